// One entry point for every quantization on the CPU backend: optional RHT, the scheme's
// quantizer in the stored orientation, dequantized values back in the input's orientation,
// and the error statistics against the exact target.
#pragma once

#include "quant/quantized.hpp"

namespace fp4d {

// Throws std::invalid_argument for an inconsistent spec or an RHT that does not fit.
QuantizedTensor quantize_cpu(const Matrix& input, const QuantSpec& spec);

// Whether every element is finite; the position of the first that is not, for messages.
bool all_finite(const Matrix& m, std::int64_t* first_bad = nullptr);

}  // namespace fp4d
