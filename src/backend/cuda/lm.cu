// The GPU-resident lm training step (see lm.hpp for the semantics), host side: the step's
// device buffers, one RecipeLinear per linear layer, and per step the kernels of lm_kernels.cuh
// and the linears' GEMMs launched in one fixed order on the run's stream, kernel by kernel or
// replayed as a CUDA graph.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/dual_amax.cuh"
#include "backend/cuda/step_graph.hpp"
#include "backend/cuda/lm.hpp"
#include "backend/cuda/lm_kernels.cuh"
#include "backend/cuda/lm_mamba_mixer.cuh"
#include "backend/cuda/lt_gemm.cuh"
#include "backend/cuda/mlp_operands.hpp"
#include "backend/cuda/recipe_linear.cuh"
#include "model/lr_schedule.hpp"
#include "model/mlp_math.hpp"
#include "model/recipe_gemm.hpp"
#include "model/sum_order.hpp"
#include "sim/lm_attention.hpp"  // rope_table: the CPU's cos / sin values, uploaded

namespace fp4d::cuda {

namespace {

// The cached activations of one block (what its backward reads).
struct Block {
  LmBlockKind kind = LmBlockKind::Attention;
  int first_linear = 0;
  std::size_t gain = 0;   // parameter index of its norm gain
  Buf<float> n, rinv, a;  // RMSNorm: normalised rows, 1 / rms, the gained output
  // Attention: [Q K V] (fused) or q, k, v (after RoPE: rotated in place), O, the probabilities.
  Buf<float> qkv, q, k, v, o, P;
  // FFN: [G U] and silu(G) U.
  Buf<float> gu, f;
  // Mamba: the mixer's activations and its own parameters' places (lm_params order).
  MambaCacheCuda mamba;
  std::size_t mixer_param[static_cast<int>(LmMixerParam::Norm) + 1] = {};  // indexed by LmMixerParam
};

}  // namespace

std::string lm_cuda_unsupported(const LmSpec& spec, const RecipeGemmOptions& opt) {
  validate(spec);
  const std::string mixer = mamba_cuda_unsupported(spec);
  if (!mixer.empty()) return mixer;
  const std::string tiling = lm_tiling_problem(spec);
  if (!tiling.empty()) return tiling;
  const auto lin = lm_linears(spec);
  RecipeGemm rg(opt, static_cast<int>(lin.size()));
  for (int l = 0; l < static_cast<int>(lin.size()); ++l) {
    const GemmRecipe* g = rg.layer_recipe(l);
    if (!g) continue;
    if (g->kind != GemmRecipe::Kind::Bf16 && g->kind != GemmRecipe::Kind::Nvfp4)
      return "recipe '" + rg.recipe_name(l) + "' (linear " + std::to_string(l) +
             ") has no resident GPU path (fp32, bf16 and nvfp4 recipes have)";
  }
  const std::int64_t S = spec.seq_len, z = spec.batch * spec.heads;
  if (z > 65535) return "batch * heads = " + std::to_string(z) + " exceeds the attention kernels' grid (65535)";
  // The row kernels keep kRowWarps rows of max(seq_len, d_model) floats in shared memory.
  if (kRowWarps * std::max(S, spec.d_model) * 4 > 227 * 1024)
    return "seq_len and d_model must be at most " + std::to_string(227 * 1024 / (4 * kRowWarps)) +
           " (the row kernels' shared memory)";
  if (spec.batch * spec.seq_len > (std::int64_t{1} << 31) - 1 || S * S * z > (std::int64_t{1} << 40))
    return "the model's activations are too large for the resident step";
  return "";
}

struct LmCudaTrainer::Impl {
  LmSpec spec;
  RecipeGemmOptions opt;
  LmPrecision prec;
  std::unique_ptr<RecipeGemm> rg;  // the recipe's per-linear choices (no products)
  std::vector<LmParam> info;
  std::vector<LmLinear> lins;
  std::vector<Block> blocks;
  std::size_t final_gain = 0;
  std::int64_t M = 0, d = 0, S = 0, V = 0, F = 0, H = 0, KV = 0, hd = 0, qd = 0, kvd = 0, W = 0;
  std::int64_t step = 0;
  float scale = 1.0f;  // 1 / sqrt(head_dim), rounded to float as the CPU does

  // Parameters, moments and gradients: one flat buffer each, parameter i at off[i] (padded to
  // 64 elements so that every GEMM operand and output is 256-byte aligned).
  std::vector<std::int64_t> off, len;
  std::int64_t total = 0;
  Buf<float> P, m1, m2, G;

  // The step's tokens and, for the embedding's backward, the positions sorted by token.
  Buf<std::int32_t> tokens, order, start;
  Buf<float> rope_cos, rope_sin;
  Buf<float> h, dh, z, da, tmp;     // residual stream, its gradient, block outputs, norm input gradients
  Buf<float> fin_n, fin_rinv, fin_a, logits;
  Buf<float> dO, dqkv, dq, dk, dv, dP, dkh, dvh, df, dgu, gain_partial;
  std::unique_ptr<MambaMixerCuda> mixer;  // with M blocks: the mixers' kernels and backward scratch
  Buf<float> dmy, dzx;                    // the gradients of a mixer's output and of its in-projection's
  Buf<double> loss_terms, loss_sum;  // loss: a term per position, their tree sum
  // The clipping norm (model/sum_order.hpp): its chunks' places in G (start, count: a parameter's
  // kNormChunk elements or its last few), their sums of squares, the tree sum of those.
  // The optimizer walks the same chunks (one block each), chunk_param naming each one's
  // parameter (its weight decay, its lost-update counter).
  std::int64_t norm_chunks = 0;
  Buf<std::int64_t> norm_start;
  Buf<std::int32_t> norm_count, chunk_param;
  Buf<std::uint8_t> param_decay;
  Buf<double> norm_sq, norm_sum;
  Buf<ClipState> clip;
  Buf<unsigned long long> lost;
  Buf<LmStepParams> params;
  std::vector<std::unique_ptr<RecipeLinear>> linear;
  cudaStream_t stream = nullptr;
  cudaStream_t side = nullptr;  // the NVFP4 linears' weight quantizations, beside X's (RecipeLinear)
  std::unique_ptr<OwnedLtContext> lt;
  // Where the Wgrad GEMMs run (RecipeLinear::GemmLane): nothing in the backward pass reads a
  // linear's dW but the embedding's gradient, when tied to the head's, after the join.
  std::unique_ptr<OwnedGemmLane> wgrad;
  // Pinned staging.
  std::int32_t* host_tokens = nullptr;
  std::int32_t* host_order = nullptr;  // M positions then V + 1 starts
  LmStepParams* host_params = nullptr;
  double* host_stats = nullptr;  // loss sum, clip norm
  unsigned long long* host_lost = nullptr;
  bool pending = false;
  // CUDA graph: captured at the first step without an operand download after an eager one.
  bool graphs_wanted = true;
  std::string graph_blocker;
  bool eager_done = false;
  cudaGraphExec_t graph = nullptr;
  GraphShape shape;  // its nodes and critical path

