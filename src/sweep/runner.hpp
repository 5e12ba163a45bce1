// Running a sweep's runs: each run is a child process of this same executable
// (`/proc/self/exe run CONFIG --out TRACE [--resume]`), so a crashing run cannot take the sweep
// down and `fp4drift run`'s own resume and interrupt handling is reused as it is.
//   Executor     keeps up to N children going on this machine (one MPI rank), each with its
//                log, its OMP_NUM_THREADS share of the cores and, for --backend cuda, its GPU
//                (CUDA_VISIBLE_DEVICES, sweep/device_assignment.hpp's device_for_slot);
//                writes each run's record, with that GPU, when its child starts and ends.
//   Coordinator  the one process that owns the sweep (the local process, or MPI rank 0):
//                materialises the configs, decides what to skip/resume/rerun, collects the
//                records, prints progress and writes the index.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "sweep/expand.hpp"
#include "sweep/index.hpp"
#include "sweep/state.hpp"

namespace fp4d::sweep {

struct ExecOptions {
  std::string outdir;
  std::string backend = "cpu";
  int slots = 1;                     // concurrent children of this process
  int local_rank = 0;                // this process's rank among those of its node (GPU assignment)
  // GPUs to hand out (--backend cuda): the child in slot k gets device_for_slot(devices,
  // local_rank, slots, k) as its CUDA_VISIBLE_DEVICES; none: the variable is left as it is.
  std::vector<std::string> devices;
  int omp_threads = 0;               // OMP_NUM_THREADS for the children; 0: inherit
  int rank = 0;                      // MPI rank (recorded with each run)
  // What each child executes, as `PROGRAM run CONFIG --out TRACE --backend B [--resume]`: this
  // fp4drift. Tests put a script here to see what a child is given.
  std::string program = "/proc/self/exe";
};

class Executor {
 public:
  Executor(const Sweep& s, ExecOptions o);
  // A sweep that ends by an error (a full disk, an unwritable index) stops its runs as a
  // Ctrl-C would and waits for them, rather than leaving orphans that hold the directory's
  // lock; their traces keep their checkpoints, and the next sweep resumes them.
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  int running() const { return static_cast<int>(children_.size()); }
  bool has_free_slot() const { return running() < opt_.slots; }
  // Resumes or starts from scratch (plan_run; `fresh` forces scratch), never a complete run.
  void launch(int run, bool fresh = false);
  // The runs whose children ended since the last call, with their (written) records.
  std::vector<std::pair<int, RunRecord>> poll();
  void stop_all();  // SIGTERM to every child: mlp runs flush and exit 130

 private:
  struct Child {
    pid_t pid;
    int run, slot;
    std::chrono::steady_clock::time_point start;
    std::uintmax_t log_offset;
    RunRecord record;
    bool resume;
  };
  const Sweep& s_;
  ExecOptions opt_;
  std::vector<Child> children_;
  std::vector<bool> slot_busy_;
  bool stopping_ = false;
};

class Coordinator {
 public:
  Coordinator(const Sweep& s, std::string outdir, IndexInfo info);
  // Writes every run's config (refusing one that differs from an earlier sweep's), reads the
  // records of complete runs and returns the runs still to do, in order.
  std::vector<int> plan();
  void finished(int run, const RunRecord& r);
  void tick(int running, bool force = false);  // progress line (at most every 10 s unless forced)
  // Final index and summary line; the exit status (0, 1 if any run failed, 130 interrupted).
  int finish(bool interrupted);
  int todo() const { return todo_; }

 private:
  void write(const std::string& status);
  const Sweep& s_;
  std::string outdir_;
  IndexInfo info_;
  std::vector<RunRecord> records_;
  std::vector<RunMetrics> metrics_;
  int todo_ = 0, done_now_ = 0, running_ = 0;
  std::chrono::steady_clock::time_point t0_, last_print_, last_index_;
};

// The signal flag of the sweep (SIGINT / SIGTERM).
extern std::atomic<bool> g_sweep_stop;
void install_stop_handlers();

// One sweep per output directory at a time: creates OUTDIR and holds an flock on
// OUTDIR/sweep.lock for the process's life (std::invalid_argument if another sweep holds it).
void lock_outdir(const std::string& outdir);

// With --backend cuda, one warning line on stderr when `concurrent` runs on one node share the
// devices (sweep/device_assignment.hpp's sharing_warning), or when there is no device list to
// pin them to. `where`: as sharing_warning's.
void warn_device_sharing(const std::string& backend, const std::vector<std::string>& devices, int concurrent,
                         const std::string& where);

// OMP_NUM_THREADS for children when `concurrent` of them share this machine's cores (0: the
// user set OMP_NUM_THREADS, which the children inherit).
int default_omp_threads(int concurrent);

// Local mode: every run on this machine, `slots` at a time, the child in slot k pinned to
// devices[k mod size] (none: the CPU backend); one warning line when runs must share a GPU.
// Returns the exit status.
int run_local(const Sweep& s, const std::string& outdir, int slots, const std::vector<std::string>& devices,
              const std::string& command_line);

}  // namespace fp4d::sweep
