// The CPU low-precision run of the `lm` workload behind model/lm_trainer.hpp's interface: the
// oracle device runs are tested against.
#pragma once

#include <memory>

#include "model/lm_trainer.hpp"

namespace fp4d {

// lm_train_step<float> with a RecipeGemm over the model's linear layers (opt.product: the
// GEMM of quantized operands, empty = the CPU emulation).
std::unique_ptr<LmTrainer> make_cpu_lm_trainer(const LmSpec& spec, const RecipeGemmOptions& opt,
                                               const LmPrecision& precision, const LmState<float>& state);

}  // namespace fp4d
