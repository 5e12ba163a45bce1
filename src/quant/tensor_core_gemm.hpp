// A GEMM whose every output is the tensor-core model's dot product (quant/tensor_core_model.hpp):
//   C(i, j) = fl(alpha * tensor_core_dot(A row i, B row j, K, c = 0, m))
// with A M x K and B N x K (C = A B^T, the stored orientation of the emulated GEMMs). alpha is the
// epilogue scale a cuBLASLt GEMM applies in float32 (D = alpha * acc with beta = 0); alpha = 1
// leaves acc as it is.
//
// Two implementations with one result. The reference calls tensor_core_dot per output. The fast
// path runs tiles of outputs, one per vector lane, and does each MMA block in 32-bit integers:
// a product a_k b_k is exact in float32 (at most 11 + 11 significant bits), its aligned,
// truncated value floor(|a_k b_k| 2^(23 + extra_bits - E)) is one multiply by a power of two
// and a truncating conversion, and the 16 products of a block sum exactly in int32 (each is
// below 4 * 2^25, so the sum stays below 2^31); the accumulator c joins in double. The fast
// path takes BF16 and FP16 models (group <= 16, 2 extra bits) for operands whose products can
// neither underflow nor overflow float32 and whose blocks' alignment exponents stay in
// [-100, 124]: checked on the operands' exponent ranges before the first output; anything else
// (FP8 models, infinities and NaN, extreme exponents) takes the reference.
#pragma once

#include "quant/matrix.hpp"
#include "quant/tensor_core_model.hpp"

namespace fp4d {

// Throws std::invalid_argument when A.cols != B.cols or an operand holds a value with more
// significant bits than the model's input format.
Matrix tensor_core_gemm(const Matrix& A, const Matrix& B, const TensorCoreModel& m, float alpha = 1.0f);

// The same, always through tensor_core_dot (the fast path's oracle in the tests).
Matrix tensor_core_gemm_reference(const Matrix& A, const Matrix& B, const TensorCoreModel& m, float alpha = 1.0f);

// Whether tensor_core_gemm takes the fast path for these operands (tests, benchmarks).
bool tensor_core_gemm_fast_path(const Matrix& A, const Matrix& B, const TensorCoreModel& m);

}  // namespace fp4d
