// fp4drift run CONFIG: one experiment from a config file (issue 5). Workloads so far: `sum`
// and `dot` (sim/sum_dot_run.hpp); `mlp` is refused with a message until it exists.
// The trace (schema fp4drift.run v1, docs/trace-format.md) carries the config text and the
// provenance; it is written as OUT.partial and renamed when complete, so a stopped sum/dot
// run leaves no file that looks complete (they are minutes at most; --resume arrives with the
// long-running mlp workload).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "commands.hpp"
#include "json.hpp"
#include "sim/sum_dot_run.hpp"
#include "trace/output_file.hpp"
#include "util/config.hpp"

namespace fp4d::cli {

namespace {

struct RunArgs {
  std::string config;
  std::string backend = "cpu";
  std::int64_t steps = 0;
  std::string out;
  bool resume = false, json = false;
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
  Json j(std::cout);
  j.begin_object().field("workload", run.dot ? "dot" : "sum").field("format", run.format_name)
      .field("rounding", run.rounding_name).field("runs", run.options.runs).key("points").begin_array();
  for (const SumDotPoint& p : r.points)
    j.begin_object().field("n", p.n).field("exact", p.exact).field("computed0", p.computed.front())
        .field("rel_error0", p.rel_error).field("mean_error", p.mean_error).field("rms_error", p.rms_error).end_object();
  j.end_array().end_object();
}

int run_run(const RunArgs& a, const std::string& command_line) {
  if (!std::filesystem::exists(a.config)) throw UsageError("config file '" + a.config + "' does not exist");
  if (a.backend != "cpu" && a.backend != "cuda") throw UsageError("--backend must be cpu or cuda, got '" + a.backend + "'");
  if (a.steps < 0) throw UsageError("--steps must be positive");
  Config cfg = Config::load(a.config);
  const std::string workload = cfg.get_string("workload");
  if (workload == "mlp")
    throw UsageError("workload 'mlp' is not implemented yet (issue 5 is in progress: sum and dot run today)");
  cfg.require(workload == "sum" || workload == "dot", "workload", "must be sum or dot (mlp: not yet)");
  if (a.backend == "cuda")
    throw UsageError("workload '" + workload + "' runs on the CPU only (its arithmetic is the format emulation; "
                     "--backend cuda is for the mlp workload)");
  if (a.resume)
    throw UsageError("--resume: '" + workload + "' runs are short and written whole; there is nothing to resume");
  const SumDotRun run = parse_sum_dot_run(cfg, workload, a.steps);
  cfg.finish();

  OutputFile file(a.out, "fp4drift.run", 1, command_line);
  if (file.enabled()) {
    h5::Group root = file.root();
    root.set_attr("workload", workload);
    root.set_attr("config", cfg.text());
    root.set_attr("config_source", a.config);
  }
  const SumDotResult r = run_sum_dot(run);
  if (file.enabled()) {
    write_sum_dot(file.root(), run, r);
    file.complete();
  }
  if (a.json) json_sum_dot(run, r);
  else {
    print_sum_dot(run, r);
    if (!a.out.empty()) std::printf("wrote %s\n", a.out.c_str());
  }
  return 0;
}

}  // namespace

Runner add_run(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<RunArgs>();
  app.add_option("config", a->config, "Experiment config file (TOML subset; data/configs/ has examples)")->required();
  app.add_option("--backend", a->backend, "cpu | cuda")->capture_default_str();
  app.add_option("--steps", a->steps, "Override the config's length (terms for sum/dot)");
  app.add_option("--out,-o", a->out, "Output trace (HDF5)");
  app.add_flag("--resume", a->resume, "Continue a stopped run from its trace (long-running workloads)");
  app.add_flag("--json", a->json, "Print the results as JSON");
  return [a, command_line]() { return run_run(*a, command_line); };
}

}  // namespace fp4d::cli
