// E2M1 (FP4): 1 sign, 2 exponent, 1 mantissa bit, bias 1. Magnitudes
// {0, 0.5, 1, 1.5, 2, 3, 4, 6}; codes 0-7 positive, 8-15 negative (8 is -0); no Inf/NaN.
// Conversions follow the spec (nvfp4-spec.md section 1): saturating, NaN -> +6 (0x7)
// as CUDA's __nv_cvt_float_to_fp4 does, the sign of zero kept.
#pragma once

#include "format/hd.hpp"
#include "format/rounding.hpp"

namespace fp4d {

constexpr float kE2M1Max = 6.0f;

// Value of a 4-bit code (the low nibble of `code`).
FP4D_HD float e2m1_decode(std::uint8_t code) {
  const std::uint32_t mag = code & 7u, e = mag >> 1, m = mag & 1u;
  std::uint32_t bits;
  if (e == 0) bits = m ? 0x3f000000u : 0u;                 // 0 or 0.5
  else bits = ((e - 1u + 127u) << 23) | (m << 22);          // (1 + m/2) * 2^(e-1)
  return bits_float(bits | (static_cast<std::uint32_t>(code & 8u) << 28));
}

FP4D_HD std::uint8_t e2m1_sign_nibble(float y) {
  return (!is_nan_f32(y) && sign_bit_f32(y)) ? 8u : 0u;
}

// The NaN and sign part of a conversion: `count` is the magnitude code of |u|; NaN gives
// +6 (code 7, the sign dropped by the select). Written without branches (the NaN and sign
// cases are selects) so that loops over it vectorise.
FP4D_HD std::uint8_t e2m1_from_magnitude_count(std::uint32_t u, std::uint32_t count) {
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<std::uint8_t>(nan ? 7u : (count | ((u >> 28) & 8u)));
}

// Round to nearest, ties to even code, saturating (NaN -> 7, sign of zero kept). Branch-free
// in two pieces selected by compares (fewer instructions than a chain of 7 threshold
// compares, on the GPU and in the CPU's vectorised loops):
//  a < 1:  0x1p22f has ulp 0.5, the E2M1 spacing below 1, so the float add rounds a to a
//          multiple of 0.5 with the FPU's RNE; those multiples 0, 0.5, 1 are the codes 0, 1,
//          2 and sit in the sum's low mantissa bits, and their parity is the code's, so
//          ties-to-even on the float grid is ties-to-even on the code.
//  a >= 1: the grid is every float with one mantissa bit (1, 1.5, 2, 3, 4, 6): round the
//          bits to one mantissa bit (RNE: add 0x1fffff plus the kept bit, drop 22 bits; a
//          carry moves into the exponent as it should). bits >> 22 of 1.0 is 254 = code 2 +
//          252, and the codes of 1 .. 6 follow consecutively. Above 6 (Inf included) the
//          result exceeds 7 and is saturated by the min; no overflow for |u| <= Inf.
FP4D_HD std::uint32_t e2m1_rne_magnitude(std::uint32_t abs_bits) {
  const float a = bits_float(abs_bits);
  const std::uint32_t below_one = float_bits(a + 0x1p22f) - 0x4a800000u;  // 0x4a800000 = 2^22
  const std::uint32_t rounded = (abs_bits + 0x1fffffu + ((abs_bits >> 22) & 1u)) >> 22;
  const std::uint32_t from_one = rounded - 252u;
  const std::uint32_t sat = from_one < 7u ? from_one : 7u;
  return a < 1.0f ? below_one : sat;
}

FP4D_HD std::uint8_t e2m1_rne(float y) {
  const std::uint32_t u = float_bits(y);
  return e2m1_from_magnitude_count(u, e2m1_rne_magnitude(u & 0x7fffffffu));
}

// e2m1_rne for a y known not to be a NaN (+-Inf allowed): the NaN select dropped, the sign
// ORed in. Equal to e2m1_rne on every non-NaN float32 (checked on all 2^32 inputs in the
// [long] value-table sweep, on the dense sample in the unit run). The CUDA quantizer uses
// it in warps it has checked for NaN (one vote per warp).
FP4D_HD std::uint8_t e2m1_rne_not_nan(float y) {
  const std::uint32_t u = float_bits(y);
  return static_cast<std::uint8_t>(e2m1_rne_magnitude(u & 0x7fffffffu) | ((u >> 28) & 8u));
}

// e2m1_rne_not_nan's magnitude on the FMA pipe: 2^23 + the magnitude code of |y|, as a float.
// The code is a concave piecewise-linear function of a = |y| (slopes 2, 1, 1/2 on [0, 2],
// [2, 4], [4, 6]), so it is the least of its three pieces and the saturation:
//   rne(2a), rne(a) + 2, rne(a / 2) + 4, 7.
// Each piece is one fused multiply-add: x + 2^23 for 0 <= x < 2^23 lies in [2^23, 2^24),
// where floats are the integers, so the float rounding is rne(x) (ties to even integer, and
// an even integer is an even code: 0.25 -> 0, 0.75 -> 1.0, 2.5 -> 2, 5 -> 4) and the integer
// sits in the low mantissa bits. The products 2a and a / 2 are exact (a tiny a / 2 or a huge
// 2a round, but then that piece is far from the least), so the host's unfused expression is
// the same value as the device's __fmaf_rn. Inf gives Inf in every piece: 7. Why it exists:
// the CUDA quantizer's RNE path is bound by the ALU pipe (ncu, docs/benchmarks.md), where
// e2m1_rne_magnitude's bit arithmetic runs; these are three FMA-pipe operations and three
// minimums. Equal to e2m1_rne_not_nan on every non-NaN float32 (tests/unit/test_formats.cpp,
// all 2^32 inputs in the [long] sweep).
FP4D_HD float e2m1_rne_magnitude_fma(float y) {
#if defined(__CUDA_ARCH__)
  const float a = fabsf(y);  // an operand modifier of the FFMAs, not an instruction
  const float twice = __fmaf_rn(a, 2.0f, 0x1p23f), once = __fadd_rn(a, 0x1p23f + 2.0f),
              half = __fmaf_rn(a, 0.5f, 0x1p23f + 4.0f);
  // fminf: one FMNMX each, where the host's selects compile to a compare and a select; the
  // same value for every non-NaN y (no operand is then a NaN).
  return fminf(fminf(twice, once), fminf(half, 0x1p23f + 7.0f));
#else
  const float a = abs_f32(y);
  const float twice = a * 2.0f + 0x1p23f, once = a + (0x1p23f + 2.0f), half = a * 0.5f + (0x1p23f + 4.0f);
  const float m = twice < once ? twice : once, n = half < 0x1p23f + 7.0f ? half : 0x1p23f + 7.0f;
  return m < n ? m : n;
#endif
}
constexpr std::uint32_t kE2M1FmaBias = 0x4b000000u;  // float_bits(0x1p23f)

// The CUDA quantizers pack `nibbles` magnitudes of e2m1_rne_magnitude_fma into one word without
// first taking 2^23's bits off each (e2m1_rne_pack_fma: Horner's acc * 16 + bits(m_j) from the
// last down, modulo 2^32 the sum of bits(m_j) << 4j). Each bits(m_j) is kE2M1FmaBias + code_j,
// and codes <= 7 carry nothing into the next nibble, so the sum is the packed codes plus this.
FP4D_HD constexpr std::uint32_t e2m1_fma_packed_bias(int nibbles) {
  std::uint32_t b = 0;
  for (int j = 0; j < nibbles; ++j) b += kE2M1FmaBias << (4 * j);
  return b;
}

// (acc << 4) | y_bits >> 28: shifts the top nibble of y (sign and three exponent bits) in below
// acc; one funnel shift on the device. Used to pack the signs of a block's codes.
FP4D_HD std::uint32_t e2m1_shift_in_top_nibble(std::uint32_t acc, std::uint32_t y_bits) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_l(y_bits, acc, 4);
#else
  return (acc << 4) | (y_bits >> 28);
#endif
}

