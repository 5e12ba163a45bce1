// MXFP4, FP8 (per tensor, 1x128, 128x128) and the BF16/FP16 casts through fp4d::quantize_cpu,
// and the error statistics (nvfp4-spec.md sections 1 and 5; quantized.hpp for the statistics).
// Expected values are worked out by hand in the comments or computed here independently of
// the library: power-of-two scale exponents by exact double comparisons, float32 operations
// as one exact double operation plus one rounding (products exact; quotients: double
// rounding innocuous as 53 >= 2*24 + 2), FP8 / E2M1 rounding against value tables built from
// the format definitions, BF16 RNE by integer arithmetic on the bits, FP16 by the compiler's
// _Float16 where available.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "format/float_format.hpp"
#include "quant/mxfp4_math.hpp"
#include "quant/quantize.hpp"
#include "quant/presets.hpp"
#include "sim/generators.hpp"
#include "support/catch.hpp"
#include "support/float_bits.hpp"

using namespace fp4d;
using namespace fp4d_test;

namespace {



QuantSpec spec_of(const char* name) { return preset(name).spec; }
Matrix row(std::initializer_list<float> v) {
  Matrix m(1, static_cast<std::int64_t>(v.size()));
  std::copy(v.begin(), v.end(), m.data.begin());
  return m;
}

// ---- value tables (spec section 1) --------------------------------------------------------
const double kE2M1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
double e2m1_value(std::uint8_t c) { return (c & 8) ? -kE2M1[c & 7] : kE2M1[c & 7]; }

int round_table_nearest_even(double v, const double* t, int n) {
  if (v >= t[n - 1]) return n - 1;
  int i = 0;
  while (t[i + 1] <= v) ++i;
  const double two_v = 2.0 * v, mid = t[i] + t[i + 1];
  if (two_v < mid) return i;
  if (two_v > mid) return i + 1;
  return (i % 2 == 0) ? i : i + 1;
}
std::uint8_t ref_e2m1_code(double y) {
  if (std::isnan(y)) return 0x7;
  return static_cast<std::uint8_t>(round_table_nearest_even(std::fabs(y), kE2M1, 8) | (std::signbit(y) ? 8 : 0));
}

// FP8 code c (sign bit 7): E4M3 bias 7, 3 mantissa bits; E5M2 bias 15, 2 mantissa bits.
double fp8_value(std::uint8_t c, int man_bits, int bias) {
  const int e = (c & 0x7f) >> man_bits, m = c & ((1 << man_bits) - 1);
  const double v = e == 0 ? std::ldexp(m, 1 - bias - man_bits) : std::ldexp((1 << man_bits) + m, e - bias - man_bits);
  return (c & 0x80) ? -v : v;
}
struct Fp8Table {
  int man_bits, bias, max_code;
  std::vector<double> t;  // value of code 0..max_code (monotone)
  Fp8Table(int m, int b, int maxc) : man_bits(m), bias(b), max_code(maxc) {
    for (int c = 0; c <= maxc; ++c) t.push_back(fp8_value(static_cast<std::uint8_t>(c), m, b));
  }
  // RNE, saturating (finite overflow and Inf to max), sign kept (also for zero); not for NaN.
  std::uint8_t encode(float x) const {
    const int c = round_table_nearest_even(std::fabs(static_cast<double>(x)), t.data(), max_code + 1);
    return static_cast<std::uint8_t>(c | (std::signbit(x) ? 0x80 : 0));
  }
  double value(std::uint8_t c) const { return fp8_value(c, man_bits, bias); }
};
const Fp8Table& e4m3() {
  static const Fp8Table t(3, 7, 0x7e);
  return t;
}
const Fp8Table& e5m2() {
  static const Fp8Table t(2, 15, 0x7b);
  return t;
}

// ---- MX scale exponents, independently ----------------------------------------------------
int clamp_e(int e) { return std::max(-127, std::min(127, e)); }
// floor: floor(log2 a) - 2 from frexp (a = m 2^ex, m in [0.5, 1) -> floor(log2 a) = ex - 1).
int ref_mx_floor(float a) {
  if (a == 0) return -127;
  int ex;
  std::frexp(static_cast<double>(a), &ex);
  return clamp_e(ex - 1 - 2);
}
// ceil: the smallest e with 6 * 2^e >= a, by exact comparisons in double.
int ref_mx_ceil(float a) {
  if (a == 0) return -127;
  for (int e = -127; e <= 127; ++e)
    if (std::ldexp(6.0, e) >= static_cast<double>(a)) return e;
  return 127;
}
// rceil: q = float32(a * float32(1/6)); the smallest e with 2^e >= q.
int ref_mx_rceil(float a) {
  const float q = f32mul(a, f32div(1.0f, 6.0f));
  if (q == 0) return -127;
  int ex;
  const double m = std::frexp(static_cast<double>(q), &ex);
  return clamp_e(m == 0.5 ? ex - 1 : ex);
}

}  // namespace

