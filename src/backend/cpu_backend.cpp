// The CPU backend: the reference every device backend is tested against. Its quantizers are
// quant/'s, its GEMM the emulation of quant/gemm_emulated.hpp, its training runs sim/'s.
#include "backend/backend.hpp"
#include "quant/quantize.hpp"
#include "sim/lm_trainer.hpp"
#include "sim/lp_trainer.hpp"

namespace fp4d {

namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  bool is_device() const override { return false; }
  void require_available() const override {}
  QuantizedTensor quantize(const Matrix& x, const QuantSpec& spec) const override { return quantize_cpu(x, spec); }
  QuantizedProduct gemm_product(const GemmProductOptions& opt) const override {
    if (opt.fp8_fast_accumulation)
      throw std::invalid_argument("FP8 fast accumulation is a tensor-core mode: it needs --backend cuda");
    return {};
  }
  std::string gemm_path(const QuantizedTensor&, const QuantizedTensor&, const GemmProductOptions&) const override {
    return "cpu-emulation";
  }
  TrainerFactory trainer_factory(const TrainerOptions&) const override { return make_cpu_trainer; }
  LmTrainerFactory lm_trainer_factory(const TrainerOptions&) const override { return make_cpu_lm_trainer; }
  std::vector<AccumulatorProbe> probe_accumulators(const std::vector<std::int64_t>&) const override {
    throw std::invalid_argument("the accumulator probes measure a device's GEMMs; the CPU's is the emulation");
  }
  std::string device_architecture() const override { return "cpu"; }
  DeviceIdentity device_identity() const override { return {}; }
  std::vector<std::string> devices() const override { return {}; }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend b;
  return b;
}

}  // namespace fp4d
