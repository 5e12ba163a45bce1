// fp4drift bench gemm-cuda: the emulated NVFP4 GEMM on the GPU (amax + quantize of both float32
// operands, decode to BF16, cuBLASLt BF16 GEMM with the global scale as epilogue alpha) against
// the cuBLASLt BF16 GEMM of the same shape measured in the same run (the roofline of issue 4),
// and the FP8 E4M3 tensor-core GEMM for reference. Best of --repeat, CUDA events.
#include <cstdio>
#include <iostream>

#include "commands.hpp"
#include "json.hpp"
#if defined(FP4DRIFT_WITH_CUDA)
#include "backend/cuda/gemm_cuda.hpp"
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

}  // namespace fp4d::cli
