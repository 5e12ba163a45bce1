// Element formats (format/e2m1.hpp, fp8.hpp, bf16.hpp, float_format.hpp): fixed points from
// nvfp4-spec.md section 1, and three independent oracles for the conversions:
//   * value tables: every finite value of E2M1/E4M3/E5M2/FP16 written from its definition
//     (s, e, m, bias), with round-to-nearest-even / toward-zero done by exact comparisons
//     against the table (no floating-point rounding involved);
//   * the host-callable CUDA conversions of cuda_fp4.h / cuda_fp8.h / cuda_bf16.h /
//     cuda_fp16.h (when CMake found them: FP4D_HAVE_CUDA_ORACLE);
//   * the compiler's _Float16 conversion (IEEE binary16, round-to-nearest-even).
// The generic FloatFormat (double arithmetic) is checked against the same oracles and
// against the bit-level fast paths.
//
// Inputs: the "dense sample" (every float32 bit pattern with stride 4099, plus +-8 ulps of
// float32 around every grid value and every midpoint of E2M1/E4M3/E5M2, +-3 ulps around
// FP16's, the rounding-relevant low halves of every BF16 pattern, powers of two, specials)
// in the default run; all 2^32 float32 patterns in the [long] tests.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "format/bf16.hpp"
#include "format/e2m1.hpp"
#include "format/float_format.hpp"
#include "format/fp16.hpp"
#include "format/fp8.hpp"
#include "quant/nvfp4_math.hpp"
#include "support/catch.hpp"

#if defined(FP4D_HAVE_CUDA_ORACLE)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#define FP4D_ORACLE_NAME(name) name
#else
#define FP4D_ORACLE_NAME(name) name " (SKIPPED: CUDA headers not found)"
#endif

using namespace fp4d;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::string hex32(std::uint32_t u) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", u);
  return b;
}
std::string hex8(unsigned u) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%02x", u);
  return b;
}
std::string num(double x) {
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", x);
  return b;
}

// Same value and same sign of zero; NaN equals NaN.
bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// ---- mismatch collection for sweeps ------------------------------------------------------
struct Mismatch {
  std::uint32_t u;
  std::string what;
};
struct Sweep {
  std::uint64_t checked = 0, failed = 0;
  std::vector<Mismatch> first;  // the smallest failing bit patterns
  std::string report() const {
    std::string s = std::to_string(failed) + " of " + std::to_string(checked) + " inputs differ";
    for (const Mismatch& m : first) s += "\n  x = " + hex32(m.u) + " (" + num(bits_float(m.u)) + "): " + m.what;
    return s;
  }
};

// Runs check(u, &msg) -> bool (true: agrees) for u = pattern(i), i in [0, n), in parallel.
// Keeps the (up to) 10 smallest failing patterns; with a static schedule each thread walks
// an ascending range, so its first 10 failures contain the smallest in its range.
template <class Pattern, class Check>
Sweep sweep(std::uint64_t n, Pattern pattern, Check check) {
  Sweep total;
  total.checked = n;
#pragma omp parallel
  {
    std::uint64_t failed = 0;
    std::vector<Mismatch> first;
    std::string msg;
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(n); ++i) {
      const std::uint32_t u = pattern(static_cast<std::uint64_t>(i));
      if (!check(u, &msg)) {
        ++failed;
        if (first.size() < 10) first.push_back({u, msg});
      }
    }
#pragma omp critical
    {
      total.failed += failed;
      total.first.insert(total.first.end(), first.begin(), first.end());
    }
  }
  std::sort(total.first.begin(), total.first.end(), [](const Mismatch& a, const Mismatch& b) { return a.u < b.u; });
  if (total.first.size() > 10) total.first.resize(10);
  return total;
}

template <class Check>
Sweep sweep_sample(const std::vector<std::uint32_t>& xs, Check check) {
  return sweep(xs.size(), [&](std::uint64_t i) { return xs[i]; }, check);
}

template <class Check>
Sweep sweep_all32(Check check) {
  return sweep(std::uint64_t{1} << 32, [](std::uint64_t i) { return static_cast<std::uint32_t>(i); }, check);
}

// ---- value tables, written from the format definitions --------------------------------
// Non-negative finite values in code order (the index is the code without its sign bit).
std::vector<double> minifloat_table(int mbits, int bias, int ncodes) {
  std::vector<double> t;
  for (int c = 0; c < ncodes; ++c) {
    const int e = c >> mbits, m = c & ((1 << mbits) - 1);
    t.push_back(e == 0 ? std::ldexp(m, 1 - bias - mbits) : std::ldexp((1 << mbits) + m, e - bias - mbits));
  }
  return t;
}
const std::vector<double>& e2m1_table() {
  static const std::vector<double> t{0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};  // spec, section 1
  return t;
}
const std::vector<double>& e4m3_table() {
  static const std::vector<double> t = minifloat_table(3, 7, 0x7f);  // 0x7f is NaN
  return t;
}
const std::vector<double>& e5m2_table() {
  static const std::vector<double> t = minifloat_table(2, 15, 0x7c);  // 0x7c is Inf
  return t;
}
const std::vector<double>& fp16_table() {
  static const std::vector<double> t = minifloat_table(10, 15, 0x7c00);
  return t;
}

// Index of round-to-nearest-even of a >= 0 in table t, saturating at the last entry.
// Exact: 2a and t[i] + t[i+1] are computed without rounding in double.
std::size_t table_rne_index(const std::vector<double>& t, double a) {
  if (a >= t.back()) return t.size() - 1;
  const std::size_t i = static_cast<std::size_t>(std::upper_bound(t.begin(), t.end(), a) - t.begin()) - 1;
  const double two_a = 2.0 * a, sum = t[i] + t[i + 1];
  if (two_a < sum) return i;
  if (two_a > sum) return i + 1;
  return (i % 2 == 0) ? i : i + 1;  // tie: the even code
}
std::size_t table_rz_index(const std::vector<double>& t, double a) {
  if (a >= t.back()) return t.size() - 1;
  return static_cast<std::size_t>(std::upper_bound(t.begin(), t.end(), a) - t.begin()) - 1;
}

// Code oracles for the saturating fast paths (sign bit kept, also for zero results).
std::uint8_t oracle_e2m1_rne(float x) {
  return static_cast<std::uint8_t>(table_rne_index(e2m1_table(), std::fabs(static_cast<double>(x))) |
                                   (std::signbit(x) ? 8u : 0u));
}
std::uint8_t oracle_e2m1_rz(float x) {
  return static_cast<std::uint8_t>(table_rz_index(e2m1_table(), std::fabs(static_cast<double>(x))) |
                                   (std::signbit(x) ? 8u : 0u));
}
std::uint8_t oracle_fp8_rne(const std::vector<double>& t, float x) {
  return static_cast<std::uint8_t>(table_rne_index(t, std::fabs(static_cast<double>(x))) |
                                   (std::signbit(x) ? 0x80u : 0u));
}

