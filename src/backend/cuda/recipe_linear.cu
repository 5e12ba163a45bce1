// One linear layer's recipe GEMMs on the device (recipe_linear.cuh): its operand buffers,
// the casts / NVFP4 quantizations and decodes, and the cuBLASLt plans.
#include "backend/cuda/recipe_linear.cuh"

#include <stdexcept>

#include "backend/cuda/launch_util.cuh"
#include "backend/cuda/nvfp4.hpp"
#include "backend/cuda/nvfp4_dual.hpp"
#include "backend/cuda/sequential_gemm.cuh"
#include "format/bf16.hpp"

namespace fp4d::cuda {

namespace {

__global__ void cast_bf16_kernel(const float* __restrict__ x, std::uint16_t* __restrict__ out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = bf16_rne_bits(x[i]);
}

// One NVFP4 quantization's device outputs (1x16 rowwise/columnwise or 16x16).
struct NvQuant {
  Buf<std::uint8_t> codes, scales;
  Buf<std::uint16_t> bf16;  // the unscaled BF16 decode (the GEMM operand)
  NvQuant(std::int64_t elements, std::int64_t scale_count)
      : codes(buf<std::uint8_t>(elements / 2, "cudaMalloc (linear codes)")),
        scales(buf<std::uint8_t>(scale_count, "cudaMalloc (linear scales)")),
        bf16(buf<std::uint16_t>(elements, "cudaMalloc (linear bf16 operand)")) {}
};

// The rowwise + columnwise quantization of one tensor (X, dY, or W without 2D).
struct NvDual {
  NvQuant row, col;
  Buf<GlobalScale> globals;  // [0] rowwise, [1] columnwise
  Buf<std::uint32_t> keys;
  explicit NvDual(std::int64_t elements)
      : row(elements, elements / 16), col(elements, elements / 16),
        globals(buf<GlobalScale>(2, "cudaMalloc (linear globals)")),
        keys(buf<std::uint32_t>(2, "cudaMalloc (linear keys)")) {}
};

const float kOne = 1.0f;

void launch_check(const char* what) { check(cudaGetLastError(), what); }

// A bf16 layer's GEMM operand: the RNE cast of n floats.
void cast(const float* x, std::uint16_t* out, std::int64_t n, cudaStream_t stream) {
  cast_bf16_kernel<<<blocks_for(n, 4), kThreads, 0, stream>>>(x, out, n);
  launch_check("cast_bf16_kernel launch");
}

// Rowwise + columnwise quantization specs as a DualSpec (both given in the NT form RecipeGemm
// quantizes; the columnwise one is the transpose's rowwise spec).
DualSpec dual_spec_of(const QuantSpec& row, QuantSpec col) {
  col.axis = 0;  // quantize_cpu(X^T, axis 1) == quantize_cpu(X, axis 0): same codes, same order
  col.rht_axis = 0;
  return dual_spec(row, col);
}

}  // namespace

struct RecipeLinear::Buffers {
  // bf16: the casts of X, W, dY
  Buf<std::uint16_t> xb, wb, dyb;
  // nvfp4
  std::unique_ptr<NvDual> x, dy, w_dual;  // w_dual: weights without 2D
  std::unique_ptr<NvQuant> w2d;           // weights with 2D (16x16 tiles)
  Buf<GlobalScale> w2d_global;
  Buf<std::uint32_t> w2d_key;
  Buf<float> alpha;  // {fprop alpha, 0, dgrad alpha, 0, wgrad alpha, 0}