// ============================================================================================
// MXFP4
// ============================================================================================

TEST_CASE("mxfp4 scale exponents, hand-worked for the three rules") {
  // a     floor: floor(log2 a) - 2     ceil: min e, 6*2^e >= a        rceil: ceil(log2 float(a*float(1/6)))
  // 6     2 - 2 = 0                    6*1 >= 6 -> 0                  6*0x1.555556p-3 = 1 + 2^-25 -> 1 -> 0
  // 7     2 - 2 = 0                    6 < 7 <= 12 -> 1               1.1667 -> 1
  // 8     3 - 2 = 1                    6 < 8 <= 12 -> 1               1.3333 -> 1
  // 1.5   0 - 2 = -2                   6/4 = 1.5 -> -2                0.25(1 + 2^-25) -> 0.25 -> -2
  // 0.75  -1 - 2 = -3                  6/8 = 0.75 -> -3               0.125(1 + 2^-25) -> 0.125 -> -3
  // 2^-130  -132, clamped to the UE8M0 minimum -127 (all three rules)
  // 0     -127 (an all-zero block: the smallest scale, by convention)
  struct Row {
    float a;
    int floor_e, ceil_e, rceil_e;
  };
  const Row rows[] = {{6.0f, 0, 0, 0},       {7.0f, 0, 1, 1},          {8.0f, 1, 1, 1},
                      {1.5f, -2, -2, -2},    {0.75f, -3, -3, -3},      {std::ldexp(1.0f, -130), -127, -127, -127},
                      {0.0f, -127, -127, -127}};
  for (const Row& r : rows) {
    INFO("a = " << hexf(r.a));
    CHECK(mxfp4_scale_exponent(r.a, MxScaleRule::Floor) == r.floor_e);
    CHECK(mxfp4_scale_exponent(r.a, MxScaleRule::Ceil) == r.ceil_e);
    CHECK(mxfp4_scale_exponent(r.a, MxScaleRule::Rceil) == r.rceil_e);
    // The same through the quantizer: a block [a, -a/2, 0...] has scale code e + 127, scale 2^e.
    const char* names[3] = {"mxfp4", "mxfp4-ceil", "mxfp4-rceil"};
    const int es[3] = {r.floor_e, r.ceil_e, r.rceil_e};
    for (int k = 0; k < 3; ++k) {
      INFO(names[k]);
      const QuantizedTensor q = quantize_cpu(row({r.a, -0.5f * r.a}), spec_of(names[k]));
      REQUIRE(q.scale_codes.size() == 1);
      CHECK(q.scale_codes[0] == es[k] + 127);
      CHECK(q.scale_values[0] == static_cast<float>(std::ldexp(1.0, es[k])));
    }
  }
  // 2^-130 against X = 2^-127: 2^-130 / 2^-127 = 0.125 -> E2M1 0: the element underflows.
  const QuantizedTensor q = quantize_cpu(row({std::ldexp(1.0f, -130)}), spec_of("mxfp4"));
  CHECK(q.code_at(0, 0) == 0);
  CHECK(q.dequantized(0, 0) == 0.0f);
  CHECK(q.stats.underflow_fraction == 1.0);
}

