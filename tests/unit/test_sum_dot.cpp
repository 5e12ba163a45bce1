// Recursive sums and dot products (sim/sum_dot.hpp) against closed-form theory.
//
// Expected values are derived from the format's precision p: with constant terms c the RN
// sum is exact up to 2^p c and then stagnates there (2^p c + c is a tie that rounds to the
// even 2^p c); exact SR is unbiased and its error is a martingale whose variance is at most
// sum_i step_i^2 / 4; k-bit SR rounds a fraction f up with probability floor(f 2^k) / 2^k.
//
// Statistical checks use fixed seeds and a normal (CLT) approximation of the error over R
// independent runs: each run's error is a sum of many bounded, zero-mean increments. The
// thresholds are the normal quantiles for a false-alarm probability of 1e-9:
//   kZ2 = 6.109 (two-sided, for means), kZ1 = 5.998 (one-sided, for mean squares, whose
//   standard deviation for a normal error of variance sigma^2 is sigma^2 sqrt(2 / R)).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "format/philox.hpp"
#include "sim/sum_dot.hpp"
#include "support/catch.hpp"

using namespace fp4d;

namespace {

constexpr double kZ2 = 6.109;
constexpr double kZ1 = 5.998;

std::vector<double> constant_terms(double c, std::int64_t n) {
  TermSpec t;
  t.kind = "constant";
  t.c = c;
  return make_terms(t, n);
}

SumDotOptions options(const FloatFormat& f, Rounding mode, int sr_bits = kSrExact, int runs = 1,
                      std::uint64_t seed = 7) {
  SumDotOptions o;
  o.format = f;
  o.rounding.mode = mode;
  o.rounding.sr_bits = sr_bits;
  o.rounding.rng = RngStream{seed, 3};
  o.runs = runs;
  return o;
}

const SumDotPoint& at(const SumDotResult& r, std::int64_t n) {
  for (const auto& p : r.points)
    if (p.n == n) return p;
  FAIL("no checkpoint at n = " << n);
  return r.points.front();
}

FloatFormat custom_p6() {  // a format fp4drift has no name for: p = 6, IEEE-like range
  FloatFormat f = format_fp16();
  f.name = "p6";
  f.precision = 6;
  return f;
}

}  // namespace

TEST_CASE("sum_dot: RN and RZ sums of a constant stagnate at 2^p c from n = 2^p + 1") {
  for (const FloatFormat& f : {format_fp16(), format_bf16(), format_e4m3(), format_e5m2(), custom_p6()}) {
    for (const int k : {0, 3}) {
      for (const Rounding mode : {Rounding::NearestEven, Rounding::TowardZero}) {
        const int p = f.precision;
        const double c = std::ldexp(1.0, -k);
        const double stagnation = std::ldexp(c, p);
        const std::int64_t N = std::int64_t{1} << (p + 3);
        INFO(f.name << " c = 2^-" << k << " mode " << static_cast<int>(mode));
        const SumDotResult r = sum_dot(options(f, mode), constant_terms(c, N));
        REQUIRE(r.first_stagnation.size() == 1);
        CHECK(r.first_stagnation[0] == (std::int64_t{1} << p) + 1);
        for (const SumDotPoint& pt : r.points) {
          const double n = static_cast<double>(pt.n);
          CHECK(pt.exact == n * c);
          if (pt.n <= (std::int64_t{1} << p)) {
            CHECK(pt.computed[0] == n * c);
            CHECK(pt.error[0] == 0.0);
          } else {
            CHECK(pt.computed[0] == stagnation);
            CHECK(pt.error[0] == stagnation - n * c);
            CHECK(pt.rel_error == (n * c - stagnation) / (n * c));
          }
        }
      }
    }
  }
}

TEST_CASE("sum_dot: exact SR does not stagnate; the mean error is zero within the CLT bound") {
  struct Case {
    FloatFormat f;
    double c;
  };
  constexpr int R = 256;
  for (const Case& cs : {Case{format_fp16(), 1.0}, Case{format_bf16(), 0.125}}) {
    const int p = cs.f.precision;
    const std::int64_t N = std::int64_t{1} << (p + 2);
    INFO(cs.f.name << " c = " << cs.c);
    const SumDotResult r = sum_dot(options(cs.f, Rounding::Stochastic, kSrExact, R), constant_terms(cs.c, N));
    for (const SumDotPoint& pt : r.points) {
      INFO("n = " << pt.n);
      // Var(error_n) <= E[sum step^2 / 4]; the mean of R runs has variance at most that / R.
      CHECK(std::fabs(pt.mean_error) <= kZ2 * std::sqrt(pt.sr_half_step_sq / R));
    }
    // Beyond RN's stagnation point every run keeps growing: at n = 4 * 2^p the RN sum would
    // be 2^p c, a deficit of 3 * 2^p c, far outside any run's spread (checked just above).
    const SumDotPoint& last = at(r, N);
    CHECK(*std::min_element(last.computed.begin(), last.computed.end()) > std::ldexp(cs.c, p + 1));
    CHECK(kZ2 * std::sqrt(last.sr_half_step_sq) < std::ldexp(cs.c, p + 1));  // so the check above is meaningful
  }
}

