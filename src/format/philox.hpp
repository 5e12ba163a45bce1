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

// 128 further bits for element i, drawn only by exact SR when the first 32 bits tie.
FP4D_HD Philox4x32 philox_extension(RngStream s, std::uint64_t element_index) {
  Philox4x32 c{{static_cast<std::uint32_t>(element_index),
                static_cast<std::uint32_t>(element_index >> 32) | 0x80000000u,
                static_cast<std::uint32_t>(s.stream), static_cast<std::uint32_t>(s.stream >> 32)}};
  return philox4x32_10(c, static_cast<std::uint32_t>(s.seed), static_cast<std::uint32_t>(s.seed >> 32));
}

}  // namespace fp4d
