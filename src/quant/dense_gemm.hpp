// The plain GEMM of the mlp workload's float32 run and double reference (sim/mlp.cpp), in a
// fixed per-element order that no blocking, SIMD width or thread count changes:
//
//   C (m x n, row-major) = op(A) op(B), every element c = 0, then for p = 0, 1, ..., k-1
//   (ascending) c = dense_step(c, A(i, p), B(p, j)),
//
// where dense_step is c + a b rounded twice in T (the build has -ffp-contract=off), except
// for double on FMA hardware (kDenseDoubleFused), where it is fma(a, b, c), rounded once.
// A(i, p) = a[i k + p] (a_t = false) or a[p m + i] (a_t = true: a holds A^T, k x m);
// B(p, j) = b[p n + j] (b_t = false) or b[j k + p] (b_t = true: b holds B^T, n x k).
// The transposed layouts cost nothing extra: the kernel packs both operands anyway. c must
// not overlap a or b (std::invalid_argument).
//
// The float32 run's results are compared bit for bit with the emulated GEMMs' (a float32
// GemmFn computing the same recurrence), and the double reference's are the "exact" side of
// every error the toolkit reports, so the order is part of the contract (docs/numerics.md
// section 8d). Only float and double are accepted; the wider reference types keep their own
// element loop in sim/plain_gemm.hpp.
#pragma once

#include <cmath>
#include <cstdint>

namespace fp4d {

#if defined(__FMA__) && defined(__AVX2__)
inline constexpr bool kDenseDoubleFused = true;
#else
inline constexpr bool kDenseDoubleFused = false;
#endif

// One step of the recurrence (the scalar definition the kernel's lanes follow).
inline float dense_step(float c, float a, float b) { return c + a * b; }
inline double dense_step(double c, double a, double b) {
  if constexpr (kDenseDoubleFused) return std::fma(a, b, c);
  else return c + a * b;
}

template <class T>
void dense_gemm(const T* a, bool a_t, const T* b, bool b_t, T* c, std::int64_t m, std::int64_t k, std::int64_t n);

// The same in double with every step unfused, c + a b rounded twice, whatever the hardware
// (the teacher network's targets in make_batch, defined that way since before this kernel).
void dense_gemm_unfused(const double* a, bool a_t, const double* b, bool b_t, double* c, std::int64_t m,
                        std::int64_t k, std::int64_t n);

extern template void dense_gemm<float>(const float*, bool, const float*, bool, float*, std::int64_t, std::int64_t,
                                       std::int64_t);
extern template void dense_gemm<double>(const double*, bool, const double*, bool, double*, std::int64_t,
                                        std::int64_t, std::int64_t);

}  // namespace fp4d