  // Where q's quantize pass writes: codes, scales, globals and the BF16 decodes (the GEMMs'
  // operands), without alphas.
  static DualOutputs outputs(NvDual& q) {
    DualOutputs o;
    o.row_codes = q.row.codes->p, o.row_scales = q.row.scales->p, o.row_bf16 = q.row.bf16->p;
    o.col_codes = q.col.codes->p, o.col_scales = q.col.scales->p, o.col_bf16 = q.col.bf16->p;
    o.globals = q.globals->p;
    return o;
  }
};

RecipeLinear::RecipeLinear(int layer, const GemmRecipe* recipe, const LinearTensors& t,
                           const std::uint64_t* device_seed, const LtContext& lt, bool model_order,
                           cudaStream_t side_stream)
    : layer_(layer), t_(t), device_seed_(device_seed), b_(std::make_unique<Buffers>()) {
  mode_ = !recipe ? Mode::Fp32 : recipe->kind == GemmRecipe::Kind::Bf16 ? Mode::Bf16 : Mode::Nvfp4;
  if (recipe) recipe_ = *recipe;
  if (recipe && recipe->kind != GemmRecipe::Kind::Bf16 && recipe->kind != GemmRecipe::Kind::Nvfp4)
    throw std::invalid_argument("recipe '" + recipe->name + "' has no resident GPU path");
  b_->alpha = buf<float>(6, "cudaMalloc (alpha)");
  LtGemm f, d, w;  // fprop Y = X W^T; dgrad dX = dY W; wgrad dW = dY^T X (out x in)
  f.M = t.M, f.N = t.out, f.K = t.in, f.ld_k = t.in, f.d = t.y;
  d.M = t.M, d.N = t.in, d.K = t.out, d.ld_k = t.out, d.d = t.dx;
  w.M = t.out, w.N = t.in, w.K = t.M, w.ld_k = t.M, w.d = t.dw;
  f.alpha = d.alpha = w.alpha = &kOne;
  if (mode_ == Mode::Nvfp4 && !side_stream)
    throw std::invalid_argument("RecipeLinear: an NVFP4 layer needs a side stream for its weight");
  if (mode_ == Mode::Nvfp4) plan_nvfp4(f, d, w);
  else plan_cast(f, d, w);
  f.k_order = d.k_order = w.k_order = model_order;
  fprop_shape_ = f, dgrad_shape_ = d, wgrad_shape_ = w;
  if (mode_ == Mode::Fp32 && model_order) {
    path_ = "fp32: ascending-k FP32 sums on the CUDA cores (the CPU's float32 GEMM, for the sm90 accumulator)";
    return;
  }
  fprop_ = std::make_unique<LtPlan>(f, &lt);
  if (t.dx) dgrad_ = std::make_unique<LtPlan>(d, &lt);
  wgrad_ = std::make_unique<LtPlan>(w, &lt);
  if (mode_ == Mode::Nvfp4) {  // last: nothing after it throws, so the destructor frees them
    side_ = side_stream;
    check(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), "cudaEventCreate (weight fork)");
    if (cudaEventCreateWithFlags(&join_, cudaEventDisableTiming) != cudaSuccess) {
      cudaEventDestroy(fork_);
      throw std::runtime_error("CUDA error in cudaEventCreate (weight join)");
    }
  }
}

RecipeLinear::~RecipeLinear() {
  if (fork_) cudaEventDestroy(fork_);
  if (join_) cudaEventDestroy(join_);
}

namespace {

// An fp32 plan's shape (plan_cast's layouts) as a SequentialGemm.
SequentialGemm sequential_of(const LtGemm& g) {
  SequentialGemm s;
  s.a = static_cast<const float*>(g.a), s.b = static_cast<const float*>(g.b), s.d = g.d;
  s.M = g.M, s.N = g.N, s.K = g.K;
  s.a_km = g.a_km, s.b_kn = g.b_kn;
  s.lda = g.a_km ? (g.ld_m ? g.ld_m : g.M) : g.ld_k;
  s.ldb = g.b_kn ? (g.ld_n ? g.ld_n : g.N) : g.ld_k;
  return s;
}

}  // namespace

void RecipeLinear::run_gemm(const std::unique_ptr<LtPlan>& plan, const LtGemm& shape, cudaStream_t stream,
                            const LtContext& lt) {
  if (plan) {
    plan->run(stream, &lt);
  } else {
    run_sequential_gemm(sequential_of(shape), stream);
    launch_check("sequential_gemm_kernel launch");
  }
}

