// Stochastic rounding (format/rounding.hpp, e2m1_sr in format/e2m1.hpp).
//
// The definitions under test (rounding.hpp): for lo < |y| < hi neighbours on the E2M1 grid
// and f = (|y| - lo) / (hi - lo),
//   * k-bit SR: r = top k bits of the element's random word w; up <=> r < floor(f 2^k);
//   * exact SR: up <=> U < f for U = w / 2^32 + (128 extension bits) / 2^160, i.e. the first
//     32 bits decide unless w == floor(f 2^32), then the extension bits are compared with the
//     remainder.
// Oracles: f and floor(f 2^k) in exact double arithmetic from a hand-written grid; TE's
// software form t = |y| + u * step evaluated exactly; a 128-bit integer comparison for the
// tie-break; binomial tests for the statistics.
//
// Statistical tests use fixed seeds (deterministic); thresholds are set so that a correct
// implementation fails for a given seed with probability at most 1e-9.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "format/e2m1.hpp"
#include "format/philox.hpp"
#include "format/rounding.hpp"
#include "support/catch.hpp"

using namespace fp4d;

namespace {

constexpr double kGrid[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

// The E2M1 interval of a (0 <= a < 6): lower code c, grid step, exact fraction f in [0, 1).
struct Interval {
  unsigned lo_code;
  double lo, step, f;
};
Interval interval_of(float y) {
  const double a = std::fabs(static_cast<double>(y));
  unsigned c = 0;
  while (c < 6 && kGrid[c + 1] <= a) ++c;
  const double step = kGrid[c + 1] - kGrid[c];
  return {c, kGrid[c], step, (a - kGrid[c]) / step};  // exact: a float, the grid dyadic, step 2^j
}

std::uint8_t sign_nibble(float y) { return std::signbit(y) ? 8u : 0u; }

// y = sign * (lo + f * step) for the interval starting at grid index c, rounded to float;
// the caller recomputes the exact f of the float it got.
float make_y(unsigned c, double f, double sign) {
  return static_cast<float>(sign * (kGrid[c] + f * (kGrid[c + 1] - kGrid[c])));
}

// Inputs for the k-bit tests: every E2M1 interval, fractions of several kinds (dyadic with
// few bits, non-dyadic, close to 0 and 1), both signs; plus tiny magnitudes.
std::vector<float> sr_inputs() {
  const double fractions[] = {0.0,       std::ldexp(1.0, -12), 0.125,         0.25,      1.0 / 3.0,
                              0.5,       0.7,                  3.0 / 7.0,     0.9999,    1.0 - std::ldexp(1.0, -20),
                              0.1 + std::ldexp(1.0, -9),       0.0625 + 0.0078125 + std::ldexp(1.0, -13)};
  std::vector<float> ys;
  for (unsigned c = 0; c < 7; ++c)
    for (double f : fractions)
      for (double s : {1.0, -1.0}) ys.push_back(make_y(c, f, s));
  for (float t : {1e-30f, 1e-45f, std::ldexp(1.0f, -40), 3e-5f, 0.2f})
    for (float s : {1.0f, -1.0f}) ys.push_back(s * t);
  return ys;
}

// ---- statistics -------------------------------------------------------------------------
constexpr double kFalseAlarm = 1e-9;

// Kullback-Leibler divergence of Bernoulli(q) from Bernoulli(p), 0 < p < 1.
double kl_bernoulli(double q, double p) {
  double d = 0.0;
  if (q > 0.0) d += q * std::log(q / p);
  if (q < 1.0) d += (1.0 - q) * std::log((1.0 - q) / (1.0 - p));
  return d;
}

// Two-sided binomial test by the Chernoff-Hoeffding bound (rigorous, no approximation):
// for K ~ Binomial(N, p), P(K/N >= q) <= exp(-N KL(q||p)) for q >= p and likewise below,
// so rejecting when N KL(K/N || p) >= ln(2/alpha) has false-alarm probability <= alpha.
bool binomial_consistent(std::uint64_t k, std::uint64_t n, double p, double alpha = kFalseAlarm) {
  if (p <= 0.0) return k == 0;
  if (p >= 1.0) return k == n;
  return static_cast<double>(n) * kl_bernoulli(static_cast<double>(k) / static_cast<double>(n), p) <
         std::log(2.0 / alpha);
}

// The acceptance interval [q_lo, q_hi] of the test above (bisection on the monotone KL).
void acceptance_interval(std::uint64_t n, double p, double* q_lo, double* q_hi, double alpha = kFalseAlarm) {
  const double bound = std::log(2.0 / alpha) / static_cast<double>(n);
  double a = p, b = 1.0;
  for (int i = 0; i < 200; ++i) {
    const double m = 0.5 * (a + b);
    (kl_bernoulli(m, p) < bound ? a : b) = m;
  }
  *q_hi = b;
  a = 0.0;
  b = p;
  for (int i = 0; i < 200; ++i) {
    const double m = 0.5 * (a + b);
    (kl_bernoulli(m, p) < bound ? b : a) = m;
  }
  *q_lo = a;
}

// ---- exact tie-break oracle -------------------------------------------------------------
using u128 = unsigned __int128;

// The 128 extension bits of element i as one integer, word 0 most significant.
u128 extension_integer(RngStream s, std::uint64_t i) {
  const Philox4x32 e = philox_extension(s, i);
  return (static_cast<u128>(e.v[0]) << 96) | (static_cast<u128>(e.v[1]) << 64) | (static_cast<u128>(e.v[2]) << 32) |
         static_cast<u128>(e.v[3]);
}

// ceil(r * 2^128) for a float r in [0, 1), exactly.
u128 ceil_scaled128(float r) {
  if (r == 0.0f) return 0;
  int ex;
  const double mant = std::frexp(static_cast<double>(r), &ex);        // r = mant 2^ex, mant in [0.5, 1)
  const std::uint64_t m = static_cast<std::uint64_t>(std::ldexp(mant, 24));  // r = m 2^(ex - 24), exact
  const int shift = ex - 24 + 128;
  if (shift >= 0) return static_cast<u128>(m) << shift;
  if (shift <= -64) return 1;  // 0 < r 2^128 < 1
  const std::uint64_t q = m >> (-shift);
  return static_cast<u128>(q) + (((q << (-shift)) != m) ? 1u : 0u);
}

// Tie-break truth: the extension bits, read as a fraction in [0, 1), are below r.
bool oracle_tie_up(float r, RngStream s, std::uint64_t i) { return extension_integer(s, i) < ceil_scaled128(r); }

}  // namespace

// =====================================================================================

TEST_CASE("SR helpers: floor/fraction decomposition is exact", "[sr]") {
  for (float y : sr_inputs()) {
    const float a = std::fabs(y);
    if (a >= 6.0f) continue;
    CAPTURE(y);
    const Interval iv = interval_of(y);
    float f;
    const std::uint8_t c = e2m1_floor_and_fraction(a, &f);
    CHECK(c == iv.lo_code);
    CHECK(static_cast<double>(f) == iv.f);
    float rem;
    const std::uint32_t f32 = sr_fraction_floor32(f, &rem);
    CHECK(static_cast<double>(f32) == std::floor(std::ldexp(iv.f, 32)));
    CHECK(static_cast<double>(rem) == std::ldexp(iv.f, 32) - std::floor(std::ldexp(iv.f, 32)));
  }
  // The largest fraction below 1.
  float rem;
  CHECK(sr_fraction_floor32(std::nextafter(1.0f, 0.0f), &rem) == 0xffffff00u);
  CHECK(rem == 0.0f);
}

TEST_CASE("k-bit SR: all 2^k random prefixes round up exactly floor(f 2^k) times (k = 1..8, 12)", "[sr]") {
  const std::vector<float> ys = sr_inputs();
  const RngStream unused{11, 12};  // k-bit SR never draws extension bits
  for (int k : {1, 2, 3, 4, 5, 6, 7, 8, 12}) {
    CAPTURE(k);
    const std::uint32_t n = 1u << k;
    const std::uint32_t low_mask = (k == 32) ? 0u : (0xffffffffu >> k);
    for (float y : ys) {
      CAPTURE(y);
      const Interval iv = interval_of(y);
      const std::uint8_t lo = static_cast<std::uint8_t>(iv.lo_code | sign_nibble(y));
      const std::uint8_t hi = static_cast<std::uint8_t>((iv.lo_code + 1) | sign_nibble(y));
      const double expect_up = std::floor(std::ldexp(iv.f, k));
      // TE's software form, exact in double where |y| >= 2^-10 (all terms within 53 bits).
      const bool te_exact = std::fabs(y) >= std::ldexp(1.0f, -10);
      for (int variant = 0; variant < 3; ++variant) {  // the bits below the top k must not matter
        CAPTURE(variant);
        std::uint32_t ups = 0, others = 0, te_mismatch = 0;
        for (std::uint32_t r = 0; r < n; ++r) {
          const std::uint32_t low = variant == 0 ? 0u : variant == 1 ? low_mask : ((r * 0x9e3779b9u) ^ 0x5bd1e995u) & low_mask;
          const std::uint32_t w = (r << (32 - k)) | low;
          const std::uint8_t q = e2m1_sr(y, w, k, unused, r);
          ups += q == hi;
          others += (q != hi && q != lo);
          if (te_exact) {
            const double u = static_cast<double>(n - 1 - r) / n;  // r' = 2^k - 1 - r, uniform as r is
            const double t = std::fabs(static_cast<double>(y)) + u * iv.step;
            const double te = std::min(std::floor(t / iv.step) * iv.step, 6.0);
            te_mismatch += e2m1_decode(q) != (std::signbit(y) ? -te : te);
          }
        }
        CHECK(ups == expect_up);
        CHECK(others == 0);
        CHECK(te_mismatch == 0);
      }
    }
  }
}

TEST_CASE("SR saturates at 6, maps NaN to 0x7, keeps the sign of zero", "[sr]") {
  const RngStream s{1, 1};
  for (int k : {kSrExact, 1, 8, 32})
    for (std::uint32_t w : {0u, 0x80000000u, 0xffffffffu}) {
      CAPTURE(k, w);
      CHECK(e2m1_sr(6.0f, w, k, s, 0) == 0x7);
      CHECK(e2m1_sr(7.5f, w, k, s, 0) == 0x7);
      CHECK(e2m1_sr(std::numeric_limits<float>::infinity(), w, k, s, 0) == 0x7);
      CHECK(e2m1_sr(-1e30f, w, k, s, 0) == 0xf);
      CHECK(e2m1_sr(std::nanf(""), w, k, s, 0) == 0x7);
      CHECK(e2m1_sr(-std::nanf(""), w, k, s, 0) == 0x7);
      CHECK(e2m1_sr(-0.0f, w, k, s, 0) == 0x8);
      CHECK(e2m1_sr(0.0f, w, k, s, 0) == 0x0);
    }
  // A tiny negative value rounds to -0 or to -0.5, never to +0.
  CHECK(e2m1_sr(-0.1f, 0xffffffffu, 8, s, 0) == 0x8);
  CHECK(e2m1_sr(-0.1f, 0u, 8, s, 0) == 0x9);
}

TEST_CASE("exact SR, f a multiple of 2^-32: w < floor(f 2^32) up, otherwise down", "[sr]") {
  const RngStream s{0x1234, 0x5678};
  // y = lo + F 2^-32 step for F with few enough bits that y is a float in every interval.
  const std::uint32_t Fs[] = {0u, 1u << 10, 3u << 10, 0x00fffc00u, 0x12345400u, 0x80000000u, 0xfffffc00u};
  for (unsigned c = 0; c < 7; ++c)
    for (std::uint32_t F : Fs)
      for (double sign : {1.0, -1.0}) {
        const double f = std::ldexp(static_cast<double>(F), -32);
        const float y = make_y(c, f, sign);
        const Interval iv = interval_of(y);
        CAPTURE(c, F, y);
        REQUIRE(iv.f == f);  // y carries f exactly
        float ff, rem;
        e2m1_floor_and_fraction(std::fabs(y), &ff);
        REQUIRE(sr_fraction_floor32(ff, &rem) == F);
        REQUIRE(rem == 0.0f);
        const std::uint8_t lo = static_cast<std::uint8_t>(iv.lo_code | sign_nibble(y));
        const std::uint8_t hi = static_cast<std::uint8_t>((iv.lo_code + 1) | sign_nibble(y));
        std::vector<std::uint32_t> ws = {0u, 1u, F - 1u, F, F + 1u, 0x7fffffffu, 0x80000000u, 0xffffffffu};
        for (std::uint64_t i = 0; i < 64; ++i) ws.push_back(philox_word(s, i));
        for (std::uint32_t w : ws)
          for (std::uint64_t i : {std::uint64_t{0}, std::uint64_t{5}, std::uint64_t{1} << 40}) {
            CAPTURE(w, i);
            // With remainder 0 the tie w == F goes down (U >= f) whatever the extension bits.
            CHECK(e2m1_sr(y, w, kSrExact, s, i) == (w < F ? hi : lo));
            CHECK(sr_round_up(ff, w, kSrExact, s, i) == (w < F));
            // 32-bit SR is the same decision here.
            CHECK(sr_round_up(ff, w, 32, s, i) == (w < F));
          }
      }
}

TEST_CASE("exact SR tie-break: matches a 128-bit integer comparison of the extension bits", "[sr]") {
  const RngStream streams[] = {{0, 0}, {0xfeedfacecafebeefull, 42}};
  SECTION("tiny y (f has bits below 2^-32), w == floor(f 2^32), end to end") {
    // y in [0, 0.5): f = 2y. Values chosen so that f 2^32 = F + remainder, remainder > 0.
    const float ys[] = {
        std::ldexp(1.0f, -33) + std::ldexp(1.0f, -53),                         // F = 1, rem 2^-20
        std::ldexp(1.0f, -32) - std::ldexp(1.0f, -56),                         // F = 1, rem 1 - 2^-23
        std::ldexp(3.0f, -34),                                                 // F = 1, rem 1/2
        std::ldexp(1.0f, -34),                                                 // F = 0, rem 1/2
        std::ldexp(1.0f, -40) * 1.3f,                                          // F = 0, rem ~ 2^-7 1.3
        static_cast<float>(std::ldexp(0x123457, -43)),                         // F = 0x48d, rem 0x57 / 2^10
        1e-45f,                                                                // F = 0, rem 2^-116
        std::ldexp(1.0f, -33) * (1.0f + std::ldexp(1.0f, -23)),                // F = 1, rem 2^-23
    };
    for (const RngStream& s : streams)
      for (float y0 : ys)
        for (float y : {y0, -y0}) {
          CAPTURE(y, s.seed);
          float f, rem;
          const std::uint8_t c = e2m1_floor_and_fraction(std::fabs(y), &f);
          REQUIRE(c == 0);
          const std::uint32_t F = sr_fraction_floor32(f, &rem);
          REQUIRE(rem > 0.0f);
          CHECK(static_cast<double>(F) + rem == std::ldexp(2.0 * std::fabs(static_cast<double>(y)), 32));
          std::uint32_t ups = 0, mismatches = 0;
          constexpr std::uint64_t n = 4096;
          for (std::uint64_t i = 0; i < n; ++i) {
            const bool up = oracle_tie_up(rem, s, i);
            ups += up;
            mismatches += sr_exact_tie_up(rem, s, i) != up;
            mismatches += sr_round_up(f, F, kSrExact, s, i) != up;
            mismatches += e2m1_sr(y, F, kSrExact, s, i) != ((up ? 1u : 0u) | sign_nibble(y));
            // Off the tie, the first word decides.
            mismatches += e2m1_sr(y, F + 1u, kSrExact, s, i) != sign_nibble(y);
            if (F > 0) mismatches += e2m1_sr(y, F - 1u, kSrExact, s, i) != (1u | sign_nibble(y));
          }
          CHECK(mismatches == 0);
          // P(up) = rem: for rem = 1/2 both outcomes must occur (P(not) = 2^-4095).
          if (rem == 0.5f) {
            CHECK(ups > 0);
            CHECK(ups < n);
          }
        }
  }
  SECTION("constructed remainders that tie on the first extension word") {
    // Find elements whose first extension word is < 2^22 (probability 2^-10 each), so that a
    // float remainder can equal it in its top 32 bits and still carry bits of the second
    // word: this drives the comparison into word 1. (Words 2 and 3 are reached only when a
    // whole 32-bit word ties, probability 2^-32 per element: not constructible this way.)
    for (const RngStream& s : streams) {
      std::uint32_t found = 0, level1_up = 0, level1_down = 0, exact_equal = 0, mismatches = 0;
      for (std::uint64_t i = 0; i < (std::uint64_t{1} << 18); ++i) {
        const Philox4x32 e = philox_extension(s, i);
        if (e.v[0] >= (1u << 22)) continue;
        ++found;
        const double word0 = std::ldexp(static_cast<double>(e.v[0]), -32);
        std::vector<float> rems;
        const float r0 = static_cast<float>(word0);  // exact: < 2^22 significant bits
        rems.push_back(r0);
        const float r01 = static_cast<float>(word0 + std::ldexp(static_cast<double>(e.v[1]), -64));  // rounded
        for (float r : {r0, r01}) {
          float x = r;
          for (int d = 0; d < 3; ++d) {
            x = std::nextafter(x, 1.0f);
            rems.push_back(x);
          }
          x = r;
          for (int d = 0; d < 3; ++d) {
            x = std::nextafter(x, 0.0f);
            if (x > 0.0f) rems.push_back(x);
          }
          rems.push_back(r);
        }
        for (float rem : rems) {
          if (!(rem > 0.0f && rem < 1.0f)) continue;
          const bool up = oracle_tie_up(rem, s, i);
          mismatches += sr_exact_tie_up(rem, s, i) != up;
          // End to end: F = 0, f = rem 2^-32 (exact), w = 0 = F.
          mismatches += sr_round_up(std::ldexp(rem, -32), 0u, kSrExact, s, i) != up;
          const double scaled = std::ldexp(static_cast<double>(rem), 32);
          if (std::floor(scaled) == e.v[0]) {  // the first extension word ties
            if (scaled == e.v[0]) ++exact_equal;
            else (up ? level1_up : level1_down) += 1;
          }
        }
      }
      CAPTURE(s.seed, found, level1_up, level1_down, exact_equal);
      CHECK(mismatches == 0);
      CHECK(found > 100);  // expected 256
      CHECK(exact_equal > 0);
      CHECK(level1_up > 0);
      CHECK(level1_down > 0);
    }
  }
  SECTION("remainder zero never rounds up on the tie") {
    for (std::uint64_t i = 0; i < 1000; ++i) CHECK_FALSE(sr_exact_tie_up(0.0f, streams[0], i));
  }
}

TEST_CASE("exact SR is unbiased: binomial test at false-alarm 1e-9 on 10^6 draws", "[sr][stats]") {
  constexpr std::uint64_t n = 1000000;
  RoundingSpec spec;
  spec.mode = Rounding::Stochastic;
  spec.sr_bits = kSrExact;
  spec.rng = RngStream{20240917, 3};
  const float ys[] = {0.3f, 1.1f, 2.7f, 4.9f, -3.3f, 5.999f, 0.2501f, std::ldexp(1.0f, -20), -1.0f - std::ldexp(1.0f, -20)};
  for (float y : ys) {
    CAPTURE(y);
    const Interval iv = interval_of(y);
    const std::uint8_t hi = static_cast<std::uint8_t>((iv.lo_code + 1) | sign_nibble(y));
    std::uint64_t ups = 0;
    double sum = 0.0;  // exact: multiples of 0.5 below 6 * 10^6
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint8_t q = e2m1_round(y, spec, i);
      ups += q == hi;
      sum += e2m1_decode(q);
    }
    const double phat = static_cast<double>(ups) / n;
    CAPTURE(iv.f, phat);
    CHECK(binomial_consistent(ups, n, iv.f));
    // Mean of the decoded values: sign * (lo + step * phat); accept it where the binomial
    // test accepts phat, i.e. |mean - y| within step * (acceptance interval - f).
    double q_lo, q_hi;
    acceptance_interval(n, iv.f, &q_lo, &q_hi);
    const double mean = sum / n, mag = std::fabs(mean);
    CAPTURE(mean, q_lo, q_hi);
    CHECK(std::signbit(mean) == std::signbit(y));
    CHECK(mag >= iv.lo + iv.step * q_lo);
    CHECK(mag <= iv.lo + iv.step * q_hi);
  }
}

