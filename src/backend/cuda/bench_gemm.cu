// bench gemm-cuda (bench.hpp): the emulated NVFP4 GEMM as a training step runs it (amax +
// quantize of both BF16 operands through nvfp4.hpp's device API, writing the BF16 decode
// q * S; one cuBLASLt BF16 GEMM with the global scales as a device-side alpha) against the
// cuBLASLt BF16 GEMM of the same shape (the roofline) and the FP8 E4M3 tensor-core GEMM.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "backend/cuda/bench.hpp"
#include "backend/cuda/bench_data.cuh"
#include "backend/cuda/bench_device.hpp"
#include "backend/cuda/bench_timer.cuh"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/lt_gemm.cuh"
#include "backend/cuda/nvfp4.hpp"
#include "quant/nvfp4_math.hpp"

namespace fp4d::cuda {

namespace {

__global__ void to_e4m3_kernel(const float* x, std::uint8_t* y, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x[i] * 0.25f, __NV_SATFINITE, __NV_E4M3));
}

// alpha = fl(s_dec^A s_dec^B) from the two amax keys, and beta = 0: the epilogue's factors.
__global__ void nvfp4_alpha_kernel(const std::uint32_t* key_a, const std::uint32_t* key_b, float* ab) {
  ab[0] = nvfp4_global_scale(bits_float(*key_a)).decode * nvfp4_global_scale(bits_float(*key_b)).decode;
  ab[1] = 0.0f;
}

using bench_data::blocks_for;

}  // namespace

GemmCudaBench gemm_cuda_bench(std::int64_t M, std::int64_t N, std::int64_t K, int repeat) {
  require_bench_device();
  if (M <= 0 || N <= 0 || K <= 0 || K % 16 != 0 || M % 16 != 0 || N % 16 != 0)
    throw std::invalid_argument("bench gemm-cuda: M, N, K must be positive multiples of 16");
  if (repeat < 1) throw std::invalid_argument("bench gemm-cuda: --repeat must be >= 1");
  GemmCudaBench r;
  r.M = M, r.N = N, r.K = K;
  const std::int64_t na = M * K, nb = N * K;
  DeviceBuffer<float> a(static_cast<std::size_t>(na), "cudaMalloc (A)"), b(static_cast<std::size_t>(nb), "cudaMalloc (B)");
  DeviceBuffer<std::uint16_t> a16(static_cast<std::size_t>(na), "cudaMalloc"), b16(static_cast<std::size_t>(nb), "cudaMalloc");
  DeviceBuffer<float> c(static_cast<std::size_t>(M * N), "cudaMalloc (C)");
  constexpr int T = 256;
  bench_data::fill(a.p, na, 1u);
  bench_data::fill(b.p, nb, 2u);
  bench_data::fill(a16.p, na, 1u);  // a and b rounded to BF16
  bench_data::fill(b16.p, nb, 2u);
  check(cudaGetLastError(), "bench setup kernels");

  BenchTimer timer;
  const auto best_of = [&timer, repeat](auto&& body) { return timer.best_seconds(repeat, "gemm benchmark", body); };
  LtGemm g;
  g.M = M, g.N = N, g.K = K, g.ld_k = K, g.d = c.p;
  float one = 1.0f;
  g.alpha = &one;
  g.a = a16.p, g.b = b16.p;
  {
    const LtPlan plan(g);
    r.bf16_s = best_of([&] { plan.run(); });
  }

  // Emulated NVFP4: amax + quantize both BF16 operands (RNE, TE rule); the quantize kernel also
  // writes the unscaled BF16 decode q * S that the GEMM reads; the global scales become a
  // device-side alpha.
  DeviceBuffer<std::uint8_t> ca(static_cast<std::size_t>(na / 2), "cudaMalloc"), cb(static_cast<std::size_t>(nb / 2), "cudaMalloc");
  DeviceBuffer<std::uint8_t> sa(static_cast<std::size_t>(na / 16), "cudaMalloc"), sb(static_cast<std::size_t>(nb / 16), "cudaMalloc");
  DeviceBuffer<std::uint16_t> qa(static_cast<std::size_t>(na), "cudaMalloc"), qb(static_cast<std::size_t>(nb), "cudaMalloc");
  DeviceBuffer<std::uint32_t> keys(2, "cudaMalloc (amax keys)");
  DeviceBuffer<float> ab(2, "cudaMalloc (alpha)");
  LtGemm q = g;
  q.a = qa.p, q.b = qb.p;
  q.alpha = ab.p;
  q.alpha_on_device = true;
  const RoundingSpec rne{};
  const LtPlan qplan(q);
  auto nvfp4_pipeline = [&] {
    nvfp4_amax_device(a16.p, na, keys.p);
    nvfp4_amax_device(b16.p, nb, keys.p + 1);
    nvfp4_quantize_1x16_device_from_amax(a16.p, M, K, keys.p, rne, false, ca.p, sa.p, nullptr, qa.p);
    nvfp4_quantize_1x16_device_from_amax(b16.p, N, K, keys.p + 1, rne, false, cb.p, sb.p, nullptr, qb.p);
    nvfp4_alpha_kernel<<<1, 1>>>(keys.p, keys.p + 1, ab.p);
    qplan.run();
  };
  r.nvfp4_s = best_of(nvfp4_pipeline);
  r.nvfp4_gemm_only_s = best_of([&] { qplan.run(); });

  // FP8 E4M3 per-tensor (unit scales): the FP8 tensor cores' rate for comparison.
  {
    DeviceBuffer<std::uint8_t> a8(static_cast<std::size_t>(na), "cudaMalloc"), b8(static_cast<std::size_t>(nb), "cudaMalloc");
    to_e4m3_kernel<<<blocks_for(na, T), T>>>(a.p, a8.p, na);
    to_e4m3_kernel<<<blocks_for(nb, T), T>>>(b.p, b8.p, nb);
    DeviceBuffer<float> sa(std::vector<float>{1.0f}, "cudaMemcpy (scale)"), sb(std::vector<float>{1.0f}, "cudaMemcpy");
    LtGemm f = g;
    f.ta = f.tb = CUDA_R_8F_E4M3;
    f.a = a8.p, f.b = b8.p, f.scale_a = sa.p, f.scale_b = sb.p;
    const LtPlan fplan(f);
    r.fp8_s = best_of([&] { fplan.run(); });
  }
  check(cudaDeviceSynchronize(), "gemm benchmark");
  return r;
}

}  // namespace fp4d::cuda
