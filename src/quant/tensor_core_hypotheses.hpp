// The tensor-core model (quant/tensor_core_model.hpp) for a whole GEMM under several accumulation
// hypotheses at once, for the model check of `fp4drift accumulator` (docs/numerics.md 8b):
//   out[h](i, j) = tensor_core_dot(A row i, B row j, K, 0, m)                       intervals[h] == 0
//                  tensor_core_dot_promoted(A row i, B row j, K, 0, intervals[h], m) otherwise
// with A M x K and B N x K (C = A B^T, the stored orientation). Every output is those functions'
// bits; the paths below only make them affordable for 10^8 outputs.
//
// Paths. Intervals {0} with a BF16 or FP16 model: tensor_core_gemm (its vectorised path). FP8
// models (group 32, 13 fraction bits; any a/b format pair) with intervals that are 0 or multiples
// of the group: an integer path, one output per vector lane. It rests on three facts of FP8
// operands, each checked on the operands before it is taken:
//  - a product of two FP8 values has at most 4 x 4 = 8 significant bits, so it is exact in
//    float32, and so is its scaling by 2^(13 - E) (a power of two, the result a normal float);
//  - the model's aligned, truncated term floor(|a b| 2^(13 - E)) (its significand's 13 kept
//    fraction bits relative to the block's alignment exponent E) is then the float-to-int
//    conversion of that scaled product (truncation toward zero: the model's sign-magnitude
//    truncation); the 32 terms and the accumulator's are each below 2^15, their sum below 2^21:
//    exact in int32 and in float;
//  - cutting the sum to 14 significant bits (the block result's truncation toward zero) is a
//    mask of the float's 10 low fraction bits, and every block result stays a normal float
//    (model exponents in [-30, 16], so results lie in [2^-73, 2^(60 + log2 K)]): the model's
//    subnormal and overflow branches never apply. The accumulator then always has at most 14
//    significant bits, so the model's truncation of c to the block grid is the same conversion.
// A block's alignment exponent is the largest model exponent e_a + e_b of its products (each
// operand's exponent floor(log2 |x|), at least its own format's minimum normal exponent) and the
// accumulator's. Anything outside those conditions (non-finite values, other models, intervals
// not multiples of the group) takes tensor_core_dot per output. tests/unit/test_tensor_core_model.cpp
// compares the paths bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/matrix.hpp"
#include "quant/tensor_core_model.hpp"

namespace fp4d {

// One matrix per interval, in order. Throws std::invalid_argument when A.cols != B.cols, an
// interval is negative, or an operand holds a value with more significant bits than its format.
std::vector<Matrix> tensor_core_gemm_hypotheses(const Matrix& A, const Matrix& B, const TensorCoreModel& m,
                                                const std::vector<std::int64_t>& intervals);

// The same, always through tensor_core_dot / tensor_core_dot_promoted (the tests' oracle).
std::vector<Matrix> tensor_core_gemm_hypotheses_reference(const Matrix& A, const Matrix& B, const TensorCoreModel& m,
                                                          const std::vector<std::int64_t>& intervals);

// Whether the FP8 integer path is taken for these operands (tests, benchmarks).
bool tensor_core_hypotheses_fp8_path(const Matrix& A, const Matrix& B, const TensorCoreModel& m,
                                     const std::vector<std::int64_t>& intervals);

}  // namespace fp4d
