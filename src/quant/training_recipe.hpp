// The training recipe: how each operand of each GEMM of a training step is quantized
// (nvfp4-spec.md section 6). A GEMM has a role (fprop, dgrad, wgrad); its operands are
// activations, weights or gradients; a recipe (bf16, fp8, mxfp4, nvfp4 and its ablations)
// maps (operand kind, role) to a QuantSpec. Every backend that quantizes a training step's
// operands takes its specs, seeds and Philox streams from here, which is what makes a device
// run's quantized operands the CPU run's bits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "quant/gemm_emulated.hpp"
#include "quant/matrix.hpp"
#include "quant/quantized.hpp"
#include "quant/spec.hpp"

namespace fp4d {

// Roles (M tokens, K input features, N output features), all as C = A * B^T with A and B
// in the quantizers' stored orientation (blocks along the reduction dimension):
//   fprop  C = X W^T   (M x N), reduction K:  A = X   (activation), B = W   (weight)
//   dgrad  C = dY W    (M x K), reduction N:  A = dY  (gradient),   B = W^T (weight)
//   wgrad  C = X^T dY  (K x N), reduction M:  A = X^T (activation), B = dY^T (gradient)
enum class GemmRole { Fprop, Dgrad, Wgrad };
GemmRole parse_gemm_role(const std::string& s);  // throws std::invalid_argument
std::string to_string(GemmRole r);

// How each operand kind is quantized: the GEMM recipes (nvfp4-spec.md section 6).
struct GemmRecipe {
  std::string name;
  std::string description;
  enum class Kind { Bf16, Fp8, Mxfp4, Nvfp4 } kind = Kind::Nvfp4;
  bool two_d_weights = true;   // 16x16 (nvfp4) / 128x128 (fp8) weight tiles
  bool rht_wgrad = true;       // RHT-16 on both Wgrad operands (nvfp4)
  bool sr_gradients = true;    // SR on gradient operands (nvfp4)
  int sr_bits = kSrHw;         // hw (the paper's: cvt.rs), kSrExact, or k bits (rounding.hpp)
  bool fp8_per_tensor = false; // fp8: per-tensor current scaling instead of 1x128 / 128x128
  MxScaleRule mx_rule = MxScaleRule::Floor;
};
// The named recipes ('all'): bf16, fp8, fp8-tensor, mxfp4, mxfp4-ceil, mxfp4-rceil, nvfp4 and
// its ablations. Besides these, any "nvfp4" followed by modifiers in any order names a
// recipe: -no-sr, -no-rht, -no-2d (each switches one element off) and at most one of -sr8
// (8-bit SR from the top of a 32-bit word) and -sr-exact (exact SR) in place of the paper's
// hardware SR; e.g. "nvfp4-no-rht-sr-exact". Throws std::invalid_argument listing the names
// otherwise.
const std::vector<GemmRecipe>& gemm_recipes();

// The quantization of one GEMM operand under a recipe, for an operand given in NT form
// (reduction along its rows, axis 1): its kind, whether the GEMM is the Wgrad one (RHT), and
// the SR seed and stream.
enum class OperandKind { Activation, Weight, Gradient };
QuantSpec gemm_operand_spec(const GemmRecipe& g, OperandKind kind, bool wgrad, std::uint64_t seed, std::uint64_t stream);

// The block layouts of g's FP8 operands over every operand kind and GEMM role ("1x128 and
// 128x128"); empty when no FP8 operand of g has block scales (the sm90 accumulator models FP8
// with per-tensor scaling only).
std::string fp8_block_layouts(const GemmRecipe& g);
GemmRecipe gemm_recipe(const std::string& name);
std::vector<std::string> expand_gemm_recipe_names(const std::vector<std::string>& names);

// Computes C = A B^T (stored orientation) of two quantized operands; the experiment's
// default is the CPU emulation (gemm_emulated.hpp). The CUDA backend passes its tensor-core GEMM.
using QuantizedProduct = std::function<Matrix(const QuantizedTensor&, const QuantizedTensor&)>;

// A training run's recipe: `recipe` on every layer except `high_precision_layers`, which run
// `edge_recipe` (the NVFP4 paper keeps some layers in BF16), SR seeded by `seed`, products
// computed by `product`.
struct RecipeGemmOptions {
  std::string recipe = "nvfp4";           // a GEMM recipe name or "fp32"
  std::string edge_recipe = "bf16";
  std::vector<int> high_precision_layers;  // layers run with edge_recipe
  std::uint64_t seed = 0;
  QuantizedProduct product;               // empty: the CPU emulation
  // How the CPU emulation accumulates the recipe's GEMMs (`[recipes] accumulator`); the plain
  // fp32 recipe's float32 GEMM and a backend's `product` are not affected.
  Accumulator accumulator = Accumulator::Fp32Sequential;
};

// The SR seed of step `step` of a run seeded `seed`, and the Philox stream of a GEMM operand
// (operand 0 = first, 1 = second): what RecipeGemm uses, for backends that quantize themselves.
std::uint64_t recipe_step_seed(std::uint64_t seed, std::int64_t step);
inline std::uint64_t recipe_operand_stream(int layer, GemmRole role, int operand) {
  return static_cast<std::uint64_t>(layer) * 8 + static_cast<std::uint64_t>(role) * 2 + static_cast<std::uint64_t>(operand);
}

}  // namespace fp4d
