// The CUDA backend of a build without CUDA: every entry throws BackendUnavailable, so the
// commands need no #if and say the same thing whichever entry is reached first.
#include "backend/backend.hpp"

namespace fp4d {

namespace {

class NoCudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }
  bool is_device() const override { return true; }
  void require_available() const override { throw BackendUnavailable(kBuiltWithoutCuda); }
  QuantizedTensor quantize(const Matrix&, const QuantSpec&) const override { throw_built_without_cuda("quantize"); }
  QuantizedProduct gemm_product(const GemmProductOptions&) const override { throw_built_without_cuda("gemm"); }
  std::string gemm_path(const QuantizedTensor&, const QuantizedTensor&, const GemmProductOptions&) const override {
    throw_built_without_cuda("gemm");
  }
  TrainerFactory trainer_factory(const TrainerOptions&) const override { throw_built_without_cuda("run"); }
  LmTrainerFactory lm_trainer_factory(const TrainerOptions&) const override { throw_built_without_cuda("run"); }
  std::vector<AccumulatorProbe> probe_accumulators(const std::vector<std::int64_t>&) const override {
    throw_built_without_cuda("accumulator");
  }
  std::string device_architecture() const override { throw_built_without_cuda("device"); }
  DeviceIdentity device_identity() const override { throw_built_without_cuda("device"); }
  std::vector<std::string> devices() const override { throw_built_without_cuda("sweep"); }
};

}  // namespace

const Backend& cuda_backend() {
  static const NoCudaBackend b;
  return b;
}

}  // namespace fp4d
