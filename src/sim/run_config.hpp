// The config sections the long-running workloads (mlp, lm) read alike: the recipes' names, the
// reference's cadence and the trace's. One reader, so that the same key means and is checked
// the same in every workload. Each takes the current values as defaults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/gemm_emulated.hpp"
#include "util/config.hpp"

namespace fp4d {

// [recipes] names (at least one, none twice) and edge_recipe (a GEMM recipe: fp32 is not one).
void parse_recipe_names(Config& cfg, std::vector<std::string>& names, std::string& edge_recipe);
// [reference] enabled, compare_every (>= 1), probe_draws (1 .. 1024).
void parse_reference_cadence(Config& cfg, bool& enabled, std::int64_t& compare_every, std::int64_t& probe_draws);
// [recipes] accumulator: how the CPU emulation accumulates the recipes' GEMMs (fp32-sequential,
// sm90, exact; quant/gemm_emulated.hpp). sm90 with an FP8 recipe that scales in blocks (fp8)
// among names or edge_recipe is refused here, before any trace exists: sm90 models FP8 with
// per-tensor scaling only (fp8-tensor).
void parse_accumulator(Config& cfg, const std::vector<std::string>& names, const std::string& edge_recipe,
                       Accumulator& accumulator);
// [trace] every (>= 1), flush_every (>= 1).
void parse_trace_cadence(Config& cfg, std::int64_t& every, std::int64_t& flush_every);

}  // namespace fp4d