  Impl(const LmSpec& s, const RecipeGemmOptions& o, const LmPrecision& p) : spec(s), opt(o), prec(p) {
    const std::string why = lm_cuda_unsupported(spec, opt);
    if (!why.empty()) throw std::invalid_argument("lm --backend cuda (resident): " + why);
    info = lm_params(spec);
    lins = lm_linears(spec);
    rg = std::make_unique<RecipeGemm>(opt, static_cast<int>(lins.size()));
    M = spec.batch * spec.seq_len, d = spec.d_model, S = spec.seq_len, V = spec.vocab, F = spec.ffn;
    H = spec.heads, KV = spec.kv_heads, hd = lm_head_dim(spec), qd = H * hd, kvd = KV * hd, W = qd + 2 * kvd;
    scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate (side)");
    lt = std::make_unique<OwnedLtContext>();
    wgrad = std::make_unique<OwnedGemmLane>();
    allocate_parameters();
    if (spec.pattern.find('M') != std::string::npos) mixer = std::make_unique<MambaMixerCuda>(spec, prec.bf16_mixers);
    allocate_step_buffers();
    build_blocks();
    build_linears();
    row_launch_config(reinterpret_cast<const void*>(&rmsnorm_forward_kernel), d);
    row_launch_config(reinterpret_cast<const void*>(&rmsnorm_backward_rows_kernel), d);
    row_launch_config(reinterpret_cast<const void*>(&softmax_rows_kernel), S);
    row_launch_config(reinterpret_cast<const void*>(&softmax_backward_rows_kernel), S);
    for (const auto& l : linear) {
      graph_blocker = l->graph_blocker();
      if (!graph_blocker.empty()) break;
    }
  }

  ~Impl() {
    if (stream) cudaStreamSynchronize(stream);
    if (side) cudaStreamSynchronize(side);  // a step that threw between a fork and its join
    if (graph) cudaGraphExecDestroy(graph);
    wgrad.reset();  // waits for the lane, which reads the linears' buffers
    linear.clear();
    lt.reset();
    cudaFreeHost(host_tokens);
    cudaFreeHost(host_order);
    cudaFreeHost(host_params);
    cudaFreeHost(host_stats);
    cudaFreeHost(host_lost);
    if (side) cudaStreamDestroy(side);
    if (stream) cudaStreamDestroy(stream);
  }

  void launch_check(const char* what) { check(cudaGetLastError(), what); }
  float* param(std::size_t i) const { return P->p + off[i]; }
  float* grad(std::size_t i) const { return G->p + off[i]; }

  // ---- construction ----

  void allocate_parameters() {
    for (const LmParam& p : info) {
      off.push_back(total);
      len.push_back(p.rows * p.cols);
      total += (p.rows * p.cols + 63) / 64 * 64;
    }
    P = buf<float>(total, "cudaMalloc (lm parameters)");
    m1 = buf<float>(total, "cudaMalloc (lm first moments)");
    m2 = buf<float>(total, "cudaMalloc (lm second moments)");
    G = buf<float>(total, "cudaMalloc (lm gradients)");
    for (std::size_t i = 0; i < info.size(); ++i)
      if (info[i].kind == LmParamKind::NormGain && info[i].block < 0) final_gain = i;
  }