TEST_CASE("mxfp4 ceil and rceil differ where a * float(1/6) rounds onto a power of two") {
  SECTION("by hand: a = 6*2^-127 + 1 ulp = 0x1.800002p-125") {
    // ceil: 6 * 2^-127 < a <= 6 * 2^-126 -> e = -126.
    // rceil: a * float(1/6) = (1.5 + 2^-23) 2^-125 * (1/6)(1 + 2^-25) = 2^-127 (1 + 2^-23/1.5)(1 + 2^-25)
    //   = 2^-127 + (0.333 + 0.125) 2^-149; the float32 result is subnormal (spacing 2^-149), so
    //   it rounds to 2^-127 (0.458 < 0.5): a power of two -> e = -127.
    // With X = 2^-127 the block maximum becomes a / X = 6 + 2^-21: clipped (to 6, code 7); with
    // X = 2^-126 it is 3 + 2^-22 -> 3 (code 5).
    const float a = 0x1.800002p-125f;
    CHECK(same_bits(f32mul(a, f32div(1.0f, 6.0f)), std::ldexp(1.0f, -127)));
    CHECK(mxfp4_scale_exponent(a, MxScaleRule::Ceil) == -126);
    CHECK(mxfp4_scale_exponent(a, MxScaleRule::Rceil) == -127);
    const QuantizedTensor qc = quantize_cpu(row({a}), spec_of("mxfp4-ceil"));
    const QuantizedTensor qr = quantize_cpu(row({a}), spec_of("mxfp4-rceil"));
    CHECK(qc.scale_codes[0] == 1);
    CHECK(qr.scale_codes[0] == 0);
    CHECK(qc.code_at(0, 0) == 0x5);
    CHECK(qr.code_at(0, 0) == 0x7);
    CHECK(qc.clipped == 0);
    CHECK(qr.clipped == 1);
    CHECK(qc.dequantized(0, 0) == std::ldexp(3.0f, -126));
    CHECK(qr.dequantized(0, 0) == std::ldexp(6.0f, -127));
  }
  SECTION("search near 6 * 2^k, +-8 float32 ulps, k = -140..126") {
    // Every rule is also checked against its independent definition on all these points.
    int differ = 0, bad = 0;
    float first = 0;
    for (int k = -140; k <= 126; ++k) {
      float a = static_cast<float>(std::ldexp(6.0, k));
      for (int s = 0; s < 8; ++s) a = std::nextafter(a, 0.0f);
      for (int s = 0; s <= 16; ++s, a = std::nextafter(a, kInf)) {
        if (!(a > 0) || !(a <= kFMax)) continue;
        const int fl = ref_mx_floor(a), ce = ref_mx_ceil(a), rc = ref_mx_rceil(a);
        bad += mxfp4_scale_exponent(a, MxScaleRule::Floor) != fl;
        bad += mxfp4_scale_exponent(a, MxScaleRule::Ceil) != ce;
        bad += mxfp4_scale_exponent(a, MxScaleRule::Rceil) != rc;
        if (ce != rc && differ++ == 0) first = a;
      }
    }
    INFO("first a with ceil != rceil: " << hexf(first) << "; cases: " << differ);
    CHECK(bad == 0);
    CHECK(differ >= 1);
    CHECK(mxfp4_scale_exponent(first, MxScaleRule::Ceil) == ref_mx_ceil(first));
    CHECK(mxfp4_scale_exponent(first, MxScaleRule::Rceil) == ref_mx_rceil(first));
    CHECK(mxfp4_scale_exponent(first, MxScaleRule::Ceil) != mxfp4_scale_exponent(first, MxScaleRule::Rceil));
  }
}

TEST_CASE("mxfp4 floor rule clips block maxima in (6, 8) X; ceil does not") {
  // Block [0.875, -0.8, 0.5, 0.3, 0.0625, 0.03] (max 7 * 2^-3).
  // floor: X = 2^(floor(log2 0.875) - 2) = 2^(-1-2) = 2^-3 (code 124 = 0x7c). x / X:
  //   7 -> clipped, 6 (7);  -6.4 -> clipped, -6 (0xF);  4 (6);  2.4 -> 2 (4);  0.5 (1);
  //   0.24 -> 0 (0). Dequantized: value * 2^-3 = 0.75, -0.75, 0.5, 0.25, 0.0625, 0.
  // ceil: X = 2^-2 (6*2^-3 = 0.75 < 0.875 <= 1.5) (code 0x7d). x / X:
  //   3.5 tie 3|4 -> 4 (6);  -3.2 -> -3 (0xD);  2 (4);  1.2 -> 1 (2);  0.25 tie 0|0.5 -> 0 (0);
  //   0.12 -> 0 (0). Dequantized: 1, -0.75, 0.5, 0.25, 0, 0.
  const Matrix x = row({0.875f, -0.8f, 0.5f, 0.3f, 0.0625f, 0.03f});
  const QuantizedTensor qf = quantize_cpu(x, spec_of("mxfp4"));
  const QuantizedTensor qc = quantize_cpu(x, spec_of("mxfp4-ceil"));
  CHECK(qf.scale_codes[0] == 0x7c);
  CHECK(qc.scale_codes[0] == 0x7d);
  const std::uint8_t cf[6] = {0x7, 0xF, 0x6, 0x4, 0x1, 0x0}, cc[6] = {0x6, 0xD, 0x4, 0x2, 0x0, 0x0};
  const float df[6] = {0.75f, -0.75f, 0.5f, 0.25f, 0.0625f, 0.0f}, dc[6] = {1.0f, -0.75f, 0.5f, 0.25f, 0.0f, 0.0f};
  for (int i = 0; i < 6; ++i) {
    INFO("element " << i);
    CHECK(qf.code_at(0, i) == cf[i]);
    CHECK(qc.code_at(0, i) == cc[i]);
    CHECK(same_bits(qf.dequantized(0, i), df[i]));
    CHECK(same_bits(qc.dequantized(0, i), dc[i]));
  }
  CHECK(qf.clipped == 2);
  CHECK(qf.stats.clipped_fraction == 2.0 / 6.0);
  CHECK(qc.clipped == 0);
  // Padding of the 32-block: codes 0, one scale for the 6 elements.
  CHECK(qf.padded_cols == 32);
  CHECK(qf.scale_cols == 1);
  for (int i = 6; i < 32; ++i) CHECK(qf.code_at(0, i) == 0);
}