TEST_CASE("k-bit SR shows its predicted bias (and the test would notice a wrong definition)", "[sr][stats]") {
  constexpr std::uint64_t n = 1000000;
  struct Case {
    float y;
    int k;
  };
  // P(up) = floor(f 2^k) / 2^k:  2.3 (f ~ 0.3), k = 2: 1/4;  -0.9 (f ~ 0.8), k = 2: 3/4;
  // 4.7 (f ~ 0.35), k = 8: 89/256;  f = 77/256 - 2^-20 in [1, 1.5), k = 8: 76/256.
  const Case cases[] = {{2.3f, 2}, {-0.9f, 2}, {4.7f, 8}, {make_y(2, 77.0 / 256 - std::ldexp(1.0, -20), 1.0), 8}};
  for (const Case& c : cases) {
    RoundingSpec spec;
    spec.mode = Rounding::Stochastic;
    spec.sr_bits = c.k;
    spec.rng = RngStream{7, 1000 + static_cast<std::uint64_t>(c.k)};
    const Interval iv = interval_of(c.y);
    const double p_k = std::floor(std::ldexp(iv.f, c.k)) / std::ldexp(1.0, c.k);
    CAPTURE(c.y, c.k, iv.f, p_k);
    REQUIRE(p_k < iv.f);  // f not a multiple of 2^-k: biased toward zero
    const std::uint8_t hi = static_cast<std::uint8_t>((iv.lo_code + 1) | sign_nibble(c.y));
    std::uint64_t ups = 0;
    double sum = 0.0;
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint8_t q = e2m1_round(c.y, spec, i);
      ups += q == hi;
      sum += e2m1_decode(q);
    }
    CAPTURE(ups);
    CHECK(binomial_consistent(ups, n, p_k));
    double q_lo, q_hi;
    acceptance_interval(n, p_k, &q_lo, &q_hi);
    const double mag = std::fabs(sum / n);
    CHECK(mag >= iv.lo + iv.step * q_lo);
    CHECK(mag <= iv.lo + iv.step * q_hi);
    // For k = 2 the bias (>= 0.05 in probability) is ~100 standard deviations: the same test
    // against the unbiased p = f must reject, so a wrong definition of k-bit SR would fail.
    if (c.k == 2) CHECK_FALSE(binomial_consistent(ups, n, iv.f));
  }
}

