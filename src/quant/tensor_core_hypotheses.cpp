// The tensor-core model under accumulation hypotheses (quant/tensor_core_hypotheses.hpp).
#include "quant/tensor_core_hypotheses.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "quant/tensor_core_gemm.hpp"
#include "quant/tensor_core_lanes.hpp"

namespace fp4d {

namespace {

using tc_lanes::kZeroExponent;
// Model exponents the FP8 path takes (FP8's are in [-14, 15]); see the header for why.
constexpr int kMinExponent = -30, kMaxExponent = 16;

void check_args(const Matrix& A, const Matrix& B, const std::vector<std::int64_t>& intervals) {
  tc_lanes::require_same_k(A, B);
  for (const std::int64_t p : intervals)
    if (p < 0) throw std::invalid_argument("tensor-core gemm: a promotion interval is negative (" + std::to_string(p) + ")");
}

bool is_fp8_model(const TensorCoreModel& m) {
  return m.group >= 1 && m.group <= 32 && m.extra_bits == -10 && m.input_fraction_bits <= 3 &&
         m.b_input_fraction_bits <= 3 && m.min_exponent <= 2 * kMinExponent;
}

bool intervals_fit(const TensorCoreModel& m, const std::vector<std::int64_t>& intervals) {
  return std::all_of(intervals.begin(), intervals.end(), [&](std::int64_t p) { return p >= 0 && p % m.group == 0; });
}

// Model exponents of one operand (kZeroExponent for zeros); ok = every element finite, of at most
// the format's fraction bits, with its exponent in [kMinExponent, kMaxExponent].
struct Exponents {
  std::vector<int> e;
  bool ok = true;
};

Exponents exponents(const Matrix& X, int min_exp, int fraction_bits) {
  Exponents p;
  const auto n = static_cast<std::int64_t>(X.data.size());
  p.e.resize(X.data.size());
  bool ok = true;
#pragma omp parallel for schedule(static) reduction(&& : ok)
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = X.data[static_cast<std::size_t>(i)];
    int e = kZeroExponent;
    if (!std::isfinite(x)) {
      ok = false;
      e = 0;
    } else if (x != 0.0f) {
      e = tc_lanes::model_exponent(x, min_exp);
      const double scaled = std::ldexp(std::fabs(static_cast<double>(x)), fraction_bits - e);
      ok = ok && scaled == std::floor(scaled) && e >= kMinExponent && e <= kMaxExponent;
    }
    p.e[static_cast<std::size_t>(i)] = e;
  }
  p.ok = ok;
  return p;
}

std::vector<Matrix> fp8_gemm(const Matrix& A, const Matrix& B, const Exponents& pa, const Exponents& pb,
                             const TensorCoreModel& m, const std::vector<std::int64_t>& intervals) {
  constexpr std::int64_t kTileRows = 8, kTileCols = 32;
  constexpr int kMaxHypotheses = 8;
  const std::int64_t M = A.rows, N = B.rows, K = A.cols, G = m.group;
  const auto H = static_cast<std::int64_t>(intervals.size());
  std::vector<Matrix> out;
  for (std::int64_t h = 0; h < H; ++h) out.emplace_back(M, N);
  if (M == 0 || N == 0 || H == 0) return out;
  // B lane-major (K x Np): the inner loops run across output columns, one lane per output.
  const tc_lanes::LaneMajorB bl = tc_lanes::lane_major(B, pb.e, kTileCols);
  const std::int64_t Np = bl.Np;
  const std::int64_t row_tiles = (M + kTileRows - 1) / kTileRows, col_tiles = Np / kTileCols;
  for (std::int64_t h0 = 0; h0 < H; h0 += kMaxHypotheses) {
    const std::int64_t hn = std::min<std::int64_t>(kMaxHypotheses, H - h0);
#pragma omp parallel for schedule(static) collapse(2)
    for (std::int64_t jt = 0; jt < col_tiles; ++jt)
      for (std::int64_t it = 0; it < row_tiles; ++it) {
        const std::int64_t i0 = it * kTileRows, j0 = jt * kTileCols;
        const float* arow[kTileRows];
        const int* aexp[kTileRows];
        for (std::int64_t r = 0; r < kTileRows; ++r) {
          const std::int64_t i = std::min(i0 + r, M - 1);  // rows past the edge: computed, not stored
          arow[r] = A.data.data() + i * K;
          aexp[r] = pa.e.data() + i * K;
        }
        // Per hypothesis: the tensor core's accumulator (this chunk's chain of blocks) and the FP32
        // accumulator the chunks are promoted to.
        float acc[kMaxHypotheses][kTileRows][kTileCols] = {}, tot[kMaxHypotheses][kTileRows][kTileCols] = {};
        for (std::int64_t k0 = 0; k0 < K; k0 += G) {
          const std::int64_t k1 = std::min(K, k0 + G);
          int ep[kTileRows][kTileCols];
          tc_lanes::block_max_exponents(aexp, bl, j0, k0, k1, ep);
          for (std::int64_t h = 0; h < hn; ++h) {
            const std::int64_t P = intervals[static_cast<std::size_t>(h0 + h)];
            float(&a)[kTileRows][kTileCols] = acc[h];
            if (P > 0 && k0 > 0 && k0 % P == 0)  // a chunk ends: promote it, start the next from 0
              for (std::int64_t r = 0; r < kTileRows; ++r)
                for (std::int64_t c = 0; c < kTileCols; ++c) {
                  tot[h][r][c] = tot[h][r][c] + a[r][c];
                  a[r][c] = 0.0f;
                }
            // The alignment exponent E (products and accumulator) and the scale 2^(13 - E) that
            // puts a term's 13 kept fraction bits above the binary point. Lanes whose block has no
            // product keep their accumulator; their E is clamped only to keep the scale finite.
            float scale[kTileRows][kTileCols], unit[kTileRows][kTileCols];
            for (std::int64_t r = 0; r < kTileRows; ++r)
              for (std::int64_t c = 0; c < kTileCols; ++c) {
                const int biased = static_cast<int>((std::bit_cast<std::uint32_t>(a[r][c]) >> 23) & 0xffu);
                const int ec = a[r][c] == 0.0f ? kZeroExponent : biased - 127;  // normal (header)
                const int e = std::clamp(std::max(ep[r][c], ec), 2 * kMinExponent, 100);
                scale[r][c] = std::bit_cast<float>(static_cast<std::uint32_t>(127 + 13 - e) << 23);
                unit[r][c] = std::bit_cast<float>(static_cast<std::uint32_t>(127 - 13 + e) << 23);
              }
            std::int32_t s[kTileRows][kTileCols] = {};
            for (std::int64_t k = k0; k < k1; ++k) {
              const float* bk = bl.values.data() + k * Np + j0;
              for (std::int64_t r = 0; r < kTileRows; ++r) {
                const float av = arow[r][k];
                for (std::int64_t c = 0; c < kTileCols; ++c) s[r][c] += static_cast<std::int32_t>((av * bk[c]) * scale[r][c]);
              }
            }
            for (std::int64_t r = 0; r < kTileRows; ++r)
              for (std::int64_t c = 0; c < kTileCols; ++c) {
                const std::int32_t sum = s[r][c] + static_cast<std::int32_t>(a[r][c] * scale[r][c]);
                // |sum| < 2^21: exact in float; the mask keeps 14 significant bits, toward zero.
                const float kept = std::bit_cast<float>(std::bit_cast<std::uint32_t>(static_cast<float>(sum)) & ~0x3ffu);
                const float v = kept * unit[r][c];
                a[r][c] = ep[r][c] < kZeroExponent / 2 ? a[r][c] : v;
              }
          }
        }
        for (std::int64_t h = 0; h < hn; ++h) {
          Matrix& C = out[static_cast<std::size_t>(h0 + h)];
          const bool promoted = intervals[static_cast<std::size_t>(h0 + h)] > 0;
          for (std::int64_t r = 0; r < kTileRows && i0 + r < M; ++r)
            for (std::int64_t c = 0; c < kTileCols && j0 + c < N; ++c)
              C(i0 + r, j0 + c) = promoted ? tot[h][r][c] + acc[h][r][c] : acc[h][r][c];
        }
      }
  }
  return out;
}

}  // namespace