// NVFP4: the quantizers' outputs, and the GEMMs reading their BF16 decodes with the global
// scales as device-side alpha.
void RecipeLinear::plan_nvfp4(LtGemm& f, LtGemm& d, LtGemm& w) {
  const std::int64_t nw = t_.in * t_.out, nh = t_.M * t_.in, nz = t_.M * t_.out;
  Buffers& y = *b_;
  y.x = std::make_unique<NvDual>(nh);
  y.dy = std::make_unique<NvDual>(nz);
  f.a = y.x->row.bf16->p;
  d.a = y.dy->row.bf16->p;
  // wgrad: dW = (dY^T columnwise, out x M) (X^T columnwise, in x M)^T: the TN form.
  w.a = y.dy->col.bf16->p, w.b = y.x->col.bf16->p;
  if (recipe_.two_d_weights) {
    y.w2d = std::make_unique<NvQuant>(nw, (t_.out / 16) * (t_.in / 16));
    y.w2d_global = buf<GlobalScale>(1, "cudaMalloc (w global)");
    y.w2d_key = buf<std::uint32_t>(1, "cudaMalloc (w key)");
    f.b = y.w2d->bf16->p;
    d.b = y.w2d->bf16->p, d.b_kn = true, d.ld_n = t_.in;  // the same quantized W, read as W^T
  } else {
    y.w_dual = std::make_unique<NvDual>(nw);
    f.b = y.w_dual->row.bf16->p;
    d.b = y.w_dual->col.bf16->p;  // W quantized along out, stored transposed (in x out)
  }
  f.alpha_on_device = d.alpha_on_device = w.alpha_on_device = true;
  f.alpha = y.alpha->p, d.alpha = y.alpha->p + 2, w.alpha = y.alpha->p + 4;
  path_ = recipe_.name + ": NVFP4 quantized on the GPU (X, dY: rowwise + columnwise" +
          std::string(recipe_.rht_wgrad ? " with RHT-16 for Wgrad" : "") +
          (recipe_.two_d_weights ? "; W: 16x16" : "; W: 1x16 both ways") +
          "), decoded to BF16, cuBLASLt BF16 GEMMs, global scales as alpha";
}

// BF16 (the casts of X, W, dY) or FP32 (the tensors themselves): the GEMMs read the operands
// in place, transposed through the plans' layouts rather than copies.
void RecipeLinear::plan_cast(LtGemm& f, LtGemm& d, LtGemm& w) {
  const std::int64_t nw = t_.in * t_.out, nh = t_.M * t_.in, nz = t_.M * t_.out;
  const bool bf = mode_ == Mode::Bf16;
  Buffers& y = *b_;
  if (bf) {
    y.xb = buf<std::uint16_t>(nh, "cudaMalloc (x bf16)");
    y.wb = buf<std::uint16_t>(nw, "cudaMalloc (w bf16)");
    y.dyb = buf<std::uint16_t>(nz, "cudaMalloc (dy bf16)");
  } else {
    f.ta = f.tb = d.ta = d.tb = w.ta = w.tb = CUDA_R_32F;
  }
  f.a = bf ? static_cast<const void*>(y.xb->p) : t_.x;
  f.b = bf ? static_cast<const void*>(y.wb->p) : t_.w;
  d.a = bf ? static_cast<const void*>(y.dyb->p) : t_.dy;
  d.b = f.b, d.b_kn = true, d.ld_n = t_.in;
  w.a = d.a, w.a_km = true, w.ld_m = t_.out;  // dY stored M x out = K x M_gemm
  w.b = f.a, w.b_kn = true, w.ld_n = t_.in;   // X stored M x in = K x N
  path_ = bf ? recipe_.name + ": BF16 casts on the GPU, cuBLASLt BF16 GEMMs (FP32 accumulation)"
             : std::string("fp32: cuBLASLt FP32 GEMMs (FP32 FMA, no TF32)");
}

// RecipeGemm's QuantSpec of this layer's operand (role, operand) in the step of this seed.
QuantSpec RecipeLinear::spec_of(OperandKind k, GemmRole role, int operand, std::uint64_t seed) const {
  return gemm_operand_spec(recipe_, k, role == GemmRole::Wgrad, seed, recipe_operand_stream(layer_, role, operand));
}

// A graph replays its launch arguments: only the SR seed of the dual quantizations is read
// from device memory, so anything else that depends on the step (or on its seed) rules the
// graph out.
std::string RecipeLinear::graph_blocker() const {
  if (mode_ != Mode::Nvfp4) return "";
  // The columnwise (Wgrad) sides of X and dY, as forward and backward make them.
  const auto signs = [&](OperandKind k, std::uint64_t seed) { return dual_spec(k, seed).rht_sign_mask; };
  if (signs(OperandKind::Activation, 1) != signs(OperandKind::Activation, 2) ||
      signs(OperandKind::Gradient, 1) != signs(OperandKind::Gradient, 2))
    return "the RHT signs depend on the step's seed";
  if (b_->w2d && spec_of(OperandKind::Weight, GemmRole::Fprop, 1, 0).rounding.mode == Rounding::Stochastic)
    return "stochastic rounding of 16x16 weights takes its seed as a launch argument";
  return "";
}

