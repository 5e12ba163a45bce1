#include "sim/batch_prefetch.hpp"

#include <omp.h>

#include <stdexcept>
#include <string>

namespace fp4d {

BatchPrefetcher::BatchPrefetcher(const MlpSpec& spec, std::int64_t first, std::int64_t end, int workers, int depth)
    : spec_(spec), next_(first), taken_(first), end_(end), depth_(depth) {
  validate(spec_);
  if (workers < 1 || depth < 1) throw std::invalid_argument("BatchPrefetcher: workers and depth must be >= 1");
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void BatchPrefetcher::work() {
  omp_set_num_threads(1);  // this thread's OpenMP teams: one thread (no oversubscription)
  for (;;) {
    std::int64_t s = 0;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || error_ || (next_ < end_ && next_ < taken_ + depth_); });
      if (stop_ || error_) return;
      s = next_++;
    }
    try {
      Batch b = make_batch(spec_, s);
      std::lock_guard<std::mutex> lk(mu_);
      ready_.emplace(s, std::move(b));
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

Batch BatchPrefetcher::take(std::int64_t step) {
  std::unique_lock<std::mutex> lk(mu_);
  if (step != taken_ || step >= end_)
    throw std::logic_error("BatchPrefetcher: batch " + std::to_string(step) + " taken out of order (expected " +
                           std::to_string(taken_) + ")");
  cv_.wait(lk, [&] { return error_ || ready_.count(step) != 0; });
  if (error_) std::rethrow_exception(error_);
  Batch b = std::move(ready_.at(step));
  ready_.erase(step);
  ++taken_;
  lk.unlock();
  cv_.notify_all();
  return b;
}

}  // namespace fp4d
