// Deterministic benchmark data on the device: the one input generator of the CUDA benchmarks
// (included by .cu files only). The values only have to be non-trivial and reproducible, not
// distributed well.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "format/bf16.hpp"

namespace fp4d::cuda::bench_data {
namespace {

// The value of element i in (-4, 4), from a cheap integer hash of (i, seed).
__device__ __forceinline__ float value(std::int64_t i, std::uint32_t seed) {
  std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return (static_cast<float>(h & 0xffffffu) / 16777216.0f - 0.5f) * 8.0f;
}

// x[i] = value(i, seed), as float32 or as BF16 bits (the float32 value rounded to nearest
// even): the same seed gives a float32 tensor and its BF16 copy. One thread per element.
__global__ void fill_kernel(float* x, std::int64_t n, std::uint32_t seed) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value(i, seed);
}
__global__ void fill_kernel(std::uint16_t* x, std::int64_t n, std::uint32_t seed) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = bf16_rne_bits(value(i, seed));
}

inline unsigned blocks_for(std::int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// fill_kernel over x[0 .. n) on the default stream.
template <class T>
void fill(T* x, std::int64_t n, std::uint32_t seed) {
  constexpr int kThreads = 256;
  if (n > 0) fill_kernel<<<blocks_for(n, kThreads), kThreads>>>(x, n, seed);
}

}  // namespace
}  // namespace fp4d::cuda::bench_data
