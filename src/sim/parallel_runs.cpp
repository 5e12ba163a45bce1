#include "sim/parallel_runs.hpp"

#include <stdexcept>

namespace fp4d {

namespace {
// Polls pred() until it holds or `budget` has passed; true if it held.
template <class Pred>
bool spin_until(std::chrono::microseconds budget, Pred pred) {
  if (budget.count() <= 0) return pred();
  const auto end = std::chrono::steady_clock::now() + budget;
  for (unsigned i = 0;; ++i) {
    if (pred()) return true;
    if ((i & 63u) == 63u && std::chrono::steady_clock::now() >= end) return pred();
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}
}  // namespace

ParallelRuns::ParallelRuns(std::size_t n, std::chrono::microseconds spin) : n_(n), spin_(spin), errors_(n) {
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
      round_.fetch_add(1, std::memory_order_release);
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
    round_.fetch_add(1, std::memory_order_release);
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ParallelRuns::work(std::size_t i) {
  std::size_t seen = 0;
  for (;;) {
    const std::function<void(std::size_t)>* fn = nullptr;
    {
      // A new round or quit_ both bump round_ (see the destructor), so one atomic to watch.
      spin_until(spin_, [&] { return round_.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lk(mu_);
      start_.wait(lk, [&] { return quit_ || round_.load(std::memory_order_relaxed) != seen; });
      if (quit_) return;
      seen = round_.load(std::memory_order_relaxed);
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
      busy_.fetch_sub(1, std::memory_order_release);
    }
    done_.notify_one();
  }
}

void ParallelRuns::run(const std::function<void(std::size_t)>& fn) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = &fn;
    busy_.store(n_ - 1, std::memory_order_relaxed);
    for (auto& e : errors_) e = nullptr;
    round_.fetch_add(1, std::memory_order_release);
  }
  start_.notify_all();
  try {
    fn(0);
  } catch (...) {
    errors_[0] = std::current_exception();  // only this thread writes slot 0
  }
  spin_until(spin_, [&] { return busy_.load(std::memory_order_acquire) == 0; });
  std::unique_lock<std::mutex> lk(mu_);
  done_.wait(lk, [&] { return busy_.load(std::memory_order_relaxed) == 0; });
  for (const auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

}  // namespace fp4d
