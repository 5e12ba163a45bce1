// A bit-accurate model of how a tensor core accumulates an FP32 dot product, after Khattak and
// Mikaitis, "Accurate Models of NVIDIA Tensor Cores" (ACM TACO; arXiv:2512.07004), whose H100
// model the H200 shares (their models/H100TC.m, H200TC.m and tools/Generic_BFMA_TC.m give the
// parameters and the algorithm; this is an independent implementation of that description).
//
// One MMA block, d = c + sum_i a_i b_i over `group` products (one k-slice of the instruction):
//   1. products with a zero factor are dropped; each other product is exact, its significand
//      sig_a sig_b in [1, 4) (not renormalised) at exponent e_a + e_b (input subnormals keep a
//      significand below 1 at the format's minimum exponent);
//   2. the alignment exponent E is the largest of those exponents and c's (c = +-0 takes no
//      part), at least min_exponent;
//   3. every term (the products and c, as 2^23-scaled integer significands) keeps 23 +
//      extra_bits fraction bits relative to 2^E: the bits below are truncated (no guard or
//      sticky bit), then the terms are summed exactly;
//   4. the sum is normalised and truncated toward zero to the output's 23 + min(extra_bits, 0)
//      fraction bits (FP32 subnormals kept); a zero sum is +0; a result past FP32's range is
//      +-inf.
// A dot product of length K runs its blocks in ascending k, each block's result the next one's
// c (recursive summation, as a GEMM main loop without split-K accumulates). Infinities and NaN
// are decided once for the whole dot product: any NaN or a product 0 * inf gives NaN, products
// of both infinite signs NaN, otherwise the infinity's sign.
//
// The parameters below are the published model's. `fp4drift accumulator` compares the model with
// the device: on the H200, cuBLASLt's BF16 GEMMs agree bit for bit where its kernel sums each
// output in ascending k (docs/findings.md); FP16 and FP8 are not compared yet
// (`fp4drift accumulator --model-check` does that, docs/numerics.md 8b).
//
// cuBLASLt's FP8 GEMMs without fast accumulation promote partial sums to an FP32 accumulator at
// an interval it does not publish: on the H200 (cuBLAS 13) every 128 products, measured by
// `fp4drift accumulator --model-check` (tensor_core_dot_promoted with interval 128 agreed on every
// output, each other candidate interval disagreed; docs/numerics.md 8b). With fast accumulation
// there is no promotion: tensor_core_dot over all of K.
#pragma once

#include <cstdint>
#include <string>

namespace fp4d {

// The promotion interval of Hopper FP8 GEMMs without fast accumulation (see above).
inline constexpr std::int64_t kSm90Fp8PromotionInterval = 128;

struct TensorCoreModel {
  int group = 16;           // products aligned and summed together (one MMA k-slice)
  int extra_bits = 2;       // fraction bits kept beyond FP32's 23 during alignment (-10: 13 bits)
  int min_exponent = -133;  // floor of the alignment exponent
  int input_min_exponent = -126;  // the input format's minimum normal exponent (its subnormals' scale)
  int input_fraction_bits = 7;    // the input format's fraction bits (operands with more are refused)
  // The b operand's format where it differs from a's: FP8 GEMMs multiply E5M2 by E4M3, and a
  // subnormal input's exponent (hence a block's alignment exponent) depends on its own format.
  // sm90_tensor_core_model sets both; the vectorised GEMM (tensor_core_gemm.hpp) takes only
  // models whose two operands share a format.
  int b_input_min_exponent = -126;
  int b_input_fraction_bits = 7;
  std::string name;
};

// Hopper (sm_90: H100, H200) with FP32 output, per input format: "bf16", "fp16" (group 16, 2
// extra bits), "e4m3", "e5m2" (group 32, 13 fraction bits: Hopper's FP8 accumulation). Throws
// std::invalid_argument naming the format and the ones modelled.
TensorCoreModel sm90_tensor_core_model(const std::string& input_format);
// Operands of two formats: a's and b's, both FP8 ("e4m3", "e5m2") or the same format (the
// one-argument form then). std::invalid_argument for other pairs.
TensorCoreModel sm90_tensor_core_model(const std::string& a_format, const std::string& b_format);

// One block: c + sum of the n products a_i b_i (n <= 64; a_i, b_i finite values of the model's
// input format - std::invalid_argument for an operand with more significant bits - and c a
// finite float).
float tensor_core_block(const float* a, const float* b, int n, float c, const TensorCoreModel& m);

// c + sum_k a_k b_k over K terms in blocks of m.group (the last one shorter), ascending.
float tensor_core_dot(const float* a, const float* b, std::int64_t K, float c, const TensorCoreModel& m);

// The same products with their partial sums promoted to FP32 every `interval` products, as a GEMM
// main loop does that accumulates a few MMAs in the tensor core's accumulator and then adds it
// to an FP32 register (CUTLASS's FP8 "promotion interval"):
//   chunk_n = tensor_core_dot(a + n P, b + n P, min(P, K - n P), 0, m)   (blocks from the chunk's start)
//   acc_0 = c,  acc_{n+1} = fl(acc_n + chunk_n)                          (FP32, round to nearest even)
// with P = interval; the result is the last acc. interval >= K (one chunk) gives
// fl(c + tensor_core_dot(..., 0, m)), which is tensor_core_dot itself for c = 0. Infinities and
// NaN propagate through the FP32 additions (the same outcome as tensor_core_dot's rule).
// std::invalid_argument for interval < 1.
float tensor_core_dot_promoted(const float* a, const float* b, std::int64_t K, float c, std::int64_t interval,
                               const TensorCoreModel& m);

}  // namespace fp4d