TEST_CASE("mxfp4 elements are E2M1(x / X) with exact division, every rule, partial blocks") {
  std::mt19937_64 g(2024);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_int_distribution<int> kd(-140, 100);
  const std::int64_t rows = 33, cols = 45;  // partial second block of 13
  Matrix x(rows, cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    int k = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      if (c % 32 == 0) k = kd(g);
      x(r, c) = std::ldexp(n01(g), k);
    }
    // The block maximum at position r % 32 of the first block (every position, edges included)
    // and at the last element of the partial block.
    x(r, r % 32) = std::ldexp(r % 2 ? 9.0f : -9.0f, k);
    x(r, 44) = std::ldexp(7.0f, k + 1);
  }
  x(2, 3) = 0.0f;
  x(2, 4) = -0.0f;
  for (const char* name : {"mxfp4", "mxfp4-ceil", "mxfp4-rceil"}) {
    INFO(name);
    const QuantSpec spec = spec_of(name);
    const QuantizedTensor q = quantize_cpu(x, spec);
    REQUIRE(q.padded_cols == 64);
    REQUIRE(q.scale_rows == rows);
    REQUIRE(q.scale_cols == 2);
    std::int64_t bad_scale = 0, bad_code = 0, bad_deq = 0, bad_pad = 0, clipped = 0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t b = 0; b < 2; ++b) {
        const std::int64_t c0 = 32 * b, c1 = std::min(cols, c0 + 32);
        float a = 0;
        for (std::int64_t c = c0; c < c1; ++c) a = std::max(a, std::fabs(x(r, c)));
        const int e = spec.mx_scale_rule == MxScaleRule::Floor  ? ref_mx_floor(a)
                      : spec.mx_scale_rule == MxScaleRule::Ceil ? ref_mx_ceil(a)
                                                                : ref_mx_rceil(a);
        bad_scale += q.scale_codes[static_cast<std::size_t>(r * 2 + b)] != e + 127;
        bad_scale += q.scale_values[static_cast<std::size_t>(r * 2 + b)] != static_cast<float>(std::ldexp(1.0, e));
        for (std::int64_t c = c0; c < c1; ++c) {
          const double y = std::ldexp(static_cast<double>(x(r, c)), -e);  // x / X, exact in double
          clipped += std::fabs(y) > 6.0;
          const std::uint8_t code = ref_e2m1_code(y);
          bad_code += q.code_at(r, c) != code;
          bad_deq += !same_bits(q.dequantized(r, c), static_cast<float>(std::ldexp(e2m1_value(code), e)));
        }
        for (std::int64_t c = c1; c < c0 + 32; ++c) bad_pad += q.code_at(r, c) != 0;
      }
    CHECK(bad_scale == 0);
    CHECK(bad_code == 0);
    CHECK(bad_deq == 0);
    CHECK(bad_pad == 0);
    CHECK(q.clipped == clipped);
    if (spec.mx_scale_rule == MxScaleRule::Ceil) CHECK(clipped == 0);  // the ceil scale never clips
  }
}

// ============================================================================================
// FP8
// ============================================================================================

