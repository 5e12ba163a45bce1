// The GPU-resident run (mlp.hpp) behind model/trainer.hpp's interface. Operand
// statistics: at the trace's cadence the step's float32 operands come back to the host and
// RecipeGemm::record_only quantizes them there with quantize_cpu - the same bits the GPU
// produced (tests/gpu/test_gpu_mlp.cpp checks it), so the statistics are the CPU run's
// definitions without a statistics kernel per quantizer.
#include "backend/cuda/mlp.hpp"
#include "backend/cuda/mlp_trainer.hpp"
#include "model/recipe_gemm.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace fp4d::cuda {

namespace {

class CudaTrainer final : public LowPrecisionTrainer {
 public:
  CudaTrainer(const MlpSpec& spec, const RecipeGemmOptions& opt, const MlpState<float>& state, bool graphs)
      : spec_(spec), stats_(opt, static_cast<int>(spec.widths.size() - 1)), gpu_(spec, opt, state),
        device_(current_device()) {
    gpu_.set_cuda_graphs(graphs);
    for (std::size_t l = 0; l + 1 < spec.widths.size(); ++l)
      path_ += (l ? "; " : "") + std::string("layer ") + std::to_string(l) + ": " + gpu_.path(static_cast<int>(l));
  }
  bool needs_batch() const override { return true; }
  StepStats step(const Batch* batch, std::vector<OperandRecord>* records) override {
    use_device();  // the runner may call from a thread of its own (a new thread starts on device 0)
    if (!records) return gpu_.step(*batch);
    const std::int64_t s = gpu_.step_index();
    MlpCudaOperands ops;
    StepStats st = gpu_.step(*batch, &ops);
    const auto L = static_cast<int>(ops.h.size());
    for (int l = 0; l < L; ++l) {
      const auto li = static_cast<std::size_t>(l);
      stats_.record_only(GemmCall{GemmRole::Fprop, l, s}, ops.h[li], ops.w[li]);
      if (l > 0) stats_.record_only(GemmCall{GemmRole::Dgrad, l, s}, ops.dz[li], ops.w[li]);
      stats_.record_only(GemmCall{GemmRole::Wgrad, l, s}, ops.h[li], ops.dz[li]);
    }
    *records = stats_.records();
    return st;
  }
  // Without records: the step launched (one graph) and waited for in end_step, so that the
  // runner's other runs launch theirs meanwhile. With records the step downloads operands
  // mid-step (synchronous): done whole in begin_step, as the interface's default does.
  void begin_step(const Batch* batch, std::vector<OperandRecord>* records) override {
    if (records) return LowPrecisionTrainer::begin_step(batch, records);
    use_device();
    gpu_.step_async(*batch);
    launched_ = true;
  }
  StepStats end_step() override {
    if (!launched_) return LowPrecisionTrainer::end_step();
    launched_ = false;
    use_device();
    return gpu_.finish();
  }
  MlpState<float> state() const override {
    use_device();
    return gpu_.state();
  }
  void set_state(const MlpState<float>& s) override {
    use_device();
    gpu_.set_state(s);
  }
  std::string path() const override { return "GPU-resident step, " + gpu_.launch_mode() + "; " + path_; }
  // Its own stream, cuBLASLt workspace, pinned buffers and statistics: it can step beside the
  // other runs, and prefers to, as a small model's step is dominated by per-step host work
  // that then overlaps (docs/performance.md); gpu.mlp checks that the traces are the same.
  bool can_step_concurrently() const override { return true; }
  bool prefers_concurrent_steps() const override { return true; }

 private:
  MlpSpec spec_;
  RecipeGemm stats_;
  MlpCudaTrainer gpu_;
  int device_;
  std::string path_;
  bool launched_ = false;  // begin_step launched the step: end_step waits for it

  static int current_device() {
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess) throw std::runtime_error("CUDA error in cudaGetDevice (resident mlp run)");
    return d;
  }
  void use_device() const {
    if (cudaSetDevice(device_) != cudaSuccess)
      throw std::runtime_error("CUDA error in cudaSetDevice(" + std::to_string(device_) + ") (resident mlp run)");
  }
};

}  // namespace

std::unique_ptr<LowPrecisionTrainer> make_cuda_trainer(const MlpSpec& spec, const RecipeGemmOptions& opt,
                                                       const MlpState<float>& state, bool cuda_graphs) {
  return std::make_unique<CudaTrainer>(spec, opt, state, cuda_graphs);
}

}  // namespace fp4d::cuda
