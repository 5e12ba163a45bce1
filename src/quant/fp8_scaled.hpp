// FP8 (E4M3 / E5M2) with float32 scales: per tensor (current scaling, scale = amax / max),
// per 1x128 block along the stored rows, or per 128x128 tile: the FP8 baselines of the
// NVFP4 paper (nvfp4-spec.md section 5). Per block: enc = min(max / amax, FLT_MAX) (1 when
// amax == 0 or enc == 0), dec = 1 / enc, code = fp8_satfinite(x * enc), x_hat = value * dec.
#pragma once

#include "quant/quantized.hpp"

namespace fp4d {

void fp8_quantize_cpu(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize = true);

}  // namespace fp4d
