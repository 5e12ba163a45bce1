// Whether a loop of `work` elementary operations (elements touched, or multiply-adds) is worth
// an OpenMP team. Waking a team costs microseconds (tens under passive waiting, and more with
// many threads), more than a small model's quantization or GEMM takes on one core: on a 2-core
// machine lm-quick's steps ran slower on 2 threads than on 1 before the loops asked this.
// Every parallel loop of the project gives the same bits for any thread count, so the answer
// changes only the time - which the tests that compare thread counts on small tensors check
// with every loop parallel (ParallelWorkThreshold).
#pragma once

#include <atomic>
#include <cstdint>

namespace fp4d {

inline constexpr std::int64_t kParallelWork = std::int64_t{1} << 16;

namespace detail {
inline std::atomic<std::int64_t> parallel_work_threshold{kParallelWork};
}  // namespace detail

inline bool parallel_worth(std::int64_t work) {
  return work >= detail::parallel_work_threshold.load(std::memory_order_relaxed);
}

// While it lives, loops of at least `threshold` operations run in parallel (0: every loop),
// for a test that compares thread counts on tensors too small to be worth a team. Process-wide:
// not for concurrent use with differing thresholds.
class ParallelWorkThreshold {
 public:
  explicit ParallelWorkThreshold(std::int64_t threshold)
      : saved_(detail::parallel_work_threshold.exchange(threshold, std::memory_order_relaxed)) {}
  ~ParallelWorkThreshold() { detail::parallel_work_threshold.store(saved_, std::memory_order_relaxed); }
  ParallelWorkThreshold(const ParallelWorkThreshold&) = delete;
  ParallelWorkThreshold& operator=(const ParallelWorkThreshold&) = delete;

 private:
  std::int64_t saved_;
};

}  // namespace fp4d
