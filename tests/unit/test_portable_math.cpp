// format/portable_math.hpp against oracles of higher precision: Boost.Multiprecision's 50-digit
// exp, log, log1p and erf. The bounds are what the formulas guarantee, not what was observed:
//   - the double functions are within 1 ulp of the exact value (each is a sum of a leading
//     term rounded once and a correction whose rounding errors total well under half an ulp);
//   - the float functions round a double within 2^-48 (relative) of the exact value (exp and
//     log1p within a few units of 2^-53; erf's series adds up to ~100 terms, each with a few
//     roundings: 2^-48.8 at worst near |x| = 6, 2^-49 below 3.92 where its float is not 1), so
//     they equal the correctly rounded float wherever the exact value is not within 2^-46 of a
//     rounding boundary (a midpoint between floats, a 4x margin); the test skips only those
//     points and counts them, which must be rare.
#include <boost/math/special_functions/erf.hpp>
#include <boost/multiprecision/cpp_bin_float.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "format/portable_math.hpp"
#include "support/catch.hpp"

using namespace fp4d;
using Big = boost::multiprecision::cpp_bin_float_50;

namespace {

// |got - exact| in units of the last place of double at `exact`.
double ulps_double(double got, const Big& exact) {
  const double e = static_cast<double>(exact);
  const double ulp = std::nextafter(std::fabs(e), std::numeric_limits<double>::infinity()) - std::fabs(e);
  const Big diff = abs(Big(got) - exact);
  return static_cast<double>(diff / Big(ulp));
}

// Whether exact lies within 2^-46 (relative) of a midpoint between two floats.
bool near_float_midpoint(const Big& exact) {
  const float f = static_cast<float>(static_cast<double>(exact));
  const float up = std::nextafter(f, std::numeric_limits<float>::infinity());
  const float dn = std::nextafter(f, -std::numeric_limits<float>::infinity());
  const Big band = abs(exact) * Big(std::ldexp(1.0, -46));
  for (const float o : {up, dn}) {
    const Big mid = (Big(f) + Big(o)) / 2;
    if (abs(exact - mid) <= band) return true;
  }
  return false;
}

// max_ulps > 0: |error| in ulps of the exact value; max_ulps < 0: |relative error| in units of
// 2^-53 (the unit roundoff), -max_ulps of them.
template <class F, class G>
void check_double(const std::vector<double>& xs, F ours, G exact, double max_ulps) {
  double worst = 0.0, worst_x = 0.0;
  for (const double x : xs) {
    const Big e = exact(Big(x));
    const double u = max_ulps > 0 ? ulps_double(ours(x), e)
                                  : static_cast<double>(abs(Big(ours(x)) - e) / abs(e) * Big(std::ldexp(1.0, 53)));
    if (u > worst) {
      worst = u;
      worst_x = x;
    }
  }
  INFO("worst " << worst << " ulp at x = " << worst_x);
  CHECK(worst <= (max_ulps > 0 ? max_ulps : -max_ulps));
}

template <class F, class G>
void check_float(const std::vector<float>& xs, F ours, G exact) {
  std::int64_t skipped = 0, wrong = 0;
  float first_wrong = 0.0f;
  for (const float x : xs) {
    const Big e = exact(Big(x));
    if (near_float_midpoint(e)) {
      ++skipped;
      continue;
    }
    // The correctly rounded float: the nearest float to the exact value (via double, which is
    // exact enough away from midpoints).
    const float want = static_cast<float>(static_cast<double>(e));
    const float got = ours(x);
    if (float_bits(got) != float_bits(want)) {
      if (wrong++ == 0) first_wrong = x;
    }
  }
  INFO("wrong " << wrong << " (first at x = " << first_wrong << "), skipped near midpoints " << skipped);
  CHECK(wrong == 0);
  CHECK(skipped * 1000 <= static_cast<std::int64_t>(xs.size()));
}

std::vector<double> doubles_in(double lo, double hi, int n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> xs;
  for (int i = 0; i < n; ++i) xs.push_back(u(g));
  return xs;
}

// n floats spread evenly over the bit patterns between lo and hi (same sign), both ends included.
std::vector<float> floats_between(float lo, float hi, int n) {
  const std::int64_t a = float_bits(lo), b = float_bits(hi);
  std::vector<float> xs;
  for (int i = 0; i < n; ++i) xs.push_back(bits_float(static_cast<std::uint32_t>(a + (b - a) * i / (n - 1))));
  return xs;
}

}  // namespace

TEST_CASE("portable exp is within 1 ulp of exp over the whole range", "[portable_math]") {
  std::vector<double> xs = doubles_in(-745.0, 709.7, 4000, 1);
  for (const double x : doubles_in(-1.0, 1.0, 2000, 2)) xs.push_back(x);
  for (const double x : doubles_in(-1e-6, 1e-6, 500, 3)) xs.push_back(x);
  for (const double x : {0.0, 1.0, -1.0, 0.5 * 0.6931471805599453, 709.78, -708.4, -740.0}) xs.push_back(x);
  check_double(xs, [](double x) { return pmath::exp(x); }, [](const Big& x) { return Big(exp(x)); }, 1.0);
}