TEST_CASE("sum_dot: exact SR's RMS error follows the martingale variance and stays below sqrt(sum step^2/4)") {
  constexpr int R = 512;
  const FloatFormat f = format_fp16();
  const int p = f.precision;
  const std::int64_t N = std::int64_t{1} << (p + 3);
  const auto terms = constant_terms(1.0, N);
  const SumDotResult sr = sum_dot(options(f, Rounding::Stochastic, kSrExact, R), terms);
  const SumDotResult rn = sum_dot(options(f, Rounding::NearestEven), terms);
  const double tol = kZ1 * std::sqrt(2.0 / R);
  for (const SumDotPoint& pt : sr.points) {
    INFO("n = " << pt.n);
    const double ms = pt.rms_error * pt.rms_error;
    CHECK(ms <= pt.sr_half_step_sq * (1.0 + tol));
    if (pt.n <= (std::int64_t{1} << p)) {  // no rounding yet: every partial sum is exact
      CHECK(pt.rms_error == 0.0);
      CHECK(pt.sr_variance == 0.0);
    } else {  // E[error^2] = E[sum f (1 - f) step^2]: checks the spread from below too
      CHECK(ms >= pt.sr_variance * (1.0 - tol));
      CHECK(ms <= pt.sr_variance * (1.0 + tol));
    }
    CHECK(pt.sr_variance <= pt.sr_half_step_sq);
  }
  // The sqrt(n) growth: from n = 2^(p+1) on, the steps are >= 2 (the running sum >= 2^p),
  // so the bound grows at least like sqrt(n - 2^p) * 2 / 2.
  const SumDotPoint& last = at(sr, N);
  CHECK(last.sr_half_step_sq >= static_cast<double>(N - (std::int64_t{1} << p)));
  // Ranking: RN lost everything after 2^p (|error| = N - 2^p exactly), SR's RMS is within
  // its bound, which is smaller by orders of magnitude.
  const SumDotPoint& rn_last = at(rn, N);
  CHECK(rn_last.abs_error == static_cast<double>(N - (std::int64_t{1} << p)));
  CHECK(std::sqrt(last.sr_half_step_sq * (1.0 + tol)) < rn_last.abs_error / 10.0);
  CHECK(last.rms_error < rn_last.abs_error / 10.0);
}

TEST_CASE("sum_dot: the harmonic series in bf16: RN stagnates, SR keeps tracking it") {
  constexpr int R = 32;
  TermSpec t;
  t.kind = "harmonic";
  const auto terms = make_terms(t, std::int64_t{1} << 16);
  const SumDotResult rn = sum_dot(options(format_bf16(), Rounding::NearestEven), terms);
  const SumDotResult sr = sum_dot(options(format_bf16(), Rounding::Stochastic, kSrExact, R), terms);
  const SumDotPoint& a = rn.points.back();
  const SumDotPoint& b = sr.points.back();
  // RN stops once 1/i is below half a step of the running sum: it stagnates (some update is
  // lost) and its final value is a fixed point of s -> round(s + 1/N).
  CHECK(rn.first_stagnation[0] > 0);
  CHECK(format_bf16().round_nearest_even(a.computed[0] + terms.back()) == a.computed[0]);
  // SR: unbiased with RMS <= its bound; RN's error is larger than that bound.
  CHECK(std::fabs(b.mean_error) <= kZ2 * std::sqrt(b.sr_half_step_sq / R));
  CHECK(b.rms_error * b.rms_error <= b.sr_half_step_sq * (1.0 + kZ1 * std::sqrt(2.0 / R)));
  // RN's error exceeds the 1e-9 upper confidence bound of SR's RMS, sqrt(E[sum f (1 - f)
  // step^2] (1 + kZ1 sqrt(2 / R))), and SR's measured RMS.
  CHECK(a.abs_error > std::sqrt(b.sr_variance * (1.0 + kZ1 * std::sqrt(2.0 / R))));
  CHECK(a.abs_error > b.rms_error);
}