// The rowwise + columnwise quantization of X (Fprop / Wgrad), dY (Dgrad / Wgrad) or W without
// 2D (Fprop / Dgrad), both sides in the NT form RecipeGemm quantizes, with the step's SR seed
// read from device memory.
DualSpec RecipeLinear::dual_spec(OperandKind k, std::uint64_t seed) const {
  DualSpec ds;
  switch (k) {
    case OperandKind::Activation:
      ds = dual_spec_of(spec_of(k, GemmRole::Fprop, 0, seed), spec_of(k, GemmRole::Wgrad, 0, seed));
      break;
    case OperandKind::Gradient:
      ds = dual_spec_of(spec_of(k, GemmRole::Dgrad, 0, seed), spec_of(k, GemmRole::Wgrad, 1, seed));
      break;
    case OperandKind::Weight:
      ds = dual_spec_of(spec_of(k, GemmRole::Fprop, 1, seed), spec_of(k, GemmRole::Dgrad, 1, seed));
      break;
  }
  ds.device_seed = device_seed_;  // = both sides' seed (spec_of gives both the step's)
  return ds;
}

RecipeLinear::AmaxTarget RecipeLinear::amax_target(OperandKind k, std::uint64_t seed) const {
  if (mode_ != Mode::Nvfp4 || k == OperandKind::Weight) return {};
  return AmaxTarget{(k == OperandKind::Activation ? b_->x : b_->dy)->keys->p, dual_spec(k, seed)};
}

void RecipeLinear::adopt_weight_amax() {
  if (mode_ != Mode::Nvfp4) return;
  Buffers& y = *b_;
  if (y.w2d) owner_amax_ = WeightAmax{y.w2d_key->p, 1};
  else if (!dual_spec(OperandKind::Weight, 0).col_rht) owner_amax_ = WeightAmax{y.w_dual->keys->p, 2};
}

void RecipeLinear::refresh_weight_amax(cudaStream_t stream) {
  if (owner_amax_.keys) weight_amax_pass(0, stream);  // adopted keys: no RHT, the seed plays no part
}

// The weight quantization's amax pass into its keys: max |W| (16x16), or the dual pass's keys.
void RecipeLinear::weight_amax_pass(std::uint64_t seed, cudaStream_t stream) {
  Buffers& y = *b_;
  if (y.w2d) nvfp4_amax_device(t_.w, t_.in * t_.out, y.w2d_key->p, stream);
  else
    nvfp4_quantize_dual_amax_pass(t_.w, t_.out, t_.in, dual_spec(OperandKind::Weight, seed), y.w_dual->keys->p, stream);
}

// NVFP4 weights: 16x16 tiles (2D: one quantization for Fprop and Dgrad) or rowwise +
// columnwise 1x16; the amax pass first unless the owner keeps the keys (adopt_weight_amax).
void RecipeLinear::quantize_weight(std::uint64_t seed, cudaStream_t stream) {
  Buffers& y = *b_;
  if (!owner_amax_.keys) weight_amax_pass(seed, stream);
  if (y.w2d) {
    const QuantSpec wf = spec_of(OperandKind::Weight, GemmRole::Fprop, 1, seed);
    nvfp4_quantize_16x16_device_from_amax(t_.w, t_.out, t_.in, y.w2d_key->p, wf.rounding,
                                          wf.nv_scale_rule == NvScaleRule::TeLegacy, y.w2d->codes->p, y.w2d->scales->p,
                                          stream, y.w2d->bf16->p, y.w2d_global->p);
  } else {
    nvfp4_quantize_dual_quantize_pass(t_.w, t_.out, t_.in, dual_spec(OperandKind::Weight, seed),
                                      Buffers::outputs(*y.w_dual), y.w_dual->keys->p, stream);
  }
}

