#include "sweep/runner.hpp"
#include "trace/run_files.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "sweep/device_assignment.hpp"
#include "util/config.hpp"

extern char** environ;

namespace fp4d::sweep {

namespace fs = std::filesystem;

std::atomic<bool> g_sweep_stop{false};
namespace {
extern "C" void on_sweep_signal(int) { g_sweep_stop.store(true); }

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The reason a run failed, from its log since `offset`: the last "fp4drift: error:" line, else
// the last non-empty line.
std::string error_from_log(const std::string& log, std::uintmax_t offset) {
  std::string text = read_all(log);
  text = offset < text.size() ? text.substr(offset) : "";
  std::istringstream in(text);
  std::string line, last, last_error;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    last = line;
    if (line.rfind("fp4drift: error:", 0) == 0) last_error = line;
  }
  std::string e = last_error.empty() ? last : last_error;
  if (e.size() > 1000) e = e.substr(0, 1000) + "...";
  return e;
}

std::string utc_now() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
}  // namespace

void install_stop_handlers() {
  std::signal(SIGINT, on_sweep_signal);
  std::signal(SIGTERM, on_sweep_signal);
}

// ---- Executor ---------------------------------------------------------------------------

Executor::Executor(const Sweep& s, ExecOptions o) : s_(s), opt_(std::move(o)), slot_busy_(opt_.slots, false) {}

void Executor::launch(int run, bool fresh) {
  const SweepRun& r = s_.runs.at(run);
  const RunPaths p(opt_.outdir, r.id);
  const bool resume = !fresh && plan_run(p) == Action::Resume;
  if (!resume) {
    for (const char* suffix : {"", ".partial", ".ckpt", ".rows"}) fs::remove(p.trace + suffix);
  }
  int slot = 0;
  while (slot_busy_[slot]) ++slot;
  Child c{0, run, slot, std::chrono::steady_clock::now(), 0, read_record(p.record), resume};
  const std::string device = device_for_slot(opt_.devices, opt_.local_rank, opt_.slots, slot);
  c.record.status = "running";
  c.record.attempts += 1;
  c.record.rank = opt_.rank;
  c.record.cuda_visible_devices = device;
  write_record(p.record, c.record);
  {
    std::ofstream log(p.log, std::ios::app);
    log << "=== fp4drift sweep: attempt " << c.record.attempts << (resume ? " (resume)" : "") << " at " << utc_now()
        << " ===\n";
  }
  c.log_offset = fs::file_size(p.log);

  std::vector<std::string> args{"fp4drift", "run", p.config, "--out", p.trace, "--backend", opt_.backend};
  if (resume) args.push_back("--resume");
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (opt_.omp_threads > 0 && kv.rfind("OMP_NUM_THREADS=", 0) == 0) continue;
    if (!device.empty() && kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) continue;
    env.push_back(kv);
  }
  if (opt_.omp_threads > 0) env.push_back("OMP_NUM_THREADS=" + std::to_string(opt_.omp_threads));
  if (!device.empty()) env.push_back("CUDA_VISIBLE_DEVICES=" + device);
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, p.log.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // Children get the default signal dispositions: the sweep forwards SIGTERM itself.
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  sigset_t def;
  sigemptyset(&def);
  sigaddset(&def, SIGINT);
  sigaddset(&def, SIGTERM);
  posix_spawnattr_setsigdefault(&at, &def);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
  const int rc = posix_spawn(&c.pid, opt_.program.c_str(), &fa, &at, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) throw std::runtime_error("cannot start run " + r.id + ": " + std::strerror(rc));
  slot_busy_[slot] = true;
  children_.push_back(c);
}

std::vector<std::pair<int, RunRecord>> Executor::poll() {
  std::vector<std::pair<int, RunRecord>> done;
  for (std::size_t k = 0; k < children_.size();) {
    Child& c = children_[k];
    int st = 0;
    const pid_t w = waitpid(c.pid, &st, WNOHANG);
    if (w == 0 || (w < 0 && errno == EINTR)) {
      ++k;
      continue;
    }
    const RunPaths p(opt_.outdir, s_.runs[c.run].id);
    RunRecord r = c.record;
    r.wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - c.start).count();
    r.error.clear();
    if (w < 0) {
      r.status = "failed";
      r.exit_code = -1;
      r.error = std::string("lost the child process: ") + std::strerror(errno);
    } else if (WIFEXITED(st)) {
      r.exit_code = WEXITSTATUS(st);
      if (r.exit_code == 0) {
        const std::string ts = trace_status(p.trace);
        r.status = ts == "complete" ? "complete" : "failed";
        if (ts != "complete") r.error = "exit status 0 but the trace's status is '" + ts + "'";
      } else if (r.exit_code == 130 && (stopping_ || g_sweep_stop.load())) {
        // Stopped with the sweep (a terminal's Ctrl-C reaches the children first). A run that
        // exits 130 on its own (someone stopped it alone) did not finish: failed, not silently
        // "interrupted" in a sweep that reports success.
        r.status = "interrupted";
      } else {
        r.status = "failed";
        r.error = error_from_log(p.log, c.log_offset);
        if (r.error.empty()) r.error = "exit status " + std::to_string(r.exit_code);
      }
    } else {
      const int sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
      r.exit_code = 128 + sig;
      if ((stopping_ || g_sweep_stop.load()) && (sig == SIGTERM || sig == SIGINT)) r.status = "interrupted";
      else {
        r.status = "failed";
        r.error = "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
      }
    }
    write_record(p.record, r);
    slot_busy_[c.slot] = false;
    const int run = c.run;
    const bool retry = c.resume && r.status == "failed" && !stopping_ && !g_sweep_stop.load();
    children_.erase(children_.begin() + static_cast<std::ptrdiff_t>(k));
    if (retry) {  // a checkpoint that cannot be resumed: start the run again, now
      std::ofstream(p.log, std::ios::app) << "=== fp4drift sweep: the resume failed (" << r.error
                                          << "); starting again from step 0 ===\n";
      launch(run, true);
      continue;
    }
    done.emplace_back(run, r);
  }
  return done;
}

