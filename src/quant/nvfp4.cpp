#include "quant/nvfp4.hpp"

#include <algorithm>
#include <omp.h>

#include <cstring>

#include <vector>

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

float amax_cpu(const Matrix& x) {
  const float* p = x.data.data();
  const std::int64_t n = x.size();
  std::uint32_t result = 0;
#pragma omp parallel
  {
    std::uint32_t local = 0;  // a private accumulator: the loop below vectorises
#pragma omp for schedule(static) nowait
    for (std::int64_t i = 0; i < n; ++i) local = std::max(local, amax_key(p[i]));
#pragma omp critical
    result = std::max(result, local);
  }
  return bits_float(result);
}

namespace {

// Quantize one block of up to 16 values held in v[0..15] (zero padded) with encode scale
// e_b; writes 16 codes. Returns the number of clipped elements. Templated on the rounding
// mode so that the RNE loop has no per-element branch and vectorises.
template <Rounding R>
int quantize_block16(const float* v, float e_b, const RoundingSpec& rs, std::uint64_t first_index,
                     std::uint8_t* q) {
  int clipped = 0;
  float y[kNvfp4Block];
  for (int i = 0; i < kNvfp4Block; ++i) {
    bool c;
    y[i] = clamp_e2m1_range(v[i] * e_b, &c);
    clipped += c;
  }
  if constexpr (R == Rounding::NearestEven) {
    for (int i = 0; i < kNvfp4Block; ++i) q[i] = e2m1_rne(y[i]);
  } else if constexpr (R == Rounding::TowardZero) {
    for (int i = 0; i < kNvfp4Block; ++i) q[i] = e2m1_rz(y[i]);
  } else {
    // first_index is a multiple of 4 (rows are padded to 16): one Philox call serves 4 elements.
    for (int g = 0; g < kNvfp4Block; g += 4) {
      const Philox4x32 w = philox_block(rs.rng, (first_index + g) >> 2);
      for (int j = 0; j < 4; ++j)
        q[g + j] = e2m1_sr(y[g + j], w.v[j], rs.sr_bits, rs.rng, first_index + static_cast<std::uint64_t>(g + j));
    }
  }
  return clipped;
}

// Random words for elements [first, first + n) of one row (first and n multiples of 4):
// the Philox blocks are computed in a plain loop over independent counters, which the
// compiler vectorises (32x32->64-bit multiplies).
void philox_words(RngStream s, std::uint64_t first, std::int64_t n, std::uint32_t* w) {
  const std::uint64_t b0 = first >> 2;
  const std::uint32_t k0 = static_cast<std::uint32_t>(s.seed), k1 = static_cast<std::uint32_t>(s.seed >> 32);
  const std::uint32_t s0 = static_cast<std::uint32_t>(s.stream), s1 = static_cast<std::uint32_t>(s.stream >> 32);
  for (std::int64_t j = 0; j < n / 4; ++j) {
    const std::uint64_t b = b0 + static_cast<std::uint64_t>(j);
    const Philox4x32 r =
        philox4x32_10(Philox4x32{{static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32), s0, s1}}, k0, k1);
    w[4 * j + 0] = r.v[0];
    w[4 * j + 1] = r.v[1];
    w[4 * j + 2] = r.v[2];
    w[4 * j + 3] = r.v[3];
  }
}

// Scale, clamp and round n elements (a row padded to whole blocks); e holds each element's
// block encode scale. Returns the number of clipped elements. Flat loops over elements, so
// the RNE/RZ cases are branch-free and vectorise; SR uses the row's random words w. Every
// code equals the reference e2m1_round(clamp(x * e_b), rs, index) (tested).
template <Rounding R>
std::int64_t round_row(const float* __restrict x, const float* __restrict e, std::int64_t n, const RoundingSpec& rs,
                       std::uint64_t first_index, const std::uint32_t* __restrict w, std::uint8_t* __restrict q) {
  std::int64_t clipped = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    const float y0 = x[k] * e[k];
    clipped += abs_f32(y0) > kE2M1Max;
    const float y = y0 > kE2M1Max ? kE2M1Max : (y0 < -kE2M1Max ? -kE2M1Max : y0);
    if constexpr (R == Rounding::NearestEven) {
      q[k] = e2m1_rne(y);
    } else if constexpr (R == Rounding::TowardZero) {
      q[k] = e2m1_rz(y);
    } else {
      q[k] = e2m1_sr(y, w[k], rs.sr_bits, rs.rng, first_index + static_cast<std::uint64_t>(k));
    }
  }
  return clipped;
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

