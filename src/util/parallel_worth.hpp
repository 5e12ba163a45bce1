// Whether a loop of `work` elementary operations (elements touched, or multiply-adds) is worth
// an OpenMP team. Waking a team costs microseconds (tens under passive waiting, and more with
// many threads), more than a small model's quantization or GEMM takes on one core: on a 2-core
// machine lm-quick's steps ran slower on 2 threads than on 1 before the loops asked this.
// Every parallel loop of the project gives the same bits for any thread count, so the answer
// changes only the time.
#pragma once

#include <cstdint>

namespace fp4d {

inline constexpr std::int64_t kParallelWork = std::int64_t{1} << 16;

inline bool parallel_worth(std::int64_t work) { return work >= kParallelWork; }

}  // namespace fp4d