  void allocate_step_buffers() {
    const auto n_params = static_cast<std::int64_t>(info.size());
    tokens = buf<std::int32_t>(spec.batch * (S + 1), "cudaMalloc (tokens)");
    order = buf<std::int32_t>(M, "cudaMalloc (token order)");
    start = buf<std::int32_t>(V + 1, "cudaMalloc (token starts)");
    const RopeTable<float> rope = rope_table<float>(S, hd, spec.rope_base);
    rope_cos = std::make_unique<DeviceBuffer<float>>(rope.cos, "cudaMalloc (rope cos)");
    rope_sin = std::make_unique<DeviceBuffer<float>>(rope.sin, "cudaMalloc (rope sin)");
    h = buf<float>(M * d, "cudaMalloc (h)");
    dh = buf<float>(M * d, "cudaMalloc (dh)");
    z = buf<float>(M * d, "cudaMalloc (block output)");
    da = buf<float>(M * d, "cudaMalloc (da)");
    tmp = buf<float>(M * d, "cudaMalloc (da part)");
    fin_n = buf<float>(M * d, "cudaMalloc (final n)");
    fin_rinv = buf<float>(M, "cudaMalloc (final rinv)");
    fin_a = buf<float>(M * d, "cudaMalloc (final a)");
    logits = buf<float>(M * V, "cudaMalloc (logits)");
    const bool attn = spec.pattern.find('A') != std::string::npos, ffn = spec.pattern.find('F') != std::string::npos;
    const std::int64_t P_elems = spec.batch * H * S * S;
    dO = buf<float>(attn ? M * qd : 0, "cudaMalloc (dO)");
    dqkv = buf<float>(attn && spec.fused_qkv ? M * W : 0, "cudaMalloc (dqkv)");
    dq = buf<float>(attn && !spec.fused_qkv ? M * qd : 0, "cudaMalloc (dq)");
    dk = buf<float>(attn && !spec.fused_qkv ? M * kvd : 0, "cudaMalloc (dk)");
    dv = buf<float>(attn && !spec.fused_qkv ? M * kvd : 0, "cudaMalloc (dv)");
    dP = buf<float>(attn ? P_elems : 0, "cudaMalloc (dP)");
    dkh = buf<float>(attn ? M * qd : 0, "cudaMalloc (dk per head)");
    dvh = buf<float>(attn ? M * qd : 0, "cudaMalloc (dv per head)");
    df = buf<float>(ffn ? M * F : 0, "cudaMalloc (df)");
    dgu = buf<float>(ffn ? M * 2 * F : 0, "cudaMalloc (dgu)");
    dmy = buf<float>(mixer ? M * mixer->dims().DI : 0, "cudaMalloc (mamba mixer output gradient)");
    dzx = buf<float>(mixer ? M * mixer->dims().W : 0, "cudaMalloc (mamba in-projection gradient)");
    gain_partial = buf<float>(chunk_count(M, kRowChunk) * d, "cudaMalloc (gain partials)");
    loss_terms = buf<double>(M, "cudaMalloc (loss terms)");
    loss_sum = buf<double>(1, "cudaMalloc (loss)");
    std::vector<std::int64_t> starts;
    std::vector<std::int32_t> counts, owners;
    std::vector<std::uint8_t> decays;
    for (std::size_t i = 0; i < info.size(); ++i) {
      for (std::int64_t c = 0; c < chunk_count(len[i], kNormChunk); ++c) {
        starts.push_back(off[i] + c * kNormChunk);
        counts.push_back(static_cast<std::int32_t>(std::min(kNormChunk, len[i] - c * kNormChunk)));
        owners.push_back(static_cast<std::int32_t>(i));
      }
      decays.push_back(info[i].weight_decay ? 1 : 0);
    }
    norm_chunks = static_cast<std::int64_t>(starts.size());
    norm_start = std::make_unique<DeviceBuffer<std::int64_t>>(starts, "cudaMalloc (norm chunk starts)");
    norm_count = std::make_unique<DeviceBuffer<std::int32_t>>(counts, "cudaMalloc (norm chunk counts)");
    chunk_param = std::make_unique<DeviceBuffer<std::int32_t>>(owners, "cudaMalloc (chunk parameters)");
    param_decay = std::make_unique<DeviceBuffer<std::uint8_t>>(decays, "cudaMalloc (parameter decay flags)");
    norm_sq = buf<double>(norm_chunks, "cudaMalloc (norm chunk sums)");
    norm_sum = buf<double>(1, "cudaMalloc (norm sum)");
    clip = buf<ClipState>(1, "cudaMalloc (clip)");
    lost = buf<unsigned long long>(n_params, "cudaMalloc (lost updates)");
    params = buf<LmStepParams>(1, "cudaMalloc (step parameters)");
    check(cudaMallocHost(&host_tokens, static_cast<std::size_t>(spec.batch * (S + 1)) * sizeof(std::int32_t)),
          "cudaMallocHost (tokens)");
    check(cudaMallocHost(&host_order, static_cast<std::size_t>(M + V + 1) * sizeof(std::int32_t)),
          "cudaMallocHost (token order)");
    check(cudaMallocHost(&host_params, sizeof(LmStepParams)), "cudaMallocHost (step parameters)");
    check(cudaMallocHost(&host_stats, 2 * sizeof(double)), "cudaMallocHost (stats)");
    check(cudaMallocHost(&host_lost, static_cast<std::size_t>(n_params) * sizeof(unsigned long long)),
          "cudaMallocHost (lost)");
  }

  void build_blocks() {
    const std::vector<LmBlockKind> kinds = lm_blocks(spec);
    blocks.resize(kinds.size());
    for (std::size_t l = lins.size(); l-- > 0;)
      if (lins[l].block >= 0) blocks[static_cast<std::size_t>(lins[l].block)].first_linear = static_cast<int>(l);
    for (std::size_t i = 0; i < info.size(); ++i)
      if (info[i].kind == LmParamKind::NormGain && info[i].block >= 0) blocks[static_cast<std::size_t>(info[i].block)].gain = i;
    for (std::size_t b = 0; b < kinds.size(); ++b) {
      Block& k = blocks[b];
      k.kind = kinds[b];
      k.n = buf<float>(M * d, "cudaMalloc (block n)");
      k.rinv = buf<float>(M, "cudaMalloc (block rinv)");
      k.a = buf<float>(M * d, "cudaMalloc (block a)");
      if (k.kind == LmBlockKind::Attention) {
        if (spec.fused_qkv) {
          k.qkv = buf<float>(M * W, "cudaMalloc (qkv)");
        } else {
          k.q = buf<float>(M * qd, "cudaMalloc (q)");
          k.k = buf<float>(M * kvd, "cudaMalloc (k)");
          k.v = buf<float>(M * kvd, "cudaMalloc (v)");
        }
        k.o = buf<float>(M * qd, "cudaMalloc (o)");
        k.P = buf<float>(spec.batch * H * S * S, "cudaMalloc (attention probabilities)");
      } else if (k.kind == LmBlockKind::Mamba) {
        mixer->allocate(k.mamba);
      } else {
        k.gu = buf<float>(M * 2 * F, "cudaMalloc (gu)");
        k.f = buf<float>(M * F, "cudaMalloc (f)");
      }
    }
    for (std::size_t i = 0; i < info.size(); ++i)
      if (info[i].kind == LmParamKind::Mixer)
        blocks[static_cast<std::size_t>(info[i].block)].mixer_param[static_cast<int>(info[i].mixer)] = i;
  }