double table_round(const std::vector<double>& t, double x, bool nearest) {
  const double a = std::fabs(x);
  return std::copysign(t[nearest ? table_rne_index(t, a) : table_rz_index(t, a)], x);
}

// ---- the dense sample -----------------------------------------------------------------
void add_around(std::vector<std::uint32_t>& v, double p, int radius) {
  const float f = static_cast<float>(p);
  REQUIRE(static_cast<double>(f) == p);  // every point used here is a float32
  const std::int64_t b = float_bits(f) & 0x7fffffffu;
  for (std::int64_t d = -radius; d <= radius; ++d) {
    const std::int64_t c = b + d;
    if (c < 0 || c > 0x7f800000) continue;
    v.push_back(static_cast<std::uint32_t>(c));
    v.push_back(static_cast<std::uint32_t>(c) | 0x80000000u);
  }
}

void add_grid(std::vector<std::uint32_t>& v, const std::vector<double>& t, int radius) {
  for (std::size_t i = 0; i < t.size(); ++i) {
    add_around(v, t[i], radius);
    if (i + 1 < t.size()) add_around(v, 0.5 * (t[i] + t[i + 1]), radius);
  }
  const double top_ulp = t.back() - t[t.size() - 2];
  add_around(v, t.back() + 0.5 * top_ulp, radius);  // overflow threshold of RNE
  add_around(v, t.back() + top_ulp, radius);
  add_around(v, 2.0 * t.back(), radius);
}

const std::vector<std::uint32_t>& dense_sample() {
  static const std::vector<std::uint32_t> xs = [] {
    std::vector<std::uint32_t> v;
    for (std::uint64_t u = 0; u <= 0xffffffffull; u += 4099) v.push_back(static_cast<std::uint32_t>(u));
    add_grid(v, e2m1_table(), 8);
    add_grid(v, e4m3_table(), 8);
    add_grid(v, e5m2_table(), 8);
    add_grid(v, fp16_table(), 3);
    for (int e = -149; e <= 127; ++e) add_around(v, std::ldexp(1.0, e), 2);
    for (std::uint32_t h = 0; h <= 0xffffu; ++h)  // BF16: exact, tie, either side of the tie
      for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) v.push_back((h << 16) | lo);
    for (std::uint32_t s : {0x00000000u, 0x00000001u, 0x007fffffu, 0x00800000u, 0x7f7fffffu, 0x7f800000u, 0x7f800001u,
                            0x7fa00000u, 0x7fc00000u, 0x7fffffffu})
      for (std::uint32_t sign : {0u, 0x80000000u}) v.push_back(s | sign);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }();
  return xs;
}

}  // namespace

// =====================================================================================
// E2M1
// =====================================================================================

