// A fixed team of host threads that runs one task per low-precision run, round after round
// (sim/mlp_run.cpp: one training step of every run per round). Device runs each own a CUDA
// stream; stepping them from one host thread serialises their kernel launches, host
// synchronisations and host-side statistics, which dominate a small model's step. With one
// thread per run they overlap. Results do not depend on it: the runs share no state.
// Threads wait on condition variables between rounds: polling an atomic instead shortens a
// hand-off but does not shorten a device run's whole step (docs/performance.md).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fp4d {

class ParallelRuns {
 public:
  // n tasks per round: task 0 on the calling thread, tasks 1..n-1 on n - 1 worker threads.
  explicit ParallelRuns(std::size_t n);
  ~ParallelRuns();
  ParallelRuns(const ParallelRuns&) = delete;
  ParallelRuns& operator=(const ParallelRuns&) = delete;

  // fn(i) for every i in [0, n), concurrently; returns when all have returned. If any threw,
  // rethrows the exception of the lowest such i (after all have finished).
  void run(const std::function<void(std::size_t)>& fn);
  std::size_t size() const { return n_; }

 private:
  void work(std::size_t i);

  std::size_t n_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(std::size_t)>* fn_ = nullptr;
  std::size_t round_ = 0, busy_ = 0;
  bool quit_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

}  // namespace fp4d
