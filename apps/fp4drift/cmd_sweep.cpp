// fp4drift sweep SWEEP: many runs from one sweep file (docs/sweeps.md). The file's
// grid axes and list entries expand into one config per run (src/sweep/expand.hpp); the runs
// are children of this executable, N at a time here or spread over MPI ranks under mpirun
// (src/sweep/runner.hpp, mpi_run.hpp); OUTDIR/sweep.h5 indexes them. Rerunning the same
// command skips complete runs and resumes interrupted ones.
// Exit status: 0 every run complete, 1 some failed (the message says how many), 2 bad input,
// 130 interrupted.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.hpp"
#include "sweep/expand.hpp"
#include "sweep/mpi_run.hpp"
#include "sweep/runner.hpp"

namespace fp4d::cli {

namespace {

struct SweepArgs {
  std::string sweep, out, backend;
  std::int64_t workers = 0;
  bool dry_run = false;
  // Given on the command line: an empty --backend or --out, or --workers 0, would otherwise
  // fall back to the file's value unnoticed.
  bool backend_given = false, out_given = false, workers_given = false;
};

int run_sweep(const SweepArgs& a, const std::string& command_line) {
  if (a.backend_given && !is_backend_name(a.backend))
    throw UsageError("--backend must be cpu or cuda, got '" + a.backend + "'");
  if (a.workers_given && (a.workers < 1 || a.workers > 4096))
    throw UsageError("--workers must be in [1, 4096], got " + std::to_string(a.workers));
  if (a.out_given && a.out.empty()) throw UsageError("--out: an empty directory name");
  sweep::Sweep s = sweep::load_sweep(a.sweep);
  if (a.backend_given) s.backend = a.backend;
  if (!is_backend_name(s.backend)) throw UsageError("--backend must be cpu or cuda");
  if (a.workers_given) s.workers = a.workers;
  const std::string out = a.out.empty() ? s.out : a.out;
  if (a.dry_run) {
    std::printf("%zu runs (workload %s) from %s, base %s; output %s\n", s.runs.size(), s.runs.front().workload.c_str(),
                s.source.c_str(), s.base_source.c_str(), out.empty() ? "(none given)" : out.c_str());
    for (const sweep::SweepRun& r : s.runs) std::printf("  %s  %s\n", r.id.c_str(), r.label.c_str());
    return 0;
  }
  if (out.empty()) throw UsageError(a.sweep + " names no output directory (key 'out'): give --out DIR");
  // Otherwise create_directories fails deep in the runner with exit status 1 and a bare
  // "filesystem error".
  if (std::filesystem::exists(out) && !std::filesystem::is_directory(out))
    throw UsageError("output directory '" + out + "' is not a directory (the sweep writes its runs and sweep.h5 under it)");
  const std::vector<std::string> devices = select_backend(s.backend).devices();
  if (const int ws = sweep::launcher_world_size(); ws > 1 || ws < 0)
    return sweep::run_mpi(s, out, static_cast<int>(s.workers), devices, command_line);
  return sweep::run_local(s, out, static_cast<int>(s.workers), devices, command_line);
}

}  // namespace

Runner add_sweep(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<SweepArgs>();
  app.add_option("sweep", a->sweep, "Sweep file (TOML subset; data/sweeps/ has examples, docs/sweeps.md the format)")
      ->required();
  app.add_option("--out,-o", a->out, "Output directory (overrides the file's 'out')")
      ->each([a](const std::string&) { a->out_given = true; });
  app.add_option("--workers,-j", a->workers, "Concurrent runs (per MPI rank under mpirun; overrides 'workers')")
      ->each([a](const std::string&) { a->workers_given = true; });
  app.add_option("--backend", a->backend, "cpu | cuda (overrides 'backend')")
      ->each([a](const std::string&) { a->backend_given = true; });
  app.add_flag("--dry-run", a->dry_run, "Expand and validate every run's config, list the runs, run nothing");
  return [a, command_line]() { return run_sweep(*a, command_line); };
}

}  // namespace fp4d::cli