void RecipeLinear::start_weight(std::uint64_t seed, cudaStream_t stream) {
  // Always a fresh fork (not skipped where the flag is set): a step that threw between the two
  // left the flag set for a quantization that belongs to it.
  if (mode_ != Mode::Nvfp4) return;
  check(cudaEventRecord(fork_, stream), "cudaEventRecord (weight fork)");
  check(cudaStreamWaitEvent(side_, fork_, 0), "cudaStreamWaitEvent (weight fork)");
  quantize_weight(seed, side_);
  check(cudaEventRecord(join_, side_), "cudaEventRecord (weight join)");
  weight_started_ = true;
}

// The operands of Fprop (and the X side of Wgrad): NVFP4 X and W with Fprop's alpha, or the
// BF16 casts of X and W; then the Fprop GEMM. The weight's quantization runs on the side stream
// (start_weight), beside X's: on a small model the quantizers' latency is the step's. It is
// joined before X's quantize pass, which then writes Fprop's alpha (no kernel of its own). The
// side branch began with the step, so for every layer but the first NVFP4 one it has finished
// by then; there X's quantize pass may wait for the weight (bench mlp-cuda's critical path
// shows how long).
void RecipeLinear::forward(std::uint64_t seed, cudaStream_t stream, const LtContext& lt, bool x_amax_done) {
  Buffers& y = *b_;
  if (mode_ == Mode::Nvfp4) {
    if (!weight_started_) start_weight(seed, stream);
    const DualSpec ds = dual_spec(OperandKind::Activation, seed);
    if (!x_amax_done) nvfp4_quantize_dual_amax_pass(t_.x, t_.M, t_.in, ds, y.x->keys->p, stream);
    check(cudaStreamWaitEvent(stream, join_, 0), "cudaStreamWaitEvent (weight join)");
    weight_started_ = false;
    DualOutputs o = Buffers::outputs(*y.x);
    o.row_alpha_partner = y.w2d ? y.w2d_global->p : y.w_dual->globals->p, o.row_alpha = y.alpha->p;
    nvfp4_quantize_dual_quantize_pass(t_.x, t_.M, t_.in, ds, o, y.x->keys->p, stream);
  } else if (mode_ == Mode::Bf16) {
    cast(t_.x, y.xb->p, t_.M * t_.in, stream);
    cast(t_.w, y.wb->p, t_.in * t_.out, stream);
  }
  run_gemm(fprop_, fprop_shape_, stream, lt);
}

// The dY operands of Dgrad and Wgrad (NVFP4 dY with both GEMMs' alphas, or the BF16 cast),
// then Wgrad (on its lane where given) and, where the layer has one, Dgrad.
void RecipeLinear::backward(std::uint64_t seed, cudaStream_t stream, const LtContext& lt, bool dy_amax_done,
                            const GemmLane* wgrad_lane) {
  Buffers& y = *b_;
  if (mode_ == Mode::Nvfp4) {
    // Dgrad's and Wgrad's alphas from the same pass: their other operands (W, X) are final.
    const DualSpec ds = dual_spec(OperandKind::Gradient, seed);
    DualOutputs o = Buffers::outputs(*y.dy);
    o.row_alpha_partner = y.w2d ? y.w2d_global->p : y.w_dual->globals->p + 1, o.row_alpha = y.alpha->p + 2;
    o.col_alpha_partner = y.x->globals->p + 1, o.col_alpha = y.alpha->p + 4;
    if (!dy_amax_done) nvfp4_quantize_dual_amax_pass(t_.dy, t_.M, t_.out, ds, y.dy->keys->p, stream);
    nvfp4_quantize_dual_quantize_pass(t_.dy, t_.M, t_.out, ds, o, y.dy->keys->p, stream);
  } else if (mode_ == Mode::Bf16) {
    cast(t_.dy, y.dyb->p, t_.M * t_.out, stream);
  }
  if (wgrad_lane) {
    check(cudaEventRecord(wgrad_lane->operands_ready, stream), "cudaEventRecord (Wgrad operands)");
    check(cudaStreamWaitEvent(wgrad_lane->stream, wgrad_lane->operands_ready, 0),
          "cudaStreamWaitEvent (Wgrad operands)");
    run_gemm(wgrad_, wgrad_shape_, wgrad_lane->stream, *wgrad_lane->lt);
  } else {
    run_gemm(wgrad_, wgrad_shape_, stream, lt);
  }
  if (t_.dx) run_gemm(dgrad_, dgrad_shape_, stream, lt);
}