TEST_CASE("e2m1_decode gives the 16 values of the spec; code 8 is -0", "[e2m1]") {
  const double mags[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  for (unsigned c = 0; c < 16; ++c) {
    CAPTURE(c);
    const double expect = (c & 8u) ? -mags[c & 7u] : mags[c & 7u];
    CHECK(same(e2m1_decode(static_cast<std::uint8_t>(c)), expect));
    CHECK(same(e2m1_decode(static_cast<std::uint8_t>(c | 0xf0u)), expect));  // only the low nibble counts
  }
  CHECK(std::signbit(e2m1_decode(8)));
  CHECK(kE2M1Max == 6.0f);
}

TEST_CASE("E2M1: every code round-trips through decode and each rounding", "[e2m1]") {
  for (unsigned c = 0; c < 16; ++c) {
    CAPTURE(c);
    const float v = e2m1_decode(static_cast<std::uint8_t>(c));
    CHECK(e2m1_rne(v) == c);
    CHECK(e2m1_rz(v) == c);
    // SR of a grid value: f = 0, so no random word can round it up, at any precision.
    for (std::uint32_t w : {0u, 1u, 0x80000000u, 0xffffffffu})
      for (int k : {kSrExact, 1, 8, 32}) CHECK(e2m1_sr(v, w, k, RngStream{1, 2}, 3) == c);
  }
}

TEST_CASE("E2M1 RNE: hand-worked midpoints and specials from the spec", "[e2m1]") {
  struct Case {
    float x;
    double value;
  };
  // Midpoints tie to the even code: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4.
  const Case cases[] = {{0.25f, 0.0}, {0.75f, 1.0}, {1.25f, 1.0}, {1.75f, 2.0}, {2.5f, 2.0}, {3.5f, 4.0}, {5.0f, 4.0},
                        // just either side of every midpoint
                        {std::nextafter(0.25f, 1.0f), 0.5}, {std::nextafter(0.75f, 0.0f), 0.5},
                        {std::nextafter(1.25f, 2.0f), 1.5}, {std::nextafter(1.75f, 0.0f), 1.5},
                        {std::nextafter(2.5f, 3.0f), 3.0}, {std::nextafter(3.5f, 0.0f), 3.0},
                        {std::nextafter(5.0f, 6.0f), 6.0}, {std::nextafter(5.0f, 0.0f), 4.0},
                        // above 5 -> 6; saturation
                        {5.5f, 6.0}, {6.0f, 6.0}, {7.0f, 6.0}, {1e30f, 6.0}, {kFltMax, 6.0}, {kInf, 6.0},
                        // tiny values
                        {1e-45f, 0.0}, {0.2499999f, 0.0}, {0.0f, 0.0}};
  for (const Case& c : cases) {
    CAPTURE(c.x, c.value);
    CHECK(same(e2m1_decode(e2m1_rne(c.x)), c.value));
    CHECK(same(e2m1_decode(e2m1_rne(-c.x)), -c.value));
    // The CUDA quantizer's FMA-pipe form (non-NaN inputs only) on the same hand-worked cases.
    CHECK(same(e2m1_decode(e2m1_rne_not_nan_fma(c.x)), c.value));
    CHECK(same(e2m1_decode(e2m1_rne_not_nan_fma(-c.x)), -c.value));
  }
  CHECK(e2m1_rne_not_nan_fma(-0.0f) == 0x8);
  CHECK(e2m1_rne_not_nan_fma(-kInf) == 0xf);
  // The CUDA quantizers' packing of those magnitudes without removing 2^23's bits first:
  // the shifted sum and Horner's rule (e2m1_rne_pack_fma's form) minus e2m1_fma_packed_bias
  // are the packed magnitude codes, for 4 and 8 nibbles, on magnitudes up to 7 (the largest
  // sum) and down to 0.
  for (const float x0 : {0.0f, 0.75f, 2.5f, 5.5f, kInf}) {
    const float xs[8] = {x0, 6.0f, 0.25f, 1.75f, 3.5f, 1e30f, 0.5f, 5.0f};
    for (const int n : {4, 8}) {
      std::uint32_t sum = 0, horner = 0, want = 0;
      for (int j = 0; j < n; ++j) {
        sum += float_bits(e2m1_rne_magnitude_fma(xs[j])) << (4 * j);
        want |= static_cast<std::uint32_t>(e2m1_rne_not_nan(xs[j])) << (4 * j);
      }
      for (int j = n - 1; j >= 0; --j) horner = horner * 16u + float_bits(e2m1_rne_magnitude_fma(xs[j]));
      CAPTURE(x0, n);
      CHECK(sum - e2m1_fma_packed_bias(n) == want);
      CHECK(horner - e2m1_fma_packed_bias(n) == want);
    }
  }
  static_assert(e2m1_fma_packed_bias(8) == 0xfb000000u, "0x4b000000 + (0x4b000000 << 4) mod 2^32");
  // e2m1_rne_pack_fma, the packing both CUDA quantizers' RNE fast paths share: element j's
  // e2m1_rne_not_nan code (sign included) in nibble j, on signed values with ties, -0, the
  // smallest subnormal, saturation and Inf, in several rotations.
  const float vals[12] = {-0.25f, 0.75f, -2.5f, 5.0f, -0.0f, -1e-45f, 6.5f, -kInf, 1.25f, -3.5f, 0.0f, -5.9f};
  for (int rot = 0; rot < 12; ++rot) {
    float ys[8];
    for (int j = 0; j < 8; ++j) ys[j] = vals[(j + rot) % 12];
    std::uint32_t want8 = 0, want4 = 0;
    for (int j = 0; j < 8; ++j) want8 |= static_cast<std::uint32_t>(e2m1_rne_not_nan(ys[j])) << (4 * j);
    for (int j = 0; j < 4; ++j) want4 |= static_cast<std::uint32_t>(e2m1_rne_not_nan(ys[j])) << (4 * j);
    CAPTURE(rot);
    CHECK(e2m1_rne_pack_fma<8>(ys) == want8);
    CHECK(e2m1_rne_pack_fma<4>(ys) == want4);
  }
  CHECK(e2m1_shift_in_top_nibble(0x12345678u, 0xabcdef01u) == 0x2345678au);
  // The codes of the spec's special cases.
  CHECK(e2m1_rne(kInf) == 0x7);
  CHECK(e2m1_rne(-kInf) == 0xf);
  CHECK(e2m1_rne(-0.0f) == 0x8);
  CHECK(e2m1_rne(-1e-30f) == 0x8);
  CHECK(e2m1_rne(-0.25f) == 0x8);
  CHECK(e2m1_rne(bits_float(0x80000001u)) == 0x8);
  // NaN -> +6 (code 0x7) for every sign and payload (CUDA: "NaN results in positive MAXNORM").
  for (std::uint32_t u : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffc00000u, 0xff800001u, 0xffffffffu}) {
    CAPTURE(hex32(u));
    CHECK(e2m1_rne(bits_float(u)) == 0x7);
    CHECK(e2m1_rz(bits_float(u)) == 0x7);
  }
}

TEST_CASE("E2M1 RZ: truncation toward zero, saturating", "[e2m1]") {
  struct Case {
    float x;
    double value;
  };
  const Case cases[] = {{0.4999999f, 0.0}, {0.5f, 0.5}, {0.9999999f, 0.5}, {1.0f, 1.0}, {1.4999999f, 1.0},
                        {1.5f, 1.5},       {1.9999999f, 1.5}, {2.0f, 2.0}, {2.9999998f, 2.0}, {3.0f, 3.0},
                        {3.9999998f, 3.0}, {4.0f, 4.0},   {5.9999995f, 4.0}, {6.0f, 6.0}, {100.0f, 6.0},
                        {kInf, 6.0},       {0.25f, 0.0},  {0.75f, 0.5}, {5.0f, 4.0}, {1e-45f, 0.0}, {0.0f, 0.0}};
  for (const Case& c : cases) {
    CAPTURE(c.x, c.value);
    CHECK(same(e2m1_decode(e2m1_rz(c.x)), c.value));
    CHECK(same(e2m1_decode(e2m1_rz(-c.x)), -c.value));
  }
  CHECK(e2m1_rz(-0.0f) == 0x8);
  CHECK(e2m1_rz(-0.3f) == 0x8);
}

TEST_CASE("e2m1_round dispatches on the rounding mode", "[e2m1]") {
  RoundingSpec rne, rz, sr;
  rz.mode = Rounding::TowardZero;
  sr.mode = Rounding::Stochastic;
  sr.sr_bits = 8;
  sr.rng = RngStream{5, 6};
  for (float x : {0.3f, 0.75f, 2.6f, -4.9f, 7.0f}) {
    CAPTURE(x);
    CHECK(e2m1_round(x, rne, 17) == e2m1_rne(x));
    CHECK(e2m1_round(x, rz, 17) == e2m1_rz(x));
    for (std::uint64_t i : {0ull, 1ull, 1000ull})
      CHECK(e2m1_round(x, sr, i) == e2m1_sr(x, philox_word(sr.rng, i), 8, sr.rng, i));
  }
}

TEST_CASE("E2M1 fast paths equal the value-table oracle on the dense sample", "[e2m1][oracle]") {
  const auto& xs = dense_sample();
  const Sweep s = sweep_sample(xs, [](std::uint32_t u, std::string* msg) {
    const float x = bits_float(u);
    if (is_nan_f32(x)) return true;  // NaN policy: tested above
    const std::uint8_t a = e2m1_rne(x), b = oracle_e2m1_rne(x), c = e2m1_rz(x), d = oracle_e2m1_rz(x);
    const std::uint8_t e = e2m1_rne_not_nan(x), f = e2m1_rne_not_nan_fma(x);
    if (a == b && c == d && e == b && f == b) return true;
    *msg = "rne " + hex8(a) + " not-NaN rne " + hex8(e) + " FMA-pipe rne " + hex8(f) + " table " + hex8(b) + ", rz " +
           hex8(c) + " table " + hex8(d);
    return false;
  });
  INFO(s.report());
  CHECK(s.failed == 0);
}

