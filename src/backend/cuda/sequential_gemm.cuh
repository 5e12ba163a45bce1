// A float32 GEMM on the CUDA cores in quant/dense_gemm.hpp's order: every output c = 0, then
// c = c + a_k b_k for k = 0, 1, ..., K-1, each step rounded twice (__fmul_rn / __fadd_rn are
// never contracted into an FMA). The resident training steps use it for their float32 layers
// when a run asks for the sm90 accumulator, so that the GPU run equals the CPU run that models
// it bit for bit (the CPU's float32 layers keep this order under every accumulator, and
// cuBLASLt's FP32 GEMM sums in an order of its own choosing). Plain and correct rather than
// fast: shared-memory tiles, one output per thread. .cu files only; internal linkage.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp4d::cuda {

namespace {

// D (M x N, row-major) = A B^T in lt_gemm.cuh's orientation: A(m, k) = a[m * lda + k], or
// a[k * lda + m] when a_km; B(n, k) = b[n * ldb + k], or b[k * ldb + n] when b_kn.
struct SequentialGemm {
  const float* a = nullptr;
  const float* b = nullptr;
  float* d = nullptr;
  std::int64_t M = 0, N = 0, K = 0, lda = 0, ldb = 0;
  bool a_km = false, b_kn = false;
};

constexpr int kSeqTile = 16;

__global__ void sequential_gemm_kernel(SequentialGemm g) {
  __shared__ float as[kSeqTile][kSeqTile + 1];
  __shared__ float bs[kSeqTile][kSeqTile + 1];
  const std::int64_t m = blockIdx.y * static_cast<std::int64_t>(kSeqTile) + threadIdx.y;
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(kSeqTile) + threadIdx.x;
  const std::int64_t m0 = blockIdx.y * static_cast<std::int64_t>(kSeqTile);
  const std::int64_t n0 = blockIdx.x * static_cast<std::int64_t>(kSeqTile);
  float c = 0.0f;
  for (std::int64_t k0 = 0; k0 < g.K; k0 += kSeqTile) {
    // Thread (y, x) loads A(m0 + y, k0 + x) and B(n0 + y, k0 + x).
    const std::int64_t ma = m0 + threadIdx.y, nb = n0 + threadIdx.y, k = k0 + threadIdx.x;
    as[threadIdx.y][threadIdx.x] =
        ma < g.M && k < g.K ? (g.a_km ? g.a[k * g.lda + ma] : g.a[ma * g.lda + k]) : 0.0f;
    bs[threadIdx.y][threadIdx.x] =
        nb < g.N && k < g.K ? (g.b_kn ? g.b[k * g.ldb + nb] : g.b[nb * g.ldb + k]) : 0.0f;
    __syncthreads();
    const std::int64_t kn = g.K - k0 < kSeqTile ? g.K - k0 : kSeqTile;
    for (int kk = 0; kk < kn; ++kk) c = __fadd_rn(c, __fmul_rn(as[threadIdx.y][kk], bs[threadIdx.x][kk]));
    __syncthreads();
  }
  if (m < g.M && n < g.N) g.d[m * g.N + n] = c;
}

inline void run_sequential_gemm(const SequentialGemm& g, cudaStream_t stream) {
  const dim3 block(kSeqTile, kSeqTile);
  const dim3 grid(static_cast<unsigned>((g.N + kSeqTile - 1) / kSeqTile),
                  static_cast<unsigned>((g.M + kSeqTile - 1) / kSeqTile));
  sequential_gemm_kernel<<<grid, block, 0, stream>>>(g);
}

}  // namespace

}  // namespace fp4d::cuda
