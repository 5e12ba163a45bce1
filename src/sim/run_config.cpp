#include "sim/run_config.hpp"

#include <stdexcept>

#include "quant/training_recipe.hpp"

namespace fp4d {

void parse_recipe_names(Config& cfg, std::vector<std::string>& names, std::string& edge_recipe) {
  names = cfg.get_strings("recipes.names", names);
  cfg.require(!names.empty(), "recipes.names", "needs at least one recipe");
  for (std::size_t i = 0; i < names.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      cfg.require(names[i] != names[j], "recipes.names", "lists '" + names[i] + "' twice");
  edge_recipe = cfg.get_string("recipes.edge_recipe", edge_recipe);
  try {
    (void)gemm_recipe(edge_recipe);  // as RecipeGemm reads it (else blamed on recipes.names later)
  } catch (const std::invalid_argument& e) {
    cfg.require(false, "recipes.edge_recipe", e.what());
  }
}

void parse_accumulator(Config& cfg, const std::vector<std::string>& names, const std::string& edge_recipe,
                       Accumulator& accumulator) {
  const std::string name = cfg.get_string("recipes.accumulator", to_string(accumulator));
  try {
    accumulator = parse_accumulator(name);
  } catch (const std::invalid_argument& e) {
    cfg.require(false, "recipes.accumulator", e.what());
  }
  if (accumulator != Accumulator::Sm90) return;
  std::vector<std::string> all = names;
  all.push_back(edge_recipe);
  for (const std::string& r : all) {
    std::string blocks;
    try {
      if (r != "fp32") blocks = fp8_block_layouts(gemm_recipe(r));
    } catch (const std::invalid_argument&) {
      // an unknown name is reported against recipes.names by the caller's own check
    }
    cfg.require(blocks.empty(), "recipes.accumulator",
                "\"sm90\" models FP8 GEMMs with per-tensor scaling only (recipe '" + r + "' scales FP8 operands in " +
                    blocks + " blocks, and cuBLASLt's per-block scale application on sm90 is not measured)");
  }
}

void parse_reference_cadence(Config& cfg, bool& enabled, std::int64_t& compare_every, std::int64_t& probe_draws) {
  enabled = cfg.get_bool("reference.enabled", enabled);
  compare_every = cfg.get_int("reference.compare_every", compare_every);
  cfg.require(compare_every >= 1, "reference.compare_every", "must be >= 1");
  probe_draws = cfg.get_int("reference.probe_draws", probe_draws);
  cfg.require(probe_draws >= 1 && probe_draws <= 1024, "reference.probe_draws", "must be in [1, 1024]");
}

void parse_trace_cadence(Config& cfg, std::int64_t& every, std::int64_t& flush_every) {
  every = cfg.get_int("trace.every", every);
  cfg.require(every >= 1, "trace.every", "must be >= 1");
  flush_every = cfg.get_int("trace.flush_every", flush_every);
  cfg.require(flush_every >= 1, "trace.flush_every", "must be >= 1");
}

}  // namespace fp4d
