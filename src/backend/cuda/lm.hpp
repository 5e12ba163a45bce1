// The low-precision run of the `lm` workload (model/lm_spec.hpp) resident on the GPU: FP32
// master weights, AdamW moments, activations and gradients stay on the device; every linear
// layer's three GEMMs quantize their operands with the CUDA backend's kernels (bit-identical to
// quantize_cpu for the same float32 inputs) and multiply on the tensor cores through cuBLASLt,
// exactly as the resident mlp step does (recipe_linear.cuh). Plain C++ header (no CUDA types).
//
// Semantics: sim/lm.hpp's lm_train_step<float> with model/recipe_gemm.hpp's RecipeGemm, operand
// for operand (the same QuantSpecs from gemm_operand_spec, the same SR seeds and streams: the
// GemmCall layer is the linear's index in lm_linears), and the same precision policy
// (LmPrecision::bf16_mixers). What differs from the CPU run by default is one thing that is not
// quantization: the linear layers' GEMMs accumulate on the tensor cores (FP32 accumulators in
// the hardware's order, docs/numerics.md 8b) instead of ascending-k FP32 sums. Everything else
// is the CPU's expression in the CPU's order (lm_kernels.cuh, lm_mamba_kernels.cuh): exp, log
// and log1p are format/portable_math.hpp's on both sides, the loss is a term per position
// summed in model/tree_sum.hpp's order, and the long sums - the norm gains' gradients, the
// clipping norm, the Mamba mixers' parameter gradients and dt's decay term - take
// model/sum_order.hpp's orders on both sides. With the sm90 accumulator the linear layers take
// only cuBLASLt algorithms that sum in k order (the CPU's model) and fp32 layers sum in
// ascending k, so nothing remains: this run is the CPU run bit for bit (asserted by
// tests/gpu/test_gpu_lm.cpp; not yet run on an H200).
// The attention products run as SIMT kernels whose every output element is an ascending FP32
// sum (the CPU's order), materialising the probabilities (batch x heads x seq^2 floats per
// attention block): plain and exact rather than fast.
// Each step after the first runs as one CUDA graph: the kernels read the step's SR seed and
// AdamW coefficients from device memory, the tokens are copied up before the launch.
// Mamba-2 blocks run their mixer as kernels of the same graph (lm_mamba_kernels.cuh: the CPU
// mixer's expressions and orders); the scan backward checkpoints every 4th position's state
// (batch x mixer heads x seq_len / 4 x head_dim x state floats, shared by the blocks) and
// recomputes the others, in the CPU's recurrence.
// Other recipes (fp8, mxfp4), shapes that do not tile by 16 and mixers too large for the scan
// kernels' shared memory are not resident: lm_cuda_unsupported says why, and the backend falls
// back to host quantization + GPU GEMMs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/graph_shape.hpp"
#include "model/lm_trainer.hpp"
#include "quant/matrix.hpp"
#include "quant/quantized.hpp"
#include "quant/training_recipe.hpp"

namespace fp4d::cuda {

// Why the resident path cannot run this model and recipe ("" if it can). Throws what
// validate(spec) throws for an invalid spec.
std::string lm_cuda_unsupported(const LmSpec& spec, const RecipeGemmOptions& opt);

// The float32 inputs of one step's quantizers, per linear layer (lm_linears order), downloaded
// on request (statistics, tests): x (M x cols, the layer's input), w (rows x cols, before the
// update), dz (M x rows, its output gradient), as sim/lm.cpp passes them to the GemmFn.
struct LmCudaOperands {
  std::vector<Matrix> x, w, dz;
};

class LmCudaTrainer {
 public:
  // Throws std::invalid_argument with lm_cuda_unsupported's reason.
  LmCudaTrainer(const LmSpec& spec, const RecipeGemmOptions& opt, const LmPrecision& precision,
                const LmState<float>& state);
  ~LmCudaTrainer();
  LmCudaTrainer(const LmCudaTrainer&) = delete;
  LmCudaTrainer& operator=(const LmCudaTrainer&) = delete;

  // One training step on `tokens` (spec.batch rows of seq_len + 1 ids): the stats of
  // lm_train_step. operands (optional): this step's quantizer inputs (the step then runs kernel
  // by kernel and waits for them mid-step).
  LmStepStats step(const std::int32_t* tokens, LmCudaOperands* operands = nullptr);
  // Benchmarks: the tokens uploaded once, then steps on them (the step index still advances).
  void upload_tokens(const std::int32_t* tokens);
  LmStepStats step_on_uploaded_tokens();

  std::int64_t step_index() const;
  LmState<float> state() const;  // downloads
  void set_state(const LmState<float>& s);

  // The GPU's quantization of GEMM operand (linear, role, operand) in the last step, in
  // quantize_cpu's stored orientation and layout (codes, scale codes, global; codes16 for BF16
  // casts); rows = 0 for an fp32 layer. For tests against quantize_cpu.
  QuantizedTensor quantized_operand(int linear, GemmRole role, int operand) const;
  std::string path(int linear) const;  // one line: how the linear's GEMMs run

  // Replay each step as one CUDA graph (default on); the results are the same bits either way.
  void set_cuda_graphs(bool on);
  std::string launch_mode() const;  // "one CUDA graph per step", or kernel by kernel and why
  GraphShape graph_shape() const;  // the captured step graph's (all zero before the capture)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp4d::cuda
