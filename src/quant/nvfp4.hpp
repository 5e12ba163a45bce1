// NVFP4 on the CPU backend: 1x16 blocks along the stored matrix's rows, or 16x16 tiles,
// E4M3 block scales and an FP32 tensor scale (nvfp4-spec.md section 2).
#pragma once

#include <algorithm>

#include "quant/nvfp4_math.hpp"
#include "quant/quantized.hpp"

namespace fp4d {

constexpr int kNvfp4Block = 16;

// Branch-free forms of the E4M3 scale conversions for the CPU's vectorised scale loops.
// e4m3_encode_nonneg(v) == e4m3_rne_satfinite(v) for every v >= 0 that is not NaN (+Inf
// included) and e4m3_decode_finite(c) == e4m3_decode(c) for every code but the NaNs 0x7f and
// 0xff; both checked exhaustively by the tests. Arithmetic masks instead of selects, which
// GCC would turn back into branches.
inline std::uint32_t e4m3_encode_nonneg(float v) {  // code in the low 8 bits
  const std::uint32_t a = float_bits(v);
  const std::uint32_t normal = ((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - (120u << 3);  // RNE, 3 mantissa bits
  // Units of 2^-9, < 8 where used; clamped first so that the conversion below is defined
  // for every input (its result only counts below 2^-6).
  const float scaled = std::min(v, 0.015625f) * 512.0f;
  const std::uint32_t sub = static_cast<std::uint32_t>((scaled + 8388608.0f) - 8388608.0f);
  const std::uint32_t is_sub = 0u - static_cast<std::uint32_t>(a < 0x3c800000u);  // below 2^-6
  const std::uint32_t is_sat = 0u - static_cast<std::uint32_t>(a >= 0x43e00000u);  // 448 and above
  const std::uint32_t code = (normal & ~is_sub) | (sub & is_sub);
  return (code & ~is_sat) | (0x7eu & is_sat);
}
inline float e4m3_decode_finite(std::uint32_t c) {  // c < 256
  const std::uint32_t mag = c & 0x7fu, e = mag >> 3, m = mag & 7u;
  const std::uint32_t is_sub = 0u - static_cast<std::uint32_t>(e == 0);
  const std::uint32_t normal = ((e + 120u) << 23) | (m << 20);
  const std::uint32_t sub = float_bits(static_cast<float>(m) * 0.001953125f);  // m * 2^-9, exact
  return bits_float(((normal & ~is_sub) | (sub & is_sub)) | (static_cast<std::uint32_t>(c & 0x80u) << 24));
}

// Global amax over a whole matrix, NaN ignored (as fmaxf): deterministic for any thread count.
float amax_cpu(const Matrix& x);

// Quantize x, given in the stored orientation (blocks run along its rows), filling codes,
// scale codes/values, the global scale, the clipped count and out.dequantized (stored
// orientation; skipped with dequantize = false, as benchmarks do). spec.scheme must be Nvfp4.
void nvfp4_quantize_cpu(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize = true);

// The same quantization written as the spec reads, one element at a time through the
// FP4D_HD functions of nvfp4_math.hpp and e2m1_round (in nvfp4_reference.cpp): the reference
// that the optimised CPU path above (and the CUDA backend) must equal bit for bit.
// Single-threaded and slow.
void nvfp4_quantize_reference(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out);

}  // namespace fp4d
