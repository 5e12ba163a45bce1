// fp4drift bench lm-ref: the CPU training steps of an lm config (default lm-quick.toml): the
// reference's step (sim/lm.hpp, plain fixed-order GEMMs) in the config's [reference] precision
// or --precision's, and each recipe's float step (quantize_cpu + emulated GEMMs), best of
// --repeat, on this machine's cores - what sets the pace of a CPU run and of the reference
// beside a GPU run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <omp.h>

#include "commands.hpp"
#include "model/recipe_gemm.hpp"
#include "sim/lm.hpp"
#include "sim/lm_run.hpp"
#include "sim/mlp_precision.hpp"
#include "util/config.hpp"

namespace fp4d::cli {

namespace {
template <class F>
double best_ms(int repeat, F&& f) {
  f();  // warm-up (first-touch of the buffers, OpenMP's threads)
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}
}  // namespace

int run_bench_lm_ref(const std::string& config, const std::string& precision, int repeat, bool json) {
  MlpPrecision ref_precision = MlpPrecision::Double;
  if (!precision.empty()) {
    try {
      ref_precision = parse_mlp_precision(precision);
    } catch (const std::invalid_argument& e) {
      throw UsageError("--precision: " + std::string(e.what()));
    }
  }
  Config cfg = Config::load(config);
  if (cfg.get_string("workload") != "lm") throw UsageError("bench lm-ref: " + config + " is not an lm config");
  const LmRunSpec spec = parse_lm_run(cfg);
  cfg.finish();
  if (precision.empty()) ref_precision = spec.reference_precision;
  const LmSpec& m = spec.model;
  const TokenBatch batch = spec.tokens ? make_file_batch(*spec.tokens, 0, m.batch, m.seq_len, spec.data_seed)
                                       : make_token_batch(spec.synthetic, 0, m.batch, m.seq_len);
  std::int64_t params = 0;
  for (const LmParam& p : lm_params(m)) params += p.rows * p.cols;
  const double ref_ms = dispatch_mlp_precision(ref_precision, [&](auto tag) {
    using Ref = decltype(tag);
    LmState<Ref> ref = init_lm_state<Ref>(m);
    return best_ms(repeat, [&] { lm_train_step<Ref>(m, ref, batch.ids.data(), nullptr); });
  });
  const std::string ref_name = to_string(ref_precision);
  std::vector<std::pair<std::string, double>> runs;
  const int linears = static_cast<int>(lm_linears(m).size());
  for (const std::string& recipe : spec.recipes) {
    RecipeGemm gemm(RecipeGemmOptions{recipe, spec.edge_recipe, lm_run_high_precision_linears(spec), m.seed, {}}, linears);
    LmState<float> st = init_lm_state<float>(m);
    runs.emplace_back(recipe, best_ms(repeat, [&] {
                        lm_train_step<float>(m, st, batch.ids.data(), gemm.fn(), LmPrecision{recipe != "fp32"});
                      }));
  }
  if (json) {
    nlohmann::ordered_json j = {{"benchmark", "lm-ref"},   {"config", config},           {"parameters", params},
                                {"tokens", m.batch * m.seq_len}, {"threads", omp_get_max_threads()},
                                {"reference_precision", ref_name}, {"reference_ms", ref_ms},
                                {"runs", nlohmann::ordered_json::array()}};
    for (const auto& [r, ms] : runs) j["runs"].push_back({{"recipe", r}, {"ms", ms}});
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("fp4drift bench lm-ref: %s, %lld parameters, %lld tokens a step, best of %d (%d threads)\n", config.c_str(),
              static_cast<long long>(params), static_cast<long long>(m.batch * m.seq_len), repeat, omp_get_max_threads());
  std::printf("  %-24s %10.2f ms/step\n", ("reference (" + ref_name + ")").c_str(), ref_ms);
  for (const auto& [r, ms] : runs) std::printf("  %-24s %10.2f ms/step\n", (r + " (float, CPU)").c_str(), ms);
  return 0;
}

}  // namespace fp4d::cli
