// bench mlp-cuda (bench.hpp): steps of the GPU-resident trainer (mlp.hpp) per second. The
// model's initial state and its batch come from the simulation layer (sim/mlp.hpp), which the
// kernels themselves do not depend on.
#include <algorithm>
#include <chrono>
#include <cstdint>

#include "backend/cuda/bench.hpp"
#include "backend/cuda/bench_device.hpp"
#include "backend/cuda/mlp.hpp"
#include "sim/mlp.hpp"

namespace fp4d::cuda {

MlpCudaBench mlp_cuda_bench(const MlpSpec& spec, const RecipeGemmOptions& opt, std::int64_t warmup, std::int64_t steps,
                            bool graphs) {
  require_bench_device();
  MlpCudaTrainer t(spec, opt, init_state<float>(spec));
  t.set_cuda_graphs(graphs);
  t.upload_batch(make_batch(spec, 0));
  for (std::int64_t i = 0; i < warmup; ++i) t.step_on_uploaded_batch();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < steps; ++i) t.step_on_uploaded_batch();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MlpCudaBench r;
  r.recipe = opt.recipe;
  r.launch_mode = t.launch_mode();
  if (t.graph_shape().captured()) r.launch_mode += " (" + t.graph_shape().text() + ")";
  r.steps = steps;
  r.step_s = s / static_cast<double>(std::max<std::int64_t>(steps, 1));
  r.steps_per_s = r.step_s > 0 ? 1.0 / r.step_s : 0.0;
  return r;
}

}  // namespace fp4d::cuda
