// The headline statistics of a training run's summary (docs/numerics.md, "Run summary
// metrics"): the loss gap as a mean over a stated trailing window, the weight error of a set
// of layers as one Frobenius ratio, and growth exponents as least-squares slopes over stated
// windows of the log-log curve with Student t intervals. The one C++ definition of each; the
// Python one is analysis/fp4drift_analysis/stats.py (window_mean_gap, local_exponents), and the
// two are tested against the same hand-computed cases.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

namespace fp4d::run_metrics {

// The trailing window of the loss gap: the last tenth of the records, but at least this many
// (all of them in a shorter run). Per-batch losses are noisy (a batch's gap moves by several
// percent from one step to the next in the quick runs), so a single record is not the run's gap;
// a tenth of the run is late enough to be the trained state and long enough that the mean's
// standard error is well below its value, and 20 records keep short runs from averaging 2-3.
inline constexpr double kGapWindowFraction = 0.1;
inline constexpr std::int64_t kGapWindowMinRecords = 20;

struct GapWindow {
  double mean = std::numeric_limits<double>::quiet_NaN();  // NaN when a gap in the window is not finite
  std::int64_t first_step = -1, last_step = -1;            // recorded steps, inclusive
  std::int64_t records = 0;
};

// Mean of gap[i] over the last max(min_records, ceil(fraction * N)) records (capped at N).
inline GapWindow trailing_gap_mean(const std::vector<std::int64_t>& steps, const std::vector<double>& gap,
                                   double fraction = kGapWindowFraction,
                                   std::int64_t min_records = kGapWindowMinRecords) {
  if (steps.size() != gap.size()) throw std::invalid_argument("trailing_gap_mean: steps and gaps differ in length");
  if (!(fraction > 0 && fraction <= 1) || min_records < 1)
    throw std::invalid_argument("trailing_gap_mean: fraction must be in (0, 1] and min_records >= 1");
  GapWindow w;
  const auto n = static_cast<std::int64_t>(gap.size());
  if (n == 0) return w;
  const auto by_fraction = static_cast<std::int64_t>(std::ceil(fraction * static_cast<double>(n) - 1e-9));
  w.records = std::min(n, std::max(min_records, by_fraction));
  const std::size_t first = static_cast<std::size_t>(n - w.records);
  w.first_step = steps[first];
  w.last_step = steps.back();
  double sum = 0;
  for (std::size_t i = first; i < gap.size(); ++i) sum += gap[i];
  w.mean = std::isfinite(sum) ? sum / static_cast<double>(w.records) : std::numeric_limits<double>::quiet_NaN();
  return w;
}

// ||W - W_ref||_F / ||W_ref||_F over several layers together, from each layer's relative error
// e_l and ||W_ref,l||_F^2: sqrt(sum e_l^2 n_l / sum n_l). Exact: e_l^2 n_l is layer l's squared
// difference norm.
inline double aggregate_rel_error(const std::vector<double>& rel_error, const std::vector<double>& ref_sq_norm) {
  if (rel_error.size() != ref_sq_norm.size())
    throw std::invalid_argument("aggregate_rel_error: errors and norms differ in length");
  if (rel_error.empty()) return std::numeric_limits<double>::quiet_NaN();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < rel_error.size(); ++i) num += rel_error[i] * rel_error[i] * ref_sq_norm[i], den += ref_sq_norm[i];
  return std::sqrt(num / den);
}

// P(|T| <= t) for Student's t with integer dof >= 1 (Abramowitz & Stegun 26.7.3 / 26.7.4).
inline double t_two_sided_mass(double t, int dof) {
  t = std::abs(t);
  if (std::isinf(t)) return 1.0;
  const double pi = 3.14159265358979323846;
  const double theta = std::atan(t / std::sqrt(static_cast<double>(dof)));
  const double s = std::sin(theta), c2 = std::cos(theta) * std::cos(theta);
  if (dof % 2 == 0) {
    double term = 1, total = 1;
    for (int k = 2; k < dof; k += 2) term *= c2 * (k - 1) / k, total += term;
    return std::min(1.0, s * total);
  }
  if (dof == 1) return 2 * theta / pi;
  double term = 1, total = 1;
  for (int k = 3; k < dof - 1; k += 2) term *= c2 * (k - 1) / k, total += term;
  return std::min(1.0, 2 / pi * (theta + s * std::cos(theta) * total));
}

