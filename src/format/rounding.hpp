// Rounding modes and the stochastic-rounding decision shared by every element format.
//
// All SR variants reduce to one question: given the exact fraction f in [0, 1) of the way
// from the lower neighbour lo to the upper neighbour hi (f = (|y| - lo) / (hi - lo),
// exact in float32 because lo and |y| share a binade and hi - lo is a power of two),
// does the value round up?
//
//  * k-bit SR (k = 1..32): r = the top k bits of the element's random word w.
//      up  <=>  r < floor(f * 2^k)          so  P(up) = floor(f * 2^k) / 2^k.
//    This is the distribution of TE's software form t = |y| + u * step, u = r' / 2^k,
//    result floor(t / step) * step, evaluated in exact arithmetic (r' = 2^k - 1 - r is
//    uniform as r is): P(up) is f truncated to k bits, so limited-bit SR is biased
//    toward zero by up to 2^-k steps. Hardware cvt.rs uses k = 8.
//  * exact SR: P(up) = f exactly, for every float32 input. The first 32 bits decide
//    unless they equal floor(f * 2^32); that tie (probability 2^-32) draws up to 128
//    more bits from the element's extension counter, which always resolves it, because
//    a float32 f is a multiple of 2^-149 and 32 + 128 > 149.
#pragma once

#include "format/hd.hpp"
#include "format/philox.hpp"

namespace fp4d {

enum class Rounding : std::uint8_t {
  NearestEven,     // RNE
  TowardZero,      // RZ (truncation)
  Stochastic,      // SR, exact or with k random bits (see SrBits)
};

// Number of random bits of SR: 1..32, or kSrExact for exact SR.
constexpr int kSrExact = 0;

struct RoundingSpec {
  Rounding mode = Rounding::NearestEven;
  int sr_bits = kSrExact;   // only for Stochastic
  RngStream rng{};          // only for Stochastic
};

// floor(f * 2^32) for f in [0, 1), and the exact remainder f * 2^32 - floor(...).
// f * 2^32 is exact in float (power-of-two scaling) and below 2^32 - 2^8; its integer
// part converts exactly, and the fractional part of a float is itself exact in float.
FP4D_HD std::uint32_t sr_fraction_floor32(float f, float* remainder) {
  const float scaled = f * 4294967296.0f;
  const std::uint32_t whole = static_cast<std::uint32_t>(scaled);
  *remainder = scaled - static_cast<float>(whole);
  return whole;
}

// Exact SR's tie breaker: compare the remaining fraction with 128 fresh random bits.
FP4D_HD bool sr_exact_tie_up(float remainder, RngStream s, std::uint64_t element_index) {
  if (remainder == 0.0f) return false;  // f * 2^32 was an integer: R >= f on the tie
  const Philox4x32 ext = philox_extension(s, element_index);
  for (int i = 0; i < 4; ++i) {
    const float scaled = remainder * 4294967296.0f;
    const std::uint32_t digit = static_cast<std::uint32_t>(scaled);
    if (ext.v[i] < digit) return true;
    if (ext.v[i] > digit) return false;
    remainder = scaled - static_cast<float>(digit);
    if (remainder == 0.0f) return false;
  }
  return false;  // unreachable for float32 fractions (see the header comment)
}

// Decide whether a value whose fraction toward the upper neighbour is f rounds up.
// w is the element's primary random word, philox_word(s, element_index).
FP4D_HD bool sr_round_up(float f, std::uint32_t w, int sr_bits, RngStream s, std::uint64_t element_index) {
  float remainder;
  const std::uint32_t f32 = sr_fraction_floor32(f, &remainder);
  if (sr_bits == kSrExact) {
    if (w != f32) return w < f32;
    return sr_exact_tie_up(remainder, s, element_index);
  }
  const int drop = 32 - sr_bits;
  return (w >> drop) < (f32 >> drop);
}

}  // namespace fp4d
