// One linear layer's three GEMMs of a GPU-resident training step under a training recipe
// (model/recipe_gemm.hpp, operand for operand), shared by the resident workloads (mlp.cu,
// lm.cu): the quantized (or cast) operands' device buffers, the cuBLASLt plans, and the
// operands' locations for the tests. .cu files only (CUDA types).
//
// For linear layer `layer` (its GemmCall layer: the SR stream) with input X (M x in), weight
// W (out x in) and output gradient dY (M x out), all float32 on the device:
//   forward()   quantizes X and W as the recipe's Fprop operands (and X's Wgrad side), then
//               Y = X W^T;
//   backward()  quantizes dY (its Dgrad and Wgrad sides), then dW = dY^T X (on a GEMM lane of
//               the caller's, where given) and, when the layer has a Dgrad output, dX = dY W.
// How each mode runs (NVFP4: nvfp4-spec.md 6):
//   fp32   cuBLASLt FP32 GEMM (CUBLAS_COMPUTE_32F: FP32 FMA, no TF32); or, in model order,
//          sequential_gemm.cuh's ascending-k FP32 sums, the CPU's float32 GEMM bit for bit.
//   bf16   operands cast to BF16 (RNE) once per step (X, W, dY: a cast commutes with the
//          transposes), BF16 GEMMs with FP32 accumulation.
//   nvfp4* X and dY: rowwise + columnwise quantization in one pass (nvfp4_dual: the columnwise
//          side RHT-16'd for Wgrad when the recipe says so, SR on gradients); W: 16x16 tiles
//          once per step, whose transpose is Dgrad's operand (2D: the same quantized weight in
//          both GEMMs), or rowwise + columnwise 1x16 without 2D. The quantizers also write the
//          codes' BF16 decode without the global scale (exact), the GEMM is a BF16 GEMM and
//          fl(s_dec^A s_dec^B) its epilogue alpha read from device memory (written by the
//          quantize pass of X, for Fprop, and of dY, for Dgrad and Wgrad).
// Model order (a run with the sm90 accumulator, whose CPU run models this one): the cuBLASLt
// plans take only algorithms that sum every output in one pass in k order (LtGemm::k_order, no
// split-K), which quant/tensor_core_model.hpp describes, and fp32 layers sum sequentially.
// The SR seed of the dual quantizations is read from device memory (device_seed), so that a
// captured CUDA graph replays every step; graph_blocker() names what else would vary.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/lt_gemm.cuh"
#include "backend/cuda/mlp_operands.hpp"
#include "backend/cuda/nvfp4_dual.hpp"
#include "quant/nvfp4_math.hpp"
#include "quant/training_recipe.hpp"

namespace fp4d::cuda {

// The device tensors of one linear layer's step (float32, row-major). dx = nullptr: the layer
// has no Dgrad (the mlp's first layer).
struct LinearTensors {
  std::int64_t M = 0, in = 0, out = 0;
  const float* x = nullptr;   // M x in
  const float* w = nullptr;   // out x in
  const float* dy = nullptr;  // M x out
  float* y = nullptr;         // M x out
  float* dx = nullptr;        // M x in
  float* dw = nullptr;        // out x in
};

class RecipeLinear {
 public:
  enum class Mode { Fp32, Bf16, Nvfp4 };
  // recipe: the layer's GemmRecipe (bf16 or nvfp4 kinds), nullptr for fp32. device_seed: the
  // step's SR seed in device memory (read when the quantizers run). lt: the workspace the plans
  // will run with. model_order: see the file comment.
  // side_stream: where an NVFP4 layer quantizes its weight, off the main stream's path (forked
  // and joined by events, so a captured graph holds both branches; the two share no buffer, and
  // amaxes and SR draws do not depend on the order). Shared by a trainer's layers; required for
  // NVFP4 (std::invalid_argument otherwise).
  RecipeLinear(int layer, const GemmRecipe* recipe, const LinearTensors& t, const std::uint64_t* device_seed,
               const LtContext& lt, bool model_order, cudaStream_t side_stream);
  ~RecipeLinear();
  RecipeLinear(const RecipeLinear&) = delete;
  RecipeLinear& operator=(const RecipeLinear&) = delete;