  MambaParamsCuda mixer_params(const Block& k) const {
    const auto at = [&](LmMixerParam r) { return param(k.mixer_param[static_cast<int>(r)]); };
    using R = LmMixerParam;
    return MambaParamsCuda{at(R::ConvW), at(R::ConvB), at(R::DtBias), at(R::ALog), at(R::DSkip), at(R::Norm)};
  }
  MambaGradsCuda mixer_grads(const Block& k) const {
    const auto at = [&](LmMixerParam r) { return grad(k.mixer_param[static_cast<int>(r)]); };
    using R = LmMixerParam;
    return MambaGradsCuda{at(R::ConvW), at(R::ConvB), at(R::DtBias), at(R::ALog), at(R::DSkip), at(R::Norm)};
  }

  // The tensors of linear l: its input, output and their gradients, as sim/lm.cpp wires them.
  LinearTensors tensors_of(int l) const {
    const LmLinear& L = lins[static_cast<std::size_t>(l)];
    LinearTensors t;
    t.M = M, t.in = L.cols, t.out = L.rows;
    t.w = param(static_cast<std::size_t>(L.param));
    t.dw = grad(static_cast<std::size_t>(L.param));
    if (L.kind == LmLinearKind::Head) {
      t.x = fin_a->p, t.y = logits->p, t.dy = logits->p, t.dx = da->p;  // dlogits overwrite the logits
      return t;
    }
    const Block& k = blocks[static_cast<std::size_t>(L.block)];
    switch (L.kind) {
      case LmLinearKind::Qkv: t.x = k.a->p, t.y = k.qkv->p, t.dy = dqkv->p, t.dx = da->p; break;
      case LmLinearKind::Q: t.x = k.a->p, t.y = k.q->p, t.dy = dq->p, t.dx = da->p; break;
      case LmLinearKind::K: t.x = k.a->p, t.y = k.k->p, t.dy = dk->p, t.dx = tmp->p; break;
      case LmLinearKind::V: t.x = k.a->p, t.y = k.v->p, t.dy = dv->p, t.dx = tmp->p; break;
      case LmLinearKind::AttnOut: t.x = k.o->p, t.y = z->p, t.dy = dh->p, t.dx = dO->p; break;
      case LmLinearKind::FfnGateUp: t.x = k.a->p, t.y = k.gu->p, t.dy = dgu->p, t.dx = da->p; break;
      case LmLinearKind::FfnDown: t.x = k.f->p, t.y = z->p, t.dy = dh->p, t.dx = df->p; break;
      case LmLinearKind::MambaIn: t.x = k.a->p, t.y = k.mamba.zx->p, t.dy = dzx->p, t.dx = da->p; break;
      case LmLinearKind::MambaOut: t.x = k.mamba.out->p, t.y = z->p, t.dy = dh->p, t.dx = dmy->p; break;
      case LmLinearKind::Head: break;
    }
    return t;
  }

  void build_linears() {
    for (int l = 0; l < static_cast<int>(lins.size()); ++l)
      linear.push_back(std::make_unique<RecipeLinear>(l, rg->layer_recipe(l), tensors_of(l), &params->p->seed, lt->get(),
                                                      opt.accumulator == Accumulator::Sm90, side));
  }

  // ---- the step's pieces ----

  // The row kernels: kRowWarps rows per block, each warp a row of n terms in shared memory.
  void row_launch_config(const void* kernel, std::int64_t n) const {
    const auto bytes = static_cast<int>(kRowWarps * n * static_cast<std::int64_t>(sizeof(float)));
    if (bytes > 48 * 1024)
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
            "cudaFuncSetAttribute (row kernel shared memory)");
  }
  static unsigned row_grid(std::int64_t rows) {
    return static_cast<unsigned>(std::min<std::int64_t>((rows + kRowWarps - 1) / kRowWarps, 65535));
  }
  static std::size_t row_smem(std::int64_t n) { return static_cast<std::size_t>(kRowWarps * n) * sizeof(float); }

  void rmsnorm_forward(const float* g, float* n, float* rinv, float* a) {
    rmsnorm_forward_kernel<<<row_grid(M), kRowWarps * 32, row_smem(d), stream>>>(h->p, g, n, rinv, a, M, d, static_cast<float>(spec.norm_eps));
    launch_check("rmsnorm_forward_kernel launch");
  }

  // dh += the gradient through the norm of da (in `da`); dg = the gain's gradient.
  void rmsnorm_backward(const float* n, const float* rinv, const float* g, float* dg) {
    rmsnorm_backward_rows_kernel<<<row_grid(M), kRowWarps * 32, row_smem(d), stream>>>(da->p, n, rinv, g, dh->p, M, d);
    launch_check("rmsnorm_backward_rows_kernel launch");
    launch_gain_gradient(da->p, n, gain_partial->p, dg, M, d, stream);
  }

  void rope(float* x, std::int64_t ld, std::int64_t heads, bool inverse) {
    rope_kernel<<<blocks_for(M * heads * hd / 2), kThreads, 0, stream>>>(x, ld, M, heads, hd, S, rope_cos->p,
                                                                       rope_sin->p, inverse ? 1 : 0);
    launch_check("rope_kernel launch");
  }

  void seq_gemm(const SeqGemm& g) {
    const dim3 grid(static_cast<unsigned>((g.J + kSeqBN - 1) / kSeqBN), static_cast<unsigned>((g.I + kSeqBM - 1) / kSeqBM),
                    static_cast<unsigned>(spec.batch * H));
    seq_gemm_kernel<<<grid, 256, 0, stream>>>(g);
    launch_check("seq_gemm_kernel launch");
  }