TEST_CASE("portable exp's special values", "[portable_math]") {
  CHECK(pmath::exp(0.0) == 1.0);
  CHECK(pmath::exp(-0.0) == 1.0);
  CHECK(std::isinf(pmath::exp(710.0)));
  CHECK(std::isinf(pmath::exp(std::numeric_limits<double>::infinity())));
  CHECK(pmath::exp(-746.0) == 0.0);
  CHECK(pmath::exp(-std::numeric_limits<double>::infinity()) == 0.0);
  CHECK(std::isnan(pmath::exp(std::nan(""))));
  // The least subnormal is e^-744.44...: reached by the two-step scaling, not flushed.
  CHECK(pmath::exp(-744.4) == std::numeric_limits<double>::denorm_min());
}

TEST_CASE("portable log and log1p are within 1 ulp", "[portable_math]") {
  std::vector<double> xs;
  for (const double e : doubles_in(-700.0, 700.0, 3000, 4)) xs.push_back(std::exp(e));
  for (const double x : doubles_in(0.5, 2.0, 3000, 5)) xs.push_back(x);
  for (const double x : {1.0, 2.0, 0.5, std::sqrt(2.0), 4.9e-320, 1e-310, 1.7e308}) xs.push_back(x);
  check_double(xs, [](double x) { return pmath::log(x); }, [](const Big& x) { return Big(log(x)); }, 1.0);

  std::vector<double> ys = doubles_in(-0.999, 4.0, 3000, 6);
  for (const double y : doubles_in(-1e-8, 1e-8, 1000, 7)) ys.push_back(y);
  for (const double e : doubles_in(-300.0, 300.0, 1000, 8)) ys.push_back(std::exp(e));
  // Goldberg's theorem 4: with log within half an ulp the trick's relative error is at most 5
  // unit roundoffs; ours is within one ulp (checked above), which adds one more: 6.
  check_double(ys, [](double x) { return pmath::log1p(x); }, [](const Big& x) { return Big(log1p(x)); }, -6.0);

  CHECK(pmath::log(1.0) == 0.0);
  CHECK(std::isinf(pmath::log(0.0)));
  CHECK(pmath::log(0.0) < 0.0);
  CHECK(std::isnan(pmath::log(-1.0)));
  CHECK(pmath::log1p(0.0) == 0.0);
  CHECK(pmath::log1p(1e-300) == 1e-300);
  CHECK(std::isinf(pmath::log1p(-1.0)));
}

TEST_CASE("portable float exp, log1p and erf are correctly rounded away from midpoints", "[portable_math]") {
  std::vector<float> xs = floats_between(0.0f, 88.7f, 20000);
  for (const float x : floats_between(-0.0f, -103.9f, 20000)) xs.push_back(x);
  check_float(xs, [](float x) { return pmath::expf(x); }, [](const Big& x) { return Big(exp(x)); });

  std::vector<float> ys = floats_between(1e-30f, 3e38f, 20000);
  for (const float y : floats_between(-1e-30f, -0.99f, 20000)) ys.push_back(y);
  check_float(ys, [](float x) { return pmath::log1pf(x); }, [](const Big& x) { return Big(log1p(x)); });

  std::vector<float> zs = floats_between(1e-30f, 6.5f, 20000);
  for (const float z : floats_between(-1e-30f, -6.5f, 20000)) zs.push_back(z);
  check_float(zs, [](float x) { return pmath::erff(x); }, [](const Big& x) { return Big(boost::math::erf(x)); });
  CHECK(pmath::erff(0.0f) == 0.0f);
  CHECK(std::signbit(pmath::erff(-0.0f)));
  CHECK(pmath::erff(std::numeric_limits<float>::infinity()) == 1.0f);
  CHECK(pmath::erff(-std::numeric_limits<float>::infinity()) == -1.0f);
  CHECK(std::isnan(pmath::erff(std::nanf(""))));
}

TEST_CASE("portable float functions agree with glibc within 1 ulp", "[portable_math]") {
  // Not an oracle (glibc is itself within an ulp): a guard that a CPU run's numbers stay where
  // they were before it switched to these functions.
  int worst = 0;
  std::vector<float> xs = floats_between(0.0f, 20.0f, 25000);
  for (const float x : floats_between(-0.0f, -20.0f, 25000)) xs.push_back(x);
  for (const float x : xs) {
    const float a = pmath::expf(x), b = std::exp(x);
    worst = std::max(worst, std::abs(static_cast<int>(float_bits(a)) - static_cast<int>(float_bits(b))));
    const float c = pmath::erff(x), d = std::erf(x);
    if (std::signbit(c) == std::signbit(d))
      worst = std::max(worst, std::abs(static_cast<int>(float_bits(c)) - static_cast<int>(float_bits(d))));
  }
  CHECK(worst <= 1);
}
