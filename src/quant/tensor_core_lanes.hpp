// What the two vectorised tensor-core model GEMMs share (quant/tensor_core_gemm.cpp for BF16 and
// FP16, quant/tensor_core_hypotheses.cpp for FP8 under promotion hypotheses): both hold one
// output per vector lane in tiles of rows x columns, with B and its per-element model exponents
// transposed so that the inner loops run across output columns, and both start each MMA block
// from the largest product exponent of every lane. Internal to those two files.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "quant/matrix.hpp"

namespace fp4d::tc_lanes {

// Exponent given to zero elements: far below any real one, so a zero product never sets a
// block's alignment exponent, and the sum of two of them cannot overflow an int. A block whose
// largest product exponent is below kZeroExponent / 2 holds no product.
constexpr int kZeroExponent = -(1 << 20);

inline void require_same_k(const Matrix& A, const Matrix& B) {
  if (A.cols != B.cols)
    throw std::invalid_argument("tensor-core gemm: K mismatch (A is " + std::to_string(A.rows) + " x " +
                                std::to_string(A.cols) + ", B is " + std::to_string(B.rows) + " x " +
                                std::to_string(B.cols) + ")");
}

// The model's exponent of a finite nonzero x: floor(log2 |x|), at least the input format's
// minimum normal exponent (its subnormals keep a significand below 1 there).
inline int model_exponent(float x, int input_min_exponent) {
  const int biased = static_cast<int>((std::bit_cast<std::uint32_t>(x) >> 23) & 0xffu);
  return std::max(biased == 0 ? -127 : biased - 127, input_min_exponent);
}

// B (N x K) and its exponents transposed to K x Np, Np = N rounded up to tile_cols; the padding
// columns hold zeros (exponent kZeroExponent) and are never stored.
struct LaneMajorB {
  std::int64_t Np = 0;
  std::vector<float> values;
  std::vector<int> exps;
};
inline LaneMajorB lane_major(const Matrix& B, const std::vector<int>& exps, std::int64_t tile_cols) {
  const std::int64_t N = B.rows, K = B.cols;
  LaneMajorB t;
  t.Np = (N + tile_cols - 1) / tile_cols * tile_cols;
  t.values.assign(static_cast<std::size_t>(K * t.Np), 0.0f);
  t.exps.assign(static_cast<std::size_t>(K * t.Np), kZeroExponent);
  for (std::int64_t j = 0; j < N; ++j)
    for (std::int64_t k = 0; k < K; ++k) {
      t.values[static_cast<std::size_t>(k * t.Np + j)] = B.data[static_cast<std::size_t>(j * K + k)];
      t.exps[static_cast<std::size_t>(k * t.Np + j)] = exps[static_cast<std::size_t>(j * K + k)];
    }
  return t;
}

// ep[r][c] = the largest e_a + e_b over the block's k in [k0, k1) of output (row r, column
// j0 + c): aexp[r] the row's exponents, b the transposed B.
template <std::int64_t Rows, std::int64_t Cols>
inline void block_max_exponents(const int* const (&aexp)[Rows], const LaneMajorB& b, std::int64_t j0, std::int64_t k0,
                                std::int64_t k1, int (&ep)[Rows][Cols]) {
  for (std::int64_t r = 0; r < Rows; ++r)
    for (std::int64_t c = 0; c < Cols; ++c) ep[r][c] = kZeroExponent;
  for (std::int64_t k = k0; k < k1; ++k) {
    const int* be = b.exps.data() + k * b.Np + j0;
    for (std::int64_t r = 0; r < Rows; ++r) {
      const int ea = aexp[r][k];
      for (std::int64_t c = 0; c < Cols; ++c) ep[r][c] = std::max(ep[r][c], ea + be[c]);
    }
  }
}

// f(i, j) for every output of an M x N reference GEMM, rows over threads; the first
// std::invalid_argument any output throws is rethrown once all are done, prefixed with
// "tensor-core gemm: ".
template <class F>
void each_output(std::int64_t M, std::int64_t N, const F& f) {
  std::string error;
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      try {
        f(i, j);
      } catch (const std::invalid_argument& e) {
#pragma omp critical
        if (error.empty()) error = e.what();
      }
    }
  if (!error.empty()) throw std::invalid_argument("tensor-core gemm: " + error);
}

}  // namespace fp4d::tc_lanes
