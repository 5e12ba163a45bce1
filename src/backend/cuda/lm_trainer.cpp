// The GPU-resident lm run (lm.hpp) behind model/lm_trainer.hpp's interface. Operand
// statistics: when the runner asks for them, the step's float32 operands come back to the host
// and RecipeGemm::record_only quantizes them there with quantize_cpu - the same bits the GPU
// produced (tests/gpu/test_gpu_lm.cpp checks it), so the statistics are the CPU run's
// definitions without a statistics kernel per quantizer.
#include "backend/cuda/lm_trainer.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "backend/cuda/lm.hpp"
#include "model/recipe_gemm.hpp"

namespace fp4d::cuda {

namespace {

class CudaLmTrainer final : public LmTrainer {
 public:
  CudaLmTrainer(const LmSpec& spec, const RecipeGemmOptions& opt, const LmPrecision& precision,
                const LmState<float>& state, bool graphs)
      : linears_(static_cast<int>(lm_linears(spec).size())), stats_(opt, linears_), gpu_(spec, opt, precision, state),
        device_(current_device()) {
    gpu_.set_cuda_graphs(graphs);
    for (int l = 0; l < linears_; ++l) path_ += (l ? "; " : "") + std::string("linear ") + std::to_string(l) + ": " + gpu_.path(l);
  }
  LmStepStats step(const std::int32_t* tokens, std::vector<OperandRecord>* records) override {
    use_device();  // the runner may call from a thread of its own (a new thread starts on device 0)
    if (!records) return gpu_.step(tokens);
    const std::int64_t s = gpu_.step_index();
    LmCudaOperands ops;
    LmStepStats st = gpu_.step(tokens, &ops);
    for (int l = 0; l < linears_; ++l) {
      const auto li = static_cast<std::size_t>(l);
      stats_.record_only(GemmCall{GemmRole::Fprop, l, s}, ops.x[li], ops.w[li]);
      stats_.record_only(GemmCall{GemmRole::Dgrad, l, s}, ops.dz[li], ops.w[li]);
      stats_.record_only(GemmCall{GemmRole::Wgrad, l, s}, ops.x[li], ops.dz[li]);
    }
    *records = stats_.records();
    return st;
  }
  LmState<float> state() const override {
    use_device();
    return gpu_.state();
  }
  void set_state(const LmState<float>& s) override {
    use_device();
    gpu_.set_state(s);
  }
  std::string path() const override { return "GPU-resident step, " + gpu_.launch_mode() + "; " + path_; }

 private:
  int linears_;
  RecipeGemm stats_;
  LmCudaTrainer gpu_;
  int device_;
  std::string path_;

  static int current_device() {
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess) throw std::runtime_error("CUDA error in cudaGetDevice (resident lm run)");
    return d;
  }
  void use_device() const {
    if (cudaSetDevice(device_) != cudaSuccess)
      throw std::runtime_error("CUDA error in cudaSetDevice(" + std::to_string(device_) + ") (resident lm run)");
  }
};

}  // namespace

std::unique_ptr<LmTrainer> make_cuda_lm_trainer(const LmSpec& spec, const RecipeGemmOptions& opt,
                                                const LmPrecision& precision, const LmState<float>& state,
                                                bool cuda_graphs) {
  return std::make_unique<CudaLmTrainer>(spec, opt, precision, state, cuda_graphs);
}

}  // namespace fp4d::cuda
