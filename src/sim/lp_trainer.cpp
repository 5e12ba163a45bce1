#include "sim/lp_trainer.hpp"

#include "model/recipe_gemm.hpp"
#include "sim/mlp.hpp"

namespace fp4d {

namespace {

class CpuTrainer final : public LowPrecisionTrainer {
 public:
  CpuTrainer(const MlpSpec& spec, const RecipeGemmOptions& opt, const MlpState<float>& state)
      : spec_(spec), gemm_(opt, static_cast<int>(spec.widths.size() - 1)), state_(state),
        path_(opt.product ? "host quantization (CPU), products by the backend's GEMM" : "CPU: quantize_cpu + emulated GEMMs") {}
  bool needs_batch() const override { return false; }
  StepStats step(const Batch*, std::vector<OperandRecord>* records) override {
    StepStats st = train_step<float>(spec_, state_, gemm_.fn());
    if (records) *records = gemm_.records();
    return st;
  }
  MlpState<float> state() const override { return state_; }
  void set_state(const MlpState<float>& s) override { state_ = s; }
  std::string path() const override { return path_; }
  // Its own RecipeGemm, state and (thread-local) step buffers; a backend product (the CUDA
  // fallback) shares that backend's process-wide GEMM workspace.
  bool can_step_concurrently() const override { return !gemm_.options().product; }

 private:
  MlpSpec spec_;
  RecipeGemm gemm_;
  MlpState<float> state_;
  std::string path_;
};

}  // namespace

std::unique_ptr<LowPrecisionTrainer> make_cpu_trainer(const MlpSpec& spec, const RecipeGemmOptions& opt,
                                                      const MlpState<float>& state) {
  return std::make_unique<CpuTrainer>(spec, opt, state);
}

}  // namespace fp4d