// The codes e2m1_rne_not_nan(y[0..N)) packed into nibbles 0..N-1 (N = 4 or 8; sign in bit 3 of
// each nibble), as the CUDA quantizers' RNE fast paths compute them: magnitudes on the FMA pipe,
// packed by Horner's rule from the last element down (acc * 16 + bits, one IMAD each, the 2^23
// bits taken off once at the end), signs by one funnel shift each. For non-NaN y only.
template <int N>
FP4D_HD std::uint32_t e2m1_rne_pack_fma(const float* y) {
  static_assert(N == 4 || N == 8, "4 or 8 codes per word");
  std::uint32_t acc = 0, signs = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = N - 1; j >= 0; --j) {
    acc = acc * 16u + float_bits(e2m1_rne_magnitude_fma(y[j]));
    signs = e2m1_shift_in_top_nibble(signs, float_bits(y[j]));
  }
  constexpr std::uint32_t sign_bits = N == 8 ? 0x88888888u : 0x8888u;
  return (acc - e2m1_fma_packed_bias(N)) | (signs & sign_bits);
}

FP4D_HD std::uint8_t e2m1_rne_not_nan_fma(float y) {
  return static_cast<std::uint8_t>((float_bits(e2m1_rne_magnitude_fma(y)) - kE2M1FmaBias) | ((float_bits(y) >> 28) & 8u));
}

