// One low-precision run of the `mlp` workload behind one interface (as Ginkgo's executors):
// a recipe's training state and its step, on the CPU (train_step<float> with RecipeGemm, the
// oracle) or resident on a device (backend/cuda/mlp.hpp). The runner (sim/mlp_run.hpp)
// drives any of them the same way: steps, operand statistics at the trace's cadence, the state
// at compare and checkpoint steps.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/mlp_spec.hpp"
#include "quant/training_recipe.hpp"

namespace fp4d {

// Statistics slot of an operand: layer * 6 + role * 2 + operand (0 = first, 1 = second).
struct OperandRecord {
  double nmse = 0, bias = 0, clipped_fraction = 0, underflow_fraction = 0;
  double zero_scale_fraction = 0, subnormal_scale_fraction = 0;  // of the blocks
};

class LowPrecisionTrainer {
 public:
  virtual ~LowPrecisionTrainer() = default;
  // Whether step() needs the batch (a CPU run makes its own with make_batch).
  virtual bool needs_batch() const = 0;
  // One step on make_batch(spec, state().step) (`batch`: that batch, or nullptr when
  // needs_batch() is false). records (optional): the quantization statistics of every GEMM
  // operand of the step, slot = layer * 6 + role * 2 + operand.
  virtual StepStats step(const Batch* batch, std::vector<OperandRecord>* records) = 0;
  // The step in two halves, so that one host thread overlaps device runs: the runner begins
  // every run's step, then ends each in turn. begin_step may return before the step is done (a
  // device run launches it on its stream); end_step waits and returns what step() would have.
  // The default does the whole step in begin_step. `batch` and `records` must outlive end_step.
  virtual void begin_step(const Batch* batch, std::vector<OperandRecord>* records) { begun_ = step(batch, records); }
  virtual StepStats end_step() {
    if (!begun_) throw std::logic_error("LowPrecisionTrainer: end_step without begin_step");
    StepStats s = std::move(*begun_);
    begun_.reset();
    return s;
  }
  virtual MlpState<float> state() const = 0;
  virtual void set_state(const MlpState<float>& s) = 0;
  virtual std::string path() const = 0;  // how the products run, for the trace
  // Whether the runner may step this run on its own host thread beside the other runs: it
  // shares no mutable state with them (a CPU run without a backend product; a device run on
  // its own stream with its own GEMM workspace). A run whose products go through a backend's
  // shared GEMM context may not.
  virtual bool can_step_concurrently() const { return false; }
  // Whether doing so is a gain worth taking unasked (sim/mlp_run: --concurrent-runs auto):
  // a device run's step is bound by launches and synchronisations that overlap with another
  // run's; a CPU run's OpenMP GEMMs already use every core.
  virtual bool prefers_concurrent_steps() const { return false; }

 private:
  std::optional<StepStats> begun_;
};

// A factory per backend; the runner makes one trainer per recipe.
using TrainerFactory =
    std::function<std::unique_ptr<LowPrecisionTrainer>(const MlpSpec&, const RecipeGemmOptions&, const MlpState<float>&)>;

}  // namespace fp4d
