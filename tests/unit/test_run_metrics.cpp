// The run summary's statistics (trace/run_metrics.hpp) against hand-computed cases: the
// trailing gap window's bounds and mean, the multi-layer Frobenius ratio, exact power laws,
// a curve made of two power laws, and the slope interval's coverage on seeded noisy data.
#include "trace/run_metrics.hpp"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "support/catch.hpp"

using namespace fp4d::run_metrics;

namespace {
// |a - b| <= tol (Catch's Approx is spelled differently in 2.13 and 3.4).
bool near(double a, double b, double tol) { return std::abs(a - b) <= tol; }

std::vector<std::int64_t> range_steps(std::int64_t first, std::int64_t last, std::int64_t every) {
  std::vector<std::int64_t> s;
  for (std::int64_t x = first; x <= last; x += every) s.push_back(x);
  return s;
}
}  // namespace

TEST_CASE("trailing gap window: the last tenth, at least 20 records, the mean of the per-step gaps", "[run_metrics]") {
  // 600 records, steps 0..599: the last 60 (steps 540..599); gap = step / 1000 -> mean 0.5695.
  std::vector<std::int64_t> s = range_steps(0, 599, 1);
  std::vector<double> g;
  for (auto x : s) g.push_back(static_cast<double>(x) / 1000);
  GapWindow w = trailing_gap_mean(s, g);
  CHECK(w.records == 60);
  CHECK(w.first_step == 540);
  CHECK(w.last_step == 599);
  CHECK(near(w.mean, 0.5695, 1e-14 * std::abs(0.5695)));
  // 100 records: a tenth is 10, the floor of 20 wins (steps 80..99, mean 0.0895).
  s.resize(100), g.resize(100);
  w = trailing_gap_mean(s, g);
  CHECK(w.records == 20);
  CHECK(w.first_step == 80);
  CHECK(near(w.mean, 0.0895, 1e-14 * std::abs(0.0895)));
  // 5 records: all of them. 201 records at a tenth: ceil(20.1) = 21.
  const std::vector<std::int64_t> s5{0, 2, 4, 6, 8};
  w = trailing_gap_mean(s5, {1, 2, 3, 4, 5});
  CHECK(w.records == 5);
  CHECK(w.first_step == 0);
  CHECK(w.mean == 3.0);
  CHECK(trailing_gap_mean(range_steps(0, 200, 1), std::vector<double>(201, 1.0)).records == 21);
  // A non-finite gap in the window makes the mean NaN, not a number that hides a divergence.
  CHECK(std::isnan(trailing_gap_mean(s5, {1, 2, 3, std::nan(""), 5}).mean));
  // A different parameter: a quarter, at least 1.
  w = trailing_gap_mean(s5, {1, 2, 3, 4, 5}, 0.25, 1);
  CHECK(w.records == 2);
  CHECK(w.mean == 4.5);
}

TEST_CASE("aggregate relative error: one Frobenius ratio over layers", "[run_metrics]") {
  // Layer A: ||W_ref||^2 = 4, ||dW|| = 1 (e = 0.5); layer B: ||W_ref||^2 = 100, ||dW|| = 3 (e = 0.3):
  // together sqrt((1 + 9) / 104).
  CHECK(near(aggregate_rel_error({0.5, 0.3}, {4, 100}), std::sqrt(10.0 / 104), 1e-15 * std::abs(std::sqrt(10.0 / 104))));
  CHECK(near(aggregate_rel_error({0.25}, {7}), 0.25, 1e-15 * std::abs(0.25)));
  CHECK(std::isnan(aggregate_rel_error({}, {})));
}

TEST_CASE("t quantiles match the tables", "[run_metrics]") {
  CHECK(near(t_quantile(0.975, 1), 12.7062047, 1e-7 * std::abs(12.7062047)));
  CHECK(near(t_quantile(0.975, 2), 4.30265273, 1e-7 * std::abs(4.30265273)));
  CHECK(near(t_quantile(0.975, 10), 2.22813885, 1e-7 * std::abs(2.22813885)));
  CHECK(near(t_quantile(0.975, 30), 2.04227246, 1e-7 * std::abs(2.04227246)));
}

TEST_CASE("local exponents: exact power laws and two joined power laws", "[run_metrics]") {
  const std::vector<std::int64_t> s = range_steps(10, 2000, 10);
  std::vector<double> e;
  for (auto x : s) e.push_back(3e-4 * std::pow(static_cast<double>(x), 0.5));
  const std::vector<SlopeWindow> w = local_exponents(s, e);
  // windows (1000, 2000], (500, 1000], (250, 500], (125, 250], (62.5, 125], (31.25, 62.5]; (15.6, 31.25]
  // holds 20 and 30 only.
  REQUIRE(w.size() == 6);
  CHECK(w.back().first_step == 1010);
  CHECK(w.back().last_step == 2000);
  CHECK(w.back().points == 100);
  CHECK(w.front().first_step == 40);
  CHECK(w.front().last_step == 60);
  for (const SlopeWindow& x : w) {
    CHECK(near(x.slope, 0.5, 1e-12));
    CHECK(x.ci_high - x.ci_low < 1e-9);
  }
  // Exponent 0.25 up to step 500, 0.7 after it (continuous at 500): every window on one side
  // sees its own exponent exactly, and the final one is 0.7.
  std::vector<double> b;
  for (auto x : s) {
    const double t = static_cast<double>(x);
    b.push_back(t <= 500 ? std::pow(t, 0.25) : std::pow(500.0, 0.25) * std::pow(t / 500, 0.7));
  }
  const std::vector<SlopeWindow> v = local_exponents(s, b);
  REQUIRE(v.size() == 6);
  CHECK(near(v[5].slope, 0.7, 1e-12));   // (1000, 2000]
  CHECK(near(v[4].slope, 0.7, 1e-12));   // (500, 1000]
  CHECK(near(v[3].slope, 0.25, 1e-12));  // (250, 500]
  CHECK(near(v[0].slope, 0.25, 1e-12));
  CHECK(near(final_growth_window(s, b).slope, 0.7, 1e-12));
  // One power law through the whole curve is neither exponent: why the headline is windowed.
  const SlopeWindow all = fit_slope(s, b, 0, 2000);
  CHECK(all.slope > 0.3);
  CHECK(all.slope < 0.65);
}

TEST_CASE("the slope's 95% t interval covers the true exponent at its confidence on noisy data", "[run_metrics]") {
  // log e = log 0.01 + 0.6 log s + N(0, 0.05^2), independent residuals (the interval's
  // assumption): over 2000 seeded replicates the coverage is 0.95 with a binomial sd of 0.0049;
  // it must lie within 4 sd (0.930 .. 0.970). This seed's outcome is fixed.
  const std::vector<std::int64_t> s = range_steps(10, 400, 10);
  std::mt19937_64 rng(20261204);
  std::normal_distribution<double> noise(0.0, 0.05);
  int covered = 0;
  const int reps = 2000;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> e;
    for (auto x : s) e.push_back(0.01 * std::pow(static_cast<double>(x), 0.6) * std::exp(noise(rng)));
    const SlopeWindow w = final_growth_window(s, e);
    REQUIRE(w.points == 20);
    covered += w.ci_low <= 0.6 && 0.6 <= w.ci_high;
  }
  const double c = static_cast<double>(covered) / reps;
  CHECK(c > 0.95 - 4 * 0.0049);
  CHECK(c < 0.95 + 4 * 0.0049);
}