// =====================================================================================
// FP8 (E4M3, E5M2)
// =====================================================================================

TEST_CASE("fp8 decode: all 256 codes of E4M3 and E5M2 against their definitions", "[fp8]") {
  const auto& t4 = e4m3_table();
  const auto& t5 = e5m2_table();
  for (unsigned c = 0; c < 256; ++c) {
    CAPTURE(c);
    const double sign = (c & 0x80u) ? -1.0 : 1.0;
    const unsigned m = c & 0x7fu;
    const float v4 = e4m3_decode(static_cast<std::uint8_t>(c));
    if (m == 0x7f) CHECK(std::isnan(v4));
    else CHECK(same(v4, sign * t4[m]));
    const float v5 = e5m2_decode(static_cast<std::uint8_t>(c));
    if (m == 0x7c) CHECK(same(v5, sign * std::numeric_limits<double>::infinity()));
    else if (m > 0x7c) CHECK(std::isnan(v5));
    else CHECK(same(v5, sign * t5[m]));
    CHECK(e4m3_is_subnormal(static_cast<std::uint8_t>(c)) == (m >= 1 && m <= 7));
  }
  CHECK(t4.back() == 448.0);
  CHECK(t4[1] == std::ldexp(1.0, -9));
  CHECK(t4[8] == std::ldexp(1.0, -6));
  CHECK(t5.back() == 57344.0);
  CHECK(t5[1] == std::ldexp(1.0, -16));
  CHECK(kE4M3Max == 448.0f);
  CHECK(kE5M2Max == 57344.0f);
  CHECK(e4m3_decode(kE4M3MaxCode) == 448.0f);
}

TEST_CASE("fp8 encode: finite codes round-trip, specials saturate, NaN is canonical", "[fp8]") {
  for (unsigned c = 0; c < 256; ++c) {
    CAPTURE(c);
    const unsigned m = c & 0x7fu;
    if (m < 0x7f) CHECK(e4m3_rne_satfinite(e4m3_decode(static_cast<std::uint8_t>(c))) == c);
    if (m < 0x7c) CHECK(e5m2_rne_satfinite(e5m2_decode(static_cast<std::uint8_t>(c))) == c);
  }
  // E4M3: 464 = 448 + half an ulp ties to the even 448 (480 is not finite); above it saturates.
  CHECK(e4m3_rne_satfinite(464.0f) == 0x7e);
  CHECK(e4m3_rne_satfinite(465.0f) == 0x7e);
  CHECK(e4m3_rne_satfinite(1e30f) == 0x7e);
  CHECK(e4m3_rne_satfinite(kInf) == 0x7e);
  CHECK(e4m3_rne_satfinite(-kInf) == 0xfe);
  CHECK(e4m3_rne_satfinite(std::ldexp(1.0f, -10)) == 0x00);  // half the min subnormal: tie to 0
  CHECK(e4m3_rne_satfinite(std::nextafter(std::ldexp(1.0f, -10), 1.0f)) == 0x01);
  CHECK(e4m3_rne_satfinite(-std::ldexp(1.0f, -10)) == 0x80);
  CHECK(e4m3_rne_satfinite(-0.0f) == 0x80);
  CHECK(e4m3_rne_satfinite(std::ldexp(1.5f, -9)) == 0x02);  // 1.5 subnormal units: tie to even 2
  CHECK(e4m3_rne_satfinite(std::ldexp(2.5f, -9)) == 0x02);
  CHECK(e4m3_rne_satfinite(std::ldexp(7.5f, -9)) == 0x08);  // rounds up into the min normal
  // E5M2: max 57344; 61440 = max + half an ulp ties to even (65536 would be Inf): saturates.
  CHECK(e5m2_rne_satfinite(61440.0f) == 0x7b);
  CHECK(e5m2_rne_satfinite(kInf) == 0x7b);
  CHECK(e5m2_rne_satfinite(-kInf) == 0xfb);
  CHECK(e5m2_rne_satfinite(std::ldexp(1.0f, -17)) == 0x00);
  CHECK(e5m2_rne_satfinite(std::ldexp(3.5f, -16)) == 0x04);  // into the min normal 2^-14
  // NaN: the canonical positive NaN 0x7F for every sign and payload (as cuda_fp8.h's host
  // conversion, which replaces any NaN by 0x7FFFFFFF first).
  for (std::uint32_t u : {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0x7fffffffu, 0xffc00000u, 0xff800001u, 0xffffffffu}) {
    CAPTURE(hex32(u));
    CHECK(e4m3_rne_satfinite(bits_float(u)) == 0x7f);
    CHECK(e5m2_rne_satfinite(bits_float(u)) == 0x7f);
    CHECK(std::isnan(e4m3_decode(e4m3_rne_satfinite(bits_float(u)))));
    CHECK(std::isnan(e5m2_decode(e5m2_rne_satfinite(bits_float(u)))));
  }
}

TEST_CASE("FP8 fast paths equal the value-table oracle on the dense sample", "[fp8][oracle]") {
  const auto& xs = dense_sample();
  const Sweep s = sweep_sample(xs, [](std::uint32_t u, std::string* msg) {
    const float x = bits_float(u);
    if (is_nan_f32(x)) return true;
    const std::uint8_t a = e4m3_rne_satfinite(x), b = oracle_fp8_rne(e4m3_table(), x);
    const std::uint8_t c = e5m2_rne_satfinite(x), d = oracle_fp8_rne(e5m2_table(), x);
    if (a == b && c == d) return true;
    *msg = "e4m3 " + hex8(a) + " table " + hex8(b) + ", e5m2 " + hex8(c) + " table " + hex8(d);
    return false;
  });
  INFO(s.report());
  CHECK(s.failed == 0);
}

// =====================================================================================
// BF16
// =====================================================================================

