#include "quant/mxfp4.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "quant/block_amax.hpp"
#include "quant/e2m1_row.hpp"
#include "util/parallel_worth.hpp"

namespace fp4d {

namespace {

constexpr int kB = kMxfp4Block;

// The structure is that of the NVFP4 1x16 path: one row at a time, the row's block scales in
// a loop over blocks, the elements in fixed-size block loops that GCC vectorises (no
// per-element dispatch: the rounding mode is a template parameter; SR through the NVFP4 row
// loop of quant/e2m1_row.hpp), one code per byte, then the row's codes packed in one vectorised
// pass. Every code, scale and
// clipped count equals the element-by-element form of the spec, x / X rounded by e2m1_round
// with the element's stored index as its Philox counter (tests/unit/test_mxfp4_fp8_fast.cpp
// compares them on every rounding mode, special values, partial blocks and thread counts).

// Each block's amax and scale (mxfp4_math.hpp, shared with the CUDA backend); the rule is a
// template parameter so that its switch folds away. The exponent is scalar code, once per 32
// elements.
template <MxScaleRule Rule>
__attribute__((noinline)) void block_scales_row(const float* __restrict x, std::int64_t nblk,
                                                std::uint8_t* __restrict sc, float* __restrict sv,
                                                float* __restrict inv) {
  for (std::int64_t b = 0; b < nblk; ++b) {
    const int e = mxfp4_scale_exponent(bits_float(block_amax_key<kB>(x + b * kB)), Rule);
    sc[b] = ue8m0_from_exponent(e);
    sv[b] = exp2i_f32(e);
    inv[b] = exp2i_f32(-e);  // x / X == x * 2^-e: 2^-e is a float for every e in [-127, 127]
  }
}

// Scale, count clips and round (RNE or RZ) the nblk blocks of one row into q (one code per
// byte). Returns the clipped count: |x * 2^-e| > 6 and finite. noinline, so that the
// __restrict qualifiers hold where the loops are vectorised (inlined into the OpenMP region the
// aliasing information is lost).
template <Rounding R>
__attribute__((noinline)) std::int64_t round_row(const float* __restrict x, const float* __restrict inv,
                                                 std::int64_t nblk, std::uint8_t* __restrict q) {
  std::int64_t clipped = 0;
  for (std::int64_t b = 0; b < nblk; ++b) {
    const float* xb = x + b * kB;
    std::uint8_t* qb = q + b * kB;
    const float s = inv[b];
    int c = 0;
    for (int i = 0; i < kB; ++i) {
      const float y = xb[i] * s;
      // |y| > 6 and finite, on the bits: 6 = 0x40c00000, Inf = 0x7f800000 (NaN lies above both).
      const std::uint32_t a = float_bits(y) & 0x7fffffffu;
      c += static_cast<int>((a > 0x40c00000u) & (a < 0x7f800000u));
      if constexpr (R == Rounding::NearestEven) qb[i] = e2m1_rne(y);
      else qb[i] = e2m1_rz(y);
    }
    clipped += c;
  }
  return clipped;
}

// One thread's SR buffers for a row: each element's scale 2^-e, the random words (hw SR: its
// bytes, from hw_words), exact SR's tie flags.
struct SrScratch {
  std::vector<float> scale;
  std::vector<std::uint32_t> words, hw_words;
  std::vector<std::uint8_t> tie;
  SrScratch(std::int64_t pcols, bool hw)
      : scale(static_cast<std::size_t>(pcols)), words(static_cast<std::size_t>(pcols)),
        hw_words(hw ? static_cast<std::size_t>(pcols / 4) : 0), tie(static_cast<std::size_t>(pcols)) {}
};

// SR of one row through the NVFP4 row loop (quant/e2m1_row.hpp): the row's random words drawn
// 8 Philox blocks at a time, the rounding branch-free, each element's draw the one
// e2m1_round takes from its stored index, as the CUDA backend's.
std::int64_t round_row_sr(const float* x, const float* inv, std::int64_t pcols, const RoundingSpec& rs,
                          std::uint64_t first, SrScratch& w, std::uint8_t* q) {
  for (std::int64_t k = 0; k < pcols; ++k) w.scale[static_cast<std::size_t>(k)] = inv[k / kB];
  return e2m1_row::draw_and_round_row<Rounding::Stochastic>(x, w.scale.data(), pcols, rs, first, w.words.data(),
                                                            w.hw_words.data(), q, w.tie.data());
}

void dequantize_row(const std::uint8_t* q, const float* sv, std::int64_t cols, float* out) {
  for (std::int64_t c = 0; c < cols; ++c) out[c] = e2m1_decode(q[c]) * sv[c / kB];
}

template <Rounding R>
std::int64_t quantize_rows(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  const std::int64_t rows = x.rows, cols = x.cols, pcols = out.padded_cols, nblk = out.scale_cols;
  std::int64_t clipped = 0;
#pragma omp parallel reduction(+ : clipped) if (parallel_worth(rows * pcols))
  {
    // Per-thread scratch; the outputs are written in place, every byte of them (padding
    // included), so they need no zero-fill pass.
    std::vector<float> padded(cols != pcols ? static_cast<std::size_t>(pcols) : 0, 0.0f);
    std::vector<float> inv(static_cast<std::size_t>(nblk));
    std::vector<std::uint8_t> q(static_cast<std::size_t>(pcols));
    SrScratch sr(R == Rounding::Stochastic ? pcols : 0, spec.rounding.sr_bits == kSrHw);
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data.data() + r * cols;
      if (cols != pcols) {  // partial last block: zero-padded copy (zeros leave the amax and give code 0)
        std::copy(xr, xr + cols, padded.begin());
        xr = padded.data();
      }
      std::uint8_t* sc = out.scale_codes.data() + r * nblk;
      float* sv = out.scale_values.data() + r * nblk;
      switch (spec.mx_scale_rule) {
        case MxScaleRule::Floor: block_scales_row<MxScaleRule::Floor>(xr, nblk, sc, sv, inv.data()); break;
        case MxScaleRule::Ceil: block_scales_row<MxScaleRule::Ceil>(xr, nblk, sc, sv, inv.data()); break;
        case MxScaleRule::Rceil: block_scales_row<MxScaleRule::Rceil>(xr, nblk, sc, sv, inv.data()); break;
      }
      std::uint8_t* cr = out.codes.data() + r * (pcols / 2);
      if constexpr (R == Rounding::Stochastic)
        clipped += round_row_sr(xr, inv.data(), pcols, spec.rounding, static_cast<std::uint64_t>(r * pcols), sr, q.data());
      else
        clipped += round_row<R>(xr, inv.data(), nblk, q.data());
      e2m1_row::pack_nibbles(q.data(), pcols, cr);
      if (dequantize) dequantize_row(q.data(), sv, cols, out.dequantized.data.data() + r * cols);
    }
  }
  return clipped;
}

}  // namespace

void mxfp4_quantize_cpu(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  const std::int64_t nblk = (x.cols + kB - 1) / kB;
  out.rows = x.rows;
  out.cols = x.cols;
  out.padded_cols = nblk * kB;
  out.scale_rows = x.rows;
  out.scale_cols = nblk;
  // resize, not assign: every byte is written by the row loop, and a reused output (the
  // benchmark's steady state) then costs no serial fill pass.
  out.codes.resize(static_cast<std::size_t>(x.rows * out.padded_cols / 2));
  out.scale_codes.resize(static_cast<std::size_t>(x.rows * nblk));
  out.scale_values.resize(out.scale_codes.size());
  out.dequantized = dequantize ? Matrix(x.rows, x.cols) : Matrix();
  out.global = GlobalScale{};
  switch (spec.rounding.mode) {
    case Rounding::NearestEven: out.clipped = quantize_rows<Rounding::NearestEven>(x, spec, out, dequantize); break;
    case Rounding::TowardZero: out.clipped = quantize_rows<Rounding::TowardZero>(x, spec, out, dequantize); break;
    case Rounding::Stochastic: out.clipped = quantize_rows<Rounding::Stochastic>(x, spec, out, dequantize); break;
  }
}

}  // namespace fp4d
