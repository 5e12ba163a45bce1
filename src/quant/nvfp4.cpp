#include "quant/nvfp4.hpp"

#include <algorithm>
#include <omp.h>

#include <cmath>
#include <cstring>

#include <vector>

#include "quant/block_amax.hpp"
#include "quant/e2m1_row.hpp"
#include "util/parallel_worth.hpp"

namespace fp4d {

Matrix transpose(const Matrix& m) {
  Matrix t(m.cols, m.rows);
  constexpr std::int64_t tile = 64;
#pragma omp parallel for schedule(static) if (parallel_worth(m.size()))
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
#pragma omp parallel for schedule(static) reduction(max : result) if (parallel_worth(n))
  for (std::int64_t c = 0; c < nchunks; ++c)
    result = std::max(result, amax_key_range(x.data.data() + c * chunk, std::min(chunk, n - c * chunk)));
  return bits_float(result);
}

namespace {

using e2m1_row::pack_nibbles;

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
  std::int64_t clipped =
      e2m1_row::draw_and_round_row<R>(xr, w.eb.data(), pcols, spec.rounding, static_cast<std::uint64_t>(r * pcols),
                                      w.words.data(), w.hw_words.data(), w.q.data(), w.tie.data());
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
#pragma omp parallel reduction(+ : clipped) if (parallel_worth(rows * pcols))
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
#pragma omp parallel reduction(+ : clipped) if (parallel_worth(rows * pcols))
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
