// Launch shapes and the one-block tree sum shared by the resident training steps' kernels (.cu
// files only). Internal linkage: each translation unit gets its own copy.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "model/tree_sum.hpp"

// Grid-stride loops over n elements (a thread each) and over rows (a warp each).
#define FP4D_GRID_STRIDE(i, n)                                                                  \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
#define FP4D_WARP_STRIDE(warp, rows)                                                                  \
  for (std::int64_t warp = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32; warp < (rows); \
       warp += static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32)

namespace fp4d::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t n, std::int64_t per_thread = 1) {
  const std::int64_t b = (n + kThreads * per_thread - 1) / (kThreads * per_thread);
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(b, 65535)));
}

// t[0] = the sum of t[0 .. n) in model/tree_sum.hpp's order (the CPU's; t is scratch), one
// block: each level's additions in parallel, a barrier between levels. *out = the sum.
__global__ void tree_sum_kernel(double* __restrict__ t, std::int64_t n, double* __restrict__ out) {
  for (std::int64_t s = tree_sum_first_stride(n); s > 0; s /= 2) {
    for (std::int64_t k = threadIdx.x; k < s; k += blockDim.x) tree_sum_step(t, n, s, k);
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = n > 0 ? t[0] : 0.0;
}

}  // namespace

}  // namespace fp4d::cuda