TEST_CASE("fp8 per-tensor E4M3 and E5M2, hand-worked") {
  const Matrix x = row({2.0f, 1.0f, -0.3f, 0.01f, -2.0f});
  SECTION("E4M3") {
    // amax 2: enc = 448/2 = 224, dec = float(1/224) = (1/224)(1 + 3*2^-26) = 0x1.24924ap-8.
    //   2 -> 448 = 1.75*2^8: e = 8+7 = 15, m = 6 -> 0x7e;   1 -> 224 = 1.75*2^7: 0x76;
    //   -0.3 -> -67.2: spacing 8 in [64, 128), neighbours 64|72, midpoint 68 -> -64 = 2^6: 0x68|0x80;
    //   0.01 -> 2.24: spacing 0.25 in [2, 4) -> 2.25 = 1.125*2: e = 8, m = 1 -> 0x41;  -2 -> 0xfe.
    // Dequantized v * dec: 448 * dec = 2 (1 + 3*2^-26) -> 2 (3/8 ulp);  224 * dec -> 1;
    //   -64 * dec = -0x1.24924ap-2 (power-of-two scaling, exact);
    //   2.25 * dec = 9 * 0x1.24924ap-10: 0x124924a * 9 = 0xa49249a, 4 dropped bits 1010 -> up:
    //   0x1.492494p-7.
    const QuantizedTensor q = quantize_cpu(x, spec_of("fp8-e4m3-tensor"));
    REQUIRE(q.scale_values.size() == 1);
    CHECK(same_bits(q.scale_values[0], 0x1.24924ap-8f));
    const std::uint8_t codes[5] = {0x7e, 0x76, 0xe8, 0x41, 0xfe};
    const float deq[5] = {2.0f, 1.0f, -0x1.24924ap-2f, 0x1.492494p-7f, -2.0f};
    for (int i = 0; i < 5; ++i) {
      INFO("element " << i << ": " << hexf(q.dequantized(0, i)));
      CHECK(q.code_at(0, i) == codes[i]);
      CHECK(same_bits(q.dequantized(0, i), deq[i]));
      // and the code's value from the table, times dec, rounded once
      CHECK(same_bits(deq[i], f32mul(static_cast<float>(e4m3().value(codes[i])), 0x1.24924ap-8f)));
    }
    CHECK(q.clipped == 0);
  }
  SECTION("E5M2") {
    // amax 2: enc = 57344/2 = 28672 = 1.75*2^14, dec = float(1/28672) = 0x1.24924ap-15.
    //   2 -> 57344: e = 15+15 = 30, m = 3 -> 0x7b;  1 -> 28672: e = 29, m = 3 -> 0x77;
    //   -0.3 -> -8601.6: spacing 2048 in [8192, 16384), midpoint 9216 -> -8192 = 2^13: 0x70|0x80;
    //   0.01 -> 286.72: spacing 64 in [256, 512), midpoint 288 -> 256 = 2^8: e = 23 -> 0x5c;
    //   -2 -> 0xfb.
    // Dequantized: 57344 dec -> 2, 28672 dec -> 1, -8192 dec = -0x1.24924ap-2, 256 dec = 0x1.24924ap-7.
    const QuantizedTensor q = quantize_cpu(x, spec_of("fp8-e5m2-tensor"));
    REQUIRE(q.scale_values.size() == 1);
    CHECK(same_bits(q.scale_values[0], 0x1.24924ap-15f));
    const std::uint8_t codes[5] = {0x7b, 0x77, 0xf0, 0x5c, 0xfb};
    const float deq[5] = {2.0f, 1.0f, -0x1.24924ap-2f, 0x1.24924ap-7f, -2.0f};
    for (int i = 0; i < 5; ++i) {
      INFO("element " << i << ": " << hexf(q.dequantized(0, i)));
      CHECK(q.code_at(0, i) == codes[i]);
      CHECK(same_bits(q.dequantized(0, i), deq[i]));
    }
  }
}

namespace {
// Reference FP8 quantization of one block/tile grid (spec section 5 / fp8_scaled.hpp).
struct RefFp8 {
  std::vector<std::uint8_t> codes;  // rows x cols
  std::vector<float> deq, scales;   // rows x cols; grid
  std::int64_t clipped = 0;
};
RefFp8 ref_fp8(const Matrix& x, const Fp8Table& f, std::int64_t br, std::int64_t bc) {
  const double maxv = f.t.back();
  if (bc == 0) {
    br = x.rows;
    bc = x.cols;
  }
  const std::int64_t tr = (x.rows + br - 1) / br, tc = (x.cols + bc - 1) / bc;
  RefFp8 R;
  R.codes.assign(static_cast<std::size_t>(x.size()), 0);
  R.deq.assign(static_cast<std::size_t>(x.size()), 0);
  R.scales.assign(static_cast<std::size_t>(tr * tc), 0);
  for (std::int64_t i = 0; i < tr; ++i)
    for (std::int64_t j = 0; j < tc; ++j) {
      const std::int64_t r0 = i * br, r1 = std::min(x.rows, r0 + br), c0 = j * bc, c1 = std::min(x.cols, c0 + bc);
      float a = 0;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) a = std::max(a, std::fabs(x(r, c)));
      float enc = 1;
      if (a != 0) {
        enc = f32div(static_cast<float>(maxv), a);
        if (enc > kFMax) enc = kFMax;
        if (enc == 0) enc = 1;
      }
      const float dec = f32div(1.0f, enc);
      R.scales[static_cast<std::size_t>(i * tc + j)] = dec;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) {
          const float y = f32mul(x(r, c), enc);
          R.clipped += std::fabs(static_cast<double>(y)) > maxv;
          const std::uint8_t q = f.encode(y);
          R.codes[static_cast<std::size_t>(r * x.cols + c)] = q;
          R.deq[static_cast<std::size_t>(r * x.cols + c)] = f32mul(static_cast<float>(f.value(q)), dec);
        }
    }
  return R;
}
Matrix blocky(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  // Magnitudes vary per 64x64 patch (2^-30 .. 2^30) so that the block scales differ.
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_int_distribution<int> kd(-30, 30);
  std::vector<int> k(static_cast<std::size_t>(((rows + 63) / 64) * ((cols + 63) / 64)));
  for (int& v : k) v = kd(g);
  Matrix m(rows, cols);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      m(r, c) = std::ldexp(n01(g), k[static_cast<std::size_t>((r / 64) * ((cols + 63) / 64) + c / 64)]);
  return m;
}
}  // namespace