OwnedGemmLane::OwnedGemmLane() {
  check(cudaStreamCreateWithFlags(&lane_.stream, cudaStreamNonBlocking), "cudaStreamCreate (GEMM lane)");
  if (cudaEventCreateWithFlags(&lane_.operands_ready, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventCreateWithFlags(&done_, cudaEventDisableTiming) != cudaSuccess) {
    if (lane_.operands_ready) cudaEventDestroy(lane_.operands_ready);
    cudaStreamDestroy(lane_.stream);
    throw std::runtime_error("CUDA error in cudaEventCreate (GEMM lane)");
  }
  lane_.lt = &lt_.get();
}

OwnedGemmLane::~OwnedGemmLane() {
  cudaStreamSynchronize(lane_.stream);  // a step that threw between a fork and its join
  cudaEventDestroy(done_);
  cudaEventDestroy(lane_.operands_ready);
  cudaStreamDestroy(lane_.stream);
}

void OwnedGemmLane::join(cudaStream_t stream) {
  check(cudaEventRecord(done_, lane_.stream), "cudaEventRecord (GEMM lane join)");
  check(cudaStreamWaitEvent(stream, done_, 0), "cudaStreamWaitEvent (GEMM lane join)");
}

DeviceOperand RecipeLinear::operand_location(GemmRole role, int operand) const {
  const Buffers& y = *b_;
  const std::int64_t M = t_.M;
  if (mode_ == Mode::Fp32) return {};
  if (mode_ == Mode::Bf16) {
    // The casts: X and dY as stored (M x in, M x out), W as stored (out x in); each GEMM reads
    // them in the orientation of its NT form.
    const auto at = [](const Buf<std::uint16_t>& b, std::int64_t rows, std::int64_t cols, bool transpose) {
      DeviceOperand d;
      d.kind = DeviceOperand::Kind::Bf16;
      d.bf16 = b->p, d.rows = rows, d.cols = cols, d.transpose = transpose;
      return d;
    };
    switch (role) {
      case GemmRole::Fprop: return operand == 0 ? at(y.xb, M, t_.in, false) : at(y.wb, t_.out, t_.in, false);
      case GemmRole::Dgrad: return operand == 0 ? at(y.dyb, M, t_.out, false) : at(y.wb, t_.out, t_.in, true);
      case GemmRole::Wgrad: return operand == 0 ? at(y.xb, M, t_.in, true) : at(y.dyb, M, t_.out, true);
    }
    return {};
  }
  // NVFP4: the rowwise sides of X and dY for Fprop and Dgrad, their columnwise sides (stored
  // transposed) for Wgrad; W as 16x16 tiles (Dgrad reads their transpose) or its two 1x16 sides.
  const auto at = [](const NvQuant& q, const GlobalScale* g, std::int64_t rows, std::int64_t cols, bool tiles,
                     bool transpose) {
    DeviceOperand d;
    d.kind = DeviceOperand::Kind::Nvfp4;
    d.codes = q.codes->p, d.scales = q.scales->p, d.global = g;
    d.rows = rows, d.cols = cols, d.tiles = tiles, d.transpose = transpose;
    return d;
  };
  const auto weight = [&](bool transposed) {
    if (y.w2d) return at(*y.w2d, y.w2d_global->p, t_.out, t_.in, true, transposed);
    return transposed ? at(y.w_dual->col, y.w_dual->globals->p + 1, t_.in, t_.out, false, false)
                      : at(y.w_dual->row, y.w_dual->globals->p, t_.out, t_.in, false, false);
  };
  switch (role) {
    case GemmRole::Fprop: return operand == 0 ? at(y.x->row, y.x->globals->p, M, t_.in, false, false) : weight(false);
    case GemmRole::Dgrad: return operand == 0 ? at(y.dy->row, y.dy->globals->p, M, t_.out, false, false) : weight(true);
    case GemmRole::Wgrad:
      return operand == 0 ? at(y.x->col, y.x->globals->p + 1, t_.in, M, false, false)
                          : at(y.dy->col, y.dy->globals->p + 1, t_.out, M, false, false);
  }
  return {};
}

}  // namespace fp4d::cuda
