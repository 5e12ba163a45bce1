// NVFP4 on the CPU backend: 1x16 blocks along the stored matrix's rows, or 16x16 tiles,
// E4M3 block scales and an FP32 tensor scale (nvfp4-spec.md section 2).
#pragma once

#include "quant/nvfp4_math.hpp"
#include "quant/quantized.hpp"

namespace fp4d {

constexpr int kNvfp4Block = 16;

// |x| as an integer key whose unsigned order is the order of |x|, with NaN mapped to 0 (so
// ignored, as fmaxf does): integer max reductions vectorise where float ones with IEEE
// semantics do not. bits_float(key) is the magnitude.
inline std::uint32_t amax_key(float x) {
  const std::uint32_t a = float_bits(x) & 0x7fffffffu;
  return a > 0x7f800000u ? 0u : a;
}

// Global amax over a whole matrix, NaN ignored (as fmaxf): deterministic for any thread count.
float amax_cpu(const Matrix& x);

// Quantize x, given in the stored orientation (blocks run along its rows), filling codes,
// scale codes/values, the global scale, the clipped count and out.dequantized (stored
// orientation; skipped with dequantize = false, as benchmarks do). spec.scheme must be Nvfp4.
void nvfp4_quantize_cpu(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize = true);

}  // namespace fp4d
