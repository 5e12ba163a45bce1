// FP8 (E4M3 / E5M2) with float32 scales: per tensor (current scaling, scale = amax / max),
// per 1x128 block along the stored rows, or per 128x128 tile: the FP8 baselines of the
// NVFP4 paper (nvfp4-spec.md section 5). Per block: enc = min(max / amax, FLT_MAX) (1 when
// amax == 0 or enc == 0), dec = 1 / enc, code = fp8_satfinite(x * enc), x_hat = value * dec.
#pragma once

#include <algorithm>

#include "format/hd.hpp"
#include "quant/quantized.hpp"

namespace fp4d {

void fp8_quantize_cpu(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize = true);

namespace fp8_detail {
// format/fp8.hpp's fp8_encode_rne_satfinite<E, M, Bias> without branches, so that the CPU
// quantizer's element loop vectorises. Every candidate is computed and the right one selected
// with masks (GCC turns selects of this kind back into branches):
//  - normal: RNE on the bits (add half an ulp of the kept mantissa minus one, plus the kept
//    bit's parity, then drop the bits), rebiased; a carry moves into the exponent as it should.
//    Saturation is the min with the largest finite code: every magnitude from the max up to
//    Inf gives a code at least as large (no overflow: the bits stay below 2^31 + 2^20).
//  - subnormal (|x| below the smallest normal 2^(1-Bias)): |x| + 2^(24-Bias-M) has the float
//    ulp 2^(1-Bias-M), the format's subnormal spacing, so the float add rounds |x| to the
//    subnormal grid with the FPU's RNE, and the count of spacings is the sum's bits minus the
//    addend's (2^M, the smallest normal's code, where it rounds up to it). No float-to-integer
//    conversion, so no input is out of range.
//  - NaN: the canonical 0x7F without sign.
template <int M, int Bias, std::uint32_t MaxCode>
inline std::uint8_t rne_satfinite_fast(float x) {
  constexpr int kShift = 23 - M;
  constexpr std::uint32_t kRebias = static_cast<std::uint32_t>(127 - Bias) << M;
  constexpr std::uint32_t kMagic = static_cast<std::uint32_t>(24 - Bias - M + 127) << 23;
  constexpr std::uint32_t kMinNormal = static_cast<std::uint32_t>(1 - Bias + 127) << 23;
  const std::uint32_t u = float_bits(x), a = u & 0x7fffffffu;
  const std::uint32_t normal =
      std::min(((a + ((1u << (kShift - 1)) - 1u) + ((a >> kShift) & 1u)) >> kShift) - kRebias, MaxCode);
  const std::uint32_t sub = float_bits(bits_float(a) + bits_float(kMagic)) - kMagic;
  const std::uint32_t is_sub = 0u - static_cast<std::uint32_t>(a < kMinNormal);
  const std::uint32_t is_nan = 0u - static_cast<std::uint32_t>(a > 0x7f800000u);
  const std::uint32_t code = ((sub & is_sub) | (normal & ~is_sub)) | ((u >> 24) & 0x80u);
  return static_cast<std::uint8_t>((code & ~is_nan) | (0x7fu & is_nan));
}
}  // namespace fp8_detail

// Equal to e4m3_rne_satfinite / e5m2_rne_satfinite on every float32 (all 2^32 inputs in the
// [long] test of tests/unit/test_mxfp4_fp8_fast.cpp, a dense sample in the unit run).
inline std::uint8_t e4m3_rne_satfinite_fast(float x) { return fp8_detail::rne_satfinite_fast<3, 7, 0x7e>(x); }
inline std::uint8_t e5m2_rne_satfinite_fast(float x) { return fp8_detail::rne_satfinite_fast<2, 15, 0x7b>(x); }

}  // namespace fp4d
