#include "sim/parallel_runs.hpp"

#include <stdexcept>

namespace fp4d {

ParallelRuns::ParallelRuns(std::size_t n) : n_(n), errors_(n) {
  if (n == 0) throw std::invalid_argument("ParallelRuns: needs at least one task per round");
  threads_.reserve(n - 1);
  try {
    for (std::size_t i = 1; i < n; ++i) threads_.emplace_back([this, i] { work(i); });
  } catch (...) {
    // A thread that cannot start: stop and join those that did (joinable threads must not
    // be destroyed), then report.
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
    }
    start_.notify_all();
    for (std::thread& t : threads_) t.join();
    throw;
  }
}

ParallelRuns::~ParallelRuns() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ParallelRuns::work(std::size_t i) {
  std::size_t seen = 0;
  for (;;) {
    const std::function<void(std::size_t)>* fn = nullptr;
    {
      std::unique_lock<std::mutex> lk(mu_);
      start_.wait(lk, [&] { return quit_ || round_ != seen; });
      if (quit_) return;
      seen = round_;
      fn = fn_;
    }
    std::exception_ptr err;
    try {
      (*fn)(i);
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      errors_[i] = err;
      --busy_;
    }
    done_.notify_one();
  }
}

void ParallelRuns::run(const std::function<void(std::size_t)>& fn) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = &fn;
    busy_ = n_ - 1;
    for (auto& e : errors_) e = nullptr;
    ++round_;
  }
  start_.notify_all();
  try {
    fn(0);
  } catch (...) {
    errors_[0] = std::current_exception();  // only this thread writes slot 0
  }
  std::unique_lock<std::mutex> lk(mu_);
  done_.wait(lk, [&] { return busy_ == 0; });
  for (const auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

}  // namespace fp4d