  // Per-(sequence, head) operand views. rows: positions; q: query head h, kv: head h / group.
  SeqOperand heads_view(const float* p, std::int64_t ld, bool kv, bool rows_are_i) const {
    SeqOperand o;
    o.p = p, o.sb = S * ld, o.sh = hd, o.hdiv = kv ? static_cast<int>(H / KV) : 1;
    o.si = rows_are_i ? ld : 1;  // (position, dim) or (dim, position) as (i, k)
    o.sk = rows_are_i ? 1 : ld;
    o.bf16 = prec.bf16_mixers ? 1 : 0;
    return o;
  }
  // The S x S matrices [b][h][t][u]: (t, u) as (i, k), or transposed.
  SeqOperand probs_view(const float* p, bool transposed, bool round) const {
    SeqOperand o;
    o.p = p, o.sb = H * S * S, o.sh = S * S, o.hdiv = 1;
    o.si = transposed ? 1 : S;
    o.sk = transposed ? S : 1;
    o.bf16 = round && prec.bf16_mixers ? 1 : 0;
    return o;
  }
  SeqOut probs_out(float* p) const { return SeqOut{p, H * S * S, S * S, S, 1}; }
  SeqOut heads_out(float* p, std::int64_t ld) const { return SeqOut{p, S * ld, hd, ld, 1}; }
  SeqOut per_head_out(float* p) const { return SeqOut{p, H * S * hd, S * hd, hd, 1}; }

  struct QkvViews {
    float *q, *k, *v;
    std::int64_t qld, kld, vld;
  };
  QkvViews qkv_views(const Block& k) const {
    if (spec.fused_qkv) return {k.qkv->p, k.qkv->p + qd, k.qkv->p + qd + kvd, W, W, W};
    return {k.q->p, k.k->p, k.v->p, qd, kvd, kvd};
  }
  QkvViews dqkv_views() const {
    if (spec.fused_qkv) return {dqkv->p, dqkv->p + qd, dqkv->p + qd + kvd, W, W, W};
    return {dq->p, dk->p, dv->p, qd, kvd, kvd};
  }

  // Q, K after RoPE; P = softmax(Q K^T scale) (causal); O = P V.
  void attention_forward(Block& k) {
    const QkvViews x = qkv_views(k);
    rope(x.q, x.qld, H, false);
    rope(x.k, x.kld, KV, false);
    SeqGemm s;
    s.a = heads_view(x.q, x.qld, false, true);
    s.b = heads_view(x.k, x.kld, true, true);
    s.c = probs_out(k.P->p);
    s.heads = static_cast<int>(H), s.I = S, s.J = S, s.K = hd, s.scale = scale, s.use_scale = 1, s.mask = SeqMask::Causal;
    seq_gemm(s);
    const std::int64_t rows = spec.batch * H * S;
    softmax_rows_kernel<<<row_grid(rows), kRowWarps * 32, row_smem(S), stream>>>(k.P->p, rows, S);
    launch_check("softmax_rows_kernel launch");
    SeqGemm o;
    o.a = probs_view(k.P->p, false, true);
    o.b = heads_view(x.v, x.vld, true, false);
    o.c = heads_out(k.o->p, qd);
    o.heads = static_cast<int>(H), o.I = S, o.J = hd, o.K = S, o.mask = SeqMask::KUpToI;
    seq_gemm(o);
  }

