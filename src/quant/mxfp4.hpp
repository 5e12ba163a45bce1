// MXFP4 (OCP MX v1.0) on the CPU backend: 1x32 blocks along the stored rows, UE8M0 scales.
#pragma once

#include "quant/mxfp4_math.hpp"
#include "quant/quantized.hpp"

namespace fp4d {

void mxfp4_quantize_cpu(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize = true);

}  // namespace fp4d
