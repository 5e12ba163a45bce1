// The fixed-order dense GEMM (quant/dense_gemm.hpp), blocked as the BLIS papers describe
// (Van Zee and van de Geijn, "BLIS: A Framework for Rapidly Instantiating BLAS
// Functionality", ACM TOMS 41(3), 2015): k in blocks of KC; each block of op(B) packed into
// panels of NR columns (KC x NR, contiguous, reused from L1 by every row panel); each thread's
// rows of op(A) packed into panels of MR rows (KC x MR, from L2); a register tile of MR x NR
// elements of C accumulated over the k-block, stored, and reloaded for the next k-block.
//
// Why the order is that of the scalar recurrence: every lane of the tile holds one element of
// C and applies dense_step with the operands of ascending p, k-block after k-block (the tile
// is stored after block [p0, p0 + KC) and reloaded before [p0 + KC, ...)); no two products
// are ever summed with each other first. Zero padding of the packed edge panels only reaches
// lanes whose results are discarded. Threads own disjoint row panels of C.
#include "quant/dense_gemm.hpp"

#if defined(__FMA__) && defined(__AVX2__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace fp4d {

namespace {

// 32-byte GCC/Clang vector types (one AVX register; split into SSE halves without AVX).
// Unaligned, may_alias: loaded and stored straight from the arrays.
typedef float VecF8 __attribute__((vector_size(32), aligned(4), may_alias));
typedef double VecD4 __attribute__((vector_size(32), aligned(8), may_alias));

// The register tile: MR rows x 2 vectors of C (12 of the 16 ymm registers hold accumulators,
// two the row of B, one the broadcast element of A).
template <class T, bool Fused>
struct Micro;
template <>
struct Micro<float, false> {
  using V = VecF8;
  static V step(V c, float a, V b) { return c + a * b; }  // two roundings (-ffp-contract=off)
};
template <>
struct Micro<double, false> {
  using V = VecD4;
  static V step(V c, double a, V b) { return c + a * b; }
};
#if defined(__FMA__) && defined(__AVX2__)
template <>
struct Micro<double, true> {  // kDenseDoubleFused: one rounding per step
  using V = VecD4;
  static V step(V c, double a, V b) { return (V)_mm256_fmadd_pd(_mm256_set1_pd(a), (__m256d)b, (__m256d)c); }
};
#endif

constexpr std::int64_t kMR = 6;      // rows of the register tile
constexpr std::int64_t kKC = 256;    // k-block: a KC x NR panel of B is 16 KB (double), in L1
constexpr std::int64_t kMCP = 16;    // row panels packed at a time: 96 x KC of A, 192 KB, in L2

template <class T>
constexpr std::int64_t vl() {
  return 32 / static_cast<std::int64_t>(sizeof(T));
}
template <class T>
constexpr std::int64_t nr() {
  return 2 * vl<T>();
}

// C tile (MR x NR at c, row stride ldc) = (first ? 0 : C tile) stepped by the kc products of
// the packed panels ap (kc x MR) and bp (kc x NR), p ascending.
template <class T, bool Fused>
inline void micro_tile(std::int64_t kc, const T* __restrict ap, const T* __restrict bp, T* __restrict c,
                       std::int64_t ldc, bool first) {
  using K = Micro<T, Fused>;
  using V = typename K::V;
  constexpr std::int64_t VL = vl<T>(), NR = nr<T>();
  V acc[kMR][2];
  for (std::int64_t ii = 0; ii < kMR; ++ii)
    for (std::int64_t v = 0; v < 2; ++v) acc[ii][v] = first ? V{} : *reinterpret_cast<const V*>(c + ii * ldc + v * VL);
  for (std::int64_t p = 0; p < kc; ++p) {
    const V b0 = *reinterpret_cast<const V*>(bp + p * NR);
    const V b1 = *reinterpret_cast<const V*>(bp + p * NR + VL);
    const T* a = ap + p * kMR;
    for (std::int64_t ii = 0; ii < kMR; ++ii) {
      acc[ii][0] = K::step(acc[ii][0], a[ii], b0);
      acc[ii][1] = K::step(acc[ii][1], a[ii], b1);
    }
  }
  for (std::int64_t ii = 0; ii < kMR; ++ii)
    for (std::int64_t v = 0; v < 2; ++v) *reinterpret_cast<V*>(c + ii * ldc + v * VL) = acc[ii][v];
}

// A partial tile (ni < MR rows or nj < NR columns of C): through a full tile on the stack.
template <class T, bool Fused>
void edge_tile(std::int64_t kc, const T* ap, const T* bp, T* c, std::int64_t ldc, bool first, std::int64_t ni,
               std::int64_t nj) {
  constexpr std::int64_t NR = nr<T>();
  alignas(32) T tile[kMR * NR] = {};
  if (!first)
    for (std::int64_t ii = 0; ii < ni; ++ii) std::memcpy(tile + ii * NR, c + ii * ldc, sizeof(T) * static_cast<std::size_t>(nj));
  micro_tile<T, Fused>(kc, ap, bp, tile, NR, first);
  for (std::int64_t ii = 0; ii < ni; ++ii) std::memcpy(c + ii * ldc, tile + ii * NR, sizeof(T) * static_cast<std::size_t>(nj));
}

// Row panels [r_begin, r_end) of op(A), k-block [p0, p0 + kc) -> dst[(panel * kc + pp) MR + ii],
// rows past m zero.
template <class T>
void pack_a(const T* a, bool a_t, std::int64_t m, std::int64_t k, std::int64_t r_begin, std::int64_t r_end,
            std::int64_t p0, std::int64_t kc, T* dst) {
  for (std::int64_t r = r_begin; r < r_end; ++r) {
    T* d = dst + (r - r_begin) * kc * kMR;
    const std::int64_t i0 = r * kMR, ni = std::min(kMR, m - i0);
    if (!a_t) {
      for (std::int64_t ii = 0; ii < ni; ++ii) {
        const T* src = a + (i0 + ii) * k + p0;
        for (std::int64_t pp = 0; pp < kc; ++pp) d[pp * kMR + ii] = src[pp];
      }
    } else {
      for (std::int64_t pp = 0; pp < kc; ++pp) {
        const T* src = a + (p0 + pp) * m + i0;
        for (std::int64_t ii = 0; ii < ni; ++ii) d[pp * kMR + ii] = src[ii];
      }
    }
    for (std::int64_t ii = ni; ii < kMR; ++ii)
      for (std::int64_t pp = 0; pp < kc; ++pp) d[pp * kMR + ii] = T(0);
  }
}

// Column panel jp of op(B), k-block [p0, p0 + kc) -> dst[pp NR + jj], columns past n zero.
template <class T>
void pack_b(const T* b, bool b_t, std::int64_t k, std::int64_t n, std::int64_t jp, std::int64_t p0, std::int64_t kc,
            T* dst) {
  constexpr std::int64_t NR = nr<T>();
  const std::int64_t j0 = jp * NR, nj = std::min(NR, n - j0);
  if (!b_t) {
    for (std::int64_t pp = 0; pp < kc; ++pp) {
      const T* src = b + (p0 + pp) * n + j0;
      T* d = dst + pp * NR;
      for (std::int64_t jj = 0; jj < nj; ++jj) d[jj] = src[jj];
      for (std::int64_t jj = nj; jj < NR; ++jj) d[jj] = T(0);
    }
  } else {
    for (std::int64_t jj = 0; jj < nj; ++jj) {
      const T* src = b + (j0 + jj) * k + p0;
      for (std::int64_t pp = 0; pp < kc; ++pp) dst[pp * NR + jj] = src[pp];
    }
    for (std::int64_t jj = nj; jj < NR; ++jj)
      for (std::int64_t pp = 0; pp < kc; ++pp) dst[pp * NR + jj] = T(0);
  }
}

template <class T, bool Fused>
void gemm_blocked(const T* a, bool a_t, const T* b, bool b_t, T* c, std::int64_t m, std::int64_t k, std::int64_t n) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    std::fill(c, c + m * n, T(0));
    return;
  }
  constexpr std::int64_t NR = nr<T>();
  const std::int64_t row_panels = (m + kMR - 1) / kMR, col_panels = (n + NR - 1) / NR;
  // C is written while A and B are still being packed (k-block after k-block, by other
  // threads too): it must not overlap them.
  const auto overlaps = [&](const T* x, std::int64_t count) { return x < c + m * n && c < x + count; };
  if (overlaps(a, m * k) || overlaps(b, k * n)) throw std::invalid_argument("dense_gemm: c overlaps a or b");
  // Packing buffers live as long as the calling thread (no allocation, no page faults per
  // call), all sized here, outside the parallel region (an allocation failure inside it would
  // terminate): B's shared by the team, one slice of A's per thread.
  const bool parallel = m * k * n > (1 << 18);
  int max_threads = 1;
