// 8-bit formats: E4M3 (OCP "fn": no Inf, NaN = S.1111.111, max 448), E5M2 (IEEE-like,
// max 57344) and UE8M0 (MX scales: a biased exponent, 2^-127..2^127, 0xFF NaN).
// float32 -> FP8 conversions are round-to-nearest-even with saturation to the largest
// finite value (CUDA's __NV_SATFINITE): finite overflow and +-Inf go to +-max; every NaN,
// whatever its sign and payload, maps to the positive canonical NaN 0x7F (S=0, all exponent
// and mantissa bits set; a NaN in both E4M3 and E5M2), as cuda_fp8.hpp's host conversion
// __nv_cvt_float_to_fp8 does (it replaces any NaN input by 0x7FFFFFFF before converting);
// -0 and negative values that round to 0 keep their sign.
#pragma once

#include "format/hd.hpp"

namespace fp4d {

// A sign-magnitude binary format with E exponent bits, M mantissa bits and bias B,
// encoded from float32 by bit manipulation. max_code is the code (without sign) of the
// largest finite value; nan_code that of the canonical NaN.
template <int E, int M, int Bias>
struct Fp8Traits {
  static constexpr int kExpBits = E, kManBits = M, kBias = Bias;
};

template <int E, int M, int Bias>
FP4D_HD std::uint8_t fp8_encode_rne_satfinite(float x, std::uint8_t max_code, std::uint8_t nan_code) {
  const std::uint32_t u = float_bits(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((u >> 31) << 7);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return nan_code;  // any NaN -> the canonical NaN, no sign (as CUDA)
  // Largest finite value as float32 bits: exponent field of max_code, its mantissa.
  const std::uint32_t max_e = (max_code >> M) & ((1u << E) - 1u), max_m = max_code & ((1u << M) - 1u);
  const std::uint32_t max_bits = ((max_e - Bias + 127u) << 23) | (max_m << (23 - M));
  if (a >= max_bits) return static_cast<std::uint8_t>(sign | max_code);
  const std::uint32_t min_normal_bits = static_cast<std::uint32_t>(1 - Bias + 127) << 23;
  if (a < min_normal_bits) {
    // Subnormal range: the value in units of the smallest subnormal 2^(1-Bias-M), rounded
    // to an integer with the float32 "magic number" (exact: the scaled value is < 2^M and
    // the scaling is a power of two). The result 2^M is the smallest normal's code.
    const float scaled = bits_float(a) * bits_float(static_cast<std::uint32_t>(Bias - 1 + M + 127) << 23);
    const float rounded = (scaled + 8388608.0f) - 8388608.0f;
    return static_cast<std::uint8_t>(sign | static_cast<std::uint8_t>(rounded));
  }
  constexpr int shift = 23 - M;
  const std::uint32_t r = a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u);  // RNE on the dropped bits
  const std::uint32_t code = (r >> shift) - (static_cast<std::uint32_t>(127 - Bias) << M);
  return static_cast<std::uint8_t>(sign | (code > max_code ? max_code : code));
}

template <int E, int M, int Bias>
FP4D_HD float fp8_decode(std::uint8_t c, bool has_inf) {
  const std::uint32_t sign = static_cast<std::uint32_t>(c >> 7) << 31;
  const std::uint32_t e = (c >> M) & ((1u << E) - 1u), m = c & ((1u << M) - 1u);
  if (e == (1u << E) - 1u) {
    if (has_inf) return bits_float(sign | (m ? 0x7fc00000u : 0x7f800000u));
    if (m == (1u << M) - 1u) return bits_float(sign | 0x7fc00000u);
  }
  if (e == 0) {
    // m * 2^(1 - Bias - M): exact in float32.
    const float v = static_cast<float>(m) * bits_float(static_cast<std::uint32_t>(1 - Bias - M + 127) << 23);
    return bits_float(float_bits(v) | sign);
  }
  return bits_float(sign | ((e - Bias + 127u) << 23) | (m << (23 - M)));
}

// ---- E4M3 (OCP fn) ----
constexpr float kE4M3Max = 448.0f;
constexpr std::uint8_t kE4M3MaxCode = 0x7e;
FP4D_HD std::uint8_t e4m3_rne_satfinite(float x) { return fp8_encode_rne_satfinite<4, 3, 7>(x, 0x7e, 0x7f); }
FP4D_HD float e4m3_decode(std::uint8_t c) { return fp8_decode<4, 3, 7>(c, false); }
// Subnormal E4M3: exponent field zero, mantissa non-zero (2^-9 .. 7 * 2^-9).
FP4D_HD bool e4m3_is_subnormal(std::uint8_t c) { return (c & 0x78u) == 0 && (c & 0x07u) != 0; }

// ---- E5M2 ----
constexpr float kE5M2Max = 57344.0f;
FP4D_HD std::uint8_t e5m2_rne_satfinite(float x) { return fp8_encode_rne_satfinite<5, 2, 15>(x, 0x7b, 0x7f); }
FP4D_HD float e5m2_decode(std::uint8_t c) { return fp8_decode<5, 2, 15>(c, true); }

// ---- UE8M0 (MX block scale): value 2^(code - 127); 0xFF is NaN ----
constexpr int kUe8m0MinExp = -127, kUe8m0MaxExp = 127;
FP4D_HD std::uint8_t ue8m0_from_exponent(int e) {
  e = e < kUe8m0MinExp ? kUe8m0MinExp : (e > kUe8m0MaxExp ? kUe8m0MaxExp : e);
  return static_cast<std::uint8_t>(e + 127);
}
FP4D_HD int ue8m0_exponent(std::uint8_t c) { return static_cast<int>(c) - 127; }
// 2^e for e in [-149, 127] as an exact float32 (subnormal powers included); outside that
// range the correctly rounded result: +Inf above, +0 below (2^-150 ties to even 0).
FP4D_HD float exp2i_f32(int e) {
  if (e > 127) return bits_float(0x7f800000u);
  if (e >= -126) return bits_float(static_cast<std::uint32_t>(e + 127) << 23);
  if (e >= -149) return bits_float(1u << (e + 149));
  return 0.0f;
}
FP4D_HD float ue8m0_decode(std::uint8_t c) {
  return c == 0xffu ? bits_float(0x7fc00000u) : exp2i_f32(ue8m0_exponent(c));
}

}  // namespace fp4d