std::vector<Matrix> tensor_core_gemm_hypotheses_reference(const Matrix& A, const Matrix& B, const TensorCoreModel& m,
                                                          const std::vector<std::int64_t>& intervals) {
  check_args(A, B, intervals);
  const std::int64_t M = A.rows, N = B.rows, K = A.cols;
  std::vector<Matrix> out;
  for (std::size_t h = 0; h < intervals.size(); ++h) out.emplace_back(M, N);
  tc_lanes::each_output(M, N, [&](std::int64_t i, std::int64_t j) {
    const float* a = A.data.data() + i * K;
    const float* b = B.data.data() + j * K;
    for (std::size_t h = 0; h < intervals.size(); ++h)
      out[h](i, j) = intervals[h] == 0 ? tensor_core_dot(a, b, K, 0.0f, m)
                                       : tensor_core_dot_promoted(a, b, K, 0.0f, intervals[h], m);
  });
  return out;
}

bool tensor_core_hypotheses_fp8_path(const Matrix& A, const Matrix& B, const TensorCoreModel& m,
                                     const std::vector<std::int64_t>& intervals) {
  check_args(A, B, intervals);
  return is_fp8_model(m) && intervals_fit(m, intervals) &&
         exponents(A, m.input_min_exponent, m.input_fraction_bits).ok &&
         exponents(B, m.b_input_min_exponent, m.b_input_fraction_bits).ok;
}

std::vector<Matrix> tensor_core_gemm_hypotheses(const Matrix& A, const Matrix& B, const TensorCoreModel& m,
                                                const std::vector<std::int64_t>& intervals) {
  check_args(A, B, intervals);
  if (intervals.size() == 1 && intervals[0] == 0 && !is_fp8_model(m)) return {tensor_core_gemm(A, B, m)};
  if (is_fp8_model(m) && intervals_fit(m, intervals)) {
    const Exponents pa = exponents(A, m.input_min_exponent, m.input_fraction_bits);
    const Exponents pb = exponents(B, m.b_input_min_exponent, m.b_input_fraction_bits);
    if (pa.ok && pb.ok) return fp8_gemm(A, B, pa, pb, m, intervals);
  }
  return tensor_core_gemm_hypotheses_reference(A, B, m, intervals);
}

}  // namespace fp4d
