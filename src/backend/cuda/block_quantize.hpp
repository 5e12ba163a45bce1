// MXFP4, FP8-scaled and BF16-cast quantization on the GPU, bit-identical to the CPU
// backend's mxfp4_quantize_cpu / fp8_quantize_cpu / cast_quantize_cpu: the same FP4D_HD
// functions (mxfp4_scale_exponent, e2m1_round with the element index as Philox counter,
// e4m3/e5m2_rne_satfinite, bf16_rne_bits) compiled with --fmad=false. Plain C++ header.
//
// Same contract as the CPU functions: x in the stored orientation; fills rows/cols/padded_cols,
// scale grid, codes (or codes16), scale codes/values, clipped and, unless dequantize is false,
// dequantized (stored orientation). Throws std::invalid_argument for a spec the kernel does not
// take and std::runtime_error naming the CUDA call on a CUDA failure.
#pragma once

#include "quant/matrix.hpp"
#include "quant/quantized.hpp"
#include "quant/spec.hpp"

namespace fp4d::cuda {

// MXFP4: 1x32 blocks, every UE8M0 rule, every rounding mode.
void mxfp4_quantize_cuda(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize = true);
// FP8 E4M3/E5M2: per tensor, 1x128 blocks or 128x128 tiles (RNE, saturating, as the CPU).
void fp8_quantize_cuda(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize = true);
// BF16 and FP16 casts (RNE; format/bf16.hpp, format/fp16.hpp).
void cast_quantize_cuda(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize = true);

}  // namespace fp4d::cuda