TEST_CASE("fp8 blocked scaling: 1x128 blocks, 128x128 tiles, per tensor, against the reference") {
  Matrix x = blocky(200, 130, 5);
  // Tile and block maxima at the edges of their tiles / blocks.
  x(127, 127) = 1e9f;
  x(128, 0) = -1e9f;
  x(199, 129) = 1e9f;
  for (std::int64_t r = 0; r < 200; r += 3) x(r, 127) *= 1e3f;
  for (std::int64_t r = 1; r < 200; r += 3) x(r, 0) *= -1e3f;
  struct Case {
    const char* name;
    const Fp8Table* f;
    std::int64_t br, bc, srows, scols, pcols;
  };
  const Case cases[] = {{"fp8-e4m3-1x128", &e4m3(), 1, 128, 200, 2, 256},
                        {"fp8-e4m3-128x128", &e4m3(), 128, 128, 2, 2, 256},
                        {"fp8-e4m3-tensor", &e4m3(), 1, 0, 1, 1, 130},
                        {"fp8-e5m2-tensor", &e5m2(), 1, 0, 1, 1, 130}};
  for (const Case& cs : cases) {
    INFO(cs.name);
    const QuantizedTensor q = quantize_cpu(x, spec_of(cs.name));
    CHECK(q.scale_rows == cs.srows);
    CHECK(q.scale_cols == cs.scols);
    CHECK(q.padded_cols == cs.pcols);
    const RefFp8 R = ref_fp8(x, *cs.f, cs.br, cs.bc);
    REQUIRE(q.scale_values.size() == R.scales.size());
    std::int64_t bad_s = 0, bad_c = 0, bad_d = 0;
    for (std::size_t i = 0; i < R.scales.size(); ++i) bad_s += !same_bits(q.scale_values[i], R.scales[i]);
    for (std::int64_t r = 0; r < x.rows; ++r)
      for (std::int64_t c = 0; c < x.cols; ++c) {
        bad_c += q.code_at(r, c) != R.codes[static_cast<std::size_t>(r * x.cols + c)];
        bad_d += !same_bits(q.dequantized(r, c), R.deq[static_cast<std::size_t>(r * x.cols + c)]);
      }
    CHECK(bad_s == 0);
    CHECK(bad_c == 0);
    CHECK(bad_d == 0);
    CHECK(q.clipped == R.clipped);
  }
  // Each 1x128 block has its own scale: the two blocks of a row differ when their amaxes do.
  const QuantizedTensor q = quantize_cpu(x, spec_of("fp8-e4m3-1x128"));
  float a0 = 0, a1 = 0;
  for (std::int64_t c = 0; c < 128; ++c) a0 = std::max(a0, std::fabs(x(0, c)));
  for (std::int64_t c = 128; c < 130; ++c) a1 = std::max(a1, std::fabs(x(0, c)));
  CHECK(same_bits(q.scale_values[0], f32div(1.0f, f32div(448.0f, a0))));
  CHECK(same_bits(q.scale_values[1], f32div(1.0f, f32div(448.0f, a1))));
}

// ============================================================================================
// Casts
// ============================================================================================

namespace {
// Test inputs for the casts: random bit patterns of every exponent, specials, BF16 ties of both
// parities, FP16 midpoints (normal, subnormal, around the overflow threshold 65520).
std::vector<float> cast_inputs() {
  std::vector<float> v = {0.0f, -0.0f, kInf, -kInf, kNaN, 1.0f, -1.0f, kFMax, -kFMax,
                          std::numeric_limits<float>::denorm_min(), 65504.0f, 65519.99f, 65520.0f, -65520.0f,
                          65536.0f, std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(3.0f, -25),
                          std::ldexp(1.0f, -26), std::ldexp(1.5f, -25), std::ldexp(1.0f, -14)};
  for (std::uint32_t hi : {0x3f80u, 0x3f81u, 0x4049u, 0x7f7fu, 0x0001u, 0xbf80u, 0xc2a5u})
    for (std::uint32_t lo : {0x7fffu, 0x8000u, 0x8001u, 0x0000u, 0xffffu}) v.push_back(from_bits((hi << 16) | lo));
  for (int e = -24; e <= 15; ++e)  // FP16 midpoints between m and m+1 (11 bits) and +-1 float ulp
    for (int m : {1024, 1025, 1500, 2047}) {
      const float mid = static_cast<float>(std::ldexp(m + 0.5, e - 10));
      v.push_back(mid);
      v.push_back(std::nextafter(mid, 0.0f));
      v.push_back(std::nextafter(mid, kInf));
      v.push_back(-mid);
    }
  std::mt19937_64 g(99);
  for (int i = 0; i < 20000; ++i) {
    const float x = from_bits(static_cast<std::uint32_t>(g()));
    if (!std::isnan(x)) v.push_back(x);
  }
  return v;
}
// BF16 round to nearest even from the bits (NaN handled by the caller).
std::uint16_t bf16_bits_ref(float x) {
  const std::uint32_t u = fbits(x);
  std::uint32_t hi = u >> 16;
  const std::uint32_t lo = u & 0xffffu;
  if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) ++hi;  // carries into the exponent as IEEE does
  return static_cast<std::uint16_t>(hi);
}
double fp16_value(std::uint16_t b) {
  const int e = (b >> 10) & 0x1f, m = b & 0x3ff;
  const double s = (b & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f) return m ? std::numeric_limits<double>::quiet_NaN() : s * std::numeric_limits<double>::infinity();
  return s * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
}
}  // namespace

