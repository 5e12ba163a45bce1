// Philox4x32-10 counter-based random number generator (Salmon, Moraes, Dror, Shaw,
// "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11). A pure function of a 128-bit
// counter and a 64-bit key, so any element's random bits can be computed independently,
// in any order, on any backend: this is what makes CPU and GPU stochastic rounding
// bit-identical.
//
// fp4drift's stream layout (docs/numerics.md, "Random bits"):
//   key     = (seed_lo, seed_hi)                      64-bit user seed
//   counter = (j_lo, j_hi, stream_lo, stream_hi)      j = element_index / 4, 64-bit stream id
//   element i uses word (i % 4) of philox(counter(i / 4)).
// The extension draws of exact SR use counter (i_lo, i_hi | 0x80000000, stream_lo,
// stream_hi). Primary counters have bit 31 of word 1 clear for every 64-bit i (j = i/4 <
// 2^62), extension counters have it set, so the two never coincide; extension counters of
// i and i + 2^63 do, so element indices must stay <= kMaxRngElementIndex (2^62 - 1). Nothing
// here checks that: the callers (quantizers) must.
//
// The packed layout of hw SR (8 random bits per element, as cvt.rs...e2m1x4 consumes them):
//   counter = (g_lo, g_hi | 0x40000000, stream_lo, stream_hi)   g = element_index / 16
//   element i uses word ((i / 4) % 4) of philox(counter(i / 16)), and in that word the byte
//   at bit kHwByteShift[i % 4] = {0, 16, 8, 24}.
// So one Philox call serves 16 consecutive stored elements (an NVFP4 1x16 block), one word 4.
// The byte order is what cvt.rs.satfinite.e2m1x4.f32 d, {a, b, e, f}, rbits reads when it is
// called as Transformer Engine calls it, {a, b, e, f} = {x3, x2, x1, x0} (so that x0 lands in
// the low nibble of d, memory order), under the PTX ISA's text for .e2m1x4: "lower 8-bits from
// both 16-bits half of rbits are used for operands e, f and upper 8-bits from both 16-bits half
// of rbits are used for operands a, b", read as a <- [31:24], e <- [23:16], b <- [15:8],
// f <- [7:0] (docs/numerics.md says what is certain about this and what is not). Counters:
// g < 2^58 for i <= kMaxRngElementIndex, so g_hi < 2^26 and word 1 has bit 30 set and bit 31
// clear; primary counters have both clear (j_hi < 2^28) and extension counters bit 31 set:
// the three families never share a counter.
#pragma once

#include "format/hd.hpp"

namespace fp4d {

struct Philox4x32 {
  std::uint32_t v[4];
};

namespace detail {
constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1
}  // namespace detail

FP4D_HD Philox4x32 philox4x32_10(Philox4x32 c, std::uint32_t k0, std::uint32_t k1) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
#if defined(__CUDA_ARCH__)
    // The same products as the host's, written as __umulhi and the low product (IMAD.HI +
    // IMAD): from the 64-bit form ptxas made an IMAD.WIDE plus a VIADD of a zero register
    // per high word (sm_90, CUDA 13.0), one instruction more per product, on the SR
    // kernels' critical issue path (docs/performance.md).
    const std::uint32_t hi0 = __umulhi(detail::kPhiloxM0, c.v[0]), lo0 = detail::kPhiloxM0 * c.v[0];
    const std::uint32_t hi1 = __umulhi(detail::kPhiloxM1, c.v[2]), lo1 = detail::kPhiloxM1 * c.v[2];
#else
    const std::uint64_t p0 = static_cast<std::uint64_t>(detail::kPhiloxM0) * c.v[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(detail::kPhiloxM1) * c.v[2];
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
#endif
    c = Philox4x32{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += detail::kPhiloxW0;
    k1 += detail::kPhiloxW1;
  }
  return c;
}

// Identifies one stream of random bits: a seed (the experiment's) and a stream id (which
// tensor / step / role draws). Different streams of one seed are independent.
struct RngStream {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
};

constexpr std::uint64_t kMaxRngElementIndex = (std::uint64_t{1} << 62) - 1;

// The 128 bits of the block holding element i's primary word.
FP4D_HD Philox4x32 philox_block(RngStream s, std::uint64_t block_index) {
  Philox4x32 c{{static_cast<std::uint32_t>(block_index), static_cast<std::uint32_t>(block_index >> 32),
                static_cast<std::uint32_t>(s.stream), static_cast<std::uint32_t>(s.stream >> 32)}};
  return philox4x32_10(c, static_cast<std::uint32_t>(s.seed), static_cast<std::uint32_t>(s.seed >> 32));
}

// Element i's primary 32 random bits.
FP4D_HD std::uint32_t philox_word(RngStream s, std::uint64_t element_index) {
  return philox_block(s, element_index >> 2).v[element_index & 3u];
}

// hw SR's packed layout (see the header): the block of 16 elements g = i / 16, the word of
// element i in it and the bit offset of its byte in that word.
constexpr std::uint32_t kHwCounterBit = 0x40000000u;
FP4D_HD Philox4x32 philox_hw_block(RngStream s, std::uint64_t group_index) {
  Philox4x32 c{{static_cast<std::uint32_t>(group_index), static_cast<std::uint32_t>(group_index >> 32) | kHwCounterBit,
                static_cast<std::uint32_t>(s.stream), static_cast<std::uint32_t>(s.stream >> 32)}};
  return philox4x32_10(c, static_cast<std::uint32_t>(s.seed), static_cast<std::uint32_t>(s.seed >> 32));
}
// {0, 16, 8, 24}: the 2-bit reversal of i % 4, times 8.
FP4D_HD constexpr int hw_byte_shift(std::uint64_t element_index) {
  return static_cast<int>(((element_index & 1u) << 4) | ((element_index & 2u) << 2));
}
// The random byte of element i within its word.
FP4D_HD std::uint32_t hw_byte_of_word(std::uint32_t word, std::uint64_t element_index) {
  return (word >> hw_byte_shift(element_index)) & 0xffu;
}
// Element i's 8 random bits (0..255).
FP4D_HD std::uint32_t philox_hw_byte(RngStream s, std::uint64_t element_index) {
  return hw_byte_of_word(philox_hw_block(s, element_index >> 4).v[(element_index >> 2) & 3u], element_index);
}

// 128 further bits for element i, drawn only by exact SR when the first 32 bits tie.
FP4D_HD Philox4x32 philox_extension(RngStream s, std::uint64_t element_index) {
  Philox4x32 c{{static_cast<std::uint32_t>(element_index),
                static_cast<std::uint32_t>(element_index >> 32) | 0x80000000u,
                static_cast<std::uint32_t>(s.stream), static_cast<std::uint32_t>(s.stream >> 32)}};
  return philox4x32_10(c, static_cast<std::uint32_t>(s.seed), static_cast<std::uint32_t>(s.seed >> 32));
}

}  // namespace fp4d
