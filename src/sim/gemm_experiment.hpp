// GEMM error experiments: the three GEMMs of a linear layer in their training
// roles, each operand quantized as a recipe says, compared with the exact product.
//
// Roles (M tokens, K input features, N output features), all as C = A * B^T with A and B
// in the quantizers' stored orientation (blocks along the reduction dimension):
//   fprop  C = X W^T   (M x N), reduction K:  A = X   (activation), B = W   (weight)
//   dgrad  C = dY W    (M x K), reduction N:  A = dY  (gradient),   B = W^T (weight)
//   wgrad  C = X^T dY  (K x N), reduction M:  A = X^T (activation), B = dY^T (gradient)
// The error of the computed product is split, in exact arithmetic, into
//   quantization  = exact(deq A, deq B) - exact(A, B)   (the operands' representation)
//   accumulation  = computed - exact(deq A, deq B)       (the GEMM's own arithmetic)
//   total         = computed - exact(A, B)  = quantization + accumulation
// where exact(deq A, deq B) is the exact product of the quantized operands' exact values
// (codes x scales x global scale) and exact(.) is computed with the fixed-point reference.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "quant/matrix.hpp"
#include "quant/quantized.hpp"

namespace fp4d {

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
  int sr_bits = 0;             // 0 = exact SR
  bool fp8_per_tensor = false; // fp8: per-tensor current scaling instead of 1x128 / 128x128
  MxScaleRule mx_rule = MxScaleRule::Floor;
};
// The named recipes ('all'): bf16, fp8, fp8-tensor, mxfp4, mxfp4-ceil, mxfp4-rceil, nvfp4 and
// its ablations. Besides these, any "nvfp4" followed by modifiers in any order names a
// recipe: -no-sr, -no-rht, -no-2d (each switches one element off), -sr8 (8-bit SR); e.g.
// "nvfp4-no-rht-no-sr". Throws std::invalid_argument listing the names otherwise.
const std::vector<GemmRecipe>& gemm_recipes();

// The quantization of one GEMM operand under a recipe, for an operand given in NT form
// (reduction along its rows, axis 1): its kind, whether the GEMM is the Wgrad one (RHT), and
// the SR seed and stream.
enum class OperandKind { Activation, Weight, Gradient };
QuantSpec gemm_operand_spec(const GemmRecipe& g, OperandKind kind, bool wgrad, std::uint64_t seed, std::uint64_t stream);
GemmRecipe gemm_recipe(const std::string& name);
std::vector<std::string> expand_gemm_recipe_names(const std::vector<std::string>& names);

// The role's logical operands: fprop (X: M x K, W: N x K), dgrad (dY: M x N, W: N x K),
// wgrad (X: M x K, dY: M x N). first/second name them for messages and files.
struct GemmOperands {
  GemmRole role = GemmRole::Fprop;
  Matrix first, second;
  std::string first_name, second_name;  // "X", "W", "dY"
};
// Shapes each role expects for (first, second), for validation messages.
void expected_shapes(GemmRole role, std::int64_t M, std::int64_t N, std::int64_t K, std::int64_t* r1,
                     std::int64_t* c1, std::int64_t* r2, std::int64_t* c2);

struct ErrorStats {
  double rel_frobenius = 0;  // ||E||_F / ||C_exact||_F
  double max_abs = 0;        // max |E|
  double bias = 0;           // mean E (signed)
};

// Bits of the accumulation that survive, per output element: b_ij = -log2(|acc_ij| / T_ij) with
// acc_ij the accumulation error (computed - exact product of the quantized operands) and
// T_ij = sum_k |a_ik b_jk| (the dequantized operands' product magnitudes, in double): the
// error measured in units of the largest partial sum any summation order can reach. A float32
// accumulator with round-to-nearest over n additions keeps b >= 24 - log2(n) (the gamma_n
// bound); an exact result counts as kCappedBits. Order statistics over the elements with T > 0.
struct AccumulationBits {
  static constexpr double kCappedBits = 64.0;
  double min = 0, p01 = 0, median = 0;  // minimum, 1st percentile, median
  double exact_fraction = 0;            // elements whose accumulation error is 0
};

struct GemmResult {
  std::string recipe;
  GemmRole role{};
  std::int64_t rows = 0, cols = 0;  // C
  std::vector<float> computed;      // the emulated low-precision product
  std::vector<double> exact;        // exact(A, B), correctly rounded to double
  std::vector<double> exact_quantized;  // exact(deq A, deq B), correctly rounded to double
  ErrorStats total, quantization, accumulation;
  // The second accumulation model: dequantize to float32, then an FP32 GEMM (ascending K,
  // no FMA); its error against exact(deq A, deq B). Equal to `accumulation` for casts.
  ErrorStats accumulation_dequant_fp32;
  AccumulationBits accumulation_bits;              // of `computed`
  AccumulationBits accumulation_bits_dequant_fp32; // of the FP32 model
  std::string product_path = "cpu-emulation";      // what computed `computed`
  bool split_exact = true;          // total == quantization + accumulation held exactly
  // With SR and draws > 1: the estimator over the draws (mean of computed).
  int draws = 1;
  double sr_rel_bias = 0;           // ||mean_d C_d - C_exact||_F / ||C_exact||_F
  double sr_rel_std = 0;            // sqrt(mean over elements of var_d C_d) / rms(C_exact)
  QuantizedTensor qa, qb;           // the quantized operands (stored orientation)
};

// Computes C = A B^T (stored orientation) of two quantized operands; the experiment's
// default is the CPU emulation (gemm_emulated.hpp). The CUDA backend passes its tensor-core GEMM.
using QuantizedProduct = std::function<Matrix(const QuantizedTensor&, const QuantizedTensor&)>;

struct GemmExperimentOptions {
  std::uint64_t seed = 0;  // SR draws and random signs; draw d uses seed + d
  int draws = 1;
  QuantizedProduct product;        // empty: the CPU emulation
  std::string product_path;        // its name for the trace (e.g. the cuBLASLt path)
  // Progress of the exact products (ExactGemmOptions::progress), with which one of the two
  // exact GEMMs of each recipe is running ("operands", "quantized operands").
  std::function<void(const char* which, std::int64_t rows_done, std::int64_t rows)> exact_progress;
};

GemmResult run_gemm_experiment(const GemmOperands& ops, const GemmRecipe& recipe, const GemmExperimentOptions& opt);

}  // namespace fp4d
