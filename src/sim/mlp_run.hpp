// The `mlp` workload of `fp4drift run`: low-precision training runs (one per recipe)
// beside a double-precision reference that sees the same data from the same initialisation,
// with the trace written as it goes (docs/trace-format.md, "run", workload mlp).
//
//   workload = "mlp"
//   [mlp]        model, data and optimizer (sim/mlp.hpp's MlpSpec; keys named as its fields)
//   steps = 500
//   [recipes]    names = ["nvfp4", "bf16"]; high_precision_layers = [0, 3]; edge_recipe = "bf16"
//                accumulator = "fp32-sequential" (or "sm90", "exact": quant/gemm_emulated.hpp)
//   [reference]  enabled = true       (false: no reference run, no compares; losses only)
//                compare_every = 10   (weights compared every k steps; losses every record)
//                queue = 64           (records the low-precision runs may be ahead of the reference)
//                probe_draws = 4      (SR draws of the local-error probe, recipes with SR only)
//                precision = "double" (the reference's scalar: double | binary128 | mp256,
//                                      sim/mlp_precision.hpp)
//                check_precision = "none" (or a wider one: at every compare step the reference
//                                      redoes that step from its own state in this precision, and
//                                      the difference - its one-step error - goes to the trace)
//   [trace]      every = 1, flush_every = 100 (flush + checkpoint)
//
// Threads: the reference trains in its own thread; the low-precision runs go ahead and keep
// their records in a bounded queue until the reference has reached the same step, and wait
// only when that queue is full (so a slow reference stalls them by at most `queue` steps).
// Files: the trace is written under its final name with status "running" and flushed with a
// checkpoint every flush_every steps; a stop (SIGINT/SIGTERM) flushes and sets "interrupted",
// an error sets "failed", the end "complete". --resume reopens it, drops the records after
// the last checkpoint and continues from there bit-exactly (data and SR draws are functions
// of (seed, step), the checkpoint holds every weight and optimizer state). The trace's layout
// is trace/mlp_trace.hpp's, the checkpoint's trace/mlp_checkpoint.hpp's.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/lp_trainer.hpp"
#include "sim/mlp.hpp"
#include "sim/mlp_precision.hpp"
#include "sim/run_control.hpp"
#include "model/recipe_gemm.hpp"
#include "trace/device_identity.hpp"
#include "trace/run_metrics.hpp"
#include "util/config.hpp"

namespace fp4d {

struct MlpRunSpec {
  MlpSpec model;
  std::int64_t steps = 500;
  std::vector<std::string> recipes{"nvfp4", "bf16"};
  std::vector<int> high_precision_layers;
  std::string edge_recipe = "bf16";
  Accumulator accumulator = Accumulator::Fp32Sequential;  // the CPU emulation's ([recipes] accumulator)
  std::int64_t compare_every = 10, queue = 64;
  std::int64_t probe_draws = 4;  // SR draws of the local-error probe's quantized gradient
  MlpPrecision reference_precision = MlpPrecision::Double;
  std::optional<MlpPrecision> check_precision;  // wider than reference_precision
  // [reference] enabled = false: no reference trajectory (losses, operand statistics and lost
  // updates only; no weight compares, no probe): the fast mode for long device runs.
  bool reference_enabled = true;
  std::int64_t trace_every = 1, flush_every = 100;
};
// Reads [mlp], [recipes], [reference], [trace] (every key checked); steps > 0 overrides.
MlpRunSpec parse_mlp_run(Config& cfg, std::int64_t steps = 0);

struct MlpRunControl : RunControl {
  QuantizedProduct product;              // the backend's GEMM (empty: CPU emulation)
  // Makes the low-precision runs (empty: make_cpu_trainer with `product`). The local-error
  // probe always runs on the host (quantize_cpu, `product`).
  TrainerFactory trainer;
  // That backend's Backend::is_device(), filled by the caller from the Backend object: sim/ is
  // below the seam (backend/backend.hpp) and cannot look the name up.
  bool backend_is_device = false;
  // Step the runs on one host thread each (sim/parallel_runs.hpp)? Unset: when every trainer
  // can and prefers to; true: when every trainer can (LowPrecisionTrainer). The trace does not
  // depend on it (the root attribute concurrent_runs says which way this attempt went).
  std::optional<bool> concurrent_runs;
};

enum class MlpRunOutcome { Complete, Interrupted };

// What a complete run's trace says at its end (docs/trace-format.md's names), for the
// command's summary.
struct MlpRunSummary {
  double reference_final_loss = 0;                  // NaN without a reference
  std::int64_t reference_first_nonfinite_step = -1;  // -1: the reference did not diverge
  struct Run {
    std::string recipe;
    double final_loss = 0, final_rel_loss_gap = 0;  // the last record's (one noisy batch)
    double final_weight_rel_error = 0;  // the last layer's at the last compare; NaN without compares
    double growth_exponent = 0;         // weight_error_growth_exponent: last layer, every compare
    std::int64_t first_nonfinite_step = -1;
    // The headline (numerics.md, "Run summary metrics"): the relative loss gap's mean over the
    // trailing window; the weight error of the layers this recipe quantizes (those not kept in
    // edge_recipe), each and together, and of the edge layers apart; the growth exponent of
    // the quantized layers' error over the last window of the log-log curve and its local
    // exponents over earlier windows.
    run_metrics::GapWindow loss_gap;
    std::vector<int> quantized_layers, edge_layers;
    std::vector<double> quantized_layer_weight_rel_error, edge_layer_weight_rel_error;
    double quantized_weight_rel_error = 0;  // NaN without compares
    run_metrics::SlopeWindow quantized_growth;
    std::vector<run_metrics::SlopeWindow> quantized_local_exponents;
  };
  std::vector<Run> runs;  // in the recipes' order
};

// Throws on errors (after marking the trace "failed" when it exists). summary, when given, is
// filled when the run completes.
MlpRunOutcome run_mlp(const MlpRunSpec& spec, const MlpRunControl& ctl, MlpRunSummary* summary = nullptr);

}  // namespace fp4d
