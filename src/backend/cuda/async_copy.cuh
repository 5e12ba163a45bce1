// Global -> shared copies that hold no registers while in flight (sm_80+ cp.async), so that a
// kernel can ask for its data first and compute something else (a CTA's scales and tables)
// while it arrives, or keep a ring of tiles in flight (commit groups, waited for oldest first).
// PTX ISA, "cp.async": with src-size 0 no byte is read and the 16 destination bytes are
// zero-filled; .cg caches in L2 only (16-byte copies of data read once), .ca also in L1 (the
// 4-byte copies, which only .ca allows).
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

// Bytes = 16 (.cg with a 256-byte L2 prefetch hint: streaming data read once, both addresses
// 16-byte aligned) or 4 (.ca, 4-byte aligned) from src to dst in shared memory; the copies a
// thread asks for between commits form one group (copy_to_shared_commit, ..._wait_prior).
template <int Bytes>
__device__ __forceinline__ void copy_to_shared_async(float* dst, const float* src) {
  static_assert(Bytes == 16 || Bytes == 4, "copy_to_shared_async: 16 or 4 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if constexpr (Bytes == 16)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src) : "memory");
#else
  if constexpr (Bytes == 16)
    *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(src);
  else
    *dst = *src;
#endif
}

// Waits until the calling thread's copies have landed; other threads see them after a barrier.
__device__ __forceinline__ void copy_to_shared_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Closes the calling thread's copies asked for since the last commit into one group (an empty
// group where there were none).
__device__ __forceinline__ void copy_to_shared_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `Pending` of the calling thread's newest groups are still in flight (the
// older ones have landed; other threads see them after a barrier).
template <int Pending>
__device__ __forceinline__ void copy_to_shared_wait_prior() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

}  // namespace fp4d::cuda
