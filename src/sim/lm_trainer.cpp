#include "sim/lm_trainer.hpp"

#include "model/recipe_gemm.hpp"
#include "sim/lm.hpp"

namespace fp4d {

namespace {

class CpuLmTrainer final : public LmTrainer {
 public:
  CpuLmTrainer(const LmSpec& spec, const RecipeGemmOptions& opt, const LmPrecision& precision,
               const LmState<float>& state)
      : spec_(spec), gemm_(opt, static_cast<int>(lm_linears(spec).size())), precision_(precision), state_(state),
        path_(opt.product ? "host quantization (CPU), products by the backend's GEMM" : "CPU: quantize_cpu + emulated GEMMs") {}
  LmStepStats step(const std::int32_t* tokens, std::vector<OperandRecord>* records) override {
    LmStepStats st = lm_train_step<float>(spec_, state_, tokens, gemm_.fn(), precision_);
    if (records) *records = gemm_.records();
    return st;
  }
  LmState<float> state() const override { return state_; }
  void set_state(const LmState<float>& s) override { state_ = s; }
  std::string path() const override { return path_; }

 private:
  LmSpec spec_;
  RecipeGemm gemm_;
  LmPrecision precision_;
  LmState<float> state_;
  std::string path_;
};

}  // namespace

std::unique_ptr<LmTrainer> make_cpu_lm_trainer(const LmSpec& spec, const RecipeGemmOptions& opt,
                                               const LmPrecision& precision, const LmState<float>& state) {
  return std::make_unique<CpuLmTrainer>(spec, opt, precision, state);
}

}  // namespace fp4d
