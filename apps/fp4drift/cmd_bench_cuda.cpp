// CUDA benchmarks beside quantize-cuda (cmd_bench.cpp).
// fp4drift bench gemm-cuda: the emulated NVFP4 GEMM on the GPU (amax + quantize of both
// BF16 operands, writing the BF16 decode q*S, cuBLASLt BF16 GEMM with the global scale as alpha) against
// the cuBLASLt BF16 GEMM of the same shape measured in the same run (the roofline of issue 4),
// and the FP8 E4M3 tensor-core GEMM for reference. Best of --repeat, CUDA events.
#include <cstdio>
#include <iostream>

#include "commands.hpp"
#include "json.hpp"
#if defined(FP4DRIFT_WITH_CUDA)
#include "backend/cuda/gemm_cuda.hpp"
#include "backend/cuda/nvfp4_dual.hpp"
#include "backend/cuda/shared_numerics_check.hpp"
#endif

namespace fp4d::cli {

int run_bench_gemm_cuda(std::int64_t size, int repeat, bool json) {
#if defined(FP4DRIFT_WITH_CUDA)
  std::string why;
  if (!cuda::device_available(&why)) throw std::runtime_error("no usable CUDA device: " + why);
  const cuda::GemmCudaBench r = cuda::gemm_cuda_bench(size, size, size, repeat);
  const double tf = r.flops() / 1e12;
  if (json) {
    Json j(std::cout);
    j.begin_object().field("benchmark", "gemm-cuda").field("m", r.M).field("n", r.N).field("k", r.K)
        .field("seconds_bf16", r.bf16_s).field("seconds_nvfp4_with_quantize", r.nvfp4_s)
        .field("seconds_nvfp4_gemm_only", r.nvfp4_gemm_only_s).field("seconds_fp8", r.fp8_s)
        .field("tflops_bf16", tf / r.bf16_s).field("tflops_nvfp4_with_quantize", tf / r.nvfp4_s)
        .field("fraction_of_bf16", r.bf16_s / r.nvfp4_s).end_object();
    return 0;
  }
  std::printf("fp4drift bench gemm-cuda: M = N = K = %lld, best of %d\n", static_cast<long long>(size), repeat);
  std::printf("  cuBLASLt BF16 GEMM (FP32 out)          : %8.3f ms  %7.1f TFLOP/s\n", r.bf16_s * 1e3, tf / r.bf16_s);
  std::printf("  emulated NVFP4, quantize of A and B incl: %8.3f ms  %7.1f TFLOP/s  %5.1f%% of BF16\n", r.nvfp4_s * 1e3,
              tf / r.nvfp4_s, 100 * r.bf16_s / r.nvfp4_s);
  std::printf("  emulated NVFP4, GEMM alone              : %8.3f ms  %7.1f TFLOP/s\n", r.nvfp4_gemm_only_s * 1e3,
              tf / r.nvfp4_gemm_only_s);
  std::printf("  cuBLASLt FP8 E4M3 GEMM (per-tensor)     : %8.3f ms  %7.1f TFLOP/s\n", r.fp8_s * 1e3, tf / r.fp8_s);
  return 0;
#else
  (void)size, (void)repeat, (void)json;
  throw UsageError("this fp4drift was built without CUDA (FP4DRIFT_CUDA=OFF or nvcc not found at configure time)");
#endif
}

// fp4drift bench quantize-dual-cuda: rowwise + columnwise NVFP4 of a rows x cols BF16 tensor in
// one pass (both amaxes included), with and without RHT-16 on the columnwise side and SR, against
// the device-to-device copy bandwidth measured by bench quantize-cuda (not repeated here).
int run_bench_dual_cuda(std::int64_t rows, std::int64_t cols, int repeat, bool json) {
#if defined(FP4DRIFT_WITH_CUDA)
  std::string why;
  if (!cuda::device_available(&why)) throw std::runtime_error("no usable CUDA device: " + why);
  struct Case {
    const char* name;
    bool rht, sr;
  };
  const Case cases[] = {{"rne", false, false}, {"rht+sr", true, true}};
  if (json) {
    Json j(std::cout);
    j.begin_object().field("benchmark", "quantize-dual-cuda").field("rows", rows).field("cols", cols).key("cases").begin_array();
    for (const Case& c : cases) {
      const cuda::DualBench r = cuda::nvfp4_quantize_dual_bench(rows, cols, true, c.rht, c.sr, repeat);
      j.begin_object().field("name", c.name).field("seconds", r.seconds).field("amax_seconds", r.amax_seconds)
          .field("counted_bytes", r.counted_bytes).field("gbps_counted", r.counted_bytes / r.seconds * 1e-9).end_object();
    }
    j.end_array().end_object();
    return 0;
  }
  std::printf("fp4drift bench quantize-dual-cuda: rowwise + columnwise NVFP4 of %lld x %lld BF16, best of %d\n",
              static_cast<long long>(rows), static_cast<long long>(cols), repeat);
  std::printf("  bytes counted: input once + both codes and scales\n");
  for (const Case& c : cases) {
    const cuda::DualBench r = cuda::nvfp4_quantize_dual_bench(rows, cols, true, c.rht, c.sr, repeat);
    std::printf("  dual %-7s: %8.3f ms (amax pass %.3f ms)  %8.1f GB/s counted\n", c.name, r.seconds * 1e3,
                r.amax_seconds * 1e3, r.counted_bytes / r.seconds * 1e-9);
  }
  return 0;
#else
  (void)rows, (void)cols, (void)repeat, (void)json;
  throw UsageError("this fp4drift was built without CUDA (FP4DRIFT_CUDA=OFF or nvcc not found at configure time)");
#endif
}

}  // namespace fp4d::cli
