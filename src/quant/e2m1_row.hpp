// Row loops shared by the CPU FP4 quantizers (NVFP4 and MXFP4, E2M1 elements): the random
// words of a row's elements, the branch-free rounding of a row of scaled elements that GCC
// vectorises, and the packing of the codes two per byte. Every code equals the element-by-
// element definition, e2m1_round(clamp(x * e), rs, index) with the element's stored index as
// its Philox counter (format/rounding.hpp, format/philox.hpp); the quantizers' tests compare
// them on every rounding mode.
#pragma once

#include <algorithm>
#include <cstdint>

#include "format/e2m1.hpp"
#include "format/hd.hpp"
#include "format/philox.hpp"
#include "format/rounding.hpp"

namespace fp4d::e2m1_row {

// Random words for elements [first, first + n) of one row (first and n multiples of 4):
// word i of the row is word (i % 4) of philox_block(s, (first + i) / 4), as philox_word
// defines it.
void philox_words(RngStream s, std::uint64_t first, std::int64_t n, std::uint32_t* w);

// hw SR's random bytes for elements [first, first + n) of one row (first and n multiples of
// 16), one per element in w[0 .. n) as philox_hw_byte defines them; words holds n / 4 words of
// scratch.
void philox_hw_bytes(RngStream s, std::uint64_t first, std::int64_t n, std::uint32_t* __restrict words,
                     std::uint32_t* __restrict w);

// Two 4-bit codes per byte, element 2j in the low nibble (n even).
void pack_nibbles(const std::uint8_t* __restrict q, std::int64_t n, std::uint8_t* __restrict out);

// floor(f * 2^32) for f in [0, 1) from the bits of f, and whether f * 2^32 has a fractional
// part: f = m * 2^E / 2^32 with m the 24-bit significand, so floor(f * 2^32) = m << E or
// m >> -E. Integer shifts only (per-lane variable shifts vectorise); equal to
// sr_fraction_floor32 (tested through the quantizers' reference comparison).
inline std::uint32_t sr_floor32_bits(float f, std::uint32_t* has_remainder) {
  const std::uint32_t fb = float_bits(f);
  const std::uint32_t ef = fb >> 23;  // f >= 0, < 1: biased exponent <= 126
  const std::uint32_t normal = ef != 0;
  const std::uint32_t m = (fb & 0x7fffffu) | (normal << 23);
  const std::int32_t e = static_cast<std::int32_t>(ef + (normal ^ 1u)) - 118;  // f * 2^32 = m * 2^e, e <= 8
  const std::uint32_t left = static_cast<std::uint32_t>(std::max(e, 0));
  const std::uint32_t right = static_cast<std::uint32_t>(std::min(std::max(-e, 0), 31));  // m < 2^24: >> 31 is 0
  *has_remainder = (m & ((1u << right) - 1u)) != 0;
  return (m << left) >> right;
}

// Which SR decision a row loop makes (rounding.hpp): k-bit, exact, or hw's carry form.
enum class SrKind { Bits, Exact, Hw };

// Branch-free form of e2m1_sr, decided by the element's primary word w (hw: its random byte)
// alone, so that the loop over a row vectorises. It returns exactly what e2m1_sr returns,
// except where exact SR's first 32 bits tie (w == floor(f * 2^32) and f * 2^32 is not an
// integer): then *tie is set and the caller asks the reference function. y0 is the scaled
// value before the clamp: |y0| is clamped to 6 on the integer bits (NaN and Inf bits compare
// above 6 and give 6, code 7), and the sign is combined with a mask - no selects, no control
// flow.
template <SrKind K>
inline std::uint8_t e2m1_sr_fast(float y0, std::uint32_t w, int drop, std::uint8_t* tie) {
  const std::uint32_t u = float_bits(y0);
  const float a = bits_float(std::min(u & 0x7fffffffu, 0x40c00000u));  // min(|y0|, 6)
  // Binade index 0 below 2, 1 in [2, 4), 2 from 4: offset o = 0, 2, 4, step 1/m = 0.5, 1, 2
  // and first code 0, 4, 6. Computed arithmetically, not with selects, which GCC would turn
  // back into branches.
  const std::uint32_t i2 = a >= 2.0f, i4 = a >= 4.0f;
  const float o = static_cast<float>(2u * (i2 + i4));
  const float m = bits_float((128u - i2 - i4) << 23);
  const float t = (a - o) * m;                          // position in grid steps, exact
  const std::int32_t c = static_cast<std::int32_t>(t);  // floor (t >= 0)
  const float f = t - static_cast<float>(c);            // fraction, exact
  const std::uint32_t base = 4u * i2 + 2u * i4;
  std::uint32_t has_remainder;
  const std::uint32_t f32 = sr_floor32_bits(f, &has_remainder);
  std::uint32_t up;
  if constexpr (K == SrKind::Exact) {
    up = w < f32;
    *tie = static_cast<std::uint8_t>((w == f32) & has_remainder);
  } else if constexpr (K == SrKind::Hw) {
    (void)drop;
    (void)has_remainder;
    up = (w + (f32 >> 24)) >> 8;  // the carry of r + floor(f * 2^8): sr_hw_round_up
  } else {
    (void)has_remainder;
    up = (w >> drop) < (f32 >> drop);  // r < floor(f * 2^k)
  }
  const std::uint32_t count = static_cast<std::uint32_t>(c) + base + up;  // a == 6: t = 1, count 7
  const std::uint32_t not_nan = (u & 0x7fffffffu) <= 0x7f800000u;         // NaN: count is 7, no sign
  return static_cast<std::uint8_t>(count | (((u >> 31) & not_nan) << 3));
}

// Scale, clamp and round n elements (a row padded to whole blocks); e holds each element's
// block encode scale. Returns the number of clipped elements. Flat loops over elements, so
// the RNE/RZ cases are branch-free and vectorise; SR uses the row's random words w. Every
// code equals the reference e2m1_round(clamp(x * e_b), rs, index) (tested).
// noinline: vectorised as a function of its own, where the __restrict qualifiers hold
// (inlined into the OpenMP region the aliasing information is lost).
template <Rounding R, SrKind K = SrKind::Bits>
__attribute__((noinline)) std::int64_t round_row(const float* __restrict x, const float* __restrict e, std::int64_t n, const RoundingSpec& rs,
                       std::uint64_t first_index, const std::uint32_t* __restrict w, std::uint8_t* __restrict q,
                       std::uint8_t* __restrict tie) {
  std::int64_t clipped = 0;
  const int drop = K == SrKind::Bits ? 32 - rs.sr_bits : 0;
  for (std::int64_t k = 0; k < n; ++k) {
    const float y0 = x[k] * e[k];
    clipped += (abs_f32(y0) > kE2M1Max) & (abs_f32(y0) <= kFltMax);  // as clamp_e2m1_range
    if constexpr (R == Rounding::Stochastic) {
      q[k] = e2m1_sr_fast<K>(y0, w[k], drop, &tie[k]);  // clamps itself
    } else {
      const float y = y0 > kE2M1Max ? kE2M1Max : (y0 < -kE2M1Max ? -kE2M1Max : y0);
      q[k] = R == Rounding::NearestEven ? e2m1_rne(y) : e2m1_rz(y);
    }
  }
  if constexpr (R == Rounding::Stochastic) {
    // Exact SR's ties (first 32 bits equal to floor(f * 2^32), probability 2^-32 per element):
    // the reference function draws the extension bits.
    if constexpr (K == SrKind::Exact) {
      std::uint8_t any = 0;
      for (std::int64_t k = 0; k < n; ++k) any |= tie[k];
      if (any)
        for (std::int64_t k = 0; k < n; ++k)
          if (tie[k]) {
            const float y0 = x[k] * e[k];
            const float y = y0 > kE2M1Max ? kE2M1Max : (y0 < -kE2M1Max ? -kE2M1Max : y0);
            q[k] = e2m1_sr(y, w[k], rs.sr_bits, rs.rng, first_index + static_cast<std::uint64_t>(k));
          }
    }
  }
  return clipped;
}

// round_row with its random words drawn: for SR the row's words (hw SR: its bytes, through
// hw_words) into words, and the SR decision rs asks for; RNE and RZ draw nothing. words holds n
// entries and hw_words n / 4 (hw SR only); first: the row's first stored index.
template <Rounding R>
std::int64_t draw_and_round_row(const float* x, const float* e, std::int64_t n, const RoundingSpec& rs,
                                std::uint64_t first, std::uint32_t* words, std::uint32_t* hw_words, std::uint8_t* q,
                                std::uint8_t* tie) {
  if constexpr (R == Rounding::Stochastic) {
    if (rs.sr_bits == kSrHw) {
      philox_hw_bytes(rs.rng, first, n, hw_words, words);
      return round_row<R, SrKind::Hw>(x, e, n, rs, first, words, q, tie);
    }
    philox_words(rs.rng, first, n, words);
    if (rs.sr_bits == kSrExact) return round_row<R, SrKind::Exact>(x, e, n, rs, first, words, q, tie);
  }
  return round_row<R>(x, e, n, rs, first, words, q, tie);
}

}  // namespace fp4d::e2m1_row
