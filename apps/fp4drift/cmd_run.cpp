// fp4drift run CONFIG: one experiment from a config file. Workloads: `sum` and
// `dot` (sim/sum_dot_run.hpp, trace/sum_dot_trace.hpp), `mlp` (sim/mlp_run.hpp), `lm`
// (sim/lm_run.hpp). The trace
// (schema fp4drift.run v1, docs/trace-format.md) carries the config text and the provenance;
// the summary printed at the end comes from the run itself, not from reading the trace back.
//  sum/dot: written as OUT.partial and renamed when complete (they take seconds); SIGINT or
//       SIGTERM stops the run, removes OUT.partial and exits 130.
//  mlp, lm: written under OUT as it goes, status running -> complete | interrupted | failed,
//       flushed with a checkpoint every trace.flush_every steps; Ctrl-C (SIGINT) or SIGTERM
//       stops at the next step, flushes and exits 130; --resume continues from the checkpoint.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "sim/lm_run.hpp"
#include "sim/mlp_run.hpp"
#include "sim/sum_dot_run.hpp"
#include "trace/sum_dot_trace.hpp"
#include "util/config.hpp"

namespace fp4d::cli {

namespace {

struct RunArgs {
  std::string config;
  std::string backend = "cpu";
  std::int64_t steps = 0;
  std::string out;
  bool resume = false, json = false, check = false;
  std::string concurrent_runs = "auto";
  std::string cuda_graphs = "on";
};

void print_sum_dot(const SumDotRun& run, const SumDotResult& r) {
  const bool sr = run.options.rounding.mode == Rounding::Stochastic;
  std::printf("fp4drift run: %s of %lld %s terms (c = %g), accumulator %s, rounding %s%s, %d run%s\n",
              run.dot ? "dot product" : "sum", static_cast<long long>(run.n), run.a.kind.c_str(), run.a.c,
              run.format_name.c_str(), run.rounding_name.c_str(),
              sr && run.options.rounding.sr_bits ? (" (" + std::to_string(run.options.rounding.sr_bits) + " bits)").c_str() : "",
              run.options.runs, run.options.runs == 1 ? "" : "s");
  std::printf("%12s %16s %16s %12s%s\n", "n", "exact", "computed[0]", "rel err[0]",
              sr ? "       mean err        rms err   sqrt(sum step^2/4)" : "");
  for (const SumDotPoint& p : r.points) {
    std::printf("%12lld %16.9g %16.9g %12.3e", static_cast<long long>(p.n), p.exact, p.computed.front(), p.rel_error);
    if (sr) std::printf(" %14.4e %14.4e %20.4e", p.mean_error, p.rms_error, std::sqrt(p.sr_half_step_sq));
    std::printf("\n");
  }
  std::int64_t stagnated = 0;
  for (const std::int64_t s : r.first_stagnation) stagnated += s >= 0;
  if (stagnated)
    std::printf("an update was lost to rounding (s_i == s_{i-1}) in %lld of %d runs; run 0 first at i = %lld\n",
                static_cast<long long>(stagnated), run.options.runs, static_cast<long long>(r.first_stagnation.front()));
}

void json_sum_dot(const SumDotRun& run, const SumDotResult& r) {
  nlohmann::ordered_json j = {{"workload", run.dot ? "dot" : "sum"}, {"format", run.format_name},
                              {"rounding", run.rounding_name}, {"runs", run.options.runs},
                              {"points", nlohmann::ordered_json::array()}};
  for (const SumDotPoint& p : r.points)
    j["points"].push_back({{"n", p.n}, {"exact", p.exact}, {"computed0", p.computed.front()},
                           {"rel_error0", p.rel_error}, {"mean_error", p.mean_error}, {"rms_error", p.rms_error}});
  // error_handler_t::replace: a string that is not UTF-8 (a path) prints as U+FFFD rather than
  // throwing after the work is done.
  std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
}

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop.store(true); }

// Progress: on a terminal one self-overwriting line (steps/s, ETA); otherwise a plain line
// at most every 10% or 30 s, so logs stay readable.
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO) != 0), t0_(std::chrono::steady_clock::now()), last_(t0_) {}
  void operator()(std::int64_t done, std::int64_t total) {
    const auto now = std::chrono::steady_clock::now();
    const double el = std::chrono::duration<double>(now - t0_).count();
    if (first_ < 0) first_ = done - 1;
    const double rate = el > 0 ? static_cast<double>(done - first_) / el : 0.0;
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
    const bool end = done == total;
    if (tty_) {
      if (!end && std::chrono::duration<double>(now - last_).count() < 0.2) return;
      std::fprintf(stderr, "\r  step %lld / %lld  %.1f steps/s  ETA %.0f s   %s", static_cast<long long>(done),
                   static_cast<long long>(total), rate, eta, end ? "\n" : "");
    } else {
      const bool tenth = total >= 10 && done % (total / 10) == 0;
      if (!end && !tenth && std::chrono::duration<double>(now - last_).count() < 30) return;
      std::fprintf(stderr, "progress: step %lld/%lld, %.1f steps/s, ETA %.0f s\n", static_cast<long long>(done),
                   static_cast<long long>(total), rate, eta);
    }
    last_ = now;
  }

 private:
  bool tty_;
  std::chrono::steady_clock::time_point t0_, last_;
  std::int64_t first_ = -1;
};