TEST_CASE("bf16 cast: codes are RNE of the float32 bits, values decode them") {
  const std::vector<float> in = cast_inputs();
  Matrix x(1, static_cast<std::int64_t>(in.size()));
  x.data = in;
  const QuantizedTensor q = quantize_cpu(x, spec_of("bf16"));
  REQUIRE(q.codes16.size() == in.size());
  std::int64_t bad_code = 0, bad_val = 0, overflow = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint16_t c = q.codes16[i];
    const float d = q.dequantized.data[i];
    if (std::isnan(in[i])) {
      bad_code += (c & 0x7f80u) != 0x7f80u || (c & 0x7fu) == 0;
      bad_val += !std::isnan(d);
      continue;
    }
    const std::uint16_t want = bf16_bits_ref(in[i]);
    bad_code += c != want;
    bad_val += !same_bits(d, from_bits(static_cast<std::uint32_t>(want) << 16));
    // The generic format (double arithmetic) agrees on the value.
    bad_val += static_cast<double>(d) != format_bf16().round_nearest_even(static_cast<double>(in[i]));
    overflow += std::isfinite(in[i]) && std::isinf(d);
  }
  CHECK(bad_code == 0);
  CHECK(bad_val == 0);
  CHECK(overflow > 0);  // kFMax rounds up to Inf in BF16
  CHECK(q.clipped == overflow);
}