#ifdef _OPENMP
  if (parallel) max_threads = omp_get_max_threads();
#endif
  constexpr std::int64_t a_slice = kMCP * kKC * kMR;
  static thread_local std::vector<T> b_buffer, a_buffer;
  b_buffer.resize(static_cast<std::size_t>(col_panels * kKC * NR));
  a_buffer.resize(static_cast<std::size_t>(max_threads * a_slice));
  T* const bpack = b_buffer.data();
  T* const apacks = a_buffer.data();
#pragma omp parallel if (parallel)
  {
    int threads = 1, t = 0;
#ifdef _OPENMP
    threads = omp_get_num_threads();  // <= max_threads
    t = omp_get_thread_num();
#endif
    T* const apack = apacks + t * a_slice;
    // This thread's row panels: an even split (rows are independent; results do not depend on it).
    const std::int64_t r_first = row_panels * t / threads, r_last = row_panels * (t + 1) / threads;
    for (std::int64_t p0 = 0; p0 < k; p0 += kKC) {
      const std::int64_t kc = std::min(kKC, k - p0);
      const bool first = p0 == 0;
#pragma omp for schedule(static)
      for (std::int64_t jp = 0; jp < col_panels; ++jp) pack_b(b, b_t, k, n, jp, p0, kc, bpack + jp * kKC * NR);
      // (the for's barrier: the packed block is complete before anyone reads it)
      for (std::int64_t r0 = r_first; r0 < r_last; r0 += kMCP) {
        const std::int64_t r1 = std::min(r_last, r0 + kMCP);
        pack_a(a, a_t, m, k, r0, r1, p0, kc, apack);
        for (std::int64_t jp = 0; jp < col_panels; ++jp) {
          const T* bp = bpack + jp * kKC * NR;
          const std::int64_t j0 = jp * NR, nj = std::min(NR, n - j0);
          for (std::int64_t r = r0; r < r1; ++r) {
            const T* ap = apack + (r - r0) * kc * kMR;
            const std::int64_t i0 = r * kMR, ni = std::min(kMR, m - i0);
            T* ct = c + i0 * n + j0;
            if (ni == kMR && nj == NR) micro_tile<T, Fused>(kc, ap, bp, ct, n, first);
            else edge_tile<T, Fused>(kc, ap, bp, ct, n, first, ni, nj);
          }
        }
      }
      // Nobody packs the next block of B while another thread still reads this one.
#pragma omp barrier
    }
  }
}

}  // namespace

template <class T>
void dense_gemm(const T* a, bool a_t, const T* b, bool b_t, T* c, std::int64_t m, std::int64_t k, std::int64_t n) {
  if constexpr (std::is_same_v<T, double>) gemm_blocked<double, kDenseDoubleFused>(a, a_t, b, b_t, c, m, k, n);
  else gemm_blocked<float, false>(a, a_t, b, b_t, c, m, k, n);
}

void dense_gemm_unfused(const double* a, bool a_t, const double* b, bool b_t, double* c, std::int64_t m,
                        std::int64_t k, std::int64_t n) {
  gemm_blocked<double, false>(a, a_t, b, b_t, c, m, k, n);
}

template void dense_gemm<float>(const float*, bool, const float*, bool, float*, std::int64_t, std::int64_t,
                                std::int64_t);
template void dense_gemm<double>(const double*, bool, const double*, bool, double*, std::int64_t, std::int64_t,
                                 std::int64_t);

}  // namespace fp4d