TEST_CASE("SR is deterministic and element-wise independent of evaluation order", "[sr]") {
  RoundingSpec spec;
  spec.mode = Rounding::Stochastic;
  spec.rng = RngStream{99, 5};
  constexpr std::uint64_t n = 4096;
  std::vector<float> y(n);
  for (std::uint64_t i = 0; i < n; ++i) y[i] = static_cast<float>(((i * 2654435761u) % 12000) / 1000.0 - 6.0);
  for (int k : {kSrExact, 8, 3}) {
    CAPTURE(k);
    spec.sr_bits = k;
    std::vector<std::uint8_t> fwd(n), rev(n), sub(n, 0xff);
    for (std::uint64_t i = 0; i < n; ++i) fwd[i] = e2m1_round(y[i], spec, i);
    for (std::uint64_t i = n; i-- > 0;) rev[i] = e2m1_round(y[i], spec, i);
    // A scattered subset in a scrambled order, with unrelated calls in between.
    for (std::uint64_t j = 0; j < n; j += 3) {
      const std::uint64_t i = (j * 1237) % n;
      sub[i] = e2m1_round(y[i], spec, i);
      (void)e2m1_round(y[(i + 1) % n], spec, (i + 1) % n);
    }
    std::uint64_t diff = 0, sub_checked = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      diff += fwd[i] != rev[i];
      // Same bits as the block-wise draw the quantizers use (one Philox call per 4 elements).
      diff += fwd[i] != e2m1_sr(y[i], philox_block(spec.rng, i / 4).v[i % 4], k, spec.rng, i);
      if (sub[i] != 0xff) {
        ++sub_checked;
        diff += sub[i] != fwd[i];
      }
    }
    CHECK(sub_checked > n / 4);
    CHECK(diff == 0);
    // A different seed or stream changes the draws: with values strictly inside intervals,
    // many of the 4096 results differ.
    RoundingSpec other = spec;
    other.rng.seed += 1;
    RoundingSpec other_stream = spec;
    other_stream.rng.stream += 1;
    std::uint64_t d_seed = 0, d_stream = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      d_seed += e2m1_round(y[i], other, i) != fwd[i];
      d_stream += e2m1_round(y[i], other_stream, i) != fwd[i];
    }
    CHECK(d_seed > 100);
    CHECK(d_stream > 100);
  }
}

