#include "quant/nvfp4.hpp"

#include <algorithm>
#include <omp.h>

#include <cmath>
#include <cstring>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <vector>

#include "quant/block_amax.hpp"

namespace fp4d {

Matrix transpose(const Matrix& m) {
  Matrix t(m.cols, m.rows);
  constexpr std::int64_t tile = 64;
#pragma omp parallel for schedule(static)
  for (std::int64_t r0 = 0; r0 < m.rows; r0 += tile)
    for (std::int64_t c0 = 0; c0 < m.cols; c0 += tile)
      for (std::int64_t r = r0; r < std::min(r0 + tile, m.rows); ++r)
        for (std::int64_t c = c0; c < std::min(c0 + tile, m.cols); ++c) t(c, r) = m(r, c);
  return t;
}

namespace {
// A plain loop outside any OpenMP construct, so that it vectorises.
std::uint32_t amax_key_range(const float* __restrict p, std::int64_t n) {
  std::uint32_t m = 0;
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, amax_key(p[i]));
  return m;
}
}  // namespace

float amax_cpu(const Matrix& x) {
  const std::int64_t n = x.size();
  constexpr std::int64_t chunk = 1 << 16;
  const std::int64_t nchunks = (n + chunk - 1) / chunk;
  std::uint32_t result = 0;
#pragma omp parallel for schedule(static) reduction(max : result)
  for (std::int64_t c = 0; c < nchunks; ++c)
    result = std::max(result, amax_key_range(x.data.data() + c * chunk, std::min(chunk, n - c * chunk)));
  return bits_float(result);
}

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
__attribute__((noinline)) void philox_hw_bytes(RngStream s, std::uint64_t first, std::int64_t n,
                                               std::uint32_t* __restrict words, std::uint32_t* __restrict w) {
  philox_block_words(s, first >> 4, n / 16, kHwCounterBit, words);
  for (std::int64_t q = 0; q < n / 4; ++q) {
    const std::uint32_t x = words[q];
    w[4 * q + 0] = x & 0xffu;
    w[4 * q + 1] = (x >> 16) & 0xffu;
    w[4 * q + 2] = (x >> 8) & 0xffu;
    w[4 * q + 3] = x >> 24;
  }
}

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

// Steps 3-4 of the spec for the nblk blocks of one row, as separate loops over blocks so
// that each vectorises: block amax keys, scale codes and values, encode scales, then each
// element's encode scale e[k] for round_row. Equal, block for block, to
// nvfp4_block_scale_code / e4m3_decode / nvfp4_block_encode_scale (tested).
__attribute__((noinline)) void block_scales_row(const float* __restrict x, std::int64_t nblk, GlobalScale g, bool legacy,
                      std::uint8_t* __restrict sc, float* __restrict sv, float* __restrict e,
                      std::uint32_t* __restrict keys, float* __restrict eb) {
  for (std::int64_t b = 0; b < nblk; ++b) keys[b] = block_amax_key<kNvfp4Block>(x + b * kNvfp4Block);
  const float factor = g.encode * (1.0f / 6.0f);
  for (std::int64_t b = 0; b < nblk; ++b) {  // nvfp4_block_scale_code's argument and code
    const float a = bits_float(keys[b]);
    keys[b] = e4m3_encode_nonneg(legacy ? (a / 6.0f) * g.encode : a * factor);
  }
  for (std::int64_t b = 0; b < nblk; ++b) sv[b] = e4m3_decode_finite(keys[b]);
  for (std::int64_t b = 0; b < nblk; ++b) eb[b] = std::min(1.0f / (sv[b] * g.decode), kFltMax);
  for (std::int64_t b = 0; b < nblk; ++b) sc[b] = static_cast<std::uint8_t>(keys[b]);
  for (std::int64_t b = 0; b < nblk; ++b)
    for (int i = 0; i < kNvfp4Block; ++i) e[b * kNvfp4Block + i] = eb[b];
}

// Elements of zero-scale blocks are not "clipped" (the whole block flushes to zero and is
// counted as underflow); round_row counted them, with e_b = FLT_MAX. Such blocks are rare:
// one scan of the row's scale codes, and a recount only where one is found.
std::int64_t zero_scale_clipped(const float* x, const float* e, const std::uint8_t* sc, std::int64_t nblk) {
  std::int64_t n = 0;
  for (std::int64_t b = 0; b < nblk; ++b) {
    if ((sc[b] & 0x7fu) != 0) continue;
    for (std::int64_t k = b * kNvfp4Block; k < (b + 1) * kNvfp4Block; ++k) {
      const float y0 = x[k] * e[k];
      n += (abs_f32(y0) > kE2M1Max) & (abs_f32(y0) <= kFltMax);
    }
  }
  return n;
}

