// QuantizedTensor -> the exact GEMM's block operand (ref/exact_block_gemm.hpp).
// The stored orientation is read as M x K with the blocks along K (stored rows = M), which
// is the layout of a GEMM "NT" operand: C = A * B^T = exact_block_gemm_nt(A, B).
#pragma once

#include "quant/quantized.hpp"
#include "ref/exact_block_gemm.hpp"

namespace fp4d {

// Supported: NVFP4 (1x16, 16x16 tiles, per tensor; E4M3 scales incl. subnormal and zero,
// global decode scale), MXFP4 (UE8M0 scales), FP8 scaled (E4M3/E5M2 elements, float32
// scales, per tensor / 1x128 / 128x128). Every value is taken from the codes exactly:
// operand element (r, k) * scale * global equals the dequantized value of stored (r, k)
// computed exactly. Throws std::invalid_argument for casts and for NaN/Inf codes or scales.
ref::BlockOperand block_operand(const QuantizedTensor& q);

// float -> (significand, exponent) with the significand odd (or 0): f = sig * 2^exp exactly.
// Throws std::invalid_argument for NaN/Inf.
void float_to_sig_exp(float f, std::int64_t& sig, std::int32_t& exp);

}  // namespace fp4d