  // From dO: dS (in dP), dQ, dK, dV into the [dQ dK dV] views, RoPE undone on dQ and dK.
  void attention_backward(Block& k) {
    const QkvViews x = qkv_views(k), dx = dqkv_views();
    SeqGemm p;
    p.a = heads_view(dO->p, qd, false, true);
    p.b = heads_view(x.v, x.vld, true, true);
    p.c = probs_out(dP->p);
    p.heads = static_cast<int>(H), p.I = S, p.J = S, p.K = hd, p.mask = SeqMask::Causal;
    seq_gemm(p);
    const std::int64_t rows = spec.batch * H * S;
    softmax_backward_rows_kernel<<<row_grid(rows), kRowWarps * 32, row_smem(S), stream>>>(k.P->p, dP->p, rows, S, scale,
                                                                                prec.bf16_mixers ? 1 : 0);
    launch_check("softmax_backward_rows_kernel launch");
    SeqGemm q;  // dq_t = sum_u dS_tu k_u
    q.a = probs_view(dP->p, false, false);
    q.b = heads_view(x.k, x.kld, true, false);
    q.c = heads_out(dx.q, dx.qld);
    q.heads = static_cast<int>(H), q.I = S, q.J = hd, q.K = S, q.mask = SeqMask::KUpToI;
    seq_gemm(q);
    // Without GQA a kv head's sum is its one query head's: dk and dv go straight to their
    // place; with GQA the per-head sums are added in ascending head order after.
    const bool grouped = H != KV;
    SeqGemm kk;  // per query head: dk_u = sum_t dS_tu q_t
    kk.a = probs_view(dP->p, true, false);
    kk.b = heads_view(x.q, x.qld, false, false);
    kk.c = grouped ? per_head_out(dkh->p) : heads_out(dx.k, dx.kld);
    kk.heads = static_cast<int>(H), kk.I = S, kk.J = hd, kk.K = S, kk.mask = SeqMask::KFromI;
    seq_gemm(kk);
    SeqGemm vv;  // per query head: dv_u = sum_t P_tu dO_t (P rounded under bf16)
    vv.a = probs_view(k.P->p, true, true);
    vv.b = heads_view(dO->p, qd, false, false);
    vv.c = grouped ? per_head_out(dvh->p) : heads_out(dx.v, dx.vld);
    vv.heads = static_cast<int>(H), vv.I = S, vv.J = hd, vv.K = S, vv.mask = SeqMask::KFromI;
    seq_gemm(vv);
    const std::int64_t n = spec.batch * S * KV * hd;
    if (grouped) {
      head_group_sum_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dkh->p, dx.k, dx.kld, spec.batch, S, H, KV, hd);
      launch_check("head_group_sum_kernel launch");
      head_group_sum_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dvh->p, dx.v, dx.vld, spec.batch, S, H, KV, hd);
      launch_check("head_group_sum_kernel launch");
    }
    rope(dx.q, dx.qld, H, true);
    rope(dx.k, dx.kld, KV, true);
  }

  void add(float* x, const float* y, std::int64_t n) {
    add_kernel<<<blocks_for(n, 4), kThreads, 0, stream>>>(x, y, n);
    launch_check("add_kernel launch");
  }

  // The float32 operands of linear l right after its backward (dZ may be the residual gradient,
  // which later blocks change), as the GemmFn saw them.
  void download_linear(int l, LmCudaOperands* ops) {
    const LinearTensors t = tensors_of(l);
    const auto li = static_cast<std::size_t>(l);
    ops->x[li] = Matrix(M, t.in);
    ops->w[li] = Matrix(t.out, t.in);
    ops->dz[li] = Matrix(M, t.out);
    const auto copy = [&](float* dst, const float* src, std::int64_t n) {
      check(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync (operand)");
    };
    copy(ops->x[li].data.data(), t.x, M * t.in);
    copy(ops->w[li].data.data(), t.w, t.out * t.in);
    copy(ops->dz[li].data.data(), t.dy, M * t.out);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (operands)");
  }

  // dy_amax_done: the kernel that made dY left its quantization's amaxes (RecipeLinear).
  void backward_linear(int l, std::uint64_t seed, LmCudaOperands* ops, bool dy_amax_done = false) {
    linear[static_cast<std::size_t>(l)]->backward(seed, stream, lt->get(), dy_amax_done, wgrad->lane());
    if (ops) download_linear(l, ops);
  }

  // ---- the step ----

  void forward(std::uint64_t seed) {
    embed_kernel<<<blocks_for(M * d, 4), kThreads, 0, stream>>>(tokens->p, param(0), h->p, M, S, d);
    launch_check("embed_kernel launch");
    for (Block& k : blocks) {
      rmsnorm_forward(param(k.gain), k.n->p, k.rinv->p, k.a->p);
      const int l0 = k.first_linear;
      if (k.kind == LmBlockKind::Attention) {
        const int parts = spec.fused_qkv ? 1 : 3;
        for (int j = 0; j < parts; ++j) linear[static_cast<std::size_t>(l0 + j)]->forward(seed, stream, lt->get());
        attention_forward(k);
        linear[static_cast<std::size_t>(l0 + parts)]->forward(seed, stream, lt->get());
      } else if (k.kind == LmBlockKind::Mamba) {
        linear[static_cast<std::size_t>(l0)]->forward(seed, stream, lt->get());
        mixer->forward(stream, mixer_params(k), k.mamba);
        linear[static_cast<std::size_t>(l0 + 1)]->forward(seed, stream, lt->get());
      } else {
        linear[static_cast<std::size_t>(l0)]->forward(seed, stream, lt->get());
        // Where the down projection quantizes F as NVFP4, SwiGLU's kernel is that quantization's
        // amax pass (dual_amax.cuh): F is read once less.
        RecipeLinear& down = *linear[static_cast<std::size_t>(l0 + 1)];
        const RecipeLinear::AmaxTarget t = down.amax_target(OperandKind::Activation, seed);
        const bool amax_done = produce_tensor(SwigluForwardPair{k.gu->p, k.f->p, F}, M, F, t.keys, t.spec, stream);
        down.forward(seed, stream, lt->get(), amax_done);
      }
      add(h->p, z->p, M * d);
    }
    rmsnorm_forward(param(final_gain), fin_n->p, fin_rinv->p, fin_a->p);
    linear.back()->forward(seed, stream, lt->get());
    cross_entropy_kernel<<<blocks_for(M), kThreads, 0, stream>>>(logits->p, tokens->p, M, S, V, loss_terms->p);
    launch_check("cross_entropy_kernel launch");
    tree_sum_kernel<<<1, kThreads, 0, stream>>>(loss_terms->p, M, loss_sum->p);
    launch_check("tree_sum_kernel launch");
  }

  void backward(std::uint64_t seed, LmCudaOperands* ops) {
    const int head = static_cast<int>(lins.size()) - 1;
    backward_linear(head, seed, ops);
    check(cudaMemsetAsync(dh->p, 0, static_cast<std::size_t>(M * d) * sizeof(float), stream), "cudaMemsetAsync (dh)");
    rmsnorm_backward(fin_n->p, fin_rinv->p, param(final_gain), grad(final_gain));
    for (std::size_t b = blocks.size(); b-- > 0;) {
      Block& k = blocks[b];
      const int l0 = k.first_linear;
      if (k.kind == LmBlockKind::Attention) {
        const int parts = spec.fused_qkv ? 1 : 3;
        backward_linear(l0 + parts, seed, ops);  // o: dW_o, dO
        attention_backward(k);
        for (int j = 0; j < parts; ++j) {
          backward_linear(l0 + j, seed, ops);
          if (j > 0) add(da->p, tmp->p, M * d);
        }
      } else if (k.kind == LmBlockKind::Mamba) {
        backward_linear(l0 + 1, seed, ops);  // out: dW_out, d(mixer output)
        mixer->backward(stream, mixer_params(k), k.mamba, dmy->p, dzx->p, mixer_grads(k));
        backward_linear(l0, seed, ops);
      } else {
        backward_linear(l0 + 1, seed, ops);  // down: dW_down, dF
        // The gate-up projection's dY: its amax pass where it is quantized as NVFP4, as above.
        const RecipeLinear::AmaxTarget t = linear[static_cast<std::size_t>(l0)]->amax_target(OperandKind::Gradient, seed);
        const bool amax_done =
            produce_tensor(SwigluBackwardPair{k.gu->p, df->p, dgu->p, F}, M, 2 * F, t.keys, t.spec, stream);
        backward_linear(l0, seed, ops, amax_done);
      }
      rmsnorm_backward(k.n->p, k.rinv->p, param(k.gain), grad(k.gain));
    }
    wgrad->join(stream);  // every dW final, the head's (dE when tied) included
    // Embedding: dE (the head's dW when tied, else zero) += dH_0 rows, ascending positions.
    if (!spec.tied_embeddings)
      check(cudaMemsetAsync(grad(0), 0, static_cast<std::size_t>(len[0]) * sizeof(float), stream), "cudaMemsetAsync (dE)");
    embed_backward_kernel<<<blocks_for(V * d), kThreads, 0, stream>>>(dh->p, order->p, start->p, grad(0), V, d);
    launch_check("embed_backward_kernel launch");
  }

  void clip_and_update() {
    norm_chunks_kernel<<<blocks_for(norm_chunks), kThreads, 0, stream>>>(G->p, norm_start->p, norm_count->p, norm_chunks,
                                                                        norm_sq->p);
    launch_check("norm_chunks_kernel launch");
    tree_sum_kernel<<<1, kThreads, 0, stream>>>(norm_sq->p, norm_chunks, norm_sum->p);
    launch_check("tree_sum_kernel launch (clipping norm)");
    clip_kernel<<<1, 1, 0, stream>>>(norm_sum->p, spec.optimizer.max_grad_norm, clip->p);
    launch_check("clip_kernel launch");
    check(cudaMemsetAsync(lost->p, 0, info.size() * sizeof(unsigned long long), stream), "cudaMemsetAsync (lost)");
    // Every parameter in one launch (a small model's step is bound by its launches).
    const auto grid = static_cast<unsigned>(std::clamp<std::int64_t>(norm_chunks, 1, 65535));  // a block per chunk
    lm_adamw_kernel<<<grid, kNormChunk, 0, stream>>>(
        P->p, m1->p, m2->p, G->p, norm_start->p, norm_count->p, chunk_param->p, param_decay->p, norm_chunks, params->p,
        clip->p, lost->p);
    launch_check("lm_adamw_kernel launch");
  }

  void read_back_stats() {
    check(cudaMemcpyAsync(host_stats, loss_sum->p, sizeof(double), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (loss)");
    check(cudaMemcpyAsync(host_stats + 1, &clip->p->norm, sizeof(double), cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync (norm)");
    check(cudaMemcpyAsync(host_lost, lost->p, info.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync (lost)");
  }

  // Everything one step puts on the stream after its tokens and parameters are up.
  void enqueue_step(std::uint64_t seed, LmCudaOperands* ops) {
    // Every NVFP4 weight's quantization first, on the side stream: none waits for the blocks
    // before its own.
    for (const auto& l : linear) l->start_weight(seed, stream);
    forward(seed);
    backward(seed, ops);
    clip_and_update();
    read_back_stats();
  }

  // ---- host side ----

  // The tokens (checked as the CPU checks them) and the positions sorted by token.
  void upload(const std::int32_t* tk) {
    if (pending) throw std::logic_error("LmCudaTrainer: a token upload during a step");
    if (!tk) throw std::invalid_argument("lm: no tokens");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (token upload)");
    const std::int64_t n = spec.batch * (S + 1);
    for (std::int64_t i = 0; i < n; ++i)
      if (tk[i] < 0 || tk[i] >= V)
        throw std::invalid_argument("lm: token " + std::to_string(tk[i]) + " at sequence " + std::to_string(i / (S + 1)) +
                                    ", position " + std::to_string(i % (S + 1)) + " is outside [0, vocab = " +
                                    std::to_string(V) + ")");
    std::copy(tk, tk + n, host_tokens);
    // Counting sort, stable: positions of each token in ascending order.
    std::int32_t* ord = host_order;
    std::int32_t* st = host_order + M;
    std::fill(st, st + V + 1, 0);
    const auto input = [&](std::int64_t i) { return tk[(i / S) * (S + 1) + i % S]; };
    for (std::int64_t i = 0; i < M; ++i) ++st[input(i) + 1];
    for (std::int64_t v = 0; v < V; ++v) st[v + 1] += st[v];
    std::vector<std::int32_t> fill(st, st + V);
    for (std::int64_t i = 0; i < M; ++i) ord[fill[static_cast<std::size_t>(input(i))]++] = static_cast<std::int32_t>(i);
    check(cudaMemcpyAsync(tokens->p, host_tokens, static_cast<std::size_t>(n) * sizeof(std::int32_t),
                          cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (tokens)");
    check(cudaMemcpyAsync(order->p, ord, static_cast<std::size_t>(M) * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                          stream), "cudaMemcpyAsync (token order)");
    check(cudaMemcpyAsync(start->p, st, static_cast<std::size_t>(V + 1) * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                          stream), "cudaMemcpyAsync (token starts)");
  }

  double lr_at(std::int64_t s) const { return scheduled_lr(lm_lr_schedule(spec), s); }

  void upload_params(std::uint64_t seed) {
    const LmOptimizer& o = spec.optimizer;
    const double lr = lr_at(step);
    host_params->seed = seed;
    host_params->decay = mlp_math::adam_coefficients<float>(lr, o.beta1, o.beta2, o.eps, o.weight_decay, step);
    host_params->no_decay = mlp_math::adam_coefficients<float>(lr, o.beta1, o.beta2, o.eps, 0.0, step);
    check(cudaMemcpyAsync(params->p, host_params, sizeof(LmStepParams), cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync (step parameters)");
  }

  void capture(std::uint64_t seed) {
    graph = capture_step_graph(stream, [&] { enqueue_step(seed, nullptr); }, &shape, "the lm training step");
  }

  void run_step(std::uint64_t seed, LmCudaOperands* ops) {
    if (graphs_wanted && graph_blocker.empty() && eager_done && !ops) {
      if (!graph) capture(seed);
      check(cudaGraphLaunch(graph, stream), "cudaGraphLaunch (lm step)");
    } else {
      enqueue_step(seed, ops);
      eager_done = true;
    }
  }

  LmStepStats launch_and_finish(const std::int32_t* tk, LmCudaOperands* ops) {
    if (pending) throw std::logic_error("LmCudaTrainer: a step during a step");
    if (tk) upload(tk);
    if (ops) {
      const std::size_t n = lins.size();
      ops->x.assign(n, Matrix{}), ops->w.assign(n, Matrix{}), ops->dz.assign(n, Matrix{});
    }
    const std::uint64_t seed = recipe_step_seed(opt.seed, step);
    upload_params(seed);
    pending = true;
    try {
      run_step(seed, ops);
      check(cudaStreamSynchronize(stream), "lm training step (cudaStreamSynchronize)");
    } catch (...) {
      pending = false;
      throw;
    }
    pending = false;
    LmStepStats st;
    st.loss = host_stats[0] / static_cast<double>(M);
    st.grad_norm = host_stats[1];
    const double max_norm = spec.optimizer.max_grad_norm;
    if (max_norm > 0.0 && st.grad_norm > max_norm) st.clip_factor = max_norm / st.grad_norm;
    st.lr = lr_at(step);
    for (std::size_t i = 0; i < info.size(); ++i)
      st.lost_update_fraction.push_back(len[i] > 0 ? static_cast<double>(host_lost[i]) / static_cast<double>(len[i]) : 0.0);
    ++step;
    return st;
  }
};

LmCudaTrainer::LmCudaTrainer(const LmSpec& spec, const RecipeGemmOptions& opt, const LmPrecision& precision,
                             const LmState<float>& state)
    : impl_(std::make_unique<Impl>(spec, opt, precision)) {
  set_state(state);
}
LmCudaTrainer::~LmCudaTrainer() = default;

LmStepStats LmCudaTrainer::step(const std::int32_t* tokens, LmCudaOperands* operands) {
  return impl_->launch_and_finish(tokens, operands);
}
void LmCudaTrainer::upload_tokens(const std::int32_t* tokens) { impl_->upload(tokens); }
LmStepStats LmCudaTrainer::step_on_uploaded_tokens() { return impl_->launch_and_finish(nullptr, nullptr); }
std::int64_t LmCudaTrainer::step_index() const { return impl_->step; }

LmState<float> LmCudaTrainer::state() const {
  const Impl& m = *impl_;
  check(cudaStreamSynchronize(m.stream), "cudaStreamSynchronize (state)");
  LmState<float> s;
  s.step = m.step;
  const auto get = [&](const Buf<float>& b, std::size_t i) {
    std::vector<float> v(static_cast<std::size_t>(m.len[i]));
    if (!v.empty())
      check(cudaMemcpy(v.data(), b->p + m.off[i], v.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (state)");
    return v;
  };
  for (std::size_t i = 0; i < m.info.size(); ++i) {
    s.p.push_back(get(m.P, i));
    s.m.push_back(get(m.m1, i));
    s.v.push_back(get(m.m2, i));
  }
  return s;
}

void LmCudaTrainer::set_state(const LmState<float>& s) {
  Impl& m = *impl_;
  if (m.pending) throw std::logic_error("LmCudaTrainer: set_state() during a step");
  const std::size_t n = m.info.size();
  if (s.p.size() != n || s.m.size() != n || s.v.size() != n)
    throw std::invalid_argument("LmCudaTrainer: the state has " + std::to_string(s.p.size()) +
                                " parameters, the spec needs " + std::to_string(n));
  check(cudaStreamSynchronize(m.stream), "cudaStreamSynchronize (set_state)");
  const auto put = [&](const Buf<float>& b, std::size_t i, const std::vector<float>& v, const char* what) {
    if (static_cast<std::int64_t>(v.size()) != m.len[i])
      throw std::invalid_argument(std::string("LmCudaTrainer: state.") + what + " of parameter " + m.info[i].name +
                                  " has " + std::to_string(v.size()) + " elements, expected " + std::to_string(m.len[i]));
    if (!v.empty())
      check(cudaMemcpy(b->p + m.off[i], v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy (state)");
  };
  for (std::size_t i = 0; i < n; ++i) {
    put(m.P, i, s.p[i], "p");
    put(m.m1, i, s.m[i], "m");
    put(m.m2, i, s.v[i], "v");
  }
  // The copies went through the legacy default stream, which does not order the trainer's
  // non-blocking stream: wait for them.
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (set_state)");
  m.step = s.step;
}

QuantizedTensor LmCudaTrainer::quantized_operand(int linear, GemmRole role, int operand) const {
  const Impl& m = *impl_;
  check(cudaStreamSynchronize(m.stream), "cudaStreamSynchronize (quantized_operand)");
  return download_operand(m.linear.at(static_cast<std::size_t>(linear))->operand_location(role, operand));
}

std::string LmCudaTrainer::path(int linear) const { return impl_->linear.at(static_cast<std::size_t>(linear))->path(); }

void LmCudaTrainer::set_cuda_graphs(bool on) {
  if (impl_->pending) throw std::logic_error("LmCudaTrainer: set_cuda_graphs() during a step");
  impl_->graphs_wanted = on;
}

std::string LmCudaTrainer::launch_mode() const {
  if (!impl_->graphs_wanted) return "kernel by kernel (CUDA graphs off)";
  if (!impl_->graph_blocker.empty()) return "kernel by kernel (" + impl_->graph_blocker + ")";
  return "one CUDA graph per step";
}

GraphShape LmCudaTrainer::graph_shape() const { return impl_->shape; }

}  // namespace fp4d::cuda
