// Batches of the mlp workload made ahead of their use on worker threads. A GPU-resident run
// steps faster than one host thread makes its data (the quick model's make_batch takes ~1.8 ms
// on one core of the dev VM: normals by Box-Muller, the teacher in double), so the runner
// takes them from here. make_batch is a pure function of (spec, step) whose result does not
// depend on the thread count, so these are exactly the batches the consumer would make itself.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "sim/mlp.hpp"

namespace fp4d {

class BatchPrefetcher {
 public:
  // Steps [first, end), at most `depth` batches made ahead of the consumer, `workers` threads
  // (each with OpenMP limited to one thread: the parallelism is across batches).
  BatchPrefetcher(const MlpSpec& spec, std::int64_t first, std::int64_t end, int workers, int depth);
  ~BatchPrefetcher();  // stops the workers
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;
  // The batch of `step`; steps must be taken in order first, first + 1, ... Blocks until it is
  // made; rethrows a worker's exception.
  Batch take(std::int64_t step);

 private:
  void work();
  MlpSpec spec_;
  std::int64_t next_ = 0, taken_ = 0, end_ = 0;
  int depth_ = 1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::int64_t, Batch> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace fp4d