TEST_CASE("bf16_rne_bits: ties to even, overflow to Inf, NaN quiet with its sign", "[bf16]") {
  CHECK(bf16_rne_bits(1.0f) == 0x3f80);
  CHECK(bf16_rne_bits(bits_float(0x3f808000u)) == 0x3f80);  // tie, even below
  CHECK(bf16_rne_bits(bits_float(0x3f818000u)) == 0x3f82);  // tie, odd below: up
  CHECK(bf16_rne_bits(bits_float(0x3f807fffu)) == 0x3f80);
  CHECK(bf16_rne_bits(bits_float(0x3f808001u)) == 0x3f81);
  CHECK(bf16_rne_bits(bits_float(0x7f7f7fffu)) == 0x7f7f);
  CHECK(bf16_rne_bits(bits_float(0x7f7f8000u)) == 0x7f80);  // tie above the max, odd: Inf
  CHECK(bf16_rne_bits(kFltMax) == 0x7f80);
  CHECK(bf16_rne_bits(kInf) == 0x7f80);
  CHECK(bf16_rne_bits(-kInf) == 0xff80);
  CHECK(bf16_rne_bits(-0.0f) == 0x8000);
  CHECK(bf16_rne_bits(bits_float(0x80008000u)) == 0x8000);  // tiny negative tie: -0
  CHECK(bf16_rne_bits(bits_float(0x7f800001u)) == 0x7fc0);  // signalling NaN stays NaN (not Inf)
  CHECK(bf16_rne_bits(bits_float(0xff800001u)) == 0xffc0);
  CHECK(bf16_rne_bits(bits_float(0x7fffffffu)) == 0x7fff);
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    if ((h & 0x7fffu) > 0x7f80u) continue;
    if (bf16_rne_bits(bf16_to_float(static_cast<std::uint16_t>(h))) != h) {
      FAIL("bf16 code " << h << " does not round-trip");
    }
  }
  CHECK(same(bf16_round(1.00390625f), 1.0));
}

// =====================================================================================
// Generic FloatFormat
// =====================================================================================

TEST_CASE("FloatFormat: named formats, extremes, and nonnegative_values", "[float_format]") {
  struct Expect {
    const FloatFormat* f;
    std::size_t count;
    double largest, smallest_normal, smallest_subnormal;
  };
  const Expect ex[] = {
      {&format_e2m1(), 8, 6.0, 1.0, 0.5},
      {&format_e4m3(), 127, 448.0, std::ldexp(1.0, -6), std::ldexp(1.0, -9)},
      {&format_e5m2(), 124, 57344.0, std::ldexp(1.0, -14), std::ldexp(1.0, -16)},
      {&format_bf16(), 0x7f80, std::ldexp(255.0, 120), std::ldexp(1.0, -126), std::ldexp(1.0, -133)},
      {&format_fp16(), 0x7c00, 65504.0, std::ldexp(1.0, -14), std::ldexp(1.0, -24)},
  };
  for (const Expect& e : ex) {
    CAPTURE(e.f->name);
    CHECK(e.f->largest() == e.largest);
    CHECK(e.f->smallest_normal() == e.smallest_normal);
    CHECK(e.f->smallest_subnormal() == e.smallest_subnormal);
    const std::vector<double> v = e.f->nonnegative_values();
    CHECK(v.size() == e.count);
    REQUIRE(v.size() >= 2);
    CHECK(same(v.front(), 0.0));
    CHECK(v[1] == e.smallest_subnormal);
    CHECK(v.back() == e.largest);
    CHECK(std::adjacent_find(v.begin(), v.end(), std::greater_equal<double>()) == v.end());  // strictly increasing
  }
  // The lists are exactly the values of the codes (tables from the definitions / bit casts).
  CHECK(format_e2m1().nonnegative_values() == e2m1_table());
  CHECK(format_e4m3().nonnegative_values() == e4m3_table());
  CHECK(format_e5m2().nonnegative_values() == e5m2_table());
  CHECK(format_fp16().nonnegative_values() == fp16_table());
  {
    const std::vector<double> v = format_bf16().nonnegative_values();
    bool all = v.size() == 0x7f80;
    for (std::uint32_t h = 0; all && h < 0x7f80; ++h) all = v[h] == bf16_to_float(static_cast<std::uint16_t>(h));
    CHECK(all);
  }
  CHECK(format_fp32().largest() == static_cast<double>(kFltMax));
  CHECK(format_fp32().smallest_subnormal() == std::ldexp(1.0, -149));
  // UE8M0: the 255 powers 2^-127 .. 2^127; it has no zero (and no sign, 0xFF is NaN).
  {
    const FloatFormat& f = format_ue8m0();
    const std::vector<double> v = f.nonnegative_values();
    REQUIRE(v.size() == 255);
    for (int c = 0; c < 255; ++c) CHECK(v[c] == std::ldexp(1.0, c - 127));
    CHECK(f.largest() == std::ldexp(1.0, 127));
    CHECK(f.smallest_subnormal() == std::ldexp(1.0, -127));
    // Rounding never leaves the grid: below the smallest value there is nothing to flush to.
    CHECK(f.round_nearest_even(std::ldexp(1.0, -140)) == std::ldexp(1.0, -127));
    CHECK(f.round_toward_zero(std::ldexp(1.0, -140)) == std::ldexp(1.0, -127));
    CHECK(f.round_nearest_even(std::ldexp(1.0, 128)) == std::ldexp(1.0, 127));
    CHECK(f.round_nearest_even(std::ldexp(1.4, 10)) == std::ldexp(1.0, 10));
    CHECK(f.round_toward_zero(std::ldexp(1.9, 10)) == std::ldexp(1.0, 10));
    CHECK(std::isnan(f.round_nearest_even(-1.0)));
  }
}

TEST_CASE("format_by_name finds every named format and rejects others", "[float_format]") {
  for (const char* n : {"e2m1", "e4m3", "e5m2", "ue8m0", "bf16", "fp16", "fp32"}) CHECK(format_by_name(n).name == n);
  CHECK(&format_by_name("e4m3") == &format_e4m3());
  CHECK_THROWS_AS(format_by_name("e3m2"), std::invalid_argument);
  try {
    format_by_name("fp8");
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find("fp8") != std::string::npos);
    CHECK(what.find("e4m3") != std::string::npos);
  }
}

TEST_CASE("FloatFormat rounding agrees with the fast paths on the dense sample", "[float_format]") {
  const auto& xs = dense_sample();
  const FloatFormat &e2m1 = format_e2m1(), &e4m3 = format_e4m3(), &e5m2 = format_e5m2(), &bf16 = format_bf16();
  const Sweep s = sweep_sample(xs, [&](std::uint32_t u, std::string* msg) {
    const float x = bits_float(u);
    if (is_nan_f32(x)) return true;
    const double d = x;
    const std::pair<double, double> pairs[] = {
        {e2m1_decode(e2m1_rne(x)), e2m1.round_nearest_even(d)},
        {e2m1_decode(e2m1_rz(x)), e2m1.round_toward_zero(d)},
        {e4m3_decode(e4m3_rne_satfinite(x)), e4m3.round_nearest_even(d)},
        {e5m2_decode(e5m2_rne_satfinite(x)), e5m2.round_nearest_even(d)},
        {bf16_round(x), bf16.round_nearest_even(d)},
    };
    const char* names[] = {"e2m1 rne", "e2m1 rz", "e4m3 rne", "e5m2 rne", "bf16 rne"};
    bool ok = true;
    msg->clear();
    for (int k = 0; k < 5; ++k)
      if (!same(pairs[k].first, pairs[k].second)) {
        ok = false;
        *msg += std::string(names[k]) + ": fast " + num(pairs[k].first) + " generic " + num(pairs[k].second) + "; ";
      }
    return ok;
  });
  INFO(s.report());
  CHECK(s.failed == 0);
}

