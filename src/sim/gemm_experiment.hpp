// GEMM error experiments: the three GEMMs of a linear layer in their training
// roles (quant/training_recipe.hpp), each operand quantized as a recipe says, compared with
// the exact product.
//
// The error of the computed product is split, in exact arithmetic, into
//   quantization  = exact(deq A, deq B) - exact(A, B)   (the operands' representation)
//   accumulation  = computed - exact(deq A, deq B)       (the GEMM's own arithmetic)
//   total         = computed - exact(A, B)  = quantization + accumulation
// where exact(deq A, deq B) is the exact product of the quantized operands' exact values
// (codes x scales x global scale) and exact(.) is computed with the fixed-point reference.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "quant/gemm_emulated.hpp"
#include "quant/matrix.hpp"
#include "quant/quantized.hpp"
#include "quant/training_recipe.hpp"

namespace fp4d {

// The role's logical operands: fprop (X: M x K, W: N x K), dgrad (dY: M x N, W: N x K),
// wgrad (X: M x K, dY: M x N). first/second name them for messages and files.
struct GemmOperands {
  GemmRole role = GemmRole::Fprop;
  Matrix first, second;
  std::string first_name, second_name;  // "X", "W", "dY"
  // Outlier channels of the first operand (X; dY in dgrad): one byte per column of `first`
  // (its features), non-zero = outlier; empty when unknown. The generator's mask of
  // --generate outliers. In the NT form those columns are the reduction dimension (fprop,
  // dgrad) or the output's rows (wgrad, where A = X^T).
  std::vector<std::uint8_t> first_channel_mask;
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

// Where in C the error sits (docs/numerics.md section 8, "Per-channel errors"), for the three
// terms of the split in order total, quantization, accumulation.
struct GemmChannelErrors {
  static constexpr int kTerms = 3;
  // Per output row i of C (stored orientation: fprop tokens, dgrad tokens, wgrad input
  // features) ||E_i,:||_2 / ||C_exact i,:||_2, and per output column j likewise.
  std::vector<double> row_rel[kTerms], col_rel[kTerms];
  // The first operand's outlier channels, where GemmOperands::first_channel_mask is given:
  // "reduction" (fprop, dgrad), "output_rows" (wgrad) or "none".
  std::string outlier_axis = "none";
  std::int64_t outlier_channels = 0;
  // reduction: the quantization term split over the reduction index k, exactly linear in it:
  // E_q = sum_{k outlier} (a^ b^ - a b) + sum_{k normal} (...), each part's ||.||_F / ||C_exact||_F.
  // The outlier part is summed in double from the quantized operands' exact values (NVFP4) or
  // their float32 dequantized values; the normal part is E_q minus it. -1 where not applicable
  // (another axis, or an operand transformed by an RHT, whose k no longer indexes channels).
  double quantization_from_outlier_rel = -1, quantization_from_normal_rel = -1;
  // output_rows: each term's pooled relative error over the outlier rows and over the others,
  // ||E_S,:||_F / ||C_exact S,:||_F. -1 where not applicable.
  double outlier_rows_rel[kTerms] = {-1, -1, -1}, normal_rows_rel[kTerms] = {-1, -1, -1};
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
  std::string accumulator = "fp32-sequential";     // the emulation's accumulator, or "device"
  // The accumulation error split against the sequential-FP32 emulation of the same operands:
  // accumulation = accumulation_fp32_sequential + accumulation_beyond_fp32_sequential (the
  // part the tensor cores' or the model's accumulation adds; zero for fp32-sequential).
  ErrorStats accumulation_fp32_sequential, accumulation_beyond_fp32_sequential;
  // A device product compared with the CPU model (GemmExperimentOptions::check_model): outputs
  // whose bits differ; -1 when not compared.
  std::int64_t model_mismatches = -1;
  bool split_exact = true;          // total == quantization + accumulation held exactly
  // With SR and draws > 1: the estimator over the draws (mean of computed).
  int draws = 1;
  double sr_rel_bias = 0;           // ||mean_d C_d - C_exact||_F / ||C_exact||_F
  double sr_rel_std = 0;            // sqrt(mean over elements of var_d C_d) / rms(C_exact)
  // sr_rel_bias split (one SR operand, NVFP4): SR's own bias ||mean_d C_d - T||_F / ||C_exact||_F
  // against T = exact(SR operand unrounded, the other operand's quantized values), and the
  // deterministic part ||T - C_exact||_F / ||C_exact||_F (the other operand's rounding). The
  // mean over draws carries sampling noise of about sr_mean_rel_noise = sr_rel_std / sqrt(draws):
  // an own bias at that level is not distinguishable from zero. -1 where not applicable.
  double sr_own_rel_bias = -1, sr_deterministic_rel_bias = -1, sr_mean_rel_noise = 0;
  QuantizedTensor qa, qb;           // the quantized operands (stored orientation)
  GemmChannelErrors channels;
};

struct GemmExperimentOptions {
  std::uint64_t seed = 0;  // SR draws and random signs; draw d uses seed + d
  int draws = 1;
  EmulatedGemmOptions emulation;   // the CPU emulation's accumulator
  // With `product` (a device): also compute the emulation with `emulation`'s accumulator and
  // count the outputs whose bits differ from the device's (GemmResult::model_mismatches).
  bool check_model = false;
  QuantizedProduct product;        // empty: the CPU emulation
  std::string product_path;        // its name for the trace (e.g. the cuBLASLt path)
  // Progress of the exact products (ExactGemmOptions::progress), with which one of the two
  // exact GEMMs of each recipe is running ("operands", "quantized operands").
  std::function<void(const char* which, std::int64_t rows_done, std::int64_t rows)> exact_progress;
};

GemmResult run_gemm_experiment(const GemmOperands& ops, const GemmRecipe& recipe, const GemmExperimentOptions& opt);

}  // namespace fp4d
