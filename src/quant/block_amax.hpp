// The amax key (quant/nvfp4_math.hpp's amax_key: |x| as an ordered integer, NaN ignored) of a block
// of N consecutive floats, for the CPU quantizers' block-scale loops (NVFP4 16, MXFP4 32).
// Left to itself GCC vectorises a loop over blocks "outward" with lane permutes that cost more
// than the rounding; with AVX2 the reduction is written out: N / 8 eight-lane maxima, then three
// folding steps. An integer maximum is exact in any order, so both forms give the same key.
#pragma once

#include <algorithm>
#include <cstdint>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "quant/nvfp4.hpp"

namespace fp4d {

template <int N>
inline std::uint32_t block_amax_key(const float* x) {
  static_assert(N >= 8 && N % 8 == 0, "blocks of whole 8-lane vectors");
#if defined(__AVX2__)
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  auto keys8 = [&](const float* p) {
    const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), abs_mask);
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(a, inf), a);  // NaN -> 0, as amax_key
  };
  __m256i m = keys8(x);
  for (int i = 8; i < N; i += 8) m = _mm256_max_epu32(m, keys8(x + i));
  m = _mm256_max_epu32(m, _mm256_permute2x128_si256(m, m, 1));
  m = _mm256_max_epu32(m, _mm256_shuffle_epi32(m, 0x4e));
  m = _mm256_max_epu32(m, _mm256_shuffle_epi32(m, 0xb1));
  return static_cast<std::uint32_t>(_mm256_cvtsi256_si32(m));
#else
  std::uint32_t key = 0;
  for (int i = 0; i < N; ++i) key = std::max(key, amax_key(x[i]));
  return key;
#endif
}

}  // namespace fp4d
