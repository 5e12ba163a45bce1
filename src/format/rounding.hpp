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
//  * hw SR (kSrHw, "hw"): the Blackwell conversion cvt.rs.satfinite.e2m1x4.f32 (PTX ISA, cvt,
//    rounding modifier .rs: "rounded in the direction toward zero or away from zero based on
//    the carry out of the integer addition of the supplied random bits to the truncated off
//    (discarded) bits of mantissa"). Each element gets one random byte r, added to the top 8
//    discarded bits, floor(f * 2^8); a carry out of those 8 bits rounds the magnitude up:
//      up  <=>  r + floor(f * 2^8) >= 2^8       so  P(up) = floor(f * 2^8) / 2^8,
//    the distribution of 8-bit SR (r = 255 - r' maps one onto the other) but the hardware's
//    map from bits to decision, and 8 random bits per element instead of a 32-bit word: the
//    byte comes from the packed layout of philox.hpp (philox_hw_byte), 16 elements per call.
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

// Number of random bits of SR: 1..32, kSrExact for exact SR, or kSrHw for the hardware
// conversion's carry form. kSrHw is negative so that no k-bit count can be mistaken for it
// (it is what traces record as sr_bits: -8, "8 bits per element, hardware form").
constexpr int kSrExact = 0;
constexpr int kSrHw = -8;
constexpr int kSrHwBits = 8;  // random bits per element of cvt.rs...e2m1x4

// The hardware form's decision from the element's random byte r (0..255) and floor(f * 2^32):
// the carry out of r + (the top 8 discarded bits).
FP4D_HD bool sr_hw_round_up(std::uint32_t f32, std::uint32_t r) { return r + (f32 >> 24) >= 256u; }

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
// w is the element's primary random word, philox_word(s, element_index); for kSrHw it is the
// element's random byte, philox_hw_byte(s, element_index).
FP4D_HD bool sr_round_up(float f, std::uint32_t w, int sr_bits, RngStream s, std::uint64_t element_index) {
  float remainder;
  const std::uint32_t f32 = sr_fraction_floor32(f, &remainder);
  if (sr_bits == kSrHw) return sr_hw_round_up(f32, w);
  if (sr_bits == kSrExact) {
    if (w != f32) return w < f32;
    return sr_exact_tie_up(remainder, s, element_index);
  }
  const int drop = 32 - sr_bits;
  return (w >> drop) < (f32 >> drop);
}

}  // namespace fp4d
