// The `sum` and `dot` workloads: recursive sums and inner products of n terms with the running sum
// held in any FloatFormat under any rounding mode, compared at every power-of-two n with the
// exact value (the classic RN stagnation and sqrt(n) u experiments).
//
//   sum:  s_0 = 0,  s_i = round(s_{i-1} + t_i)
//   dot:  s_i = round(s_{i-1} + p_i),  p_i = round(a_i b_i)  or  p_i = a_i b_i exactly
// Every addition and product is formed exactly (TwoSum / TwoProd pairs) and rounded once to
// the accumulator format, so the only errors are the roundings the format forces; RNE, RZ and
// SR (exact or k-bit, rounding.hpp's decision) are all applied to that exact value. The exact
// value is the exact sum of the terms as given, kept in a fixed-point accumulator.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/float_format.hpp"
#include "format/rounding.hpp"

namespace fp4d {

// Terms, deterministic from a seed through Philox (term i is a pure function of seed, stream
// and i). The first term is i = 1.
struct TermSpec {
  // uniform: c * U[0,1)   normal: c * N(0,1)   constant: c   harmonic: c / i
  // alternating: c * (-1)^(i+1)   alternating-harmonic: c * (-1)^(i+1) / i
  std::string kind = "uniform";
  double c = 1.0;
  std::uint64_t seed = 1;
  bool float32 = true;  // round every term to float32 (RNE): values an fp32 program holds
};

// n terms; stream separates independent vectors of one seed (a and b of a dot product).
// Throws std::invalid_argument for unknown kinds, n < 0 or non-finite c.
// Thrown by make_terms and sum_dot when *stop became true (a signal handler sets it): long
// runs stop within a few thousand terms instead of running to the end.
struct SumDotInterrupted : std::runtime_error {
  SumDotInterrupted() : std::runtime_error("sum/dot run interrupted") {}
};

std::vector<double> make_terms(const TermSpec& t, std::int64_t n, std::uint64_t stream = 0,
                               const std::atomic<bool>* stop = nullptr);

struct SumDotOptions {
  FloatFormat format = format_fp32();  // the accumulator (and the rounded products)
  RoundingSpec rounding{};
  // SR: independent runs; run r draws from seed rounding.rng.seed + r. RNE/RZ: always 1 run.
  int runs = 1;
  bool round_products = true;  // dot: p_i = round(a_i b_i) in the same format and mode
  const std::atomic<bool>* stop = nullptr;  // when set and true: SumDotInterrupted
};

struct SumDotPoint {
  std::int64_t n = 0;
  double exact = 0.0;              // the exact value, RNE to double
  std::vector<double> computed;    // s_n, per run
  std::vector<double> error;       // s_n - exact per run: the exact difference, RNE to double
  double abs_error = 0.0;          // |error| of run 0
  double rel_error = 0.0;          // |error| / |exact| of run 0 (0 when both are 0)
  double mean_error = 0.0;         // over runs
  double rms_error = 0.0;          // sqrt(mean of error^2) over runs
  // Every rounding of x between neighbours lo < |x| < hi adds an error whose variance under
  // exact SR is f (1 - f) step^2 (f = (|x| - lo) / step, step = hi - lo) <= step^2 / 4, and
  // the errors are martingale increments, so E[error^2] = E[sum of f (1 - f) step^2].
  // Both sums over i <= n (product roundings included), averaged over runs; 0 unless SR.
  double sr_variance = 0.0;        // mean of sum f (1 - f) step^2
  double sr_half_step_sq = 0.0;    // mean of sum step^2 / 4
};

struct SumDotResult {
  std::vector<SumDotPoint> points;            // n = 1, 2, 4, ... <= N, and N itself
  std::vector<std::int64_t> first_stagnation; // per run: first i with a non-zero addend and
                                              // s_i == s_{i-1} (an update lost); -1 if none
};

// b empty: the sum of a; else the dot product of a and b (equal lengths, else
// std::invalid_argument). Terms must be finite. A dot with round_products = false needs
// every a_i b_i exact in double (true for float32 terms), else std::invalid_argument.
SumDotResult sum_dot(const SumDotOptions& opt, std::span<const double> a, std::span<const double> b = {});

// x = hi + lo exactly (a TwoSum or TwoProd pair, |lo| <= ulp(hi) / 2) rounded once to f with
// the given mode; SR draws element `element` of stream s (primary word w = its Philox word).
// If var is given, f (1 - f) step^2 and step^2 / 4 of an inexact rounding are added to
// var[0], var[1]. Overflow: RNE and RZ as FloatFormat rounds (IEEE: RZ saturates); SR beyond
// the largest finite value applies f's rule for an infinite input (saturate, Inf or NaN).
double round_exact(const FloatFormat& f, double hi, double lo, const RoundingSpec& r, RngStream s,
                   std::uint64_t element, std::uint32_t w, double* var = nullptr);

// rounding.hpp's SR decision for a fraction fh + fl in (0, 1) given as a normalized
// double-double (exact sums and products can need more bits than a float32 fraction):
// identical to sr_round_up where fh + fl is a float32; otherwise the same comparison of the
// fraction's base-2^32 digits with w and the 128 extension bits, which decides exactly unless
// the fraction is longer than 160 bits (then P(up) falls short of f by less than 2^-160).
bool sr_round_up_wide(double fh, double fl, std::uint32_t w, int sr_bits, RngStream s, std::uint64_t element);

}  // namespace fp4d
