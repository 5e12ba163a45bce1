// The --backend option shared by the subcommands.
#include "commands.hpp"
#if defined(FP4DRIFT_WITH_CUDA)
#include "backend/cuda/shared_numerics_check.hpp"
#endif

namespace fp4d::cli {

void require_backend(const std::string& backend) {
  if (backend != "cpu" && backend != "cuda") throw UsageError("--backend must be cpu or cuda, got '" + backend + "'");
  if (backend != "cuda") return;
#if defined(FP4DRIFT_WITH_CUDA)
  std::string why;
  if (!cuda::device_available(&why)) throw UsageError("--backend cuda: no usable CUDA device (" + why + ")");
#else
  throw UsageError("--backend cuda: this fp4drift was built without CUDA (FP4DRIFT_CUDA=OFF or no nvcc)");
#endif
}

}  // namespace fp4d::cli
