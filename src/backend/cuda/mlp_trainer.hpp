// The GPU-resident mlp run as a model/trainer.hpp LowPrecisionTrainer. Plain C++ header.
#pragma once

#include <memory>

#include "model/trainer.hpp"

namespace fp4d::cuda {

// Throws std::invalid_argument where mlp_cuda_unsupported() names a reason. cuda_graphs:
// MlpCudaTrainer::set_cuda_graphs (the trace is the same either way).
std::unique_ptr<LowPrecisionTrainer> make_cuda_trainer(const MlpSpec& spec, const RecipeGemmOptions& opt,
                                                       const MlpState<float>& state, bool cuda_graphs = true);

}  // namespace fp4d::cuda
