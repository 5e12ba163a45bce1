// What a sweep knows about each run on disk (OUTDIR/runs/<id>/): the materialised config, the
// run's trace, its log, and result.toml - the sweep's record of the attempts (status, exit
// code, wall time, error). Restart semantics (docs/sweeps.md):
//   trace complete                 -> skipped (its record kept; recreated if missing)
//   trace with a checkpoint        -> resumed (`fp4drift run --resume`: mlp runs continue
//   (interrupted, killed, failed)     bit-exactly from their last checkpoint, the trace
//                                     verified against it and rebuilt from its journal where a
//                                     crash tore it); if the resume is refused, the run starts
//                                     again from scratch at once
//   no checkpoint, absent, .partial-> run from the start (sum/dot runs, runs killed while
//                                     being created; a failure is recorded, and rerun on the
//                                     next sweep)
#pragma once

#include <cmath>
#include <string>
#include <vector>

namespace fp4d::sweep {

struct RunRecord {
  std::string status = "pending";  // pending | running | complete | interrupted | failed
  int exit_code = -1;              // of the last attempt; -1: none, or killed by a signal
  double wall_s = 0;               // summed over the attempts
  int attempts = 0;
  std::string error;               // failed runs: the reason (the run's last error line)
  int rank = 0;                    // the MPI rank that ran the last attempt (0 in local mode)
  // The CUDA_VISIBLE_DEVICES the sweep gave the last attempt (its GPU); "" where it left the
  // variable alone (--backend cpu, or no device list).
  std::string cuda_visible_devices;
};

// Paths of a run under the sweep's output directory.
struct RunPaths {
  std::string dir, config, trace, log, record;
  RunPaths(const std::string& outdir, const std::string& id);
};

// The trace's root attribute `status` ("" when there is no trace under its final name;
// "unreadable" when it cannot be opened, "in use" when another process holds it open).
std::string trace_status(const std::string& trace);

enum class Action { Skip, Resume, Fresh };
Action plan_run(const RunPaths& p);

RunRecord read_record(const std::string& path);  // a pending record if absent or unreadable
void write_record(const std::string& path, const RunRecord& r);  // atomic (temp + rename)
// Writes path.tmp, fsyncs it and renames it to path: a crash leaves the old file or the new
// one, never a truncated one. A full disk throws h5::DiskFull.
void write_file_atomically(const std::string& path, const std::string& text);
std::string record_text(const RunRecord& r);
RunRecord parse_record(const std::string& text, const std::string& source);

// The final metrics of a complete trace (NaN where the workload has none).
struct RecipeMetrics {
  std::string recipe;
  double final_loss = NAN, final_rel_loss_gap = NAN, final_weight_rel_error = NAN, growth_exponent = NAN;
  long long first_nonfinite_step = -1;
  double tail_loss = NAN, tail_rel_loss_gap = NAN;  // lm: means of the last tenth of the records
  // The run summary's headline (docs/numerics.md 8g), copied from the recipe group's attributes
  // so that the index and the run's own summary cannot disagree. NaN / -1 when the trace
  // predates those attributes; the older fields above then remain the only values.
  double rel_loss_gap_window_mean = NAN;
  long long gap_window_first_step = -1, gap_window_last_step = -1;
  double quantized_weight_rel_error = NAN;
  double quantized_growth_exponent = NAN, quantized_growth_ci_low = NAN, quantized_growth_ci_high = NAN;
  long long quantized_growth_first_step = -1, quantized_growth_last_step = -1;
};
struct RunMetrics {
  double reference_final_loss = NAN;           // mlp, lm
  double final_rms_error = NAN, final_mean_error = NAN, final_exact = NAN;  // sum / dot, at the last n
  std::vector<RecipeMetrics> recipes;          // mlp, lm
};
RunMetrics read_metrics(const std::string& trace);  // h5::Error if unreadable

}  // namespace fp4d::sweep
