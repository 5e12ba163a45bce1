// The CPU low-precision run of the `mlp` workload behind model/trainer.hpp's interface: the
// oracle the device runs are tested against.
#pragma once

#include <memory>

#include "model/trainer.hpp"

namespace fp4d {

// The CPU run: train_step<float> with a RecipeGemm (opt.product: the GEMM, empty = emulation).
std::unique_ptr<LowPrecisionTrainer> make_cpu_trainer(const MlpSpec& spec, const RecipeGemmOptions& opt,
                                                      const MlpState<float>& state);

}  // namespace fp4d
