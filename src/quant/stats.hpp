// Error statistics of a quantization (definitions in quantized.hpp and docs/numerics.md).
#pragma once

#include <functional>

#include "quant/quantized.hpp"

namespace fp4d {

// target(i): the exact value of element i (input orientation, row-major), in double.
// Sums run over fixed chunks of 4096 elements combined in order: the result is the same for
// any number of threads.
QuantStats compute_stats(const std::function<double(std::int64_t)>& target, const QuantizedTensor& q);

}  // namespace fp4d
