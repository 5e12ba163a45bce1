// bench lm-cuda (bench.hpp): steps of the GPU-resident lm trainer (lm.hpp) per second. The
// model's initial state comes from the simulation layer (sim/lm.hpp), which the kernels
// themselves do not depend on; the tokens are uniform random ids (the step's cost does not
// depend on them).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/bench.hpp"
#include "backend/cuda/bench_device.hpp"
#include "backend/cuda/lm.hpp"
#include "sim/lm.hpp"

namespace fp4d::cuda {

LmCudaBench lm_cuda_bench(const LmSpec& spec, const RecipeGemmOptions& opt, std::int64_t warmup, std::int64_t steps) {
  require_bench_device();
  // The low-precision run's policy (lm_default_precision of a recipe's GemmFn): BF16 mixer operands.
  LmCudaTrainer t(spec, opt, LmPrecision{true}, init_lm_state<float>(spec));
  std::mt19937 rng(7);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(spec.batch * (spec.seq_len + 1)));
  for (auto& x : tokens) x = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(spec.vocab));
  t.upload_tokens(tokens.data());
  for (std::int64_t i = 0; i < warmup; ++i) t.step_on_uploaded_tokens();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < steps; ++i) t.step_on_uploaded_tokens();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  LmCudaBench r;
  r.recipe = opt.recipe;
  r.launch_mode = t.launch_mode();
  if (t.graph_shape().captured()) r.launch_mode += " (" + t.graph_shape().text() + ")";
  r.steps = steps;
  r.step_s = s / static_cast<double>(std::max<std::int64_t>(steps, 1));
  for (const LmParam& p : lm_params(spec)) r.parameters += p.rows * p.cols;
  const double M = static_cast<double>(spec.batch * spec.seq_len);
  for (const LmLinear& l : lm_linears(spec)) r.linear_flops += 3 * 2 * M * static_cast<double>(l.rows * l.cols);
  const double S = static_cast<double>(spec.seq_len), hd = static_cast<double>(lm_head_dim(spec));
  const auto attention_blocks = static_cast<double>(std::count(spec.pattern.begin(), spec.pattern.end(), 'A'));
  r.attention_flops = attention_blocks * 6 * 2 * static_cast<double>(spec.batch * spec.heads) * (S * S / 2) * hd;
  return r;
}

}  // namespace fp4d::cuda
