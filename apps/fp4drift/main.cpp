// fp4drift: measure how rounding error accumulates in NVFP4 training.
// Exit status: 0 success, 1 a run failed, 2 bad input or usage (one-line message on stderr).
#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <new>
#include <string>

#include "commands.hpp"
#include "trace/h5.hpp"
#include "util/version.hpp"

namespace {

// OpenMP threads that wait for work spin by default (libgomp), which on a machine shared with
// other jobs costs far more than it saves: a run took 8x its time at a load average of 7-11.
// libgomp reads OMP_WAIT_POLICY once, when it is loaded, so a process started without it sets
// it to passive and starts itself again (the same process id, before anything ran). A policy
// the user set, active included, is kept.
void wait_passively_unless_told(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: then run with the default policy
}

// `--threads N` of a computing subcommand: the OpenMP thread count of this process and of the
// runs it starts (a sweep's workers inherit OMP_NUM_THREADS).
void add_threads_option(CLI::App& sub, int& threads) {
  sub.add_option("--threads", threads,
                 "OpenMP threads for the host computation (default: OMP_NUM_THREADS, else every core; a sweep: per "
                 "run). Results are bit-identical for any count")
      ->check(CLI::Range(1, 4096));
}

}  // namespace

int main(int argc, char** argv) {
  wait_passively_unless_told(argv);
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);

  CLI::App app{"fp4drift " + fp4d::version_string() +
               ": measures how rounding error accumulates in NVFP4 training, against an exact reference"};
  app.set_version_flag("--version", "fp4drift " + fp4d::version_string() + " (" + fp4d::git_commit() + ")");
  app.require_subcommand(1);
  std::map<CLI::App*, fp4d::cli::Runner> runners;
  CLI::App* q = app.add_subcommand("quantize", "Quantize a tensor (HDF5 dataset or synthetic) with one or more presets");
  runners[q] = fp4d::cli::add_quantize(*q, command_line);
  CLI::App* gm = app.add_subcommand("gemm", "Fprop/Dgrad/Wgrad GEMMs under recipes vs the exact product, error split");
  runners[gm] = fp4d::cli::add_gemm(*gm, command_line);
  CLI::App* run = app.add_subcommand("run", "Run one experiment from a config file (workloads sum, dot, mlp)");
  runners[run] = fp4d::cli::add_run(*run, command_line);
  CLI::App* sw = app.add_subcommand("sweep", "Many runs from a sweep file: a grid or list of config overrides, N workers or MPI ranks");
  runners[sw] = fp4d::cli::add_sweep(*sw, command_line);
  CLI::App* acc = app.add_subcommand("accumulator", "GPU tensor-core GEMMs: bits of the exact partial sums kept, vs K (CUDA)");
  runners[acc] = fp4d::cli::add_accumulator(*acc);
  CLI::App* b = app.add_subcommand("bench", "Benchmarks (throughput, bit-identity across thread counts)");
  runners[b] = fp4d::cli::add_bench(*b);
  int threads = 0;  // bench has its own --threads: the list of counts it measures
  for (CLI::App* sub : {q, gm, run, sw, acc}) add_threads_option(*sub, threads);

  // A first word that is not an option nor a subcommand is a misspelt subcommand: say which exist
  // (CLI11 would only say that a subcommand is required).
  std::string known;
  bool is_subcommand = false;
  for (const CLI::App* sub : {q, gm, run, sw, acc, b}) {
    known += (known.empty() ? "" : ", ") + sub->get_name();
    is_subcommand = is_subcommand || (argc > 1 && sub->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !is_subcommand) {
    std::cerr << "fp4drift: error: unknown subcommand '" << argv[1] << "' (known: " << known << ")\n";
    return 2;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "fp4drift: error: " << e.what() << " (see fp4drift --help)\n";
    return 2;
  }
  if (threads > 0) {
    setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
    omp_set_num_threads(threads);
  }
  for (auto& [sub, run] : runners) {
    if (!sub->parsed()) continue;
    try {
      return run();
    } catch (const std::bad_alloc&) {
      // what() is only "std::bad_alloc", which does not tell a user what to change.
      std::cerr << "fp4drift: error: out of memory (the input or the sizes asked for need more memory than is available)\n";
      return 1;
    } catch (const std::exception& e) {
      // Bad input (usage, invalid values, unreadable or malformed files) exits 2; anything
      // else that stopped the run exits 1.
      const bool bad_input = dynamic_cast<const fp4d::cli::UsageError*>(&e) ||
                             dynamic_cast<const std::invalid_argument*>(&e) || dynamic_cast<const fp4d::h5::Error*>(&e);
      std::cerr << "fp4drift: error: " << e.what() << "\n";
      return bad_input ? 2 : 1;
    }
  }
  return 2;
}