  // Starts this step's weight quantization on the side stream, after the work already on
  // `stream` (the previous step's update); a no-op but for NVFP4. A trainer calls it for every
  // layer at the start of each step, so that no weight quantization waits for the layers
  // before it; forward() joins it (and starts it itself where nothing did since the last
  // forward()).
  void start_weight(std::uint64_t seed, cudaStream_t stream);
  // x_amax_done / dy_amax_done: the kernel that made X / dY this step already left the amax
  // keys of its quantization (amax_target, dual_amax.cuh), so the quantizer skips its own
  // amax pass, a full read of the tensor.
  void forward(std::uint64_t seed, cudaStream_t stream, const LtContext& lt, bool x_amax_done = false);
  // wgrad_lane: where Wgrad runs (nullptr: on `stream`, before Dgrad). Off the main stream it
  // leaves the chain that bounds the backward pass (dY's quantization, Dgrad, the producer of
  // the next layer's dY) and runs beside the layers below: their memory-bound kernels beside a
  // compute-bound GEMM. The caller joins the lane before anything reads dW (OwnedGemmLane).
  struct GemmLane {
    cudaStream_t stream = nullptr;
    const LtContext* lt = nullptr;  // a workspace of the lane's own, the size of the plans'
    cudaEvent_t operands_ready = nullptr;
  };
  void backward(std::uint64_t seed, cudaStream_t stream, const LtContext& lt, bool dy_amax_done = false,
                const GemmLane* wgrad_lane = nullptr);

  // Where the producer of this step's X (Activation) or dY (Gradient) leaves the amax keys of
  // its NVFP4 quantization, and the spec they are computed under (its RHT); keys = nullptr
  // where the layer does not quantize that operand as NVFP4 (the producer then only writes it).
  struct AmaxTarget {
    std::uint32_t* keys = nullptr;
    DualSpec spec{};
  };
  AmaxTarget amax_target(OperandKind k, std::uint64_t seed) const;

  // The weight's amax keys (max |W| as float bits: one with 2D weights, else the dual pass's
  // two, both max |W| since a weight's columnwise side has no RHT) for an owner that keeps them
  // current, so that quantize_weight skips its amax pass, a full read of W every step.
  // adopt_weight_amax() hands them over and adopted_weight_amax() says where they are (keys =
  // nullptr where the layer has none to hand: not NVFP4, or an RHT on the weight's columns);
  // from then on the owner must, before every start_weight/forward, leave max |W| of the current
  // W there: its optimizer step computes it as it writes W, and refresh_weight_amax(stream)
  // computes it after any other write of W.
  struct WeightAmax {
    std::uint32_t* keys = nullptr;
    int count = 0;
  };
  void adopt_weight_amax();
  const WeightAmax& adopted_weight_amax() const { return owner_amax_; }  // none before adopt_weight_amax
  void refresh_weight_amax(cudaStream_t stream);

  Mode mode() const { return mode_; }
  const std::string& path() const { return path_; }  // one line: how the GEMMs run
  // What would make a replayed graph differ from the eager step ("" if nothing).
  std::string graph_blocker() const;
  // Where operand (role, operand) of the last step lies, in the NT form RecipeGemm quantizes.
  DeviceOperand operand_location(GemmRole role, int operand) const;

 private:
  struct Buffers;
  int layer_;
  Mode mode_;
  GemmRecipe recipe_{};
  LinearTensors t_;
  const std::uint64_t* device_seed_;
  std::string path_;
  std::unique_ptr<Buffers> b_;
  cudaStream_t side_ = nullptr;  // NVFP4: the weight's quantization
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  bool weight_started_ = false;  // start_weight ran this step, forward() has not joined it yet
  WeightAmax owner_amax_{};      // adopt_weight_amax's keys, kept current by the owner
  std::unique_ptr<LtPlan> fprop_, dgrad_, wgrad_;  // null for an fp32 layer in model order:
  LtGemm fprop_shape_, dgrad_shape_, wgrad_shape_;  // these shapes then run on sequential_gemm.cuh

  QuantSpec spec_of(OperandKind k, GemmRole role, int operand, std::uint64_t seed) const;
  DualSpec dual_spec(OperandKind k, std::uint64_t seed) const;  // X's, dY's or W's (no 2D), as quantized
  void plan_nvfp4(LtGemm& f, LtGemm& d, LtGemm& w);
  void plan_cast(LtGemm& f, LtGemm& d, LtGemm& w);
  void quantize_weight(std::uint64_t seed, cudaStream_t stream);
  void weight_amax_pass(std::uint64_t seed, cudaStream_t stream);
  void run_gemm(const std::unique_ptr<LtPlan>& plan, const LtGemm& shape, cudaStream_t stream, const LtContext& lt);
};

// A trainer's RecipeLinear::GemmLane: a stream, a cuBLASLt workspace of its own (GEMMs running
// at once must not share one) and the events that fork it from the main stream and join it.
class OwnedGemmLane {
 public:
  OwnedGemmLane();
  ~OwnedGemmLane();  // waits for the lane's work first
  OwnedGemmLane(const OwnedGemmLane&) = delete;
  OwnedGemmLane& operator=(const OwnedGemmLane&) = delete;
  const RecipeLinear::GemmLane* lane() const { return &lane_; }
  // `stream` waits for everything given to the lane so far (recorded now: a graph captures it).
  void join(cudaStream_t stream);

 private:
  OwnedLtContext lt_;
  cudaEvent_t done_ = nullptr;
  RecipeLinear::GemmLane lane_;
};

}  // namespace fp4d::cuda