template <Rounding R>
void quantize_1x16(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  const std::int64_t rows = x.rows, cols = x.cols, pcols = out.padded_cols, nblk = out.scale_cols;
  const bool legacy = spec.nv_scale_rule == NvScaleRule::TeLegacy;
  const GlobalScale g = out.global;
  std::int64_t clipped = 0;
#pragma omp parallel reduction(+ : clipped)
  {
    std::vector<float> padded(static_cast<std::size_t>(pcols), 0.0f), eb(static_cast<std::size_t>(pcols));
    std::vector<std::uint8_t> q(static_cast<std::size_t>(pcols));
    std::vector<std::uint32_t> words(R == Rounding::Stochastic ? static_cast<std::size_t>(pcols) : 0);
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data.data() + r * cols;
      if (cols != pcols) {  // partial last block: zero-padded copy
        std::copy(xr, xr + cols, padded.begin());
        xr = padded.data();
      }
      std::uint8_t* sc = out.scale_codes.data() + r * nblk;
      float* sv = out.scale_values.data() + r * nblk;
      for (std::int64_t b = 0; b < nblk; ++b) {
        std::uint32_t key = 0;
        for (int i = 0; i < kNvfp4Block; ++i) key = std::max(key, amax_key(xr[b * kNvfp4Block + i]));
        const std::uint8_t s = nvfp4_block_scale_code(bits_float(key), g.encode, legacy);
        sc[b] = s;
        sv[b] = e4m3_decode(s);
        const float e_b = nvfp4_block_encode_scale(s, g.decode);
        for (int i = 0; i < kNvfp4Block; ++i) eb[static_cast<std::size_t>(b * kNvfp4Block + i)] = e_b;
      }
      const auto first = static_cast<std::uint64_t>(r * pcols);
      if constexpr (R == Rounding::Stochastic) philox_words(spec.rounding.rng, first, pcols, words.data());
      clipped += round_row<R>(xr, eb.data(), pcols, spec.rounding, first, words.data(), q.data());
      pack_nibbles(q.data(), pcols, out.codes.data() + r * (pcols / 2));
      if (dequantize) {
        float* dr = out.dequantized.data.data() + r * cols;
        for (std::int64_t c = 0; c < cols; ++c)
          dr[c] = (e2m1_decode(q[static_cast<std::size_t>(c)]) * sv[c / kNvfp4Block]) * g.decode;
      }
    }
  }
  out.clipped = clipped;
}

template <Rounding R>
void quantize_16x16(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  const std::int64_t rows = x.rows, cols = x.cols, pcols = out.padded_cols;
  const std::int64_t trows = out.scale_rows, tcols = out.scale_cols;
  const bool legacy = spec.nv_scale_rule == NvScaleRule::TeLegacy;
  const GlobalScale g = out.global;
  std::int64_t clipped = 0;
#pragma omp parallel for schedule(static) reduction(+ : clipped)
  for (std::int64_t tr = 0; tr < trows; ++tr) {
    const std::int64_t r0 = tr * kNvfp4Block, r1 = std::min(rows, r0 + kNvfp4Block);
    for (std::int64_t tc = 0; tc < tcols; ++tc) {
      const std::int64_t c0 = tc * kNvfp4Block;
      const int n = static_cast<int>(std::min<std::int64_t>(kNvfp4Block, cols - c0));
      float a = 0.0f;
      for (std::int64_t r = r0; r < r1; ++r)
        for (int i = 0; i < n; ++i) {
          const float t = abs_f32(x(r, c0 + i));
          a = t > a ? t : a;
        }
      const std::uint8_t s = nvfp4_block_scale_code(a, g.encode, legacy);
      const float e_b = nvfp4_block_encode_scale(s, g.decode);
      const float sv = e4m3_decode(s);
      out.scale_codes[tr * tcols + tc] = s;
      out.scale_values[tr * tcols + tc] = sv;
      for (std::int64_t r = r0; r < r1; ++r) {
        float v[kNvfp4Block];
        for (int i = 0; i < kNvfp4Block; ++i) v[i] = i < n ? x(r, c0 + i) : 0.0f;
        std::uint8_t q[kNvfp4Block];
        clipped += quantize_block16<R>(v, e_b, spec.rounding, static_cast<std::uint64_t>(r * pcols + c0), q);
        std::uint8_t* cr = out.codes.data() + r * (pcols / 2);
        for (int i = 0; i < kNvfp4Block / 2; ++i)
          cr[c0 / 2 + i] = static_cast<std::uint8_t>(q[2 * i] | (q[2 * i + 1] << 4));
        if (dequantize)
          for (int i = 0; i < n; ++i) out.dequantized(r, c0 + i) = (e2m1_decode(q[i]) * sv) * g.decode;
      }
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
