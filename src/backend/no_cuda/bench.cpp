// The CUDA benchmarks (backend/cuda/bench.hpp) of a build without CUDA: every entry throws
// BackendUnavailable (throw_built_without_cuda), so the bench commands need no #if.
#include "backend/backend.hpp"
#include "backend/cuda/bench.hpp"

namespace fp4d::cuda {

Nvfp4BenchResult nvfp4_quantize_cuda_bench(std::int64_t, std::int64_t, int, InputDtype) {
  throw_built_without_cuda("bench quantize-cuda");
}

DualBench nvfp4_quantize_dual_bench(std::int64_t, std::int64_t, bool, bool, bool, int, int) {
  throw_built_without_cuda("bench quantize-dual-cuda");
}

DualStreamBench dual_stream_bench(std::int64_t, std::int64_t, bool, int) {
  throw_built_without_cuda("bench quantize-dual-cuda");
}

GemmCudaBench gemm_cuda_bench(std::int64_t, std::int64_t, std::int64_t, int) {
  throw_built_without_cuda("bench gemm-cuda");
}

MlpCudaBench mlp_cuda_bench(const MlpSpec&, const RecipeGemmOptions&, std::int64_t, std::int64_t, bool) {
  throw_built_without_cuda("bench mlp-cuda");
}

LmCudaBench lm_cuda_bench(const LmSpec&, const RecipeGemmOptions&, std::int64_t, std::int64_t) {
  throw_built_without_cuda("bench lm-cuda");
}

MambaScanBench mamba_scan_bench(const LmSpec&, int) { throw_built_without_cuda("bench lm-cuda"); }

}  // namespace fp4d::cuda
