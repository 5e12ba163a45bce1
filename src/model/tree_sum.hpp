// The one order in which both backends add a batch's per-row terms (the loss), so that the sum's
// bits do not depend on the backend or on how a GPU spreads the rows over threads.
//
// Terms t_0 .. t_{n-1}; P the least power of two >= n. For s = P/2, P/4, ..., 1, every k < s
// with k + s < n takes t_k = t_k + t_{k+s}; then t_0 is the sum. Each level's additions are
// independent of one another (they read t_{k+s} >= s and write t_k < s), which is what lets one
// GPU block run a level in parallel (tree_sum_level between barriers) and the CPU run it as a
// loop, with the same result. Pairwise summation also bounds the rounding error by
// O(log2 n) unit roundoffs rather than the O(n) of a running sum (Higham, "Accuracy and
// Stability of Numerical Algorithms", 2nd ed., section 4.2).
#pragma once

#include <cstdint>

#include "format/hd.hpp"

namespace fp4d {

// The first level's stride, P / 2 (0 for n <= 1).
FP4D_HD std::int64_t tree_sum_first_stride(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p *= 2;
  return p / 2;
}

// One addition of the level with stride s.
template <class T>
FP4D_HD void tree_sum_step(T* t, std::int64_t n, std::int64_t s, std::int64_t k) {
  if (k < s && k + s < n) t[k] = t[k] + t[k + s];
}

// The sum of t[0 .. n) in that order, in place (t[0] holds it; t is scratch). 0 for n = 0.
template <class T>
T tree_sum(T* t, std::int64_t n) {
  if (n <= 0) return T(0);
  for (std::int64_t s = tree_sum_first_stride(n); s > 0; s /= 2)
    for (std::int64_t k = 0; k < s; ++k) tree_sum_step(t, n, s, k);
  return t[0];
}

}  // namespace fp4d