// Two 4-bit codes per byte, element 2j in the low nibble: read the code pairs as 16-bit
// little-endian words (a plain loop that vectorises, unlike a stride-2 byte gather).
__attribute__((noinline)) void pack_nibbles(const std::uint8_t* __restrict q, std::int64_t n, std::uint8_t* __restrict out) {
  for (std::int64_t j = 0; j < n / 2; ++j) {
    std::uint16_t pair;
    std::memcpy(&pair, q + 2 * j, 2);
    out[j] = static_cast<std::uint8_t>((pair & 0x0fu) | ((pair >> 4) & 0xf0u));
  }
}

// One thread's buffers for rows of a tensor: the zero-padded row, per-element encode scales,
// codes, exact-SR tie flags, per-block keys and scales, and the row's random words.
struct RowScratch {
  std::vector<float> padded, eb;
  std::vector<std::uint8_t> q, tie;
  std::vector<std::uint32_t> keys;
  std::vector<float> ebb;
  std::vector<std::uint32_t> words, hw_words;
  RowScratch(std::int64_t pcols, std::int64_t nblk, bool sr, bool hw)
      : padded(static_cast<std::size_t>(pcols), 0.0f), eb(static_cast<std::size_t>(pcols)),
        q(static_cast<std::size_t>(pcols)), tie(static_cast<std::size_t>(pcols)), keys(static_cast<std::size_t>(nblk)),
        ebb(static_cast<std::size_t>(nblk)), words(sr ? static_cast<std::size_t>(pcols) : 0),
        hw_words(hw ? static_cast<std::size_t>(pcols / 4) : 0) {}
  // Row r of x, zero-padded to pcols where the last block is partial.
  const float* row(const Matrix& x, std::int64_t r, std::int64_t pcols) {
    const float* xr = x.data.data() + r * x.cols;
    if (x.cols == pcols) return xr;
    std::copy(xr, xr + x.cols, padded.begin());
    return padded.data();
  }
};

// Stored row r once its encode scales are in w.eb and its block scales in sc / sv: the random
// words (SR), the element rounding, the packed codes and the dequantized values. Returns the
// row's clipped elements (zero-scale blocks flush: underflow, not clipping).
template <Rounding R>
std::int64_t round_pack_row(const float* xr, std::int64_t r, const QuantSpec& spec, QuantizedTensor& out,
                            bool dequantize, const std::uint8_t* sc, const float* sv, RowScratch& w) {
  const std::int64_t pcols = out.padded_cols, nblk = out.scale_cols, cols = out.cols;
  const bool hw = R == Rounding::Stochastic && spec.rounding.sr_bits == kSrHw;
  const auto first = static_cast<std::uint64_t>(r * pcols);
  if constexpr (R == Rounding::Stochastic) {
    if (hw) philox_hw_bytes(spec.rounding.rng, first, pcols, w.hw_words.data(), w.words.data());
    else philox_words(spec.rounding.rng, first, pcols, w.words.data());
  }
  std::int64_t clipped = 0;
  if (R == Rounding::Stochastic && spec.rounding.sr_bits == kSrExact)
    clipped = round_row<R, SrKind::Exact>(xr, w.eb.data(), pcols, spec.rounding, first, w.words.data(), w.q.data(),
                                          w.tie.data());
  else if (hw)
    clipped = round_row<R, SrKind::Hw>(xr, w.eb.data(), pcols, spec.rounding, first, w.words.data(), w.q.data(),
                                       w.tie.data());
  else
    clipped = round_row<R>(xr, w.eb.data(), pcols, spec.rounding, first, w.words.data(), w.q.data(), w.tie.data());
  clipped -= zero_scale_clipped(xr, w.eb.data(), sc, nblk);
  pack_nibbles(w.q.data(), pcols, out.codes.data() + r * (pcols / 2));
  if (dequantize) {
    float* dr = out.dequantized.data.data() + r * cols;
    for (std::int64_t c = 0; c < cols; ++c)
      dr[c] = (e2m1_decode(w.q[static_cast<std::size_t>(c)]) * sv[c / kNvfp4Block]) * out.global.decode;
  }
  return clipped;
}

