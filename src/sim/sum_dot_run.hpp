// The `sum` and `dot` workloads of `fp4drift run`: the [sum] / [dot] section of a
// config file -> SumDotOptions and terms, and the run itself. Its trace is
// trace/sum_dot_trace.hpp's.
//
//   workload = "sum"            # or "dot"
//   [sum]                       # [dot] for dot products
//   terms = "constant"          # uniform | normal | constant | harmonic | alternating |
//                               # alternating-harmonic (sum_dot.hpp's TermSpec)
//   c = 1.0                     # scale of the terms
//   n = 4096                    # number of terms (points are recorded at powers of two)
//   format = "fp16"             # accumulator: fp32 | bf16 | fp16 | e4m3 | e5m2 | e2m1
//   rounding = "sr"             # rne | rz | sr
//   sr_bits = 0                 # SR: 0 = exact, else k random bits
//   runs = 64                   # SR: independent runs (seeds seed, seed+1, ...)
//   seed = 1                    # terms and SR
//   float32_terms = true        # round every term to float32
//   round_products = true       # dot only: p_i = round(a_i b_i)
//   b_terms = "uniform"         # dot only: the second vector (default: terms)
//   b_c = 1.0                   # dot only (default: c)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/sum_dot.hpp"
#include "util/config.hpp"

namespace fp4d {

struct SumDotRun {
  bool dot = false;
  TermSpec a, b;
  std::int64_t n = 0;
  SumDotOptions options;
  std::string format_name, rounding_name;
};

// Reads the workload's section (every key checked, ranges with the key named). steps > 0
// overrides n (the CLI's --steps).
SumDotRun parse_sum_dot_run(Config& cfg, const std::string& workload, std::int64_t steps = 0);

// stop: checked every few thousand terms (SumDotInterrupted when it became true).
SumDotResult run_sum_dot(const SumDotRun& run, const std::atomic<bool>* stop = nullptr);

}  // namespace fp4d