nlohmann::ordered_json json_window(const run_metrics::SlopeWindow& w) {
  return {{"first_step", w.first_step}, {"last_step", w.last_step}, {"points", w.points},
          {"exponent", w.slope}, {"ci_low", w.ci_low}, {"ci_high", w.ci_high}};
}

// The headline metrics' JSON keys, shared by mlp and lm (docs/numerics.md, "Run summary metrics").
void json_headline(nlohmann::ordered_json& j, const run_metrics::GapWindow& gap, double quantized_error,
                   const run_metrics::SlopeWindow& growth, const std::vector<run_metrics::SlopeWindow>& local) {
  j["rel_loss_gap"] = gap.mean;
  j["rel_loss_gap_window"] = {{"first_step", gap.first_step}, {"last_step", gap.last_step}, {"records", gap.records},
                              {"fraction", run_metrics::kGapWindowFraction},
                              {"min_records", run_metrics::kGapWindowMinRecords}};
  j["quantized_weight_rel_error"] = quantized_error;
  j["quantized_growth"] = json_window(growth);
  j["quantized_growth"]["confidence"] = run_metrics::kSlopeConfidence;
  j["quantized_local_exponents"] = nlohmann::ordered_json::array();
  for (const run_metrics::SlopeWindow& w : local) j["quantized_local_exponents"].push_back(json_window(w));
}

// A complete mlp run's summary as one line of JSON (--json). final_rel_loss_gap (the last
// record's), final_last_layer_weight_rel_error and weight_error_growth_exponent (last layer,
// every compare) stay for older readers; rel_loss_gap and the quantized_* keys are the headline.
void json_mlp(const MlpRunSpec& spec, const MlpRunSummary& s) {
  nlohmann::ordered_json j = {{"workload", "mlp"}, {"steps", spec.steps}, {"reference_final_loss", s.reference_final_loss},
                              {"runs", nlohmann::ordered_json::array()}};
  for (const MlpRunSummary::Run& r : s.runs) {
    nlohmann::ordered_json x = {{"recipe", r.recipe}, {"final_loss", r.final_loss}};
    json_headline(x, r.loss_gap, r.quantized_weight_rel_error, r.quantized_growth, r.quantized_local_exponents);
    x["quantized_layers"] = r.quantized_layers;
    x["quantized_layer_weight_rel_error"] = r.quantized_layer_weight_rel_error;
    x["edge_layers"] = r.edge_layers;
    x["edge_layer_weight_rel_error"] = r.edge_layer_weight_rel_error;
    x["final_rel_loss_gap"] = r.final_rel_loss_gap;
    x["final_last_layer_weight_rel_error"] = r.final_weight_rel_error;
    x["weight_error_growth_exponent"] = r.growth_exponent;
    x["first_nonfinite_step"] = r.first_nonfinite_step;
    j["runs"].push_back(std::move(x));
  }
  std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
}