TEST_CASE("FloatFormat rounding agrees with the value-table oracle on the dense sample", "[float_format]") {
  const auto& xs = dense_sample();
  struct F {
    const FloatFormat* f;
    const std::vector<double>* t;
  };
  // FP16 is IEEE (overflow to Inf), not saturating: the table oracle covers |x| <= 65504 only.
  const F fs[] = {{&format_e2m1(), &e2m1_table()},
                  {&format_e4m3(), &e4m3_table()},
                  {&format_e5m2(), &e5m2_table()},
                  {&format_fp16(), &fp16_table()}};
  const Sweep s = sweep_sample(xs, [&](std::uint32_t u, std::string* msg) {
    const float x = bits_float(u);
    if (is_nan_f32(x)) return true;
    const double d = x;
    bool ok = true;
    msg->clear();
    for (const F& f : fs) {
      if (f.f == &format_fp16() && std::fabs(d) > 65504.0) continue;
      for (bool nearest : {true, false}) {
        const double g = nearest ? f.f->round_nearest_even(d) : f.f->round_toward_zero(d);
        const double o = table_round(*f.t, d, nearest);
        if (!same(g, o)) {
          ok = false;
          *msg += f.f->name + (nearest ? " rne" : " rz") + ": generic " + num(g) + " table " + num(o) + "; ";
        }
      }
      // neighbours(): the two adjacent table values around |x| (equal on the grid).
      const double a = std::fabs(d);
      if (a <= f.t->back()) {
        double lo, hi;
        f.f->neighbours(a, &lo, &hi);
        const std::size_t i = table_rz_index(*f.t, a);
        const double elo = (*f.t)[i], ehi = (elo == a) ? a : (*f.t)[i + 1];
        if (lo != elo || hi != ehi) {
          ok = false;
          *msg += f.f->name + " neighbours: " + num(lo) + ", " + num(hi) + " table " + num(elo) + ", " + num(ehi) + "; ";
        }
      }
    }
    return ok;
  });
  INFO(s.report());
  CHECK(s.failed == 0);
}

TEST_CASE("FloatFormat fp32 is the identity on float32; bf16 RZ truncates; fp16 matches _Float16",
          "[float_format]") {
  const auto& xs = dense_sample();
  const FloatFormat &fp32 = format_fp32(), &bf16 = format_bf16(), &fp16 = format_fp16();
  const Sweep s = sweep_sample(xs, [&](std::uint32_t u, std::string* msg) {
    const float x = bits_float(u);
    if (is_nan_f32(x)) return true;
    const double d = x;
    msg->clear();
    bool ok = true;
    auto expect = [&](const char* what, double got, double want) {
      if (same(got, want)) return;
      ok = false;
      *msg += std::string(what) + ": " + num(got) + " expected " + num(want) + "; ";
    };
    expect("fp32 rne", fp32.round_nearest_even(d), d);
    expect("fp32 rz", fp32.round_toward_zero(d), d);
    // BF16 toward zero is truncation of the low 16 bits (IEEE: Inf stays Inf).
    expect("bf16 rz", bf16.round_toward_zero(d), bits_float(u & 0xffff0000u));
#if defined(__FLT16_MAX__)
    expect("fp16 rne", fp16.round_nearest_even(d), static_cast<double>(static_cast<_Float16>(x)));
#else
    (void)fp16;
#endif
    return ok;
  });
  INFO(s.report());
  CHECK(s.failed == 0);
  // Overflow: IEEE formats go to Inf under RNE, to the largest finite under RZ (finite input).
  CHECK(bf16.round_nearest_even(1e39) == std::numeric_limits<double>::infinity());
  CHECK(bf16.round_toward_zero(1e39) == bf16.largest());
  CHECK(fp16.round_nearest_even(65520.0) == std::numeric_limits<double>::infinity());  // tie, odd max: up
  CHECK(fp16.round_nearest_even(std::nextafter(65520.0, 0.0)) == 65504.0);
  CHECK(fp16.round_toward_zero(-1e6) == -65504.0);
  CHECK(same(fp16.round_toward_zero(-kInf), -std::numeric_limits<double>::infinity()));
  CHECK(same(format_e4m3().round_toward_zero(kInf), 448.0));  // saturating formats: Inf -> max
  CHECK(same(format_e5m2().round_toward_zero(-kInf), -57344.0));
  CHECK(same(format_e5m2().round_nearest_even(kInf), 57344.0));
  CHECK(std::isnan(fp16.round_nearest_even(std::numeric_limits<double>::quiet_NaN())));
}

// =====================================================================================
// UE8M0
// =====================================================================================

TEST_CASE("UE8M0: exp2i_f32, ue8m0_from_exponent clamping, decode", "[ue8m0]") {
  for (int e = -149; e <= 127; ++e) {
    CAPTURE(e);
    CHECK(same(exp2i_f32(e), std::ldexp(1.0, e)));
  }
  // Outside the float32 range: 0 below 2^-149 (2^-150 ties to even 0), +Inf above 2^127.
  CHECK(same(exp2i_f32(-150), 0.0));
  CHECK(same(exp2i_f32(-1000), 0.0));
  CHECK(same(exp2i_f32(128), std::numeric_limits<double>::infinity()));
  CHECK(same(exp2i_f32(129), std::numeric_limits<double>::infinity()));
  CHECK(same(exp2i_f32(std::numeric_limits<int>::max()), std::numeric_limits<double>::infinity()));
  CHECK(same(exp2i_f32(std::numeric_limits<int>::min()), 0.0));

  CHECK(kUe8m0MinExp == -127);
  CHECK(kUe8m0MaxExp == 127);
  for (int e = -127; e <= 127; ++e) {
    CAPTURE(e);
    CHECK(ue8m0_from_exponent(e) == e + 127);
    CHECK(ue8m0_exponent(ue8m0_from_exponent(e)) == e);
    CHECK(same(ue8m0_decode(ue8m0_from_exponent(e)), std::ldexp(1.0, e)));
  }
  for (int e : {-128, -149, -1000, std::numeric_limits<int>::min()}) CHECK(ue8m0_from_exponent(e) == 0x00);
  for (int e : {128, 200, 1000, std::numeric_limits<int>::max()}) CHECK(ue8m0_from_exponent(e) == 0xfe);
  CHECK(std::isnan(ue8m0_decode(0xff)));
  CHECK(same(ue8m0_decode(0x00), std::ldexp(1.0, -127)));
  CHECK(same(ue8m0_decode(0xfe), std::ldexp(1.0, 127)));
  CHECK(same(ue8m0_decode(0x7f), 1.0));
}