TEST_CASE("32-bit SR equals exact SR except on the tie", "[sr]") {
  const RngStream s{3, 4};
  for (float y : sr_inputs()) {
    if (std::fabs(y) >= 6.0f) continue;
    float f;
    e2m1_floor_and_fraction(std::fabs(y), &f);
    float rem;
    const std::uint32_t F = sr_fraction_floor32(f, &rem);
    for (std::uint64_t i = 0; i < 256; ++i) {
      const std::uint32_t w = philox_word(s, i);
      if (w == F) continue;
      CHECK(sr_round_up(f, w, 32, s, i) == sr_round_up(f, w, kSrExact, s, i));
    }
    // On the tie 32-bit SR rounds down; exact SR consults the extension bits.
    CHECK_FALSE(sr_round_up(f, F, 32, s, 0));
  }
}

// ---- hw SR (cvt.rs...e2m1x4's carry form) --------------------------------------------------

namespace {
// Fractions at and next to the 1/256 boundaries, where hw SR's truncation of f is largest
// (just below k/256) and smallest (at k/256), plus 0 and the largest fraction below 1.
std::vector<double> boundary_fractions() {
  std::vector<double> fs = {0.0, std::ldexp(1.0, -20), 1.0 - std::ldexp(1.0, -22)};
  for (int k : {1, 2, 3, 64, 127, 128, 129, 200, 254, 255}) {
    const double b = std::ldexp(static_cast<double>(k), -8);
    for (double d : {0.0, -std::ldexp(1.0, -20), std::ldexp(1.0, -20), -std::ldexp(1.0, -12)}) fs.push_back(b + d);
  }
  return fs;
}
}  // namespace