std::string step_range(std::int64_t a, std::int64_t b) {
  return a < 0 ? std::string("-") : std::to_string(a) + "-" + std::to_string(b);
}

std::string layer_list(const std::vector<int>& layers, const std::vector<double>& err) {
  std::string out;
  char buf[64];
  for (std::size_t i = 0; i < layers.size() && i < err.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%d %.3e", out.empty() ? "" : ", ", layers[i], err[i]);
    out += buf;
  }
  return out.empty() ? std::string("none") : out;
}

std::string interval(const run_metrics::SlopeWindow& w) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.2f [%.2f, %.2f]", w.slope, w.ci_low, w.ci_high);
  return buf;
}

// The window-stating header of the headline columns (the windows are the same for every run:
// they depend on the recorded and compared steps only).
void print_headline_legend(const run_metrics::GapWindow& gap, const run_metrics::SlopeWindow& growth) {
  std::printf("loss gap: mean of (L - L_ref) / L_ref over steps %s (the last %g%% of the records, at least %lld)\n",
              step_range(gap.first_step, gap.last_step).c_str(), 100 * run_metrics::kGapWindowFraction,
              static_cast<long long>(run_metrics::kGapWindowMinRecords));
  std::printf("growth exp: slope of log(quantized W rel err) vs log(step) over the compares of steps %s, %g%% t interval; "
              "local: the same over windows of a factor %g\n",
              step_range(growth.first_step, growth.last_step).c_str(), 100 * run_metrics::kSlopeConfidence,
              run_metrics::kWindowFactor);
}

// The same as a table: the reference's final loss, per recipe its headline values (or where it
// diverged), then per layer the quantized layers' and the edge layers' errors and the local exponents.
void print_mlp(const MlpRunSpec& spec, const std::string& config_source, const MlpRunSummary& s, const std::string& out) {
  if (spec.reference_enabled)
    std::printf("fp4drift run: mlp %s, %lld steps; reference (%s) final loss %.6g\n", config_source.c_str(),
                static_cast<long long>(spec.steps), to_string(spec.reference_precision).c_str(), s.reference_final_loss);
  else
    std::printf("fp4drift run: mlp %s, %lld steps; reference off (no gaps, no weight errors)\n", config_source.c_str(),
                static_cast<long long>(spec.steps));
  if (s.reference_first_nonfinite_step >= 0)
    std::printf("the reference itself diverged at step %lld (not a rounding effect: lower mlp.lr)\n",
                static_cast<long long>(s.reference_first_nonfinite_step));
  if (s.runs.empty()) return;
  const MlpRunSummary::Run& r0 = s.runs.front();
  if (spec.reference_enabled) print_headline_legend(r0.loss_gap, r0.quantized_growth);
  const std::string gap_head = "loss gap " + step_range(r0.loss_gap.first_step, r0.loss_gap.last_step);
  std::printf("%-22s %12s %20s %20s %22s\n", "recipe", "final loss", gap_head.c_str(), "quantized W rel err",
              "growth exp [95% CI]");
  for (const MlpRunSummary::Run& r : s.runs) {
    if (r.first_nonfinite_step >= 0) {
      std::printf("%-22s diverged: the loss is not finite from step %lld on\n", r.recipe.c_str(),
                  static_cast<long long>(r.first_nonfinite_step));
      continue;
    }
    std::printf("%-22s %12.6g %20.3e %20.3e %22s\n", r.recipe.c_str(), r.final_loss, r.loss_gap.mean,
                r.quantized_weight_rel_error, interval(r.quantized_growth).c_str());
  }
  if (spec.reference_enabled) {
    std::printf("per layer W rel err at step %lld (quantized layers; edge layers in %s apart):\n",
                static_cast<long long>(spec.steps), spec.edge_recipe.c_str());
    for (const MlpRunSummary::Run& r : s.runs) {
      if (r.first_nonfinite_step >= 0) continue;
      std::printf("  %-20s quantized %s; edge %s\n", r.recipe.c_str(),
                  layer_list(r.quantized_layers, r.quantized_layer_weight_rel_error).c_str(),
                  layer_list(r.edge_layers, r.edge_layer_weight_rel_error).c_str());
    }
    std::printf("local growth exponents of the quantized W rel err (steps: exponent [95%% CI]):\n");
    for (const MlpRunSummary::Run& r : s.runs) {
      if (r.first_nonfinite_step >= 0) continue;
      std::string line;
      for (const run_metrics::SlopeWindow& w : r.quantized_local_exponents)
        line += (line.empty() ? "" : "; ") + step_range(w.first_step, w.last_step) + ": " + interval(w);
      std::printf("  %-20s %s\n", r.recipe.c_str(), line.empty() ? "too few compares" : line.c_str());
    }
  }
  std::printf("wrote %s\n", out.c_str());
}

