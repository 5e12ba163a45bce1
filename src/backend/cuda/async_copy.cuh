// Global -> shared copies that hold no registers while in flight (sm_80+ cp.async), so that a
// kernel can ask for its data first and compute something else (a CTA's scales and tables)
// while it arrives. PTX ISA, "cp.async": with src-size 0 no byte is read and the 16
// destination bytes are zero-filled; .cg caches in L2 only (the data is read once).
#pragma once

#include <cuda_runtime.h>

namespace fp4d::cuda {

// 16 bytes from src (16-byte aligned) to dst in shared memory (16-byte aligned), or 16 zero
// bytes where !in (src is then not read, but must still be a valid address expression).
__device__ __forceinline__ void copy16_to_shared_async(void* dst, const void* src, bool in) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(in ? 16 : 0) : "memory");
#else
  *static_cast<uint4*>(dst) = in ? *static_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
#endif
}

// Waits until the calling thread's copies have landed; other threads see them after a barrier.
__device__ __forceinline__ void copy_to_shared_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

}  // namespace fp4d::cuda
