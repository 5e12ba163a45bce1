// The GPU-resident lm run as a model/lm_trainer.hpp LmTrainer. Plain C++ header.
#pragma once

#include <memory>

#include "model/lm_trainer.hpp"

namespace fp4d::cuda {

// Throws std::invalid_argument where lm_cuda_unsupported() names a reason. cuda_graphs:
// LmCudaTrainer::set_cuda_graphs (the results are the same either way).
std::unique_ptr<LmTrainer> make_cuda_lm_trainer(const LmSpec& spec, const RecipeGemmOptions& opt,
                                                const LmPrecision& precision, const LmState<float>& state,
                                                bool cuda_graphs = true);

}  // namespace fp4d::cuda
