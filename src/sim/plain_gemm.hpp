// The plain GEMM of the CPU models' reference runs (sim/mlp.cpp, sim/lm.cpp) in any scalar T:
// every element c = 0, then c = c + a_p b_p for p = 0, 1, ..., k-1 (ascending).
//   float, double  quant/dense_gemm (packed, vectorised, threaded; c = dense_step(c, a, b), fused
//                  for double on FMA hardware): the double reference keeps its speed and its bits
//   a wider T      (sim/mlp_precision.hpp) the same recurrence element by element, c + a b
//                  rounded twice in T (Boost.Multiprecision has no fused step), rows split over
//                  threads; no row's sum crosses threads, so the result is the thread count's
//                  whatever it is
// One definition for both models, so that "the reference's GEMM" means one order everywhere.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "quant/dense_gemm.hpp"

namespace fp4d {

// x [rows x cols] row-major, transposed.
template <class T>
std::vector<T> transposed(const std::vector<T>& x, std::int64_t rows, std::int64_t cols) {
  std::vector<T> t(x.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      t[static_cast<std::size_t>(c * rows + r)] = x[static_cast<std::size_t>(r * cols + c)];
  return t;
}

// c [m x n] = a [m x k] b [k x n], all row-major, for a T without a dense_gemm.
template <class T>
void gemm_kn_wide(const T* a, const T* b, T* c, std::int64_t m, std::int64_t k, std::int64_t n) {
#pragma omp parallel for schedule(static) if (m * k * n > (1 << 12))
  for (std::int64_t i = 0; i < m; ++i) {
    T* ci = c + i * n;
    for (std::int64_t j = 0; j < n; ++j) ci[j] = T(0);
    for (std::int64_t p = 0; p < k; ++p) {
      const T& aip = a[i * k + p];
      const T* bp = b + p * n;
      for (std::int64_t j = 0; j < n; ++j) ci[j] += aip * bp[j];
    }
  }
}

// c (m x n, resized) = op(A) op(B) in the fixed order; a_t / b_t as in dense_gemm (a holds A^T,
// k x m; b holds B^T, n x k).
template <class T>
void plain_gemm(const std::vector<T>& a, bool a_t, const std::vector<T>& b, bool b_t, std::vector<T>& c,
                std::int64_t m, std::int64_t k, std::int64_t n) {
  c.resize(static_cast<std::size_t>(m * n));
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    dense_gemm(a.data(), a_t, b.data(), b_t, c.data(), m, k, n);
  } else {
    const std::vector<T> an = a_t ? transposed(a, k, m) : std::vector<T>{};
    const std::vector<T> bn = b_t ? transposed(b, n, k) : std::vector<T>{};
    gemm_kn_wide((a_t ? an : a).data(), (b_t ? bn : b).data(), c.data(), m, k, n);
  }
}

}  // namespace fp4d
