// Operands for the tensor-core model check (`fp4drift accumulator --model-check`, docs/numerics.md
// 8b): seeded generators, one per distribution, whose every value is exactly representable in the
// GEMM's input format, so that the device and the model multiply the same numbers.
//
// Input types: "bf16", "fp16", "e4m3" (both operands), "e5m2" (A in E5M2, B in E4M3: cuBLASLt
// has no E5M2 x E5M2 GEMM).
//
// Distributions. Random ones: "normal" N(0,1); "uniform" U(-1,1); "abs-normal" |N(0,1)| (every
// partial sum grows); "heavy-tailed" Student t with 2 degrees of freedom (clamped to the format's
// range); "mixed-exp" N(0,1) times 2^s, s uniform over a range of exponents per format;
// "cancelling" adjacent product pairs that cancel exactly or to a few units of the last place.
// Adversarial ones, aimed at the model's decisions. Their structure is laid on the K positions,
// shared by every row of A and B, so that it holds in every output (i, j); rows differ in
// signs, significands and (where stated) a power-of-two scale. With F the fraction bits a term
// keeps below the block's alignment exponent (25 for BF16/FP16, 13 for FP8), G the block (16 or
// 32 products) and O the output's fraction bits (23, FP8 13):
//  "exp-gap"          in every block one leading product and products F - 2 .. F + 1 binades
//                     below it (23 to 26 for BF16/FP16): kept, partly kept or truncated by the
//                     alignment; a quarter of the positions near the leader;
//  "zero-sum"         the K products in pairs p, -p: the exact sum is 0; half the pairs lie in one
//                     block (they cancel in the block's exact sum), half straddle blocks (the
//                     alignment's truncations then need not cancel);
//  "near-2^B"         non-negative integers whose sums end within about a factor 1.3 of 2^B,
//                     on both sides, B = 24 (BF16/FP16: where FP32 stops holding every integer)
//                     or 14 (FP8: the 13-bit accumulator's): partial sums cross 2^B;
//  "ties"             a leading power of two per block and products exactly half a unit of the
//                     alignment grid (2^-(F+1)) or of the output (2^-(O+1)), and 3/4 of it, with
//                     random signs: where round-to-nearest and truncation differ;
//  "subnormal"        subnormal inputs of each format (times subnormal, tiny or ordinary
//                     values) and, for BF16, products below FP32's normal range and below the
//                     model's alignment floor 2^-133;
//  "big-accumulator"  a first block of large positive products, then products 2^-6 .. 2^-(F+4)
//                     of it with random signs: the accumulator is at least 16 times any later
//                     block's sum of magnitudes (and FP8 partial sums promoted to FP32 keep what
//                     the 13-bit accumulator drops beside it).
// Every generator refuses to hand out an all-zero operand (std::logic_error): a zero operand
// would make every output agree trivially.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/matrix.hpp"

namespace fp4d {

const std::vector<std::string>& accumulator_input_types();     // bf16, fp16, e4m3, e5m2
const std::vector<std::string>& accumulator_distributions();   // the random ones, then the adversarial
bool is_adversarial_distribution(const std::string& distribution);

// The element formats of the two operands of an input type ("e5m2" -> "e5m2", "e4m3").
std::string accumulator_a_format(const std::string& input);
std::string accumulator_b_format(const std::string& input);

// x rounded to a format ("bf16", "fp16", "e4m3", "e5m2"; round to nearest even, saturating to the
// largest finite value), and whether x is exactly a finite value of it.
float round_to_format(float x, const std::string& format);
bool representable_in(float x, const std::string& format);

// Kept fraction bits F, block G and output fraction bits O of the sm90 model of an input type.
struct AccumulatorModelBits {
  int kept = 25, group = 16, output = 23;
};
AccumulatorModelBits accumulator_model_bits(const std::string& input);
// The power of two that "near-2^B" sums approach: 24, or 14 for FP8.
int accumulator_boundary_exponent(const std::string& input);

struct AccumulatorOperands {
  Matrix a, b;  // M x K and N x K (C = A B^T), values exact in a_format / b_format
  std::string a_format, b_format;
};

// Deterministic in (input, distribution, M, N, K, seed), independent of the thread count.
// std::invalid_argument for an unknown input or distribution or a size below 1; std::logic_error
// if an operand came out all zero.
// std::logic_error naming `what` when every element of X is zero.
void refuse_all_zero(const Matrix& X, const std::string& what);

AccumulatorOperands accumulator_operands(const std::string& input, const std::string& distribution, std::int64_t M,
                                         std::int64_t N, std::int64_t K, std::uint64_t seed);

}  // namespace fp4d