TEST_CASE("hw SR: all 256 random bytes round up exactly floor(256 f) times, on every interval", "[sr][hw]") {
  const RngStream unused{11, 12};  // hw SR draws no extension bits
  std::vector<float> ys = sr_inputs();
  for (unsigned c = 0; c < 7; ++c)  // every E2M1 interval, the subnormal 0 - 0.5 step included
    for (double f : boundary_fractions())
      for (double s : {1.0, -1.0}) ys.push_back(make_y(c, f, s));
  std::uint64_t checked = 0;
  for (float y : ys) {
    CAPTURE(y);
    const Interval iv = interval_of(y);  // f of the float y, exactly
    const std::uint8_t lo = static_cast<std::uint8_t>(iv.lo_code | sign_nibble(y));
    const std::uint8_t hi = static_cast<std::uint8_t>((iv.lo_code + 1) | sign_nibble(y));
    const double f8 = std::floor(std::ldexp(iv.f, 8));
    std::uint32_t ups = 0, others = 0, carry_mismatch = 0, k8_mismatch = 0;
    for (std::uint32_t r = 0; r < 256; ++r) {
      const std::uint8_t q = e2m1_sr(y, r, kSrHw, unused, r);
      ups += q == hi;
      others += q != hi && q != lo;
      // The definition written out: the carry out of the 8-bit sum r + floor(f 2^8).
      carry_mismatch += (q == hi) != (r + static_cast<std::uint32_t>(f8) >= 256u);
      // The same distribution as 8-bit SR with r' = 255 - r in the word's top byte.
      k8_mismatch += q != e2m1_sr(y, (255u - r) << 24, 8, unused, r);
    }
    CHECK(ups == f8);
    CHECK(others == 0);
    CHECK(carry_mismatch == 0);
    CHECK(k8_mismatch == 0);
    ++checked;
  }
  CHECK(checked > 500);
}

