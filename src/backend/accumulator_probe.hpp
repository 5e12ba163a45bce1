// The accumulator probe's result (docs/numerics.md 8b), in a header of its own so that the
// seam (backend.hpp) and the CUDA code that measures it (cuda/gemm.hpp) share one type without
// the kernels' translation units pulling in the rest of the seam.
#pragma once

#include <cstdint>
#include <string>

namespace fp4d {

// One line of the accumulator probe: how many bits below the running sum's leading bit a
// GEMM path keeps.
struct AccumulatorProbe {
  std::string path;       // "bf16", "fp16", "fp8-e4m3", "fp8-e4m3-fast-accum"
  std::string placement;  // "adjacent" (k = 0, 1), "far" (k = 0, K-1), "small-first" (k = 0 small, K-1 big)
  std::int64_t K = 0;
  int kept_bits = 0;
  int max_t = 0;  // largest t the probe could represent in that input format
  // Placement "promotion": one product 1 at k = 0 and K - 1 products 2^-18 after it, below what an
  // accumulator of 13 fraction bits (Hopper's FP8 MMA) keeps beside 1 but exact in FP32. The
  // number of small products that reached the result: K - 1 where nothing is lost (an FP32
  // accumulator), 0 where nothing is promoted to FP32 within K, K - n where the partial sums are
  // promoted every n products (the first chunk's small products are lost beside the 1). -1 for
  // the other placements.
  std::int64_t promoted_small_terms = -1;
};

}  // namespace fp4d
