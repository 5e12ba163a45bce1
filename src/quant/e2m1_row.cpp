// Row loops shared by the CPU FP4 quantizers (quant/e2m1_row.hpp).
#include "quant/e2m1_row.hpp"

#include <cstring>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace fp4d::e2m1_row {

namespace {

#if defined(__AVX2__)
// Philox4x32-10 on 8 counters at once, one AVX2 register per counter word (structure of
// arrays). The 32x32 -> 64-bit products come from vpmuludq on the even and the odd lanes;
// every step is the scalar philox4x32_10's, so the words are the same (tested against the
// reference quantizer, which calls the scalar function).
struct Philox8 {
  __m256i c0, c1, c2, c3;
};
inline void mulhilo8(__m256i a, __m256i m, __m256i* hi, __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(a, m);                          // lanes 0, 2, 4, 6
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);    // lanes 1, 3, 5, 7
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xaa);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xaa);
}
inline Philox8 philox8(Philox8 c, std::uint32_t k0, std::uint32_t k1) {
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(detail::kPhiloxM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(detail::kPhiloxM1));
  for (int round = 0; round < 10; ++round) {
    __m256i hi0, lo0, hi1, lo1;
    mulhilo8(c.c0, m0, &hi0, &lo0);
    mulhilo8(c.c2, m1, &hi1, &lo1);
    const __m256i key0 = _mm256_set1_epi32(static_cast<int>(k0)), key1 = _mm256_set1_epi32(static_cast<int>(k1));
    c = Philox8{_mm256_xor_si256(_mm256_xor_si256(hi1, c.c1), key0), lo1,
                _mm256_xor_si256(_mm256_xor_si256(hi0, c.c3), key1), lo0};
    k0 += detail::kPhiloxW0;
    k1 += detail::kPhiloxW1;
  }
  return c;
}
#endif

// The words of Philox blocks b0 .. b0 + nblocks - 1 of stream s in order (block j's 4 words at
// w[4j ..]), with hi_bits ORed into counter word 1 (0: the primary layout, as philox_block;
// kHwCounterBit: hw SR's, as philox_hw_block). With AVX2, 8 blocks at a time; the scalar loop
// does the rest.
__attribute__((noinline)) void philox_block_words(RngStream s, std::uint64_t b0, std::int64_t nblocks,
                                                  std::uint32_t hi_bits, std::uint32_t* w) {
  const std::uint32_t k0 = static_cast<std::uint32_t>(s.seed), k1 = static_cast<std::uint32_t>(s.seed >> 32);
  const std::uint32_t s0 = static_cast<std::uint32_t>(s.stream), s1 = static_cast<std::uint32_t>(s.stream >> 32);
  std::int64_t j = 0;
#if defined(__AVX2__)
  for (; j + 8 <= nblocks; j += 8) {
    const std::uint64_t b = b0 + static_cast<std::uint64_t>(j);
    // Counter low words b + 0..7 (with the carry into the high word where they wrap).
    alignas(32) std::uint32_t lo[8], hi[8];
    for (int l = 0; l < 8; ++l) {
      lo[l] = static_cast<std::uint32_t>(b + static_cast<std::uint64_t>(l));
      hi[l] = static_cast<std::uint32_t>((b + static_cast<std::uint64_t>(l)) >> 32) | hi_bits;
    }
    const Philox8 r = philox8(Philox8{_mm256_load_si256(reinterpret_cast<const __m256i*>(lo)),
                                      _mm256_load_si256(reinterpret_cast<const __m256i*>(hi)),
                                      _mm256_set1_epi32(static_cast<int>(s0)), _mm256_set1_epi32(static_cast<int>(s1))},
                              k0, k1);
    // Structure of arrays -> words in element order: block l's 4 words at w[4(j + l) ...].
    const __m256i t0 = _mm256_unpacklo_epi32(r.c0, r.c1), t1 = _mm256_unpackhi_epi32(r.c0, r.c1);
    const __m256i t2 = _mm256_unpacklo_epi32(r.c2, r.c3), t3 = _mm256_unpackhi_epi32(r.c2, r.c3);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    // u0 = blocks 0 | 4, u1 = 1 | 5, u2 = 2 | 6, u3 = 3 | 7 (128-bit halves)
    auto* out = reinterpret_cast<__m256i*>(w + 4 * j);
    _mm256_storeu_si256(out + 0, _mm256_permute2x128_si256(u0, u1, 0x20));
    _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
    _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
    _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
  }
#endif
  for (; j < nblocks; ++j) {
    const std::uint64_t b = b0 + static_cast<std::uint64_t>(j);
    const Philox4x32 r = philox4x32_10(
        Philox4x32{{static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32) | hi_bits, s0, s1}}, k0, k1);
    for (int i = 0; i < 4; ++i) w[4 * j + i] = r.v[i];
  }
}

}  // namespace

// Random words for elements [first, first + n) of one row (first and n multiples of 4):
// word i of the row is word (i % 4) of philox_block(s, (first + i) / 4), as philox_word
// defines it.
void philox_words(RngStream s, std::uint64_t first, std::int64_t n, std::uint32_t* w) {
  philox_block_words(s, first >> 2, n / 4, 0u, w);
}

// hw SR's random bytes for elements [first, first + n) of one row (first and n multiples of
// 16), one per element in w[0 .. n) as philox_hw_byte defines them: the words of philox_hw_block
// (first / 16 ..) into words[0 .. n / 4), then each word's four bytes to its four elements
// (element 4q + t takes the byte at hw_byte_shift(t) of word q).
void philox_hw_bytes(RngStream s, std::uint64_t first, std::int64_t n, std::uint32_t* __restrict words,
                     std::uint32_t* __restrict w) {
  philox_block_words(s, first >> 4, n / 16, kHwCounterBit, words);
  for (std::int64_t q = 0; q < n / 4; ++q) {
    const std::uint32_t x = words[q];
    w[4 * q + 0] = x & 0xffu;
    w[4 * q + 1] = (x >> 16) & 0xffu;
    w[4 * q + 2] = (x >> 8) & 0xffu;
    w[4 * q + 3] = x >> 24;
  }
}

// Two 4-bit codes per byte, element 2j in the low nibble: read the code pairs as 16-bit
// little-endian words (a plain loop that vectorises, unlike a stride-2 byte gather).
void pack_nibbles(const std::uint8_t* __restrict q, std::int64_t n, std::uint8_t* __restrict out) {
  for (std::int64_t j = 0; j < n / 2; ++j) {
    std::uint16_t pair;
    std::memcpy(&pair, q + 2 * j, 2);
    out[j] = static_cast<std::uint8_t>((pair & 0x0fu) | ((pair >> 4) & 0xf0u));
  }
}

}  // namespace fp4d::e2m1_row
