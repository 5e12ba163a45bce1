// The CUDA backend's counterpart of quantize_cpu (quant/quantize.hpp): every scheme with a GPU
// kernel (NVFP4 1x16 / 16x16, MXFP4, FP8 per tensor / 1x128 / 128x128, BF16 and FP16 casts:
// every preset) through the shared host-side wrapper (RHT, orientation and statistics on the
// host), bit-identical to the CPU backend.
#pragma once

#include "quant/quantized.hpp"

namespace fp4d::cuda {

QuantizedTensor quantize_cuda(const Matrix& input, const QuantSpec& spec);

}  // namespace fp4d::cuda
