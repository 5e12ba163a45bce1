// The fixed orders in which both backends add the lm step's long sums, so that the CPU's float
// step (sim/lm.cpp, sim/lm_mamba.cpp) and the GPU's resident step (backend/cuda/lm_kernels.cuh,
// lm_mamba_kernels.cuh) give the same bits: a parameter's gradient summed over the batch's rows,
// the clipping norm summed over every gradient element, and the Mamba-2 mixer's per-head
// parameters summed over positions and sequences. Both sides call these helpers, so each order
// is written here once; which helper each sum uses is listed below and in the callers.
//
// Why these orders: one ascending running sum over M = batch seq_len rows (or over every
// gradient element) is one GPU thread's serial loop over all of them, which leaves the GPU idle;
// a reduction tree over the threads of a block depends on the launch shape. Chunks of a fixed
// length, each summed in ascending order by one thread, bound the serial part and fix the
// order whatever the launch; the CPU runs the same chunks as plain loops. A chunked sum's error
// bound, (chunk + n / chunk) u sum |term| to first order, is no larger than the n u sum |term|
// of the running sum it replaces (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd
// ed., section 4.2).
//
//   ascending_sum(n, term)        acc = 0, then acc = acc + term(k) for k = 0 .. n-1
//   descending_sum(n, term)       the same for k = n-1 .. 0
//   chunk_sum(c, chunk, n, term)  ascending_sum of term(i) over chunk c of [0, n): i = c chunk ..
//                                 min((c + 1) chunk, n) - 1
//   chunked_sum(n, chunk, term)   ascending_sum over the chunks c < ceil(n / chunk) of their chunk_sum
// term returns the rounded term in T (a product is rounded before it is added: no FMA on either
// side). A term the model leaves out (a convolution tap before the sequence's start) is +0: a
// sum that starts at +0 never becomes -0 in round-to-nearest (x + (-x) = +0), so adding +0
// gives the bits of skipping the term.
//
// The lm's sums (model/lm_spec.hpp and sim/lm_mamba.hpp say what they compute):
//   row gradients  the RMSNorm gains' dg_j = sum_i da_ij n_ij, the Mamba gated norm's gain and
//                  the Mamba convolution's weights and bias: per column (tap, channel),
//                  chunked_sum over the M rows with kRowChunk (the GPU: one thread per chunk and
//                  column, then one per column over its chunks);
//   clipping norm  sum g^2 over every parameter in lm_params order, in the wider of T and double:
//                  each parameter's elements in chunks of kNormChunk, each chunk_sum'd, and all
//                  the chunk sums, parameter after parameter, added by model/tree_sum.hpp's
//                  tree_sum (the GPU: one thread per chunk, then tree_sum_kernel);
//   Mamba per head dD and dA: per row (sequence b, position t) its term (dD: ascending_sum over
//                  the head's P channels of dy x), per sequence descending_sum over the positions
//                  (the adjoint's reverse time), then ascending_sum over the sequences; dt_bias:
//                  per sequence ascending_sum over the positions, then over the sequences; the
//                  decay term <G_t, h_(t-1)> of dt's gradient: per state column n ascending_sum
//                  over p of G_pn h_pn, then ascending_sum over the columns.
#pragma once

#include <cstdint>

#include "format/hd.hpp"

// A term is a device lambda in a kernel and a host lambda on the CPU: the host-device templates
// call whichever they are given, so nvcc's execution-space check is off for them.
#if defined(__CUDACC__)
#define FP4D_SUM_ORDER_EXEC_CHECK _Pragma("nv_exec_check_disable")
#else
#define FP4D_SUM_ORDER_EXEC_CHECK
#endif

namespace fp4d {

constexpr std::int64_t kRowChunk = 64;    // rows per chunk of a gradient summed over the batch's rows
constexpr std::int64_t kNormChunk = 256;  // elements per chunk of the clipping norm's sum of squares

FP4D_HD std::int64_t chunk_count(std::int64_t n, std::int64_t chunk) { return n > 0 ? (n + chunk - 1) / chunk : 0; }

FP4D_SUM_ORDER_EXEC_CHECK
template <class T, class Term>
FP4D_HD T ascending_sum(std::int64_t n, const Term& term) {
  T acc = T(0);
  for (std::int64_t k = 0; k < n; ++k) acc = acc + term(k);
  return acc;
}

FP4D_SUM_ORDER_EXEC_CHECK
template <class T, class Term>
FP4D_HD T descending_sum(std::int64_t n, const Term& term) {
  T acc = T(0);
  for (std::int64_t k = n; k-- > 0;) acc = acc + term(k);
  return acc;
}

FP4D_SUM_ORDER_EXEC_CHECK
template <class T, class Term>
FP4D_HD T chunk_sum(std::int64_t c, std::int64_t chunk, std::int64_t n, const Term& term) {
  const std::int64_t begin = c * chunk, end = begin + chunk < n ? begin + chunk : n;
  T acc = T(0);
  for (std::int64_t i = begin; i < end; ++i) acc = acc + term(i);
  return acc;
}

FP4D_SUM_ORDER_EXEC_CHECK
template <class T, class Term>
FP4D_HD T chunked_sum(std::int64_t n, std::int64_t chunk, const Term& term) {
  return ascending_sum<T>(chunk_count(n, chunk), [&](std::int64_t c) -> T { return chunk_sum<T>(c, chunk, n, term); });
}

}  // namespace fp4d
