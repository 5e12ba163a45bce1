// Deterministic benchmark data on the device, shared by the CUDA benchmarks (included by .cu
// files only). The values only have to be non-trivial and reproducible, not distributed well.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "format/bf16.hpp"

namespace fp4d::cuda::bench_data {
namespace {

// x[i] in (-4, 4) from a cheap integer hash of (i, seed).
__global__ void fill_kernel(float* x, std::int64_t n, std::uint32_t seed) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  x[i] = (static_cast<float>(h & 0xffffffu) / 16777216.0f - 0.5f) * 8.0f;
}

__global__ void to_bf16_kernel(const float* x, std::uint16_t* y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = bf16_rne_bits(x[i]);
}

inline unsigned blocks_for(std::int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace
}  // namespace fp4d::cuda::bench_data
