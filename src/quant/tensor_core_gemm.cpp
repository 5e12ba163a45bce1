// The tensor-core model GEMM (quant/tensor_core_gemm.hpp): a reference through tensor_core_dot
// and a vectorised path that computes the same bits.
#include "quant/tensor_core_gemm.hpp"
#include "quant/tensor_core_lanes.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace fp4d {

namespace {

using tc_lanes::kZeroExponent;
using tc_lanes::require_same_k;
// The fast path's window for alignment exponents of blocks that hold a product (see the header).
constexpr int kFastMinExponent = -100, kFastMaxExponent = 124;

// One operand prepared for the fast path: values as they are, exponents per element.
struct Prepared {
  std::vector<int> exps;
  int emin = std::numeric_limits<int>::max(), emax = std::numeric_limits<int>::min();
  bool finite = true;
};

// Whether a finite nonzero x has at most the model's input fraction bits at its model exponent
// e. A normal float at or above the input format's minimum exponent needs only its low
// fraction bits clear; anything else (the input format's subnormals) is checked exactly.
bool fits_input_format(float x, int e, const TensorCoreModel& m) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const int biased = static_cast<int>((bits >> 23) & 0xffu);
  if (biased != 0 && biased - 127 >= m.input_min_exponent)
    return (bits & ((std::uint32_t{1} << (23 - m.input_fraction_bits)) - 1)) == 0;
  const double scaled = std::ldexp(std::fabs(static_cast<double>(x)), m.input_fraction_bits - e);
  return scaled == std::floor(scaled);
}

Prepared prepare(const Matrix& X, const TensorCoreModel& m) {
  Prepared p;
  const auto n = static_cast<std::int64_t>(X.data.size());
  p.exps.resize(X.data.size());
  std::int64_t first_bad = n;
  bool finite = true;
  int emin = std::numeric_limits<int>::max(), emax = std::numeric_limits<int>::min();
#pragma omp parallel for schedule(static) reduction(min : emin, first_bad) reduction(max : emax) reduction(&& : finite)
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = X.data[static_cast<std::size_t>(i)];
    int e = kZeroExponent;
    if (!std::isfinite(x)) {
      finite = false;
      e = 0;
    } else if (x != 0.0f) {
      e = tc_lanes::model_exponent(x, m.input_min_exponent);
      if (!fits_input_format(x, e, m)) first_bad = std::min(first_bad, i);
      emin = std::min(emin, e);
      emax = std::max(emax, e);
    }
    p.exps[static_cast<std::size_t>(i)] = e;
  }
  if (first_bad < n)
    throw std::invalid_argument("tensor-core gemm: element " + std::to_string(first_bad) + " (" +
                                std::to_string(X.data[static_cast<std::size_t>(first_bad)]) +
                                ") has more significant bits than the " + m.name + " model's input format");
  p.finite = finite;
  p.emin = emin;
  p.emax = emax;
  return p;
}

bool model_has_fast_path(const TensorCoreModel& m) {
  return m.group >= 1 && m.group <= 16 && m.extra_bits == 2 && m.input_fraction_bits <= 10 &&
         m.min_exponent <= kFastMinExponent && m.b_input_min_exponent == m.input_min_exponent &&
         m.b_input_fraction_bits == m.input_fraction_bits;
}

bool operands_fit(const Prepared& a, const Prepared& b) {
  if (!a.finite || !b.finite) return false;
  if (a.emin > a.emax || b.emin > b.emax) return true;  // an all-zero operand: every product is 0
  return a.emin + b.emin >= kFastMinExponent && a.emax + b.emax <= kFastMaxExponent;
}

Matrix apply_alpha(Matrix C, float alpha) {
  if (alpha != 1.0f)
    for (float& c : C.data) c = alpha * c;
  return C;
}

