// BF16 (bfloat16): the top 16 bits of a float32. Round-to-nearest-even from float32,
// NaN kept quiet with its sign; overflow goes to infinity (IEEE).
#pragma once

#include "format/hd.hpp"

namespace fp4d {

FP4D_HD std::uint16_t bf16_rne_bits(float x) {
  const std::uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
FP4D_HD float bf16_to_float(std::uint16_t b) { return bits_float(static_cast<std::uint32_t>(b) << 16); }
FP4D_HD float bf16_round(float x) { return bf16_to_float(bf16_rne_bits(x)); }

}  // namespace fp4d
