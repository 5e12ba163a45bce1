// Block-wide maxima of unsigned keys, ending in one atomicMax per key and block: the amax
// passes' last step. A same-address atomic per warp (8 per block, thousands per pass, all
// arriving as the streams end) serialises at the L2; one per block does not. An unsigned max is
// exact in any order, so the result does not depend on how the threads, warps and blocks meet.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp4d::cuda {

// keys[j] = max(keys[j], the block's maximum of every thread's k[j]) for j < N, by thread j,
// skipped where that maximum is 0 (a key's floor). Every thread of the block must call it (a
// full-warp reduction and a barrier), and the block must have exactly kThreads threads (the
// shared partials are read for every warp of kThreads). Once per kernel: it ends without a
// barrier, so a second call could overwrite the partials while the first is still reading them.
template <int kThreads, int N>
__device__ __forceinline__ void block_max_to_keys(const std::uint32_t (&k)[N], std::uint32_t* keys) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block_max_to_keys: whole warps, at most 32 of them");
  static_assert(N >= 1 && N <= kThreads, "block_max_to_keys: a thread per key");
  __shared__ std::uint32_t part[N][kThreads / 32];
  const unsigned warp = threadIdx.x / 32u;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const std::uint32_t m = __reduce_max_sync(0xffffffffu, k[j]);
    if ((threadIdx.x & 31u) == 0) part[j][warp] = m;
  }
  __syncthreads();
  if (threadIdx.x < static_cast<unsigned>(N)) {
    std::uint32_t m = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) m = max(m, part[threadIdx.x][w]);
    if (m) atomicMax(keys + threadIdx.x, m);
  }
}

}  // namespace fp4d::cuda
