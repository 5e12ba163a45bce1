// The GEMMs of a low-precision training run under a recipe: each call of the MLP's
// GemmFn quantizes its two operands as the recipe says (gemm_operand_spec: NVFP4 16x16
// weights, RHT-16 on the Wgrad operands, SR on gradients, ...) and multiplies them with the
// CPU emulation (gemm_emulated.hpp) or a backend's product (the CUDA tensor-core GEMM).
//
// Recipes: every GEMM recipe of quant/training_recipe.hpp (bf16, fp8, fp8-tensor, mxfp4*, nvfp4 and
// its -no-sr/-no-rht/-no-2d/-sr8 ablations) and `fp32` (no quantization: the plain float32
// product, ascending k - the "every format set to FP32" run). `high_precision_layers` keeps
// the listed layers in `edge_recipe` (BF16 by default), as the NVFP4 paper keeps the first and
// last layers; it applies to recipes below BF16 only (fp32 and bf16 runs ignore it).
//
// SR draws: the seed is mixed with the step and the stream encodes (layer, role, operand), so
// every quantization of a run draws different bits, and the same ones when the run is resumed.
// The quantization statistics of the last call of every (layer, role, operand) are kept for
// the trace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/mlp_spec.hpp"
#include "model/trainer.hpp"
#include "quant/quantized.hpp"
#include "quant/training_recipe.hpp"

namespace fp4d {

class RecipeGemm {
 public:
  // Throws std::invalid_argument for an unknown recipe name.
  RecipeGemm(RecipeGemmOptions opt, int layers);
  Matrix operator()(const GemmCall& call, const Matrix& first, const Matrix& second);
  GemmFn fn();  // a GemmFn that calls *this (which must outlive it)
  // The call's two operands in NT form, quantized as the recipe says (statistics recorded);
  // nullopt for a plain fp32 call. What a backend that quantizes on its own must reproduce.
  std::optional<std::pair<QuantizedTensor, QuantizedTensor>> quantize_operands(const GemmCall& call, const Matrix& first,
                                                                               const Matrix& second);
  // The same for the statistics alone: runs whose products were computed elsewhere (the
  // GPU-resident step) on the same operands.
  void record_only(const GemmCall& call, const Matrix& first, const Matrix& second) {
    quantize_operands(call, first, second);
  }
  const GemmRecipe* layer_recipe(int layer) const;  // nullptr: plain fp32 (no quantization)
  const std::vector<OperandRecord>& records() const { return records_; }
  const std::string& recipe_name(int layer) const;  // the recipe a layer runs with
  bool uses_sr() const;  // some operand is stochastically rounded (nvfp4 gradients)
  const RecipeGemmOptions& options() const { return opt_; }

 private:
  RecipeGemmOptions opt_;
  int layers_;
  bool plain_fp32_ = false;
  GemmRecipe recipe_{}, edge_{};
  std::vector<OperandRecord> records_;
  // Quantizes a call's operands (statistics recorded); false for a plain fp32 call.
  bool quantize_call(const GemmCall& call, const Matrix& first, const Matrix& second, QuantizedTensor* qa,
                     QuantizedTensor* qb, Matrix* a_plain, Matrix* b_plain);
};

}  // namespace fp4d