// Restores the default SIGINT/SIGTERM actions when it goes out of scope, however the run ends.
struct StopSignals {
  StopSignals() {
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
  }
  ~StopSignals() {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

// What a long run (mlp, lm) needs of --out and --resume, checked before anything is read.
void check_long_run_output(const RunArgs& a, const std::string& workload) {
  if (a.out.empty()) throw UsageError("workload '" + workload + "' needs --out FILE: the trace is the run's result");
  if (a.resume && !std::filesystem::exists(a.out)) throw UsageError("--resume: " + a.out + " does not exist");
  if (!a.resume && std::filesystem::exists(a.out))
    throw UsageError(a.out + " exists: use --resume to continue that run, or another --out");
}

// The device trainers as the command line asks: --cuda-graphs, and a recipe that cannot stay
// resident said on stderr (unless --json).
TrainerOptions trainer_options(const RunArgs& a) {
  TrainerOptions t;
  t.cuda_graphs = a.cuda_graphs == "on";
  if (!a.json)
    t.on_host_fallback = [](const std::string& recipe, const std::string& why) {
      std::fprintf(stderr, "fp4drift run: recipe %s is not GPU-resident (%s): host quantization, GPU GEMMs\n",
                   recipe.c_str(), why.c_str());
    };
  return t;
}

int interrupted_exit(const std::string& out) {
  std::fprintf(stderr, "fp4drift: interrupted: %s holds every step up to its last checkpoint; continue with --resume\n",
               out.c_str());
  return 130;
}

void print_note(const std::string& line) { std::fprintf(stderr, "fp4drift run: %s\n", line.c_str()); }

// What every long run is told the same way: its trace, its provenance, the stop flag, notes.
void fill_run_control(RunControl& ctl, const RunArgs& a, const Config& cfg, const Backend& backend,
                      const std::string& command_line) {
  ctl.path = a.out;
  ctl.config_text = cfg.text();
  ctl.config_source = a.config;
  ctl.command_line = command_line;
  ctl.resume = a.resume;
  ctl.backend = a.backend;
  ctl.device = backend.device_identity();
  ctl.stop = &g_stop;
  ctl.note = print_note;
}

// [recipes] accumulator on a device: the device accumulates as its hardware does, so a config
// may call that sm90 (on an sm_90 GPU: one config then describes the CPU run that models it and
// the GPU run) but not exact.
void check_accumulator_on_backend(Accumulator acc, const Backend& backend) {
  if (!backend.is_device() || acc == Accumulator::Fp32Sequential) return;
  if (acc != Accumulator::Sm90)
    throw UsageError("[recipes] accumulator = \"" + to_string(acc) + "\" with --backend " + backend.name() +
                     ": the device accumulates as its tensor cores do; only \"sm90\" describes it");
  backend.require_available();
  const std::string arch = backend.device_architecture();
  if (arch.rfind("sm_90 ", 0) != 0)
    throw UsageError("[recipes] accumulator = \"sm90\" models the tensor cores of sm_90 (H100, H200); this GPU is " + arch);
}

int run_mlp_workload(const RunArgs& a, Config& cfg, const std::string& command_line) {
  const Backend& backend = select_backend(a.backend);
  check_long_run_output(a, "mlp");
  const MlpRunSpec spec = parse_mlp_run(cfg, a.steps);
  cfg.finish();
  check_accumulator_on_backend(spec.accumulator, backend);
  MlpRunControl ctl;
  fill_run_control(ctl, a, cfg, backend, command_line);
  ctl.backend_is_device = backend.is_device();
  if (a.concurrent_runs != "auto") ctl.concurrent_runs = a.concurrent_runs == "on";
  if (backend.is_device()) {
    ctl.product = backend.gemm_product({});
    ctl.trainer = backend.trainer_factory(trainer_options(a));
  }
  Progress progress;
  if (!a.json) ctl.progress = [&](std::int64_t d, std::int64_t t) { progress(d, t); };
  MlpRunSummary summary;
  bool interrupted = false;
  {
    const StopSignals signals;
    interrupted = run_mlp(spec, ctl, &summary) == MlpRunOutcome::Interrupted;
  }
  if (interrupted) return interrupted_exit(a.out);
  if (a.json) json_mlp(spec, summary);
  else print_mlp(spec, cfg.source(), summary, a.out);
  return 0;
}

// A complete lm run's summary as one line of JSON (--json).
void json_lm(const LmRunSpec& spec, const LmRunSummary& s) {
  nlohmann::ordered_json j = {{"workload", "lm"},
                              {"steps", spec.steps},
                              {"loss_floor", s.loss_floor},
                              {"unigram_loss", s.unigram_loss},
                              {"reference_final_loss", s.reference_final_loss},
                              {"reference_tail_loss", s.reference_tail_loss},
                              {"runs", nlohmann::ordered_json::array()}};
  // tail_rel_loss_gap (ratio of tail means), final_weight_rel_error and
  // weight_error_growth_exponent (every parameter) stay for older readers.
  for (const LmRunSummary::Run& r : s.runs) {
    nlohmann::ordered_json x = {{"recipe", r.recipe}, {"final_loss", r.final_loss}, {"tail_loss", r.tail_loss}};
    json_headline(x, r.loss_gap, r.quantized_weight_rel_error, r.quantized_growth, r.quantized_local_exponents);
    x["quantized_params"] = r.quantized_params;
    x["other_weight_rel_error"] = r.other_weight_rel_error;
    x["tail_rel_loss_gap"] = r.tail_rel_loss_gap;
    x["final_weight_rel_error"] = r.final_weight_rel_error;
    x["weight_error_growth_exponent"] = r.growth_exponent;
    x["first_nonfinite_step"] = r.first_nonfinite_step;
    j["runs"].push_back(std::move(x));
  }
  std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
}

void print_lm(const LmRunSpec& spec, const std::string& config_source, const LmRunSummary& s, const std::string& out) {
  std::printf("fp4drift run: lm %s, %lld steps, %s; data: loss floor %.4g nats, unigram %.4g nats\n",
              config_source.c_str(), static_cast<long long>(spec.steps), spec.model.pattern.c_str(), s.loss_floor,
              s.unigram_loss);
  if (spec.reference_enabled)
    std::printf("reference (%s): final loss %.6g, tail loss %.6g (mean of the last tenth of the steps)\n",
                to_string(spec.reference_precision).c_str(), s.reference_final_loss, s.reference_tail_loss);
  else
    std::printf("reference off (no gaps, no weight errors)\n");
  if (s.reference_first_nonfinite_step >= 0)
    std::printf("the reference itself diverged at step %lld (not a rounding effect: lower lm.optimizer.lr)\n",
                static_cast<long long>(s.reference_first_nonfinite_step));
  if (s.runs.empty()) return;
  const LmRunSummary::Run& r0 = s.runs.front();
  if (spec.reference_enabled) print_headline_legend(r0.loss_gap, r0.quantized_growth);
  const std::string gap_head = "loss gap " + step_range(r0.loss_gap.first_step, r0.loss_gap.last_step);
  std::printf("%-22s %12s %12s %20s %18s %16s %22s\n", "recipe", "final loss", "tail loss", gap_head.c_str(),
              "quantized W err", "other W err", "growth exp [95% CI]");
  for (const LmRunSummary::Run& r : s.runs) {
    if (r.first_nonfinite_step >= 0) {
      std::printf("%-22s diverged: the loss is not finite from step %lld on\n", r.recipe.c_str(),
                  static_cast<long long>(r.first_nonfinite_step));
      continue;
    }
    std::printf("%-22s %12.6g %12.6g %20.3e %18.3e %16.3e %22s\n", r.recipe.c_str(), r.final_loss, r.tail_loss,
                r.loss_gap.mean, r.quantized_weight_rel_error, r.other_weight_rel_error,
                interval(r.quantized_growth).c_str());
  }
  if (spec.reference_enabled) {
    std::printf("quantized W err: the weights of the linears each recipe quantizes, together; other: the rest "
                "(embedding, gains, mixer parameters, edge linears)\n");
    std::printf("local growth exponents of the quantized W err (steps: exponent [95%% CI]):\n");
    for (const LmRunSummary::Run& r : s.runs) {
      if (r.first_nonfinite_step >= 0) continue;
      std::string line;
      for (const run_metrics::SlopeWindow& w : r.quantized_local_exponents)
        line += (line.empty() ? "" : "; ") + step_range(w.first_step, w.last_step) + ": " + interval(w);
      std::printf("  %-20s %s\n", r.recipe.c_str(), line.empty() ? "too few compares" : line.c_str());
    }
  }
  std::printf("wrote %s\n", out.c_str());
}

int run_lm_workload(const RunArgs& a, Config& cfg, const std::string& command_line) {
  const Backend& backend = select_backend(a.backend);
  check_long_run_output(a, "lm");
  if (a.concurrent_runs != "auto")
    throw UsageError("--concurrent-runs: the lm workload steps its runs in turn, beside the reference's thread");
  const LmRunSpec spec = parse_lm_run(cfg, a.steps);
  cfg.finish();
  check_accumulator_on_backend(spec.accumulator, backend);
  LmRunControl ctl;
  fill_run_control(ctl, a, cfg, backend, command_line);
  ctl.trainer = backend.lm_trainer_factory(trainer_options(a));
  Progress progress;
  if (!a.json) ctl.progress = [&](std::int64_t d, std::int64_t t) { progress(d, t); };
  LmRunSummary summary;
  bool interrupted = false;
  {
    const StopSignals signals;
    interrupted = run_lm(spec, ctl, &summary) == LmRunOutcome::Interrupted;
  }
  if (interrupted) return interrupted_exit(a.out);
  if (a.json) json_lm(spec, summary);
  else print_lm(spec, cfg.source(), summary, a.out);
  return 0;
}


// A sum/dot run: short, and written whole as OUT.partial renamed when complete. SIGINT or
// SIGTERM stops it within a few thousand terms (SumDotInterrupted), and the trace's
// destructor removes the partial file as the exception leaves this function.
int run_sum_dot_workload(const RunArgs& a, const Config& cfg, const SumDotRun& run, const std::string& command_line) {
  const StopSignals signals;
  SumDotTrace trace(a.out, command_line, run, cfg.text(), a.config);
  const SumDotResult r = run_sum_dot(run, &g_stop);
  if (trace.enabled()) {
    trace.write(run, r);
    if (g_stop.load()) throw SumDotInterrupted();  // a signal while the trace was written
    trace.complete();
  }
  if (a.json) json_sum_dot(run, r);
  else {
    print_sum_dot(run, r);
    if (!a.out.empty()) std::printf("wrote %s\n", a.out.c_str());
  }
  return 0;
}

// --check: the config read and validated as a run would (every key, the model, the data, the
// recipes' tiling), a one-line description of what would run, nothing written. For configs
// sized for another machine (a GPU config on a laptop, a cluster's batch before submission).
int check_config(Config& cfg, const std::string& workload, std::int64_t steps) {
  std::string what;
  if (workload == "mlp") {
    const MlpRunSpec s = parse_mlp_run(cfg, steps);
    what = std::to_string(s.steps) + " steps, " + std::to_string(s.recipes.size()) + " recipes";
  } else if (workload == "lm") {
    const LmRunSpec s = parse_lm_run(cfg, steps);
    std::int64_t params = 0;
    for (const LmParam& p : lm_params(s.model)) params += p.rows * p.cols;
    what = std::to_string(s.steps) + " steps, " + std::to_string(s.recipes.size()) + " recipes, " +
           std::to_string(params) + " parameters, " + std::to_string(s.model.batch * s.model.seq_len) + " tokens a step";
  } else {
    cfg.require(workload == "sum" || workload == "dot", "workload", "must be sum, dot, mlp or lm");
    const SumDotRun s = parse_sum_dot_run(cfg, workload, steps);
    what = std::to_string(s.n) + " terms";
  }
  cfg.finish();
  std::printf("%s: a valid %s config (%s)\n", cfg.source().c_str(), workload.c_str(), what.c_str());
  return 0;
}

int run_run(const RunArgs& a, const std::string& command_line) {
  if (!std::filesystem::exists(a.config)) throw UsageError("config file '" + a.config + "' does not exist");
  // The backend's name is checked here, whether it can run when the workload needs it (a sum
  // or dot run is refused on a device before that).
  if (!is_backend_name(a.backend)) throw UsageError("--backend must be cpu or cuda, got '" + a.backend + "'");
  const Backend& backend = backend_named(a.backend);
  if (a.steps < 0) throw UsageError("--steps must be positive");
  if (a.cuda_graphs == "off" && !backend.is_device())
    throw UsageError("--cuda-graphs off: only --backend cuda launches graphs (this run is --backend " + a.backend + ")");
  Config cfg = Config::load(a.config);
  const std::string workload = cfg.get_string("workload");
  if (a.check) return check_config(cfg, workload, a.steps);
  if (workload == "mlp") return run_mlp_workload(a, cfg, command_line);
  if (workload == "lm") return run_lm_workload(a, cfg, command_line);
  cfg.require(workload == "sum" || workload == "dot", "workload", "must be sum, dot, mlp or lm");
  if (backend.is_device())
    throw UsageError("workload '" + workload + "' runs on the CPU only (its arithmetic is the format emulation; "
                     "--backend cuda is for the mlp and lm workloads)");
  if (a.resume)
    throw UsageError("--resume: '" + workload + "' runs are short and written whole; there is nothing to resume");
  // Accepted and ignored, the option would read as applied in the recorded command line.
  if (a.concurrent_runs != "auto")
    throw UsageError("--concurrent-runs: only the mlp workload has runs to step concurrently (this is '" + workload +
                     "')");
  const SumDotRun run = parse_sum_dot_run(cfg, workload, a.steps);
  cfg.finish();
  try {
    return run_sum_dot_workload(a, cfg, run, command_line);
  } catch (const SumDotInterrupted&) {
    // The output (OUT.partial) is gone with the SumDotTrace: a sum/dot run is written whole.
    std::fprintf(stderr, "fp4drift: interrupted: the %s run stopped early; nothing was written\n", workload.c_str());
    return 130;
  }
}

}  // namespace

Runner add_run(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("config", a->config, "Experiment config file (TOML subset; data/configs/ has examples)")->required();
  app.add_option("--backend", a->backend, "cpu | cuda")->capture_default_str();
  app.add_option("--steps", a->steps, "Override the config's length (terms for sum/dot); at least 1")
      ->check(CLI::Range(std::int64_t{1}, std::numeric_limits<std::int64_t>::max()));
  app.add_option("--out,-o", a->out, "Output trace (HDF5)");
  app.add_flag("--resume", a->resume, "Continue a stopped run from its trace (long-running workloads)");
  app.add_flag("--json", a->json, "Print the results as JSON");
  app.add_flag("--check", a->check, "Read and validate the config as the run would, say what it would run, write nothing");
  app.add_option("--concurrent-runs", a->concurrent_runs,
                 "mlp: step the low-precision runs on one host thread each (auto: where every run allows it; "
                 "the trace is the same either way)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--cuda-graphs", a->cuda_graphs,
                 "mlp and lm --backend cuda: replay each resident step as one CUDA graph (the trace is the same "
                 "either way; off: kernel by kernel)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  return [a, command_line]() { return run_run(*a, command_line); };
}

}  // namespace fp4d::cli