// The p quantile (0.5 < p < 1) of Student's t, by bisection on the monotone mass above.
inline double t_quantile(double p, int dof) {
  const double target = 2 * p - 1;
  double lo = 0, hi = 1;
  while (t_two_sided_mass(hi, dof) < target) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (t_two_sided_mass(mid, dof) < target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

inline constexpr double kSlopeConfidence = 0.95;
inline constexpr double kWindowFactor = 2.0;  // a local exponent's window spans a factor 2 in steps

// The slope of log(error) against log(step) over the compares with lo < step <= hi, by least
// squares, and its t interval from the residuals (n - 2 degrees of freedom; the residuals of
// one trajectory are correlated, so read it as the fit's precision on this trajectory). Points
// with a non-positive or non-finite error are left out; fewer than 3 points give NaN.
struct SlopeWindow {
  std::int64_t first_step = -1, last_step = -1;  // the compares used
  std::int64_t points = 0;
  double slope = std::numeric_limits<double>::quiet_NaN();
  double ci_low = std::numeric_limits<double>::quiet_NaN(), ci_high = std::numeric_limits<double>::quiet_NaN();
};

inline SlopeWindow fit_slope(const std::vector<std::int64_t>& steps, const std::vector<double>& err, double lo,
                             double hi, double confidence = kSlopeConfidence) {
  std::vector<double> x, y;
  SlopeWindow w;
  for (std::size_t i = 0; i < steps.size() && i < err.size(); ++i) {
    const auto s = static_cast<double>(steps[i]);
    if (!(s > lo && s <= hi && s > 0 && err[i] > 0 && std::isfinite(err[i]))) continue;
    if (w.first_step < 0) w.first_step = steps[i];
    w.last_step = steps[i];
    x.push_back(std::log(s)), y.push_back(std::log(err[i]));
  }
  w.points = static_cast<std::int64_t>(x.size());
  if (x.size() < 3) return w;
  const double n = static_cast<double>(x.size());
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) mx += x[i], my += y[i];
  mx /= n, my /= n;
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
  if (sxx == 0) return w;
  w.slope = sxy / sxx;
  double rss = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double u = y[i] - my - w.slope * (x[i] - mx);
    rss += u * u;
  }
  const int dof = static_cast<int>(x.size()) - 2;
  const double half = t_quantile(0.5 + confidence / 2, dof) * std::sqrt(rss / dof / sxx);
  w.ci_low = w.slope - half, w.ci_high = w.slope + half;
  return w;
}

// Local exponents: slopes over the windows (S / f^(k+1), S / f^k], k = 0, 1, ..., anchored at the
// last compare S and going back while a window still holds 3 compares; listed in step order.
// The first of them in reverse, (S / f, S], is the run's headline growth exponent: the growth
// where the run ended, over a stated window, rather than one power law fitted through a curve
// that bends.
inline std::vector<SlopeWindow> local_exponents(const std::vector<std::int64_t>& steps, const std::vector<double>& err,
                                                double factor = kWindowFactor, double confidence = kSlopeConfidence) {
  if (!(factor > 1)) throw std::invalid_argument("local_exponents: the window factor must exceed 1");
  std::vector<SlopeWindow> out;
  if (steps.empty() || steps.back() <= 0) return out;
  for (double hi = static_cast<double>(steps.back()); hi >= 1; hi /= factor) {
    const SlopeWindow w = fit_slope(steps, err, hi / factor, hi, confidence);
    if (w.points < 3) break;
    out.push_back(w);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// The headline exponent: the last window's slope (NaN windows when there are too few compares).
inline SlopeWindow final_growth_window(const std::vector<std::int64_t>& steps, const std::vector<double>& err,
                                       double factor = kWindowFactor, double confidence = kSlopeConfidence) {
  if (steps.empty() || steps.back() <= 0) return {};
  const auto hi = static_cast<double>(steps.back());
  return fit_slope(steps, err, hi / factor, hi, confidence);
}

}  // namespace fp4d::run_metrics