TEST_CASE("sum_dot: RNE/RZ equal the naive recursion in double where double is exact") {
  // Float32 uniform terms (>= 2^-24 unless 0, < 1) and running sums of <= 11 bits below
  // 2^16: s + t spans at most 16 + 24 bits, and float32 products a b are exact in double,
  // so round(s + t) evaluated in double is the exact recursion: an independent oracle.
  const std::int64_t N = std::int64_t{1} << 16;
  TermSpec ta, tb;
  tb.kind = "normal";
  const auto a = make_terms(ta, N), b = make_terms(tb, N, 1);
  for (const FloatFormat& f : {format_fp16(), format_bf16(), format_e4m3(), format_e5m2(), custom_p6()}) {
    for (const Rounding mode : {Rounding::NearestEven, Rounding::TowardZero}) {
      INFO(f.name << " mode " << static_cast<int>(mode));
      const auto rnd = [&](double x) {
        return mode == Rounding::NearestEven ? f.round_nearest_even(x) : f.round_toward_zero(x);
      };
      const SumDotResult rs = sum_dot(options(f, mode), a), rd = sum_dot(options(f, mode), a, b);
      double s = 0.0, d = 0.0;
      std::size_t j = 0;
      for (std::int64_t k = 0; k < N; ++k) {
        const auto i = static_cast<std::size_t>(k);
        s = rnd(s + a[i]);
        d = rnd(d + rnd(a[i] * b[i]));
        if (k + 1 == rs.points[j].n) {
          CHECK(rs.points[j].computed[0] == s);
          CHECK(rd.points[j].computed[0] == d);
          ++j;
        }
      }
    }
  }
}

TEST_CASE("sum_dot: small integers in fp32 are summed exactly up to 2^24 / max term") {
  constexpr int kMax = 15;
  const std::int64_t N = (std::int64_t{1} << 24) / 16;  // every partial sum < 15 * 2^20 < 2^24
  std::vector<double> t(static_cast<std::size_t>(N));
  for (std::int64_t i = 0; i < N; ++i) t[static_cast<std::size_t>(i)] = static_cast<double>((i * 7919 + 3) % (kMax + 1));
  for (const Rounding mode : {Rounding::NearestEven, Rounding::TowardZero, Rounding::Stochastic}) {
    const SumDotResult r = sum_dot(options(format_fp32(), mode), t);
    double exact = 0.0;  // < 2^53: exact in double
    std::size_t j = 0;
    for (std::int64_t i = 0; i < N; ++i) {
      exact += t[static_cast<std::size_t>(i)];
      if (i + 1 == r.points[j].n) {
        CHECK(r.points[j].exact == exact);
        CHECK(r.points[j].computed[0] == exact);
        CHECK(r.points[j].error[0] == 0.0);
        ++j;
      }
    }
    CHECK(j == r.points.size());
    CHECK(r.points.back().n == N);
    CHECK(r.first_stagnation[0] == -1);
  }
  // The same for a dot product of small integers (products <= 225, 2^16 terms < 2^24),
  // with the products exact or rounded (to fp32: they are integers < 2^24, no rounding).
  std::vector<double> a(1 << 16), b(1 << 16);
  double exact = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<double>(i % 16);
    b[i] = static_cast<double>((i * 5) % 16);
    exact += a[i] * b[i];
  }
  for (const bool rp : {true, false}) {
    SumDotOptions o = options(format_fp32(), Rounding::NearestEven);
    o.round_products = rp;
    const SumDotResult r = sum_dot(o, a, b);
    CHECK(r.points.back().exact == exact);
    CHECK(r.points.back().computed[0] == exact);
  }
}

TEST_CASE("sum_dot: a beyond-2^24 sum of fp32 terms is exact in the reference and rounded in fp32") {
  // 2^24 + 1 is not an fp32: the sum of 1s stagnates at 2^24 (RN), the exact value does not.
  const std::int64_t N = (std::int64_t{1} << 24) + 1;
  const SumDotResult r = sum_dot(options(format_fp32(), Rounding::NearestEven), constant_terms(1.0, N));
  CHECK(r.first_stagnation[0] == N);
  CHECK(r.points.back().n == N);
  CHECK(r.points.back().exact == static_cast<double>(N));
  CHECK(r.points.back().error[0] == -1.0);
}