TEST_CASE("fp16 cast: against the generic format and the compiler's _Float16") {
  const std::vector<float> in = cast_inputs();
  Matrix x(1, static_cast<std::int64_t>(in.size()));
  x.data = in;
  const QuantizedTensor q = quantize_cpu(x, spec_of("fp16"));
  REQUIRE(q.codes16.size() == in.size());
  std::int64_t bad_val = 0, bad_decode = 0, bad_f16 = 0, overflow = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const float d = q.dequantized.data[i];
    const double code_value = fp16_value(q.codes16[i]);
    if (std::isnan(in[i])) {
      bad_val += !std::isnan(d) || !std::isnan(code_value);
      continue;
    }
    const double want = format_fp16().round_nearest_even(static_cast<double>(in[i]));
    bad_val += static_cast<double>(d) != want || std::signbit(d) != std::signbit(want);
    bad_decode += code_value != static_cast<double>(d) || std::signbit(code_value) != std::signbit(d);
    overflow += std::isfinite(in[i]) && std::isinf(d);
#if defined(__FLT16_MAX__)
    const _Float16 h = static_cast<_Float16>(in[i]);
    std::uint16_t hb;
    std::memcpy(&hb, &h, sizeof hb);
    bad_f16 += hb != q.codes16[i];
#endif
  }
  CHECK(bad_val == 0);
  CHECK(bad_decode == 0);
  CHECK(bad_f16 == 0);
  CHECK(overflow > 0);  // 65520 and above
  CHECK(q.clipped == overflow);
  // Fixed points: 65519.99 -> 65504 (0x7bff), 65520 -> Inf (0x7c00, the tie rounds to even = up),
  // 2^-25 -> 0 (tie to even), 3*2^-25 -> 2^-23 (0x0002), 1.5*2^-25 -> 2^-24 (0x0001).
  auto code_of = [&](float v) {
    for (std::size_t i = 0; i < in.size(); ++i)
      if (same_bits(in[i], v)) return static_cast<int>(q.codes16[i]);
    return -1;
  };
  CHECK(code_of(65519.99f) == 0x7bff);
  CHECK(code_of(65520.0f) == 0x7c00);
  CHECK(code_of(-65520.0f) == 0xfc00);
  CHECK(code_of(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(code_of(std::ldexp(3.0f, -25)) == 0x0002);
  CHECK(code_of(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(code_of(-0.0f) == 0x8000);
}

// ============================================================================================
// Statistics
// ============================================================================================

TEST_CASE("error statistics follow their definitions (recomputed in long double)") {
  GeneratorSpec gs;
  gs.kind = "normal";
  gs.rows = 256;
  gs.cols = 256;
  gs.seed = 3;
  Matrix x = generate(gs);
  // Some exact zeros and tiny values, so that underflow occurs.
  for (std::int64_t i = 0; i < 256; ++i) {
    x(i, 7) = 0.0f;
    x(i, 9) = x(i, 9) * 1e-6f;
  }
  // Bound for the library's double sums (chunks of 4096 summed recursively, 16 chunk sums
  // added in order): for sums of non-negative terms each term and each addition contributes a
  // relative error <= u = 2^-53, in all at most gamma_m = m u / (1 - m u), m = 4096 + 16 + 2
  // (the +2: forming e = xh - x, exact here, and e*e). nmse is a quotient of two such sums:
  // 2 gamma_m + u. The signed sum (bias) is bounded by gamma_m * sum |e_i| absolutely.
  const long double u = std::ldexp(1.0L, -53), m = 4096 + 16 + 2;
  const long double gam = m * u / (1 - m * u);
  for (const char* name : {"nvfp4", "nvfp4-2d", "mxfp4", "fp8-e4m3-1x128", "bf16"}) {
    INFO(name);
    const QuantizedTensor q = quantize_cpu(x, spec_of(name));
    long double err2 = 0, ref2 = 0, err = 0, abserr = 0, absref = 0, maxerr = 0;
    std::int64_t nonzero = 0, underflow = 0;
    for (std::int64_t i = 0; i < x.size(); ++i) {
      const long double xi = x.data[static_cast<std::size_t>(i)], xh = q.dequantized.data[static_cast<std::size_t>(i)];
      const long double e = xh - xi;  // exact: both floats, 64-bit significand
      err2 += e * e;
      ref2 += xi * xi;
      err += e;
      abserr += std::fabs(e);
      absref += std::fabs(xi);
      maxerr = std::max(maxerr, std::fabs(e));
      if (xi != 0) {
        ++nonzero;
        underflow += xh == 0;
      }
    }
    const long double n = static_cast<long double>(x.size());
    CHECK(q.stats.elements == x.size());
    CHECK(q.stats.nonfinite == 0);
    const long double nmse = err2 / ref2;
    INFO("nmse " << static_cast<double>(nmse) << " vs " << q.stats.nmse);
    CHECK(std::fabs(q.stats.nmse - nmse) <= (2 * gam + u) * nmse + 1e-300L);
    CHECK(std::fabs(q.stats.bias - err / n) <= gam * abserr / n + u * std::fabs(err / n));
    CHECK(std::fabs(q.stats.relative_bias - err / absref) <= (gam * abserr + 2 * gam * std::fabs(err)) / absref);
    CHECK(q.stats.max_abs_error == static_cast<double>(maxerr));  // |e| exact in double too
    CHECK(q.stats.underflow_fraction == static_cast<double>(underflow) / static_cast<double>(nonzero));
    CHECK(q.stats.clipped_fraction == static_cast<double>(q.clipped) / static_cast<double>(x.size()));
    CHECK(q.stats.blocks == static_cast<std::int64_t>(q.scale_values.size()));
    if (std::string(name) != "bf16") CHECK(underflow > 0);
  }
  SECTION("non-finite elements are counted and excluded") {
    Matrix y = x;
    y(0, 0) = kNaN;
    y(5, 5) = kInf;
    const QuantizedTensor q = quantize_cpu(y, spec_of("bf16"));
    CHECK(q.stats.nonfinite == 2);
    CHECK(q.stats.elements == y.size() - 2);
    CHECK(std::isfinite(q.stats.nmse));
  }
}

TEST_CASE("mxfp4 and fp8 1x128 columnwise (axis 0) equal rowwise of the transpose") {
  const Matrix x = blocky(70, 150, 17);
  Matrix xt(x.cols, x.rows);
  for (std::int64_t r = 0; r < x.rows; ++r)
    for (std::int64_t c = 0; c < x.cols; ++c) xt(c, r) = x(r, c);
  for (const char* name : {"mxfp4", "mxfp4-ceil", "fp8-e4m3-1x128"}) {
    INFO(name);
    QuantSpec col = spec_of(name);
    col.axis = 0;
    const QuantizedTensor a = quantize_cpu(x, col);
    const QuantizedTensor b = quantize_cpu(xt, spec_of(name));
    CHECK(a.rows == 150);
    CHECK(a.cols == 70);
    CHECK(a.codes == b.codes);
    CHECK(a.scale_codes == b.scale_codes);
    CHECK(a.scale_values == b.scale_values);
    CHECK(a.clipped == b.clipped);
    std::int64_t bad = 0;
    for (std::int64_t r = 0; r < x.rows; ++r)
      for (std::int64_t c = 0; c < x.cols; ++c) bad += !same_bits(a.dequantized(r, c), b.dequantized(c, r));
    CHECK(bad == 0);
  }
}
