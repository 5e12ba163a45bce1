// One low-precision run of the `lm` workload behind one interface, as model/trainer.hpp is
// for the mlp: a recipe's training state and its step, on the CPU (sim/lm.hpp's
// lm_train_step<float> with a RecipeGemm: the oracle) or resident on a device. The runner
// (sim/lm_run.hpp) drives any of them the same way: a step on the batch's tokens, the operand
// statistics at the trace's cadence, the state at compare and checkpoint steps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/lm_spec.hpp"
#include "model/trainer.hpp"  // OperandRecord
#include "quant/training_recipe.hpp"

namespace fp4d {

// State of one run: parameters and AdamW moments (each a row-major rows x cols vector, in
// lm_params order), the step. Plain values: a copy is a checkpoint.
template <class T>
struct LmState {
  std::int64_t step = 0;
  std::vector<std::vector<T>> p;
  std::vector<std::vector<T>> m, v;
};

struct LmStepStats {
  double loss = 0;           // before the update
  double grad_norm = 0;      // global gradient norm before clipping (summed in the wider of T and double)
  double clip_factor = 1;    // min(1, max_grad_norm / grad_norm); 1 without clipping
  double lr = 0;             // the step's scheduled learning rate
  // Per parameter: the fraction of elements with a non-zero update whose value did not change.
  std::vector<double> lost_update_fraction;
};

class LmTrainer {
 public:
  virtual ~LmTrainer() = default;
  // One training step (forward, backward, clipping, AdamW at the state's step, step + 1) on
  // `tokens`: spec.batch rows of seq_len + 1 int32 ids, row-major. records (optional): the
  // quantization statistics of every GEMM operand of the step, slot = linear * 6 + role * 2 +
  // operand (linear: the GemmCall layer, lm_linears order).
  virtual LmStepStats step(const std::int32_t* tokens, std::vector<OperandRecord>* records) = 0;
  virtual LmState<float> state() const = 0;  // a device run downloads it
  virtual void set_state(const LmState<float>& s) = 0;
  virtual std::string path() const = 0;  // how the products run, for the trace
};

// A factory per backend; the runner makes one trainer per recipe (opt.high_precision_layers
// are linear layers, lm_high_precision_linears). precision: the run's attention policy.
using LmTrainerFactory = std::function<std::unique_ptr<LmTrainer>(const LmSpec&, const RecipeGemmOptions&,
                                                                  const LmPrecision&, const LmState<float>&)>;

}  // namespace fp4d