// Round toward zero (saturating at 6).
FP4D_HD std::uint8_t e2m1_rz(float y) {
  const std::uint32_t u = float_bits(y);
  const float a = bits_float(u & 0x7fffffffu);
  const std::uint32_t count = static_cast<std::uint32_t>(a >= 0.5f) + (a >= 1.0f) + (a >= 1.5f) + (a >= 2.0f) +
                              (a >= 3.0f) + (a >= 4.0f) + (a >= 6.0f);
  return e2m1_from_magnitude_count(u, count);
}

// Lower neighbour code of |y| (|y| < 6) and the fraction f of the way to the next code.
// The grid spacing is 0.5 below 2, 1 in [2, 4), 2 in [4, 6): all subtractions and
// power-of-two scalings below are exact in float32.
FP4D_HD std::uint8_t e2m1_floor_and_fraction(float a, float* f) {
  if (a < 2.0f) {
    const float t = a * 2.0f;
    const std::uint32_t c = static_cast<std::uint32_t>(t);
    *f = t - static_cast<float>(c);
    return static_cast<std::uint8_t>(c);
  }
  if (a < 4.0f) {
    const float t = a - 2.0f;
    const std::uint32_t c = static_cast<std::uint32_t>(t);
    *f = t - static_cast<float>(c);
    return static_cast<std::uint8_t>(4u + c);
  }
  *f = (a - 4.0f) * 0.5f;
  return 6u;
}

// Stochastic rounding (exact, k-bit or hw, see rounding.hpp), saturating at 6: w is the
// element's random word, or for hw its random byte (philox_hw_byte).
FP4D_HD std::uint8_t e2m1_sr(float y, std::uint32_t w, int sr_bits, RngStream s, std::uint64_t element_index) {
  if (is_nan_f32(y)) return 0x7u;
  const float a = abs_f32(y);
  std::uint8_t mag;
  if (a >= kE2M1Max) {
    mag = 7u;
  } else {
    float f;
    mag = e2m1_floor_and_fraction(a, &f);
    mag = static_cast<std::uint8_t>(mag + (sr_round_up(f, w, sr_bits, s, element_index) ? 1u : 0u));
  }
  return mag | e2m1_sign_nibble(y);
}

// The random bits SR draws for element i: its primary word, or hw SR's byte.
FP4D_HD std::uint32_t sr_random_bits(const RoundingSpec& r, std::uint64_t element_index) {
  return r.sr_bits == kSrHw ? philox_hw_byte(r.rng, element_index) : philox_word(r.rng, element_index);
}

// One conversion entry point for the quantizers. For SR the caller passes the element's
// global index (its Philox counter) so that every backend draws the same bits.
FP4D_HD std::uint8_t e2m1_round(float y, const RoundingSpec& r, std::uint64_t element_index) {
  switch (r.mode) {
    case Rounding::TowardZero: return e2m1_rz(y);
    case Rounding::Stochastic:
      return e2m1_sr(y, sr_random_bits(r, element_index), r.sr_bits, r.rng, element_index);
    case Rounding::NearestEven:
    default: return e2m1_rne(y);
  }
}

}  // namespace fp4d