TEST_CASE("hw SR saturates at 6, maps NaN to 0x7 and keeps the sign as the other modes", "[sr][hw]") {
  const RngStream s{1, 1};
  for (std::uint32_t r : {0u, 1u, 128u, 255u}) {
    CAPTURE(r);
    CHECK(e2m1_sr(6.0f, r, kSrHw, s, 0) == 0x7);
    CHECK(e2m1_sr(std::nextafter(6.0f, 0.0f), r, kSrHw, s, 0) == (r == 0 ? 0x6 : 0x7));  // f = 1 - 2^-22
    CHECK(e2m1_sr(7.5f, r, kSrHw, s, 0) == 0x7);
    CHECK(e2m1_sr(std::numeric_limits<float>::infinity(), r, kSrHw, s, 0) == 0x7);
    CHECK(e2m1_sr(-1e30f, r, kSrHw, s, 0) == 0xf);
    CHECK(e2m1_sr(std::nanf(""), r, kSrHw, s, 0) == 0x7);
    CHECK(e2m1_sr(-std::nanf(""), r, kSrHw, s, 0) == 0x7);
    CHECK(e2m1_sr(-0.0f, r, kSrHw, s, 0) == 0x8);
    CHECK(e2m1_sr(0.0f, r, kSrHw, s, 0) == 0x0);
    // Below 2^-8 of the 0.5 step (f < 2^-8) no byte rounds up: floor(256 f) = 0.
    CHECK(e2m1_sr(std::ldexp(1.0f, -10), r, kSrHw, s, 0) == 0x0);
    CHECK(e2m1_sr(-std::ldexp(1.0f, -10), r, kSrHw, s, 0) == 0x8);
  }
  // f = 2^-8 exactly on the 0.5 step: only r = 255 carries.
  CHECK(e2m1_sr(std::ldexp(1.0f, -9), 255u, kSrHw, s, 0) == 0x1);
  CHECK(e2m1_sr(std::ldexp(1.0f, -9), 254u, kSrHw, s, 0) == 0x0);
}

