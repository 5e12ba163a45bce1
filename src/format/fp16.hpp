// FP16 (IEEE binary16) conversions shared by the CPU and CUDA backends (FP4D_HD), integer-only
// so that both evaluate them identically: round to nearest even from float32, saturating to
// infinity above the largest finite value (IEEE overflow), NaN -> the canonical quiet NaN with
// the input's sign. Exhaustively checked against the generic FloatFormat rounding and CUDA's
// host-callable __float2half_rn (tests/unit/test_formats.cpp, [long]).
#pragma once

#include <cstdint>

#include "format/hd.hpp"

namespace fp4d {

FP4D_HD std::uint16_t fp16_rne_bits(float x) {
  const std::uint32_t b = float_bits(x);
  const auto sign = static_cast<std::uint16_t>((b >> 16) & 0x8000u);
  const std::uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 (or Inf): Inf
  if (a >= 0x38800000u) {
    // Normal in FP16 (>= 2^-14): rebias the exponent (127 -> 15), round the 13 dropped bits to
    // nearest even; a carry out of the significand steps the exponent, as it should.
    std::uint32_t m = a - 0x38000000u;
    m += 0xfffu + ((m >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (m >> 13));
  }
  if (a < 0x33000000u) return sign;  // below 2^-25: rounds to zero (2^-25 itself: the tie below)
  // Subnormal in FP16: units of 2^-24. x = s * 2^(e - 150) with the 24-bit significand s, so
  // x / 2^-24 = s >> (126 - e) with the dropped bits rounded to nearest even (a result of
  // 1024 is the smallest normal, bit pattern 0x0400: correct as it stands).
  const std::uint32_t e = a >> 23, s = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
  std::uint32_t q = s >> shift;
  const std::uint32_t rem = s & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  q += (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
  return static_cast<std::uint16_t>(sign | q);
}

// FP16 bits -> float32 (exact); NaN -> the canonical quiet NaN 0x7fc00000.
FP4D_HD float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return m ? bits_float(0x7fc00000u) : bits_float(sign | 0x7f800000u);
  if (e != 0) return bits_float(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return bits_float(sign);
  // Subnormal: m * 2^-24, normal in float32: shift the leading one to bit 10.
  std::uint32_t mm = m, ee = 113u;
  while (!(mm & 0x400u)) mm <<= 1, --ee;
  return bits_float(sign | (ee << 23) | ((mm & 0x3ffu) << 13));
}

}  // namespace fp4d