// =====================================================================================
// CUDA host conversions as oracle
// =====================================================================================

#if defined(FP4D_HAVE_CUDA_ORACLE)
namespace {
std::uint8_t cuda_fp4_rn(float x) { return static_cast<std::uint8_t>(__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)); }
std::uint8_t cuda_fp4_rz(float x) { return static_cast<std::uint8_t>(__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundZero)); }
std::uint8_t cuda_e4m3(float x) { return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)); }
std::uint8_t cuda_e5m2(float x) { return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2)); }

// All four element conversions of fp4drift against CUDA's, code for code (NaN included).
bool agrees_with_cuda(std::uint32_t u, std::string* msg) {
  const float x = bits_float(u);
  const std::uint8_t r[4] = {e2m1_rne(x), e2m1_rz(x), e4m3_rne_satfinite(x), e5m2_rne_satfinite(x)};
  const std::uint8_t c[4] = {cuda_fp4_rn(x), cuda_fp4_rz(x), cuda_e4m3(x), cuda_e5m2(x)};
  if (r[0] == c[0] && r[1] == c[1] && r[2] == c[2] && r[3] == c[3]) return true;
  static const char* names[4] = {"e2m1_rne", "e2m1_rz", "e4m3_rne_satfinite", "e5m2_rne_satfinite"};
  msg->clear();
  for (int k = 0; k < 4; ++k)
    if (r[k] != c[k]) *msg += std::string(names[k]) + " " + hex8(r[k]) + " cuda " + hex8(c[k]) + "; ";
  return false;
}
}  // namespace
#endif

TEST_CASE(FP4D_ORACLE_NAME("CUDA oracle: NaN and signed-zero policy of cuda_fp4.h / cuda_fp8.h"), "[oracle][cuda]") {
#if defined(FP4D_HAVE_CUDA_ORACLE)
  // What the CUDA 13 host conversions do, documented by assertion:
  //  * FP4: any NaN, positive or negative, gives +MAXNORM (code 0x7): the sign is dropped.
  //  * FP8 (E4M3 and E5M2, SATFINITE): any NaN is first replaced by 0x7FFFFFFF, so every NaN
  //    gives 0x7F: sign and payload are dropped (E5M2's 0x7F is a NaN, as is E4M3's).
  //  * -0 and negative values that round to zero keep the sign (0x8 / 0x80).
  for (std::uint32_t u : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffc00000u, 0xff800001u, 0xffffffffu}) {
    const float x = bits_float(u);
    CAPTURE(hex32(u));
    CHECK(cuda_fp4_rn(x) == 0x7);
    CHECK(cuda_fp4_rz(x) == 0x7);
    CHECK(cuda_e4m3(x) == 0x7f);
    CHECK(cuda_e5m2(x) == 0x7f);
    std::string msg;
    CHECK(agrees_with_cuda(u, &msg));
  }
  for (float x : {-0.0f, -1e-30f, -0.25f}) {
    CAPTURE(x);
    CHECK(cuda_fp4_rn(x) == 0x8);
    CHECK(cuda_fp4_rz(x) == 0x8);
  }
  CHECK(cuda_e4m3(-0.0f) == 0x80);
  CHECK(cuda_e5m2(-1e-30f) == 0x80);
#else
  WARN("skipped: CUDA headers (cuda_fp4.h, cuda_fp8.h) not found at configure time; "
       "the CUDA oracle comparison did not run");
#endif
}

TEST_CASE(FP4D_ORACLE_NAME("CUDA oracle: E2M1 RNE/RZ, E4M3, E5M2 agree with cuda_fp4.h/cuda_fp8.h on the dense sample"),
          "[oracle][cuda]") {
#if defined(FP4D_HAVE_CUDA_ORACLE)
  const auto& xs = dense_sample();
  const Sweep s = sweep_sample(xs, agrees_with_cuda);
  INFO(s.report());
  CHECK(s.failed == 0);
#else
  WARN("skipped: CUDA headers (cuda_fp4.h, cuda_fp8.h) not found at configure time; "
       "the CUDA oracle comparison did not run");
#endif
}

TEST_CASE(FP4D_ORACLE_NAME("CUDA oracle: BF16 and FP16 conversions agree with cuda_bf16.h/cuda_fp16.h on the dense sample"),
          "[oracle][cuda]") {
#if defined(FP4D_HAVE_CUDA_ORACLE)
  const auto& xs = dense_sample();
  const FloatFormat &bf16 = format_bf16(), &fp16 = format_fp16();
  const Sweep s = sweep_sample(xs, [&](std::uint32_t u, std::string* msg) {
    const float x = bits_float(u);
    if (is_nan_f32(x)) return true;  // CUDA makes every NaN 0x7FFF; fp4drift keeps the sign (bf16.hpp)
    const double d = x;
    const __nv_bfloat16_raw brn = __float2bfloat16_rn(x), brz = __float2bfloat16_rz(x);
    const __half_raw hrn = __float2half_rn(x), hrz = __float2half_rz(x);
    msg->clear();
    bool ok = true;
    auto expect = [&](const char* what, double got, double want) {
      if (same(got, want)) return;
      ok = false;
      *msg += std::string(what) + ": " + num(got) + " cuda " + num(want) + "; ";
    };
    if (bf16_rne_bits(x) != brn.x) {
      ok = false;
      *msg += "bf16_rne_bits " + std::to_string(bf16_rne_bits(x)) + " cuda " + std::to_string(brn.x) + "; ";
    }
    expect("bf16 generic rne", bf16.round_nearest_even(d), bf16_to_float(brn.x));
    expect("bf16 generic rz", bf16.round_toward_zero(d), bf16_to_float(brz.x));
    expect("fp16 generic rne", fp16.round_nearest_even(d), __half2float(__half(hrn)));
    expect("fp16 generic rz", fp16.round_toward_zero(d), __half2float(__half(hrz)));
    return ok;
  });
  INFO(s.report());
  CHECK(s.failed == 0);
#else
  WARN("skipped: CUDA headers (cuda_bf16.h, cuda_fp16.h) not found at configure time; "
       "the CUDA oracle comparison did not run");
#endif
}