TEST_CASE("hw SR through e2m1_round draws the packed layout's byte", "[sr][hw]") {
  RoundingSpec spec{Rounding::Stochastic, kSrHw, RngStream{0xfeedfacecafebeefull, 0x0123456789abcdefull}};
  constexpr std::uint64_t n = 4096;
  std::uint64_t diff = 0, ups = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const float y = 1.0f + 0.25f;  // f = 1/2: up iff r >= 128
    // The layout written out from the definition in philox.hpp, with the generator itself
    // called on a counter built here.
    const std::uint64_t g = i / 16;
    const Philox4x32 c{{static_cast<std::uint32_t>(g), static_cast<std::uint32_t>(g >> 32) | 0x40000000u,
                        static_cast<std::uint32_t>(spec.rng.stream), static_cast<std::uint32_t>(spec.rng.stream >> 32)}};
    const Philox4x32 b =
        philox4x32_10(c, static_cast<std::uint32_t>(spec.rng.seed), static_cast<std::uint32_t>(spec.rng.seed >> 32));
    const unsigned shift[4] = {0, 16, 8, 24};  // x0 <- f [7:0], x1 <- e [23:16], x2 <- b [15:8], x3 <- a [31:24]
    const std::uint32_t r = (b.v[(i / 4) % 4] >> shift[i % 4]) & 0xffu;
    const std::uint8_t q = e2m1_round(y, spec, i);
    diff += q != (r >= 128u ? 0x3u : 0x2u);
    ups += q == 0x3u;
  }
  CHECK(diff == 0);
  double lo, hi;
  acceptance_interval(n, 0.5, &lo, &hi);
  CHECK(static_cast<double>(ups) / n >= lo);
  CHECK(static_cast<double>(ups) / n <= hi);
}
