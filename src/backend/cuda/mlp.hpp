// The low-precision run of the `mlp` workload resident on the GPU: weights, optimizer
// state, activations and gradients stay on the device; every GEMM quantizes its operands with
// the CUDA backend's kernels (bit-identical to quantize_cpu for the same float32 inputs) and
// multiplies them on the tensor cores through cuBLASLt. Plain C++ header (no CUDA types).
//
// Semantics: sim/mlp.hpp's train_step<float> with model/recipe_gemm.hpp's RecipeGemm, operand
// for operand (the same QuantSpecs from gemm_operand_spec, the same SR seeds and streams), so
// that given the same float32 operands the quantized operands are the same bits. What differs
// from the CPU run is only the GEMMs' accumulation: the tensor cores' (FP32 accumulators, the
// hardware's order; docs/numerics.md 8b) where the CPU emulation sums in ascending k. With the
// sm90 accumulator (RecipeGemmOptions::accumulator) the CPU run models exactly that, the GEMMs
// here take only cuBLASLt algorithms that sum in k order, and fp32 layers sum in ascending k
// on the CUDA cores: the CPU run and this one are then the same run, bit for bit (gpu.mlp
// checks it). Everything else is the CPU's expressions in the CPU's order (--fmad=false):
// the activations and softmax with format/portable_math.hpp's exp and erf, the loss as a term
// per row summed in model/tree_sum.hpp's order, both optimizers. Runs are deterministic: the
// same spec, recipe and seed give the same bits on the same GPU and library versions.
//
// How each layer's GEMMs run (NVFP4: nvfp4-spec.md 6):
//   fp32   cuBLASLt FP32 GEMM (CUBLAS_COMPUTE_32F: FP32 FMA, no TF32); with the sm90
//          accumulator ascending-k FP32 sums on the CUDA cores (recipe_linear.cuh).
//   bf16   operands cast to BF16 (RNE) once per step (X, W, dY: a cast commutes with the
//          transposes), BF16 GEMMs with FP32 accumulation.
//   nvfp4* X and dY: rowwise + columnwise quantization in one pass (nvfp4_dual: the columnwise
//          side RHT-16'd for Wgrad when the recipe says so, SR on gradients); W: 16x16 tiles
//          once per step, whose transpose is Dgrad's operand (2D: the same quantized weight in
//          both GEMMs, as the spec says), or rowwise + columnwise 1x16 without 2D. Codes and
//          block scales are decoded to BF16 without the global scale (exact), the GEMM is a
//          BF16 GEMM and fl(s_dec^A s_dec^B) its epilogue alpha read from device memory.
// Each step after the first runs as one CUDA graph (set_cuda_graphs): the kernels read the
// step's SR seed and optimizer coefficients from device memory, so a replay is the same step.
// Other recipes (fp8, mxfp4), shapes that are not multiples of 16 and the model options
// swiglu, RMSNorm and residual connections are not resident (yet):
// mlp_cuda_unsupported says why, and the runner falls back to host quantization + GPU GEMMs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/graph_shape.hpp"
#include "quant/quantized.hpp"
#include "model/mlp_spec.hpp"
#include "quant/training_recipe.hpp"

namespace fp4d::cuda {

// Why the resident path cannot run this model and recipe ("" if it can).
std::string mlp_cuda_unsupported(const MlpSpec& spec, const RecipeGemmOptions& opt);

// The float32 inputs of one step's quantizers, downloaded on request (statistics, tests):
// per layer H_l (M x in), W_l (out x in, before the update) and dZ_l (M x out). Layer 0 has no
// Dgrad (its dZ is still there: Wgrad uses it).
struct MlpCudaOperands {
  std::vector<Matrix> h, w, dz;
};

class MlpCudaTrainer {
 public:
  // Throws std::invalid_argument with mlp_cuda_unsupported's reason.
  MlpCudaTrainer(const MlpSpec& spec, const RecipeGemmOptions& opt, const MlpState<float>& state);
  ~MlpCudaTrainer();
  MlpCudaTrainer(const MlpCudaTrainer&) = delete;
  MlpCudaTrainer& operator=(const MlpCudaTrainer&) = delete;

  // One training step on `batch` (= make_batch(spec, step_index())): loss before the update and
  // the lost-update fractions. operands (optional): this step's quantizer inputs.
  StepStats step(const Batch& batch, MlpCudaOperands* operands = nullptr);
  // Benchmarks: upload a batch once, then step on the batch already on the device (the step
  // index still advances: SR seeds and the learning rate follow it).
  void upload_batch(const Batch& batch);
  StepStats step_on_uploaded_batch();
  // The same without waiting for the result (benchmarks: the host prepares the next batch
  // while the GPU runs); finish() waits and returns the stats of the last step_async.
  void step_async(const Batch& batch);
  StepStats finish();

  std::int64_t step_index() const;
  MlpState<float> state() const;  // downloads
  void set_state(const MlpState<float>& s);

  // The GPU's quantization of GEMM operand (layer, role, operand) in the last step, in
  // quantize_cpu's stored orientation and layout for that operand (codes, scale codes, global;
  // codes16 for BF16 casts); rows = 0 for an fp32 layer. For tests against quantize_cpu.
  QuantizedTensor quantized_operand(int layer, GemmRole role, int operand) const;
  std::string path(int layer) const;  // one line: how the layer's GEMMs run

  // Replay each step as one CUDA graph (default on): the steps that download operands and
  // the first step run kernel by kernel, the others as the graph captured at the first such
  // step. The results are the same bits either way (gpu.mlp checks it); only the host's
  // launch work differs, which is what bounds small models. Off: every step kernel by kernel.
  void set_cuda_graphs(bool on);
  // How the steps run, in words: "one CUDA graph per step", or kernel by kernel and why.
  std::string launch_mode() const;
  // The captured step graph's nodes and critical path (all zero before the capture).
  GraphShape graph_shape() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp4d::cuda