Matrix fast_gemm(const Matrix& A, const Matrix& B, const Prepared& pa, const Prepared& pb, const TensorCoreModel& m,
                 float alpha) {
  // Tiles of 8 x 32 outputs, column strips outermost: a strip of B (values and exponents) is
  // reused by every row tile from cache while A's rows stream, which halves the traffic of the
  // other order at these tile sizes (the exponents double what the float32 GEMM moves).
  constexpr std::int64_t kTileRows = 8, kTileCols = 32;
  const std::int64_t M = A.rows, N = B.rows, K = A.cols, G = m.group;
  Matrix C(M, N);
  if (M == 0 || N == 0) return C;
  // B lane-major (K x Np): the inner loops run across output columns, one lane per output.
  const tc_lanes::LaneMajorB bl = tc_lanes::lane_major(B, pb.exps, kTileCols);
  const std::int64_t Np = bl.Np;
  const std::int64_t row_tiles = (M + kTileRows - 1) / kTileRows, col_tiles = Np / kTileCols;
#pragma omp parallel for schedule(static) collapse(2)
  for (std::int64_t jt = 0; jt < col_tiles; ++jt)
    for (std::int64_t it = 0; it < row_tiles; ++it) {
      const std::int64_t i0 = it * kTileRows, j0 = jt * kTileCols;
      // Rows past the edge compute on the last row (valid memory) and are not stored.
      const float* arow[kTileRows];
      const int* aexp[kTileRows];
      for (std::int64_t r = 0; r < kTileRows; ++r) {
        const std::int64_t i = std::min(i0 + r, M - 1);
        arow[r] = A.data.data() + i * K;
        aexp[r] = pa.exps.data() + i * K;
      }
      float acc[kTileRows][kTileCols] = {};
      for (std::int64_t k0 = 0; k0 < K; k0 += G) {
        const std::int64_t k1 = std::min(K, k0 + G);
        // Pass 1: the block's largest product exponent e_a + e_b per output.
        int ep[kTileRows][kTileCols];
        tc_lanes::block_max_exponents(aexp, bl, j0, k0, k1, ep);
        // The alignment exponent E (with the accumulator's) and the scale 2^(25 - E) that puts
        // a term's 23 + 2 kept fraction bits above the binary point. A block without a product
        // returns c unchanged (c has 24 bits, the grid 25 below c's exponent): such lanes use
        // a clamped E and are not updated.
        float scale[kTileRows][kTileCols];
        int E[kTileRows][kTileCols];
        for (std::int64_t r = 0; r < kTileRows; ++r)
          for (std::int64_t c = 0; c < kTileCols; ++c) {
            const std::uint32_t cb = std::bit_cast<std::uint32_t>(acc[r][c]);
            const int biased = static_cast<int>((cb >> 23) & 0xffu);
            const int ec = acc[r][c] == 0.0f ? kZeroExponent : (biased == 0 ? -126 : biased - 127);
            const int e = std::max(std::max(ep[r][c], ec), kFastMinExponent);
            E[r][c] = e;
            scale[r][c] = std::bit_cast<float>(static_cast<std::uint32_t>(152 - e) << 23);
          }
        // Pass 2: each product exact in float, scaled exactly, truncated toward zero; the
        // block's products sum exactly in int32 (below 16 * 4 * 2^25 < 2^31).
        std::int32_t s[kTileRows][kTileCols] = {};
        for (std::int64_t k = k0; k < k1; ++k) {
          const float* bk = bl.values.data() + k * Np + j0;
          for (std::int64_t r = 0; r < kTileRows; ++r) {
            const float av = arow[r][k];
            for (std::int64_t c = 0; c < kTileCols; ++c) s[r][c] += static_cast<std::int32_t>((av * bk[c]) * scale[r][c]);
          }
        }
        // The accumulator joins in double (the sum is an integer below 2^32: exact); the sum is
        // truncated toward zero to 24 significant bits by masking the double's low fraction
        // bits and scaled back. Branch-free, so the compiler vectorises it; lanes without a
        // product keep c.
        for (std::int64_t r = 0; r < kTileRows; ++r)
          for (std::int64_t c = 0; c < kTileCols; ++c) {
            const double vc = static_cast<double>(static_cast<std::int32_t>(acc[r][c] * scale[r][c]));
            const double sum = static_cast<double>(s[r][c]) + vc;
            const double kept = std::bit_cast<double>(std::bit_cast<std::uint64_t>(sum) & ~((std::uint64_t{1} << 29) - 1));
            const double unit = std::bit_cast<double>(static_cast<std::uint64_t>(E[r][c] - 25 + 1023) << 52);
            const float v = static_cast<float>(kept * unit);  // exact: 24 bits, normal (E >= -100)
            acc[r][c] = ep[r][c] < kZeroExponent / 2 ? acc[r][c] : v;  // no product in the block: c stays
          }
      }
      for (std::int64_t r = 0; r < kTileRows && i0 + r < M; ++r)
        for (std::int64_t c = 0; c < kTileCols && j0 + c < N; ++c)
          C(i0 + r, j0 + c) = alpha == 1.0f ? acc[r][c] : alpha * acc[r][c];
    }
  return C;
}

}  // namespace

Matrix tensor_core_gemm_reference(const Matrix& A, const Matrix& B, const TensorCoreModel& m, float alpha) {
  require_same_k(A, B);
  const std::int64_t M = A.rows, N = B.rows, K = A.cols;
  Matrix C(M, N);
  tc_lanes::each_output(M, N, [&](std::int64_t i, std::int64_t j) {
    C(i, j) = tensor_core_dot(A.data.data() + i * K, B.data.data() + j * K, K, 0.0f, m);
  });
  return apply_alpha(std::move(C), alpha);
}

bool tensor_core_gemm_fast_path(const Matrix& A, const Matrix& B, const TensorCoreModel& m) {
  require_same_k(A, B);
  return model_has_fast_path(m) && operands_fit(prepare(A, m), prepare(B, m));
}

Matrix tensor_core_gemm(const Matrix& A, const Matrix& B, const TensorCoreModel& m, float alpha) {
  require_same_k(A, B);
  if (!model_has_fast_path(m)) return tensor_core_gemm_reference(A, B, m, alpha);
  const Prepared pa = prepare(A, m), pb = prepare(B, m);
  if (!operands_fit(pa, pb)) return tensor_core_gemm_reference(A, B, m, alpha);
  return fast_gemm(A, B, pa, pb, m, alpha);
}

}  // namespace fp4d
