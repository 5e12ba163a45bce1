// The growth-exponent attributes of a run's summary, written alike for mlp and lm runs
// (docs/trace-format.md, "Run summary attributes").
#pragma once

#include <cstdint>
#include <vector>

#include "trace/h5.hpp"
#include "trace/run_metrics.hpp"

namespace fp4d {

// The headline exponent over its stated window with its interval, and the local exponents as
// parallel lists in step order (a list of attributes reads back with h5py as arrays).
inline void write_run_growth_attributes(h5::Group g, const run_metrics::SlopeWindow& fit,
                                        const std::vector<run_metrics::SlopeWindow>& local) {
  g.set_attr("quantized_growth_exponent", fit.slope);
  g.set_attr("quantized_growth_ci", std::vector<double>{fit.ci_low, fit.ci_high});
  g.set_attr("quantized_growth_window", std::vector<std::int64_t>{fit.first_step, fit.last_step});
  std::vector<std::int64_t> first, last;
  std::vector<double> slope, lo, hi;
  for (const run_metrics::SlopeWindow& w : local) {
    first.push_back(w.first_step), last.push_back(w.last_step);
    slope.push_back(w.slope), lo.push_back(w.ci_low), hi.push_back(w.ci_high);
  }
  g.set_attr("local_exponent_first_step", first);
  g.set_attr("local_exponent_last_step", last);
  g.set_attr("local_exponent", slope);
  g.set_attr("local_exponent_ci_low", lo);
  g.set_attr("local_exponent_ci_high", hi);
}

}  // namespace fp4d
