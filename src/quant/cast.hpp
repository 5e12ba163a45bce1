// Plain element casts to BF16 / FP16 (round to nearest even, IEEE overflow to infinity):
// the high-precision baselines. Codes are the 16-bit patterns; the conversions are
// format/bf16.hpp and format/fp16.hpp, shared with the CUDA backend.
#pragma once

#include "quant/quantized.hpp"

namespace fp4d {

void cast_quantize_cpu(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out);
// The shape of a cast's result, shared by the backends: no blocks or scales, zeroed codes16
// and dequantized values of x's shape, global scale 1.
void prepare_cast_output(const Matrix& x, QuantizedTensor& out);

}  // namespace fp4d
