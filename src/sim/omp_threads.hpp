// Sets the calling thread's OpenMP thread count for a scope (a thread's own count: other
// threads keep theirs). The runners give each thread that steps beside another its share of
// the cores: full-width teams on both would oversubscribe them, and spinning libgomp workers
// then slow every team down by an order of magnitude.
#pragma once

#include <omp.h>

namespace fp4d {

struct OmpThreads {
  int saved;
  explicit OmpThreads(int n) : saved(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;
};

}  // namespace fp4d