TEST_CASE("sum_dot: k-bit SR stagnates at 2^(p+k) c, exact SR does not") {
  // With the running sum in [2^e, 2^(e+1)) the step is q = 2^(e-p+1) c and adding c is a
  // fraction f = c / q = 2^-(e-p+1). k-bit SR rounds up with probability floor(f 2^k) / 2^k:
  // exactly f while q <= 2^k c, and 0 once q = 2^(k+1) c, i.e. from s = 2^(p+k) c on, which
  // the sum reaches exactly (it moves along the grid in steps of at most 2^k c).
  constexpr int R = 16;
  const FloatFormat f = format_fp16();
  const int p = f.precision;
  for (const int k : {1, 2, 3}) {
    INFO("k = " << k);
    const std::int64_t N = std::int64_t{1} << (p + k + 2);
    const SumDotResult r = sum_dot(options(f, Rounding::Stochastic, k, R), constant_terms(1.0, N));
    for (const double s : r.points.back().computed) CHECK(s == std::ldexp(1.0, p + k));
    // Below 2^(p+k) it is unbiased (the fractions are multiples of 2^-k).
    const SumDotPoint& mid = at(r, std::int64_t{1} << (p + k - 1));
    CHECK(std::fabs(mid.mean_error) <= kZ2 * std::sqrt(mid.sr_half_step_sq / R));
  }
  const std::int64_t N = std::int64_t{1} << (p + 3);
  const SumDotResult ex = sum_dot(options(f, Rounding::Stochastic, kSrExact, R), constant_terms(1.0, N));
  for (const double s : ex.points.back().computed) CHECK(s > std::ldexp(1.0, p + 1));
}

TEST_CASE("sum_dot: the wide SR decision equals rounding.hpp's on float fractions and is exact beyond") {
  const RngStream s{12345, 6};
  for (std::uint64_t i = 0; i < 4000; ++i) {
    // Float fractions go to sr_round_up itself.
    const std::uint32_t bits = philox_word(RngStream{99, 1}, i) | 1u;
    const float f = std::ldexp(static_cast<float>(bits >> 8), -24 - static_cast<int>(i % 20));
    const std::uint32_t w = (i % 3 == 0) ? static_cast<std::uint32_t>(static_cast<double>(f) * 0x1p32)  // a tie
                                         : philox_word(s, i);
    for (const int k : {kSrExact, 1, 8, 32})
      REQUIRE(sr_round_up_wide(f, 0.0, w, k, s, i) == sr_round_up(f, w, k, s, i));
    // A 53-bit fraction m 2^-53 (not a float): its base-2^32 digits are d0 = m >> 21 and
    // d1 = (m mod 2^21) 2^11, then zeros; U < f compares (w, E0, E1, ...) with them.
    const std::uint64_t m = ((std::uint64_t{philox_word(RngStream{98, 1}, i)} << 21) ^
                             philox_word(RngStream{98, 2}, i)) & ((std::uint64_t{1} << 53) - 1);
    const double fd = static_cast<double>(m | 1u) * 0x1p-53;
    const std::uint64_t mm = m | 1u;
    const auto d0 = static_cast<std::uint32_t>(mm >> 21), d1 = static_cast<std::uint32_t>((mm & 0x1fffffu) << 11);
    const std::uint32_t w2 = (i % 2 == 0) ? d0 : philox_word(s, i);
    const Philox4x32 E = philox_extension(s, i);
    const bool expect_exact = w2 != d0 ? w2 < d0 : E.v[0] < d1;  // E0 == d1 then E1 >= 0: down
    CHECK(sr_round_up_wide(fd, 0.0, w2, kSrExact, s, i) == expect_exact);
    for (const int k : {1, 8, 32})
      CHECK(sr_round_up_wide(fd, 0.0, w2, k, s, i) == ((w2 >> (32 - k)) < (d0 >> (32 - k))));
  }
  // Fractions longer than a float, tied on the first word (w = 0): U < f decided by the
  // extension words E against f's base-2^32 digits (derived here by hand).
  for (std::uint64_t i = 0; i < 64; ++i) {
    const Philox4x32 E = philox_extension(s, i);
    const double e0 = static_cast<double>(E.v[0]);
    // f = E0 2^-64 + 2^-150: digits (0, E0, 0, 0, 0, ...): up iff E1..E3 are all 0 (never here).
    CHECK(sr_round_up_wide(e0 * 0x1p-64, 0x1p-150, 0u, kSrExact, s, i) ==
          (E.v[1] == 0 && E.v[2] == 0 && E.v[3] == 0));
    // f = (E0 + 1) 2^-64 - 2^-150: digits (0, E0, 2^32 - 1, ...): up iff E1 < 2^32 - 1 (or ties further).
    CHECK(sr_round_up_wide((e0 + 1.0) * 0x1p-64, -0x1p-150, 0u, kSrExact, s, i) == (E.v[1] < 0xffffffffu));
    // f = E0 2^-64 exactly: U >= f on the tie, down; (E0 + 1) 2^-64: E0 < E0 + 1, up.
    CHECK_FALSE(sr_round_up_wide(e0 * 0x1p-64, 0.0, 0u, kSrExact, s, i));
    CHECK(sr_round_up_wide((e0 + 1.0) * 0x1p-64, 0.0, 0u, kSrExact, s, i));
  }
}

