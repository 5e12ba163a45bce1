// The sweep's index file OUTDIR/sweep.h5 (schema fp4drift.sweep, docs/trace-format.md): the
// provenance and the sweep on the root, an external link to every run's trace, the summary
// tables of final metrics. The only code that knows that layout; what goes into it comes from
// sweep/index.cpp, in the plain rows below (nothing of the sweep's own types). Written whole
// (OUT.partial + rename), so a reader never sees half an index.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp4d {

struct SweepIndexRun {  // a row of /summary
  std::string id, label;
  std::string overrides;            // "key = value" lines
  std::vector<std::string> params;  // per axis, the run's value as TOML text ("" = the base's)
  std::string workload, status, error;
  std::int64_t exit_code = -1, attempts = 0, rank = 0;
  std::string cuda_visible_devices;  // the GPU the sweep gave the last attempt; "" none
  double wall_s = 0;  // NaN: unknown
  double reference_final_loss = 0, final_rms_error = 0, final_mean_error = 0, final_exact = 0;
  std::string trace_link;  // the trace relative to the index's directory; "" while it does not exist
};

struct SweepIndexRecipe {  // a row of /summary_recipes
  std::int64_t run = 0;
  std::string id, recipe;
  double final_loss = 0, final_rel_loss_gap = 0, final_weight_rel_error = 0, growth_exponent = 0;
  std::int64_t first_nonfinite_step = -1;
  double tail_loss = 0, tail_rel_loss_gap = 0;  // lm; NaN otherwise
  // The run's summary headline (its trace's attributes); NaN / -1 for a trace without them.
  double rel_loss_gap_window_mean = 0;
  std::int64_t gap_window_first_step = -1, gap_window_last_step = -1;
  double quantized_weight_rel_error = 0;
  double quantized_growth_exponent = 0, quantized_growth_ci_low = 0, quantized_growth_ci_high = 0;
  std::int64_t quantized_growth_first_step = -1, quantized_growth_last_step = -1;
};

struct SweepIndex {
  std::string command_line;
  std::string status;  // running | complete | interrupted
  std::string backend, mode;
  std::int64_t ranks = 1, workers = 1;
  std::string sweep_text, sweep_source, base_text, base_source;
  std::vector<std::string> axes;
  std::int64_t runs_complete = 0, runs_failed = 0, runs_interrupted = 0, runs_pending = 0;
  std::vector<SweepIndexRun> runs;  // expansion order
  std::vector<SweepIndexRecipe> recipes;
};

// Writes `path` whole: path.partial, renamed over path when complete.
void write_sweep_index(const std::string& path, const SweepIndex& index);

}  // namespace fp4d