template <Rounding R>
void quantize_1x16(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  const std::int64_t rows = x.rows, pcols = out.padded_cols, nblk = out.scale_cols;
  const bool legacy = spec.nv_scale_rule == NvScaleRule::TeLegacy;
  const bool sr = R == Rounding::Stochastic, hw = sr && spec.rounding.sr_bits == kSrHw;
  std::int64_t clipped = 0;
#pragma omp parallel reduction(+ : clipped)
  {
    RowScratch w(pcols, nblk, sr, hw);
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = w.row(x, r, pcols);
      std::uint8_t* sc = out.scale_codes.data() + r * nblk;
      float* sv = out.scale_values.data() + r * nblk;
      block_scales_row(xr, nblk, out.global, legacy, sc, sv, w.eb.data(), w.keys.data(), w.ebb.data());
      clipped += round_pack_row<R>(xr, r, spec, out, dequantize, sc, sv, w);
    }
  }
  out.clipped = clipped;
}

// Column-wise maximum of amax keys over one row, into k (for the 16x16 tiles' amax).
__attribute__((noinline)) void colmax_keys(const float* __restrict x, std::int64_t n, std::uint32_t* __restrict k) {
  for (std::int64_t c = 0; c < n; ++c) k[c] = std::max(k[c], amax_key(x[c]));
}

// 16x16 tiles through the 1x16 row machinery: per 16-row tile row, the column-wise maximum of
// the amax keys (a vector max over the rows) gives each tile's amax to block_scales_row - the
// keys are non-negative, non-NaN float bits, so a block of them has their maximum as its amax -
// and every row is then rounded, packed and dequantized as a 1x16 row with the tile row's
// scales. The element order, indices and random bits are the 1x16 path's.
template <Rounding R>
void quantize_16x16(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  const std::int64_t rows = x.rows, cols = x.cols, pcols = out.padded_cols, nblk = out.scale_cols;
  const std::int64_t trows = out.scale_rows;
  const bool legacy = spec.nv_scale_rule == NvScaleRule::TeLegacy;
  const bool sr = R == Rounding::Stochastic, hw = sr && spec.rounding.sr_bits == kSrHw;
  std::int64_t clipped = 0;
#pragma omp parallel reduction(+ : clipped)
  {
    RowScratch w(pcols, nblk, sr, hw);
    std::vector<std::uint32_t> colkey(static_cast<std::size_t>(pcols));
#pragma omp for schedule(static)
    for (std::int64_t tr = 0; tr < trows; ++tr) {
      const std::int64_t r0 = tr * kNvfp4Block, r1 = std::min(rows, r0 + kNvfp4Block);
      std::fill(colkey.begin(), colkey.end(), 0u);  // padding columns and rows stay 0
      for (std::int64_t r = r0; r < r1; ++r) colmax_keys(x.data.data() + r * cols, cols, colkey.data());
      std::uint8_t* sc = out.scale_codes.data() + tr * nblk;
      float* sv = out.scale_values.data() + tr * nblk;
      block_scales_row(reinterpret_cast<const float*>(colkey.data()), nblk, out.global, legacy, sc, sv, w.eb.data(),
                       w.keys.data(), w.ebb.data());
      for (std::int64_t r = r0; r < r1; ++r)
        clipped += round_pack_row<R>(w.row(x, r, pcols), r, spec, out, dequantize, sc, sv, w);
    }
  }
  out.clipped = clipped;
}

template <Rounding R>
void dispatch_layout(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  if (spec.is_2d()) quantize_16x16<R>(x, spec, out, dequantize);
  else quantize_1x16<R>(x, spec, out, dequantize);
}

}  // namespace

void nvfp4_quantize_cpu(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  out.rows = x.rows;
  out.cols = x.cols;
  out.padded_cols = (x.cols + kNvfp4Block - 1) / kNvfp4Block * kNvfp4Block;
  out.scale_rows = spec.is_2d() ? (x.rows + kNvfp4Block - 1) / kNvfp4Block : x.rows;
  out.scale_cols = out.padded_cols / kNvfp4Block;
  // Every byte and scale is written below (padding included): resize, no zero-fill pass.
  out.codes.resize(static_cast<std::size_t>(x.rows * out.padded_cols / 2));
  out.scale_codes.resize(static_cast<std::size_t>(out.scale_rows * out.scale_cols));
  out.scale_values.resize(out.scale_codes.size());
  out.dequantized = dequantize ? Matrix(x.rows, x.cols) : Matrix();
  out.global = nvfp4_global_scale(amax_cpu(x));
  switch (spec.rounding.mode) {
    case Rounding::NearestEven: dispatch_layout<Rounding::NearestEven>(x, spec, out, dequantize); break;
    case Rounding::TowardZero: dispatch_layout<Rounding::TowardZero>(x, spec, out, dequantize); break;
    case Rounding::Stochastic: dispatch_layout<Rounding::Stochastic>(x, spec, out, dequantize); break;
  }
}

}  // namespace fp4d