TEST_CASE("sum_dot: one rounding of the exact sum, products rounded or exact") {
  // bf16 (p = 8), a = (1, 773/512), b = (1, 1). 773/512 = 1.5 + 2^-7 + 2^-9 (a float32).
  //  rounded products: p_2 = RNE_bf16(773/512) = 1.5 + 2^-7 (steps of 2^-7 in [1, 2)), then
  //    s_2 = RNE(2.5 + 2^-7): a tie between 2.5 and 2.5 + 2^-6 (steps of 2^-6 in [2, 4)) -> 2.5;
  //  exact products: s_2 = RNE(2.5 + 2^-7 + 2^-9), above the midpoint -> 2.5 + 2^-6.
  const std::vector<double> a{1.0, 773.0 / 512.0}, b{1.0, 1.0};
  SumDotOptions o = options(format_bf16(), Rounding::NearestEven);
  const SumDotResult r1 = sum_dot(o, a, b);
  o.round_products = false;
  const SumDotResult r2 = sum_dot(o, a, b);
  CHECK(r1.points.back().exact == 1.0 + 773.0 / 512.0);
  CHECK(r1.points.back().computed[0] == 2.5);
  CHECK(r2.points.back().computed[0] == 2.5 + 0x1p-6);
  // A sum whose exact s + t is not a double (TwoSum's lo != 0) still rounds once: fp32,
  // s = 1, t = 2^-24 + 2^-76 (a double): 1 + t is just above the midpoint 1 + 2^-24 ->
  // 1 + 2^-23 (rounding through double would give the tie, then the even 1).
  const std::vector<double> t{1.0, 0x1p-24 + 0x1p-76};
  const SumDotResult r3 = sum_dot(options(format_fp32(), Rounding::NearestEven), t);
  CHECK(r3.points.back().computed[0] == 1.0 + 0x1p-23);
  CHECK(r3.points.back().error[0] == 0x1p-24 - 0x1p-76);
  // RZ: s = 2^24, t = -2^-60: just below 2^24 -> the fp32 below it, 2^24 - 1.
  const std::vector<double> u{0x1p24, -0x1p-60};
  CHECK(sum_dot(options(format_fp32(), Rounding::TowardZero), u).points.back().computed[0] == 0x1p24 - 1.0);
}

TEST_CASE("sum_dot: same seed, same results; another seed, other SR results") {
  TermSpec t;
  t.kind = "uniform";
  t.seed = 5;
  const auto terms = make_terms(t, 1 << 14);
  CHECK(terms == make_terms(t, 1 << 14));
  for (const double x : terms) CHECK((x >= 0.0 && x < 1.0 && static_cast<double>(static_cast<float>(x)) == x));
  TermSpec t2 = t;
  t2.seed = 6;
  CHECK(terms != make_terms(t2, 1 << 14));
  CHECK(make_terms(t, 16, 1) != make_terms(t, 16, 0));  // the b stream of a dot differs from a
  for (const double x : make_terms(TermSpec{"alternating-harmonic", 2.0, 1, false}, 4)) CHECK(std::fabs(x) <= 2.0);
  CHECK(make_terms(TermSpec{"alternating-harmonic", 2.0, 1, false}, 4) == std::vector<double>{2.0, -1.0, 2.0 / 3.0, -0.5});

  const auto run = [&](std::uint64_t seed) {
    return sum_dot(options(format_bf16(), Rounding::Stochastic, kSrExact, 4, seed), terms);
  };
  const SumDotResult r1 = run(11), r2 = run(11), r3 = run(12);
  for (std::size_t j = 0; j < r1.points.size(); ++j) {
    CHECK(r1.points[j].computed == r2.points[j].computed);
    CHECK(r1.points[j].error == r2.points[j].error);
  }
  // 2^14 uniform terms in bf16: thousands of random roundings, so the runs of seed 11 and 12
  // (and the 4 runs of one seed) end apart.
  CHECK(r1.points.back().computed != r3.points.back().computed);
  const auto& c = r1.points.back().computed;
  CHECK(std::adjacent_find(c.begin(), c.end()) == c.end());
  CHECK_THROWS_AS(make_terms(TermSpec{"cauchy"}, 4), std::invalid_argument);
}