Executor::~Executor() {
  if (children_.empty()) return;
  stop_all();
  for (const Child& c : children_) {
    int st = 0;
    while (waitpid(c.pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

void Executor::stop_all() {
  stopping_ = true;
  for (const Child& c : children_) kill(c.pid, SIGTERM);
}

// ---- Coordinator ------------------------------------------------------------------------

Coordinator::Coordinator(const Sweep& s, std::string outdir, IndexInfo info)
    : s_(s), outdir_(std::move(outdir)), info_(std::move(info)), records_(s.runs.size()), metrics_(s.runs.size()) {
  t0_ = last_print_ = last_index_ = std::chrono::steady_clock::now();
}

std::vector<int> Coordinator::plan() {
  std::vector<int> todo;
  for (const SweepRun& r : s_.runs) {
    const RunPaths p(outdir_, r.id);
    fs::create_directories(p.dir);
    if (fs::exists(p.config)) {
      if (read_all(p.config) != r.config_text)
        throw ConfigError(p.config + " differs from the config this sweep gives run " + r.id +
                          " (the base config or the sweep file changed since that run): use another output directory, "
                          "or delete " + p.dir + " to rerun it");
    } else {  // whole or not at all: a torn config.toml would read as "the config changed"
      write_file_atomically(p.config, r.config_text);
    }
    RunRecord rec = read_record(p.record);
    if (plan_run(p) == Action::Skip) {
      remove_leftovers_of_complete_run(p.trace);  // a child killed after closing its trace
      if (rec.status != "complete") {  // the sweep stopped between the run's end and its record
        rec.status = "complete";
        rec.exit_code = 0;
        rec.error.clear();
        if (rec.wall_s == 0) rec.wall_s = -1;  // unknown (NaN would not read back from TOML)
        write_record(p.record, rec);
      }
      try {
        metrics_[r.index] = read_metrics(p.trace);
      } catch (const std::exception& e) {
        // A trace marked complete that cannot be read (a disk error, a hand edit): set it aside
        // and run again, rather than refusing every later restart.
        const std::string aside = p.trace + ".unreadable";
        fs::rename(p.trace, aside);
        std::fprintf(stderr, "fp4drift sweep: run %s: its trace cannot be read (%s); moved to %s, running it again\n",
                     r.id.c_str(), e.what(), aside.c_str());
        rec.status = "interrupted";
        todo.push_back(r.index);
      }
    } else {
      if (rec.status == "running") rec.status = "interrupted";  // a killed sweep left it so
      todo.push_back(r.index);
    }
    records_[r.index] = rec;
  }
  todo_ = static_cast<int>(todo.size());
  std::fprintf(stderr, "fp4drift sweep: %zu runs, %zu complete from before, %d to run (%s, %s)\n", s_.runs.size(),
               s_.runs.size() - todo.size(), todo_, info_.mode.c_str(), s_.backend.c_str());
  write("running");
  return todo;
}

void Coordinator::finished(int run, const RunRecord& r) {
  records_[run] = r;
  if (r.status == "complete") {
    try {
      metrics_[run] = read_metrics(RunPaths(outdir_, s_.runs[run].id).trace);
    } catch (const std::exception& e) {
      records_[run].status = "failed";
      records_[run].error = std::string("the trace cannot be read: ") + e.what();
    }
  }
  if (r.status != "interrupted") ++done_now_;
  if (r.status == "failed") {
    const std::string on = r.cuda_visible_devices.empty() ? "" : " on CUDA_VISIBLE_DEVICES=" + r.cuda_visible_devices;
    std::fprintf(stderr, "fp4drift sweep: run %s (%s) failed%s: %s\n", s_.runs[run].id.c_str(),
                 s_.runs[run].label.c_str(), on.c_str(), records_[run].error.c_str());
  }
  tick(running_ > 0 ? running_ - 1 : 0, true);
  if (std::chrono::duration<double>(std::chrono::steady_clock::now() - last_index_).count() >= 5) write("running");
}

void Coordinator::tick(int running, bool force) {
  running_ = running;
  const auto now = std::chrono::steady_clock::now();
  if (!force && std::chrono::duration<double>(now - last_print_).count() < 10) return;
  last_print_ = now;
  int complete = 0, failed = 0;
  for (const RunRecord& r : records_) {
    complete += r.status == "complete";
    failed += r.status == "failed";
  }
  const double el = std::chrono::duration<double>(now - t0_).count();
  const int left = todo_ - done_now_;
  char eta[48] = "ETA --";
  if (done_now_ > 0) std::snprintf(eta, sizeof eta, "ETA %.0f s", el / done_now_ * left);
  std::fprintf(stderr, "progress: %d/%zu complete, %d failed, %d running, %d pending; %.0f s elapsed, %s\n", complete,
               records_.size(), failed, running, left - running > 0 ? left - running : 0, el, eta);
}

void Coordinator::write(const std::string& status) {
  info_.status = status;
  write_index(outdir_, s_, records_, metrics_, info_);
  last_index_ = std::chrono::steady_clock::now();
}

int Coordinator::finish(bool interrupted) {
  int failed = 0, complete = 0;
  for (RunRecord& r : records_) {
    if (r.status == "running") r.status = "interrupted";
    failed += r.status == "failed";
    complete += r.status == "complete";
  }
  write(interrupted ? "interrupted" : "complete");
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const std::string index = (fs::path(outdir_) / "sweep.h5").string();
  std::printf("fp4drift sweep: %zu runs: %d complete, %d failed, %zu not finished; %d run now in %.2f s (%.3f runs/s); "
              "index %s\n",
              records_.size(), complete, failed, records_.size() - complete - failed, done_now_, el,
              el > 0 ? done_now_ / el : 0.0, index.c_str());
  std::fflush(stdout);
  if (interrupted) {
    std::fprintf(stderr, "fp4drift sweep: interrupted: rerun the same command to resume (complete runs are skipped)\n");
    return 130;
  }
  if (failed) {
    std::fprintf(stderr, "fp4drift sweep: %d of %zu runs failed (their errors: %s /summary/error, runs/<id>/log.txt)\n",
                 failed, records_.size(), index.c_str());
    return 1;
  }
  if (complete != static_cast<int>(records_.size())) {
    std::fprintf(stderr, "fp4drift sweep: %zu of %zu runs did not finish\n", records_.size() - complete, records_.size());
    return 1;
  }
  return 0;
}

// ---- local mode -------------------------------------------------------------------------

void lock_outdir(const std::string& outdir) {
  fs::create_directories(outdir);
  const std::string path = (fs::path(outdir) / "sweep.lock").string();
  // Not close-on-exec: the runs inherit the descriptor, so the lock lasts until the last of
  // them has ended - runs orphaned by a killed sweep keep a rerun from writing under them.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0)
    throw std::invalid_argument("another sweep, or the runs of a killed one, is running in '" + outdir + "' (" + path +
                                " is locked)");
  // fd stays open (and locked) until the process and its runs exit
}

void warn_device_sharing(const std::string& backend, const std::vector<std::string>& devices, int concurrent,
                         const std::string& where) {
  if (backend != "cuda") return;
  if (devices.empty()) {
    std::fprintf(stderr,
                 "fp4drift sweep: warning: no GPU list (CUDA_VISIBLE_DEVICES is unset and /dev has no nvidiaN): the "
                 "runs%s are not pinned, and CUDA gives each its first device\n",
                 where.c_str());
    return;
  }
  const std::string w = sharing_warning(devices, concurrent, where);
  if (!w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
}

int default_omp_threads(int concurrent) {
  if (std::getenv("OMP_NUM_THREADS")) return 0;
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, (hw > 0 ? hw : 1) / std::max(1, concurrent));
}

int run_local(const Sweep& s, const std::string& outdir, int slots, const std::vector<std::string>& devices,
              const std::string& command_line) {
  lock_outdir(outdir);
  Coordinator co(s, outdir, IndexInfo{"running", "local", 1, command_line});
  std::vector<int> todo = co.plan();
  ExecOptions o;
  o.outdir = outdir;
  o.backend = s.backend;
  o.slots = slots;
  o.omp_threads = default_omp_threads(slots);
  o.devices = devices;
  warn_device_sharing(s.backend, devices, slots, "");
  Executor ex(s, o);
  install_stop_handlers();
  std::size_t next = 0;
  bool stopped = false;
  while (next < todo.size() || ex.running() > 0) {
    if (g_sweep_stop.load() && !stopped) {
      stopped = true;
      ex.stop_all();
    }
    while (!stopped && next < todo.size() && ex.has_free_slot()) ex.launch(todo[next++]);
    co.tick(ex.running());
    for (const auto& [run, rec] : ex.poll()) co.finished(run, rec);
    if (stopped && ex.running() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a run's end is seen within 2 ms
  }
  return co.finish(stopped);
}

}  // namespace fp4d::sweep