TEST_CASE(FP4D_ORACLE_NAME("CUDA oracle: all 2^32 float32 inputs, E2M1 RNE/RZ, E4M3, E5M2"), "[oracle][cuda][long]") {
#if defined(FP4D_HAVE_CUDA_ORACLE)
  const auto t0 = std::chrono::steady_clock::now();
  const Sweep s = sweep_all32(agrees_with_cuda);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN("all 2^32 inputs x 4 conversions vs CUDA: " << secs << " s");
  INFO(s.report());
  CHECK(s.checked == (std::uint64_t{1} << 32));
  CHECK(s.failed == 0);
#else
  WARN("skipped: CUDA headers (cuda_fp4.h, cuda_fp8.h) not found at configure time; "
       "the CUDA oracle comparison did not run");
#endif
}

// fp16.hpp (the CPU and GPU FP16 cast) against the generic FloatFormat rounding, which is the
// independent definition: every FP16 code decodes to the generic value; every 61st float32
// input (70M, all exponents, both signs, NaN payloads) encodes to the generic RNE's bits.
TEST_CASE("FP16 cast: integer encoder and decoder against the generic FloatFormat", "[formats]") {
  const FloatFormat& f = format_fp16();
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float d = fp16_to_float(static_cast<std::uint16_t>(h));
    const bool nan = ((h >> 10) & 0x1fu) == 0x1fu && (h & 0x3ffu);
    if (nan) {
      REQUIRE(float_bits(d) == 0x7fc00000u);
      continue;
    }
    REQUIRE(fp16_rne_bits(d) == h);  // round trip: every non-NaN code is exact in float32
    REQUIRE(static_cast<double>(d) == f.round_nearest_even(static_cast<double>(d)));
  }
  std::uint64_t bad = 0, checked = 0;
  for (std::uint64_t u = 0; u < (std::uint64_t{1} << 32); u += 61) {
    const float x = bits_float(static_cast<std::uint32_t>(u));
    const std::uint16_t h = fp16_rne_bits(x);
    ++checked;
    if (is_nan_f32(x)) {
      bad += h != static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u);
      continue;
    }
    const double want = f.round_nearest_even(static_cast<double>(x));
    const float got = fp16_to_float(h);
    bad += !(static_cast<double>(got) == want && std::signbit(got) == std::signbit(want));
  }
  INFO(bad << " of " << checked << " sampled inputs differ from the generic FP16 RNE");
  CHECK(bad == 0);
  CHECK(checked > 70000000u);
}

TEST_CASE(FP4D_ORACLE_NAME("CUDA oracle: all 2^32 float32 inputs to FP16 RNE (fp16.hpp vs __float2half_rn)"), "[oracle][cuda][long]") {
#if defined(FP4D_HAVE_CUDA_ORACLE)
  const Sweep s = sweep_all32([](std::uint32_t u, std::string* msg) {
    const float x = bits_float(u);
    const std::uint16_t mine = fp16_rne_bits(x);
    const __half_raw r = __half_raw(__float2half_rn(x));
    if (is_nan_f32(x)) {  // CUDA's NaN payload is its own; both must be a NaN of FP16
      const bool ok = ((mine >> 10) & 0x1fu) == 0x1fu && (mine & 0x3ffu) && ((r.x >> 10) & 0x1fu) == 0x1fu && (r.x & 0x3ffu);
      if (!ok) *msg = "NaN";
      return ok;
    }
    if (mine == r.x) return true;
    *msg = "fp16_rne_bits " + std::to_string(mine) + " cuda " + std::to_string(r.x);
    return false;
  });
  INFO(s.report());
  CHECK(s.checked == (std::uint64_t{1} << 32));
  CHECK(s.failed == 0);
#else
  WARN("skipped: CUDA headers (cuda_fp16.h) not found at configure time; the CUDA oracle comparison did not run");
#endif
}

TEST_CASE("Value-table oracle: all 2^32 float32 inputs, E2M1 RNE/RZ, E4M3, E5M2", "[oracle][long]") {
  // The CUDA-independent counterpart of the sweep above (runs without CUDA headers).
  const auto t0 = std::chrono::steady_clock::now();
  const Sweep s = sweep_all32([](std::uint32_t u, std::string* msg) {
    const float x = bits_float(u);
    // The CUDA lanes kernel rounds x * e_b without NVFP4 step 5's clamp to [-6, 6] for RNE and
    // RZ, relying on this: the conversions saturate exactly as the clamp does.
    bool clipped;
    const float y = clamp_e2m1_range(x, &clipped);
    if (e2m1_rne(y) != e2m1_rne(x) || e2m1_rz(y) != e2m1_rz(x)) {
      *msg = "clamp_e2m1_range changes an E2M1 RNE/RZ code";
      return false;
    }
    if (is_nan_f32(x)) {
      *msg = "NaN not mapped to 0x7 / 0x7f";
      return e2m1_rne(x) == 0x7 && e2m1_rz(x) == 0x7 && e4m3_rne_satfinite(x) == 0x7f && e5m2_rne_satfinite(x) == 0x7f;
    }
    // The CUDA quantizer's path for blocks without a NaN.
    if (e2m1_rne_not_nan(x) != e2m1_rne(x)) {
      *msg = "e2m1_rne_not_nan differs from e2m1_rne";
      return false;
    }
    if (e2m1_rne_not_nan_fma(x) != e2m1_rne(x)) {
      *msg = "e2m1_rne_not_nan_fma differs from e2m1_rne";
      return false;
    }
    const std::uint8_t r[4] = {e2m1_rne(x), e2m1_rz(x), e4m3_rne_satfinite(x), e5m2_rne_satfinite(x)};
    const std::uint8_t o[4] = {oracle_e2m1_rne(x), oracle_e2m1_rz(x), oracle_fp8_rne(e4m3_table(), x),
                               oracle_fp8_rne(e5m2_table(), x)};
    if (r[0] == o[0] && r[1] == o[1] && r[2] == o[2] && r[3] == o[3]) return true;
    msg->clear();
    for (int k = 0; k < 4; ++k) *msg += hex8(r[k]) + "/" + hex8(o[k]) + " ";
    return false;
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN("all 2^32 inputs x 4 conversions vs value tables: " << secs << " s");
  INFO(s.report());
  CHECK(s.failed == 0);
}
