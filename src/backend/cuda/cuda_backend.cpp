// The CUDA backend behind backend/backend.hpp: the kernels of this folder and cuBLASLt.
#include "backend/backend.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/lm.hpp"
#include "backend/cuda/lm_trainer.hpp"
#include "backend/cuda/mlp.hpp"
#include "backend/cuda/mlp_trainer.hpp"
#include "backend/cuda/quantize.hpp"
#include "sim/lm_trainer.hpp"
#include "sim/lp_trainer.hpp"

namespace fp4d {

namespace {

cuda::GpuGemmOptions gpu_options(const GemmProductOptions& opt) {
  cuda::GpuGemmOptions g;
  g.fp8_fast_accumulation = opt.fp8_fast_accumulation;
  g.free_algorithm = opt.free_algorithm;
  return g;
}

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }
  bool is_device() const override { return true; }
  void require_available() const override {
    std::string why;
    if (!cuda::device_available(&why)) throw BackendUnavailable("no usable CUDA device (" + why + ")");
  }
  QuantizedTensor quantize(const Matrix& x, const QuantSpec& spec) const override { return cuda::quantize_cuda(x, spec); }
  QuantizedProduct gemm_product(const GemmProductOptions& opt) const override {
    const cuda::GpuGemmOptions g = gpu_options(opt);
    return [g](const QuantizedTensor& a, const QuantizedTensor& b) { return cuda::gemm_quantized_cuda(a, b, g); };
  }
  std::string gemm_path(const QuantizedTensor& a, const QuantizedTensor& b, const GemmProductOptions& opt) const override {
    return cuda::gemm_quantized_cuda_path(a, b, gpu_options(opt));
  }
  // Resident on the GPU where the recipe and shapes allow; otherwise the host quantizes and the
  // GPU multiplies (the trace's gemm_path attribute says which).
  TrainerFactory trainer_factory(const TrainerOptions& opt) const override {
    return [opt](const MlpSpec& m, const RecipeGemmOptions& o, const MlpState<float>& st) {
      const std::string why = cuda::mlp_cuda_unsupported(m, o);
      if (why.empty()) return cuda::make_cuda_trainer(m, o, st, opt.cuda_graphs);
      if (opt.on_host_fallback) opt.on_host_fallback(o.recipe, why);
      return make_cpu_trainer(m, o, st);
    };
  }
  // Resident on the GPU where the recipe and shapes allow; otherwise the host quantizes
  // (quantize_cpu, the CPU run's bits) and the GPU multiplies.
  LmTrainerFactory lm_trainer_factory(const TrainerOptions& opt) const override {
    const QuantizedProduct product = gemm_product({});
    return [opt, product](const LmSpec& s, const RecipeGemmOptions& o, const LmPrecision& p,
                          const LmState<float>& st) -> std::unique_ptr<LmTrainer> {
      const std::string why = cuda::lm_cuda_unsupported(s, o);
      if (why.empty()) return cuda::make_cuda_lm_trainer(s, o, p, st, opt.cuda_graphs);
      if (opt.on_host_fallback) opt.on_host_fallback(o.recipe, why);
      RecipeGemmOptions with = o;
      with.product = product;
      return make_cpu_lm_trainer(s, with, p, st);
    };
  }
  std::vector<AccumulatorProbe> probe_accumulators(const std::vector<std::int64_t>& ks) const override {
    return cuda::probe_accumulators(ks);
  }
  std::string device_architecture() const override { return cuda::device_architecture(); }
  DeviceIdentity device_identity() const override { return cuda::device_identity(); }
  std::vector<std::string> devices() const override { return cuda::visible_devices(); }
};

}  // namespace

const Backend& cuda_backend() {
  static const CudaBackend b;
  return b;
}

}  // namespace fp4d
