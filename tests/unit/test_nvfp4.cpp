// NVFP4 quantizer (quant/nvfp4*.{hpp,cpp} through fp4d::quantize_cpu), against
// nvfp4-spec.md section 2:
//   * hand-worked blocks: every number worked out in the comments from the spec's formulas,
//     asserted exactly (codes, packed bytes, scale bytes, dequantized values, statistics);
//   * an independent reference quantizer written in this file: float32 operations are
//     evaluated as one exact double operation followed by one rounding to float (exact
//     for products of floats; for quotients double rounding is innocuous because
//     53 >= 2*24 + 2, Figueroa 1995), and the E2M1 / E4M3 roundings are done against
//     value tables built from the format definitions with exact midpoint comparisons. It
//     shares no code with the library;
//   * structural properties: 16x16 tiles commute with transposition, columnwise equals
//     rowwise of the transpose, partial blocks equal zero padding, thread independence;
//   * stochastic rounding: neighbours only, unbiasedness with a Hoeffding bound at a stated
//     confidence, determinism in the seed.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "format/bf16.hpp"
#include "quant/nvfp4_math.hpp"
#include "quant/quantize.hpp"
#include "quant/presets.hpp"
#include "quant/training_recipe.hpp"
#include "support/catch.hpp"
#include "support/float_bits.hpp"
#include "util/parallel_worth.hpp"

using namespace fp4d;
using namespace fp4d_test;

namespace {




// ---- value tables from the format definitions (spec section 1) ---------------------------
// E2M1 magnitudes by code 0..7.
const double kE2M1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
double e2m1_value(std::uint8_t code) { return (code & 8) ? -kE2M1[code & 7] : kE2M1[code & 7]; }

// E4M3 (bias 7, no Inf, S.1111.111 NaN): code c in 0..126 has value
//   e = c >> 3, m = c & 7:  e == 0 -> m * 2^-9,  else (1 + m/8) * 2^(e-7).
double e4m3_value(std::uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (c & 0x80) ? -v : v;
}

// Round a non-negative value to the code of a monotone table t[0..n) (t[i] = value of code i),
// nearest, ties to the even code, saturating at t[n-1]. Exact: 2v and t[i] + t[i+1] are
// exact doubles for the formats used here.
int round_table_nearest_even(double v, const double* t, int n) {
  if (v >= t[n - 1]) return n - 1;
  int i = 0;
  while (t[i + 1] <= v) ++i;  // t[i] <= v < t[i+1]
  const double two_v = 2.0 * v, mid = t[i] + t[i + 1];
  if (two_v < mid) return i;
  if (two_v > mid) return i + 1;
  return (i % 2 == 0) ? i : i + 1;
}
int round_table_toward_zero(double v, const double* t, int n) {
  if (v >= t[n - 1]) return n - 1;
  int i = 0;
  while (t[i + 1] <= v) ++i;
  return i;
}

std::vector<double> e4m3_table() {
  std::vector<double> t;
  for (int c = 0; c <= 0x7e; ++c) t.push_back(e4m3_value(static_cast<std::uint8_t>(c)));
  return t;
}
// E4M3 code of a non-negative scale value (RNE, saturating to 448, Inf -> 448).
std::uint8_t ref_e4m3_code(float v) {
  static const std::vector<double> t = e4m3_table();
  return static_cast<std::uint8_t>(round_table_nearest_even(static_cast<double>(v), t.data(), 127));
}
// E2M1 code of y (spec section 1): RNE or RZ, saturating, NaN -> 0x7, sign of zero kept.
std::uint8_t ref_e2m1_code(float y, bool rz = false) {
  if (std::isnan(y)) return 0x7;
  const double a = std::fabs(static_cast<double>(y));
  const int mag = rz ? round_table_toward_zero(a, kE2M1, 8) : round_table_nearest_even(a, kE2M1, 8);
  return static_cast<std::uint8_t>(mag | (std::signbit(y) ? 8 : 0));
}

// ---- the reference NVFP4 quantizer (spec section 2, stored orientation) -------------------
struct RefNv {
  std::int64_t rows = 0, cols = 0, pcols = 0, srows = 0, scols = 0;
  float s_enc = 1, s_dec = 1;
  std::vector<std::uint8_t> codes;        // rows x pcols, unpacked
  std::vector<std::uint8_t> scale_codes;  // srows x scols
  std::vector<float> deq;                 // rows x cols
  std::int64_t clipped = 0;
};

RefNv ref_nvfp4(const Matrix& x, bool two_d, bool legacy, bool rz = false) {
  RefNv R;
  R.rows = x.rows;
  R.cols = x.cols;
  R.pcols = (x.cols + 15) / 16 * 16;
  R.srows = two_d ? (x.rows + 15) / 16 : x.rows;
  R.scols = R.pcols / 16;
  // Step 1: A = max |x|, NaN ignored.
  float A = 0;
  for (float v : x.data)
    if (!std::isnan(v)) A = std::max(A, std::fabs(v));
  // Step 2.
  if (A != 0) {
    float enc = f32div(2688.0f, A);
    if (enc > kFMax) enc = kFMax;
    if (enc == 0) enc = 1;
    R.s_enc = enc;
    R.s_dec = f32div(1.0f, enc);
  }
  const float factor = f32mul(R.s_enc, f32div(1.0f, 6.0f));
  R.codes.assign(static_cast<std::size_t>(R.rows * R.pcols), 0);
  R.scale_codes.assign(static_cast<std::size_t>(R.srows * R.scols), 0);
  R.deq.assign(static_cast<std::size_t>(R.rows * R.cols), 0);
  const std::int64_t br = two_d ? 16 : 1;
  for (std::int64_t tr = 0; tr < R.srows; ++tr)
    for (std::int64_t tc = 0; tc < R.scols; ++tc) {
      const std::int64_t r0 = tr * br, r1 = std::min(R.rows, r0 + br), c0 = tc * 16, c1 = std::min(R.cols, c0 + 16);
      float a = 0;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c)
          if (!std::isnan(x(r, c))) a = std::max(a, std::fabs(x(r, c)));
      // Step 3.
      const std::uint8_t s = legacy ? ref_e4m3_code(f32mul(f32div(a, 6.0f), R.s_enc)) : ref_e4m3_code(f32mul(a, factor));
      const float sv = static_cast<float>(e4m3_value(s));
      // Step 4.
      float e_b = f32div(1.0f, f32mul(sv, R.s_dec));
      if (e_b > kFMax) e_b = kFMax;
      R.scale_codes[static_cast<std::size_t>(tr * R.scols + tc)] = s;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) {
          // Step 5.
          float y = f32mul(x(r, c), e_b);
          if (std::fabs(y) > 6.0f && std::isfinite(y) && (s & 0x7f) != 0) ++R.clipped;
          if (y > 6.0f) y = 6.0f;
          if (y < -6.0f) y = -6.0f;
          const std::uint8_t q = ref_e2m1_code(y, rz);
          R.codes[static_cast<std::size_t>(r * R.pcols + c)] = q;
          // Step 6.
          R.deq[static_cast<std::size_t>(r * R.cols + c)] =
              f32mul(f32mul(static_cast<float>(e2m1_value(q)), sv), R.s_dec);
        }
    }
  return R;
}

// Compares a quantization (stored orientation) with the reference; returns the number of
// differences and describes the first.
std::int64_t compare_with_ref(const QuantizedTensor& q, const RefNv& R, std::string* first) {
  std::int64_t bad = 0;
  auto note = [&](const std::string& s) {
    if (bad++ == 0) *first = s;
  };
  if (q.rows != R.rows || q.cols != R.cols || q.padded_cols != R.pcols || q.scale_rows != R.srows ||
      q.scale_cols != R.scols) {
    note("shape");
    return bad;
  }
  if (!same_bits(q.global.encode, R.s_enc)) note("s_enc " + hexf(q.global.encode) + " vs " + hexf(R.s_enc));
  if (!same_bits(q.global.decode, R.s_dec)) note("s_dec " + hexf(q.global.decode) + " vs " + hexf(R.s_dec));
  for (std::size_t i = 0; i < R.scale_codes.size(); ++i) {
    if (q.scale_codes[i] != R.scale_codes[i])
      note("scale " + std::to_string(i) + ": " + std::to_string(q.scale_codes[i]) + " vs " +
           std::to_string(R.scale_codes[i]));
    if (!same_bits(q.scale_values[i], static_cast<float>(e4m3_value(R.scale_codes[i]))))
      note("scale value " + std::to_string(i));
  }
  for (std::int64_t r = 0; r < R.rows; ++r)
    for (std::int64_t c = 0; c < R.pcols; ++c)
      if (q.code_at(r, c) != R.codes[static_cast<std::size_t>(r * R.pcols + c)])
        note("code (" + std::to_string(r) + "," + std::to_string(c) + "): " + std::to_string(q.code_at(r, c)) +
             " vs " + std::to_string(R.codes[static_cast<std::size_t>(r * R.pcols + c)]));
  if (q.clipped != R.clipped) note("clipped " + std::to_string(q.clipped) + " vs " + std::to_string(R.clipped));
  return bad;
}

Matrix row(std::initializer_list<float> v) {
  Matrix m(1, static_cast<std::int64_t>(v.size()));
  std::copy(v.begin(), v.end(), m.data.begin());
  return m;
}
Matrix concat_blocks(const std::vector<std::vector<float>>& blocks) {  // 1 x 16*k, blocks zero padded
  Matrix m(1, static_cast<std::int64_t>(16 * blocks.size()));
  for (std::size_t b = 0; b < blocks.size(); ++b)
    for (std::size_t i = 0; i < blocks[b].size(); ++i) m.data[16 * b + i] = blocks[b][i];
  return m;
}

// Random test data with a wide dynamic range: every 16-run of a row gets its own magnitude
// 2^k, k in [-24, 3], so that blocks with normal, subnormal and zero E4M3 scales occur next to
// the block setting the global amax; some exact zeros, negative zeros and E2M1 midpoints.
Matrix wide_range(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_int_distribution<int> kdist(-24, 3), pick(0, 40);
  Matrix m(rows, cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    int k = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      if (c % 16 == 0) k = kdist(g);
      const int p = pick(g);
      float v;
      if (p == 0) v = 0.0f;
      else if (p == 1) v = -0.0f;
      else if (p == 2) v = std::ldexp(1.25f, k);
      else v = std::ldexp(n01(g), k);
      m(r, c) = v;
    }
    // In every other block, one element (its position cycling through 0..15 over the rows)
    // becomes the block maximum, so that maxima sit at every position, the edges included.
    for (std::int64_t c0 = 0; c0 < cols; c0 += 16)
      if (((c0 / 16 + r) & 1) == 0) {
        const std::int64_t c = c0 + (r + c0 / 16) % 16;
        if (c < cols) m(r, c) *= 8.0f;
      }
  }
  return m;
}
Matrix normal_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n01(0.0f, scale);
  Matrix m(rows, cols);
  for (float& v : m.data) v = n01(g);
  return m;
}

QuantSpec spec_of(const char* name) { return preset(name).spec; }

bool same_stats(const QuantStats& a, const QuantStats& b) {
  auto d = [](double x, double y) { return std::memcmp(&x, &y, sizeof x) == 0; };
  return a.elements == b.elements && a.nonfinite == b.nonfinite && d(a.nmse, b.nmse) && d(a.bias, b.bias) &&
         d(a.relative_bias, b.relative_bias) && d(a.max_abs_error, b.max_abs_error) &&
         d(a.clipped_fraction, b.clipped_fraction) && d(a.underflow_fraction, b.underflow_fraction) &&
         a.blocks == b.blocks && a.zero_scale_blocks == b.zero_scale_blocks &&
         a.subnormal_scale_blocks == b.subnormal_scale_blocks;
}
bool same_matrix_bits(const Matrix& a, const Matrix& b) {
  return a.rows == b.rows && a.cols == b.cols &&
         (a.data.empty() || std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0);
}
bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

// ============================================================================================
// Hand-worked blocks
// ============================================================================================

// Constants used below, worked out once:
//   float(1/6) = 0x1.555556p-3: 1/6 = 2^-3 * 1.0101..._2; the bits after the 23rd fraction bit
//     are 1010..., i.e. 2/3 ulp, so RNE rounds up by 1/3 ulp: float(1/6) = (1/6)(1 + 2^-25).
//   float(1/7) = 0x1.24924ap-3: 8/7 = 1.001001..._2; the dropped tail .1001... = 4/7 ulp rounds
//     up by 3/7 ulp: float(1/7) = (1/7)(1 + 3*2^-26). Hence float(1/448) = 0x1.24924ap-9 and
//     float(1/224) = 0x1.24924ap-8 are (1/448)(1 + 3*2^-26), (1/224)(1 + 3*2^-26).
//   A value v = m*2^k with m = 1 or 1.5 times (1 + 3*2^-26): for m = 1 the excess is
//     3*2^-26 = 3/8 ulp (ulp 2^-23 at the significand 1) -> rounds back to v; for m = 1.5 it is
//     4.5*2^-26 = 9/16 ulp -> rounds up to (1.5 + 2^-23) * 2^k = 0x1.800002p(k).

TEST_CASE("nvfp4 hand-worked (a): the block sets the global amax, A = 6") {
  // A = 6 -> s_enc = 2688/6 = 448 exactly; s_dec = float(1/448) = 0x1.24924ap-9.
  // factor = float(448 * float(1/6)) = float(74.666...(1 + 2^-25)): 74 + 2/3 has the tail 1/3 ulp
  //   (ulp 2^-17) plus 74.67*2^-25 = 0.29 ulp -> 0.625 ulp -> rounds up: 0x1.2aaaacp+6.
  // S_b = e4m3(6 * factor) = e4m3(448 + 2^-15) = 448 (saturating) -> code 0x7e (e=15, m=6).
  // e_b = 1 / float(448 * s_dec) = 1 / float(1 + 3*2^-26) = 1 / 1 = 1: the elements are E2M1(x).
  // RNE on the E2M1 grid {0, .5, 1, 1.5, 2, 3, 4, 6} (code = index, +8 for negative):
  //   6 -> 6 (7)        -5.2 -> -6 (0xF)    5.0 tie 4|6 -> 4 (6)     3.5 tie 3|4 -> 4 (6)
  //   -2.6 -> -3 (0xD)  2.5 tie 2|3 -> 2 (4) 1.8 -> 2 (4)           1.75 tie 1.5|2 -> 2 (4)
  //   1.3 -> 1.5 (3)    1.25 tie 1|1.5 -> 1 (2) 0.8 -> 1 (2)         0.75 tie .5|1 -> 1 (2)
  //   0.3 -> 0.5 (1)    0.25 tie 0|.5 -> 0 (0) -0.2 -> -0 (8)        -0.0 -> -0 (8)
  // Dequantized (v * 448) * s_dec = v * (1 + 3*2^-26) rounded: exact for v in {.5, 1, 2, 4},
  // 0x1.800002p(k) for v = 1.5 * 2^k (1.5, 3, 6).
  const Matrix x = row({6.0f, -5.2f, 5.0f, 3.5f, -2.6f, 2.5f, 1.8f, 1.75f, 1.3f, 1.25f, 0.8f, 0.75f, 0.3f, 0.25f,
                        -0.2f, -0.0f});
  const QuantizedTensor q = quantize_cpu(x, spec_of("nvfp4"));
  CHECK(q.global.encode == 448.0f);
  CHECK(same_bits(q.global.decode, 0x1.24924ap-9f));
  REQUIRE(q.scale_codes.size() == 1);
  CHECK(q.scale_codes[0] == 0x7e);
  CHECK(q.scale_values[0] == 448.0f);
  const std::uint8_t codes[16] = {0x7, 0xF, 0x6, 0x6, 0xD, 0x4, 0x4, 0x4, 0x3, 0x2, 0x2, 0x2, 0x1, 0x0, 0x8, 0x8};
  for (int i = 0; i < 16; ++i) {
    INFO("element " << i);
    CHECK(q.code_at(0, i) == codes[i]);
  }
  // Packing: element 2i in the low nibble.
  const std::uint8_t bytes[8] = {0xF7, 0x66, 0x4D, 0x44, 0x23, 0x22, 0x01, 0x88};
  REQUIRE(q.codes.size() == 8);
  for (int i = 0; i < 8; ++i) CHECK(q.codes[i] == bytes[i]);
  const float deq[16] = {0x1.800002p+2f, -0x1.800002p+2f, 4.0f, 4.0f, -0x1.800002p+1f, 2.0f, 2.0f, 2.0f,
                         0x1.800002p+0f, 1.0f, 1.0f, 1.0f, 0.5f, 0.0f, -0.0f, -0.0f};
  for (int i = 0; i < 16; ++i) {
    INFO("element " << i << ": " << hexf(q.dequantized(0, i)) << " expected " << hexf(deq[i]));
    CHECK(same_bits(q.dequantized(0, i), deq[i]));
  }
  CHECK(q.clipped == 0);
  CHECK(q.stats.clipped_fraction == 0.0);
  CHECK(q.stats.elements == 16);
  CHECK(q.stats.blocks == 1);
  CHECK(q.stats.zero_scale_blocks == 0);
  CHECK(q.stats.subnormal_scale_blocks == 0);
  // 0.25 and -0.2 became 0: 2 of the 15 nonzero inputs underflow.
  CHECK(q.stats.underflow_fraction == 2.0 / 15.0);
}

TEST_CASE("nvfp4 hand-worked (b): the E4M3 scale rounds down and the block maximum clips") {
  // Block 0 = [6, 0...] sets A = 6: s_enc = 448, s_dec = 0x1.24924ap-9, factor = 0x1.2aaaacp+6
  // (see (a)); its scale is 448 (0x7e), e_b = 1.
  // Block 1 = [4, -3.9, 3, 2, 1, 0.5, 0...]: a_b * factor = 4 * 0x1.2aaaacp+6 = 0x1.2aaaacp+8
  //   = 298.67 (exact, power of two). E4M3 spacing in [256, 512) is 32: neighbours 288 and 320,
  //   midpoint 304 -> rounds DOWN to 288 = 1.125 * 2^8 -> code (8+7)<<3 | 1 = 0x79.
  // 288 * s_dec = (9/14)(1 + 3*2^-26) -> 0x1.492494p-1 (0x1.24924a * 9 = 0xa.49249a; the dropped
  //   tail 0xa/16 rounds up), e_b = 1/0x1.492494p-1 = 0x1.8e38e2p+0 = 1.5555555 (just below 14/9).
  //   4 * e_b = 6.22 > 6 -> clipped, code 7;  -3.9 * e_b = -6.07 -> clipped, code 0xF;
  //   3 * e_b = 4.67 -> 4 (midpoint 5), code 6;  2 * e_b = 3.11 -> 3, code 5;
  //   1 * e_b = 1.556 -> 1.5 (midpoint 1.75), code 3;  0.5 * e_b = 0.778 -> 1 (midpoint .75), code 2.
  // 2 of 32 elements clip: clipped_fraction = 1/16.
  // Dequantized (v * 288) * s_dec: 288 * s_dec = 0x1.492494p-1 (above); for v = 2^k the result is
  //   that times 2^k; for v = 1.5 * 2^k: 432 * s_dec = 27 * 0x1.24924ap-5, 0x124924a * 27 = 0x1edb6dce
  //   (29 bits), the 5 dropped bits 01110 are below half -> 0x1.edb6dcp-1 (times 2^k).
  const Matrix x = concat_blocks({{6.0f}, {4.0f, -3.9f, 3.0f, 2.0f, 1.0f, 0.5f}});
  const QuantizedTensor q = quantize_cpu(x, spec_of("nvfp4"));
  CHECK(q.global.encode == 448.0f);
  REQUIRE(q.scale_codes.size() == 2);
  CHECK(q.scale_codes[0] == 0x7e);
  CHECK(q.scale_codes[1] == 0x79);
  CHECK(q.scale_values[1] == 288.0f);
  // Independent check of the intermediate numbers used above.
  CHECK(same_bits(f32mul(288.0f, 0x1.24924ap-9f), 0x1.492494p-1f));
  CHECK(same_bits(f32div(1.0f, 0x1.492494p-1f), 0x1.8e38e2p+0f));
  const std::uint8_t codes[6] = {0x7, 0xF, 0x6, 0x5, 0x3, 0x2};
  for (int i = 0; i < 6; ++i) {
    INFO("block 1 element " << i);
    CHECK(q.code_at(0, 16 + i) == codes[i]);
  }
  for (int i = 6; i < 16; ++i) CHECK(q.code_at(0, 16 + i) == 0);
  CHECK(q.code_at(0, 0) == 0x7);
  const float deq[6] = {0x1.edb6dcp+1f, -0x1.edb6dcp+1f, 0x1.492494p+1f, 0x1.edb6dcp+0f, 0x1.edb6dcp-1f,
                        0x1.492494p-1f};
  for (int i = 0; i < 6; ++i) {
    INFO("block 1 element " << i << ": " << hexf(q.dequantized(0, 16 + i)) << " expected " << hexf(deq[i]));
    CHECK(same_bits(q.dequantized(0, 16 + i), deq[i]));
  }
  CHECK(q.clipped == 2);
  CHECK(q.stats.clipped_fraction == 2.0 / 32.0);
  CHECK(q.stats.underflow_fraction == 0.0);
}

TEST_CASE("nvfp4 hand-worked (c): subnormal and zero E4M3 block scales") {
  // Block 0 = [6, -3, 1]: A = 6 (s_enc = 448, factor = 0x1.2aaaacp+6, e_b = 1 as in (a)):
  //   codes 7, 0xD, 2; dequantized 0x1.800002p+2, -0x1.800002p+1, 1.
  // Block 1 = [2^-13, -2^-14, 2^-15, 2^-16, 2^-18]: a_b * factor = 0x1.2aaaacp-7 = 4.667 * 2^-9.
  //   E4M3 subnormals are m * 2^-9 (m = 1..7): 4.667 -> 5 (midpoint 4.5): code 0x05, subnormal.
  //   5*2^-9 * s_dec = 5 * 0x1.24924ap-18: 0x124924a * 5 = 0x5b6db72, dropped 3 bits 010 -> down:
  //   0x1.6db6dcp-16; e_b = 1/that = 0x1.666666p+15 = 45875.199 (448*512/5 = 45875.2).
  //   2^-13 e_b = 5.6 -> 6 (midpoint 5; not > 6, no clip), code 7;  -2^-14 e_b = -2.8 -> -3, 0xD;
  //   2^-15 e_b = 1.4 -> 1.5, code 3;  2^-16 e_b = 0.7 -> 0.5 (midpoint .75), code 1;
  //   2^-18 e_b = 0.175 -> 0 (midpoint .25), code 0: an underflow.
  //   Dequantized (v * 5*2^-9) * s_dec: 1 -> 0x1.6db6dcp-16 (above), 0.5 -> 0x1.6db6dcp-17,
  //   1.5 * 2^k -> 15 * 2^(k-10) * 0x1.24924ap-9: 0x124924a * 15 = 0x11249256 (29 bits), the
  //   5 dropped bits 10110 are above half -> rounds up: 0x1.124926p(k-13).
  // Block 2 = [2^-17, -2^-19]: a_b * factor = 0x1.2aaaacp-11 = 0.29 * 2^-9 < 2^-10 (half the
  //   smallest subnormal) -> scale 0 (code 0x00). e_b = min(1/0, FLT_MAX) = FLT_MAX: x * e_b is
  //   huge, clamps to +-6 (codes 7, 0xF; not counted as clipped: a zero-scale block flushes,
  //   which the statistics count as underflow), and dequantizes to (+-6 * 0) * s_dec = +-0.
  // Statistics: 3 blocks, 1 subnormal-scale, 1 zero-scale; nonzero inputs 3 + 5 + 2 = 10 of
  // which 2^-18, 2^-17, -2^-19 dequantize to 0: underflow_fraction = 3/10; clipped 0.
  const float t13 = std::ldexp(1.0f, -13), t14 = std::ldexp(1.0f, -14), t15 = std::ldexp(1.0f, -15),
              t16 = std::ldexp(1.0f, -16), t17 = std::ldexp(1.0f, -17), t18 = std::ldexp(1.0f, -18),
              t19 = std::ldexp(1.0f, -19);
  const Matrix x = concat_blocks({{6.0f, -3.0f, 1.0f}, {t13, -t14, t15, t16, t18}, {t17, -t19}});
  const QuantizedTensor q = quantize_cpu(x, spec_of("nvfp4"));
  CHECK(q.global.encode == 448.0f);
  REQUIRE(q.scale_codes.size() == 3);
  CHECK(q.scale_codes[0] == 0x7e);
  CHECK(q.scale_codes[1] == 0x05);
  CHECK(q.scale_values[1] == 5.0f * std::ldexp(1.0f, -9));
  CHECK(q.scale_codes[2] == 0x00);
  CHECK(q.scale_values[2] == 0.0f);
  CHECK(same_bits(f32mul(5.0f * std::ldexp(1.0f, -9), 0x1.24924ap-9f), 0x1.6db6dcp-16f));
  CHECK(same_bits(f32div(1.0f, 0x1.6db6dcp-16f), 0x1.666666p+15f));

  const std::uint8_t c0[3] = {0x7, 0xD, 0x2}, c1[5] = {0x7, 0xD, 0x3, 0x1, 0x0}, c2[2] = {0x7, 0xF};
  for (int i = 0; i < 3; ++i) CHECK(q.code_at(0, i) == c0[i]);
  for (int i = 0; i < 5; ++i) {
    INFO("block 1 element " << i);
    CHECK(q.code_at(0, 16 + i) == c1[i]);
  }
  for (int i = 0; i < 2; ++i) CHECK(q.code_at(0, 32 + i) == c2[i]);

  CHECK(same_bits(q.dequantized(0, 0), 0x1.800002p+2f));
  CHECK(same_bits(q.dequantized(0, 1), -0x1.800002p+1f));
  CHECK(same_bits(q.dequantized(0, 2), 1.0f));
  // Block 1: (v * 5*2^-9) * s_dec, each product 5*2^-9 * v exact (<= 6 significant bits), then one
  // rounding of the product with s_dec: 30*2^-9, 15*2^-9, 7.5*2^-9, 2.5*2^-9 times 0x1.24924ap-9.
  // Worked out by hand in the comment above, and cross-checked by one double product each.
  const float s_dec = 0x1.24924ap-9f;
  const float e1[5] = {0x1.124926p-13f, -0x1.124926p-14f, 0x1.124926p-15f, 0x1.6db6dcp-17f, 0.0f};
  CHECK(same_bits(e1[0], f32mul(30.0f * std::ldexp(1.0f, -9), s_dec)));
  CHECK(same_bits(e1[1], -f32mul(15.0f * std::ldexp(1.0f, -9), s_dec)));
  CHECK(same_bits(e1[2], f32mul(7.5f * std::ldexp(1.0f, -9), s_dec)));
  CHECK(same_bits(e1[3], f32mul(2.5f * std::ldexp(1.0f, -9), s_dec)));
  for (int i = 0; i < 5; ++i) {
    INFO("block 1 element " << i << ": " << hexf(q.dequantized(0, 16 + i)) << " expected " << hexf(e1[i]));
    CHECK(same_bits(q.dequantized(0, 16 + i), e1[i]));
  }
  CHECK(q.dequantized(0, 32) == 0.0f);
  CHECK(q.dequantized(0, 33) == 0.0f);
  CHECK(q.clipped == 0);
  CHECK(q.stats.blocks == 3);
  CHECK(q.stats.subnormal_scale_blocks == 1);
  CHECK(q.stats.zero_scale_blocks == 1);
  CHECK(q.stats.underflow_fraction == 3.0 / 10.0);
  CHECK(q.stats.clipped_fraction == 0.0);
}

TEST_CASE("nvfp4 hand-worked (d): an all-zero tensor") {
  // A = 0 -> s_enc = s_dec = 1 (step 2); every a_b = 0 -> S_b = e4m3(0) = 0 (code 0x00),
  // e_b = FLT_MAX, 0 * FLT_MAX = 0 -> code 0; x_hat = 0.
  for (const char* name : {"nvfp4", "nvfp4-2d", "nvfp4-col", "nvfp4-legacy", "nvfp4-sr"}) {
    INFO(name);
    Matrix x(19, 37, 0.0f);
    const QuantizedTensor q = quantize_cpu(x, spec_of(name));
    CHECK(q.global.encode == 1.0f);
    CHECK(q.global.decode == 1.0f);
    for (std::uint8_t s : q.scale_codes) CHECK(s == 0);
    for (float v : q.scale_values) CHECK(v == 0.0f);
    bool codes_zero = std::all_of(q.codes.begin(), q.codes.end(), [](std::uint8_t b) { return b == 0; });
    CHECK(codes_zero);
    bool deq_zero = std::all_of(q.dequantized.data.begin(), q.dequantized.data.end(),
                                [](float v) { return fbits(v) == 0; });
    CHECK(deq_zero);
    CHECK(q.stats.nmse == 0.0);
    CHECK(q.stats.bias == 0.0);
    CHECK(q.stats.max_abs_error == 0.0);
    CHECK(q.stats.underflow_fraction == 0.0);
    CHECK(q.stats.clipped_fraction == 0.0);
    CHECK(q.stats.elements == 19 * 37);
    CHECK(q.stats.zero_scale_blocks == q.stats.blocks);
  }
}

TEST_CASE("nvfp4 hand-worked (e): NaN and Inf elements") {
  SECTION("NaN is ignored by the amax") {
    // [NaN, 6, 1] has the amax of [6, 1]: s_enc = 448 as in (a); the NaN becomes code 0x7.
    const QuantizedTensor a = quantize_cpu(row({kNaN, 6.0f, 1.0f}), spec_of("nvfp4"));
    const QuantizedTensor b = quantize_cpu(row({0.0f, 6.0f, 1.0f}), spec_of("nvfp4"));
    CHECK(a.global.encode == 448.0f);
    CHECK(same_bits(a.global.decode, b.global.decode));
    CHECK(a.scale_codes[0] == 0x7e);
    CHECK(a.code_at(0, 0) == 0x7);
    CHECK(a.code_at(0, 1) == 0x7);
    CHECK(a.code_at(0, 2) == 0x2);
    CHECK(a.stats.nonfinite == 1);
    CHECK(a.stats.elements == 2);
  }
  SECTION("Inf makes the global amax Inf: s_enc = 1, saturated block scale") {
    // amax = Inf -> s_enc = min(2688/Inf, FLT_MAX) = 0 -> s_enc = 1, s_dec = 1.
    // Block 0 = [NaN, 3, -1.5, -NaN]: a_b = 3 (NaNs ignored); 3 * float(1/6) = 3 * 0x1.555556p-3 =
    //   0x1.0000008p-1 -> the dropped bits are below half -> 0.5 exactly: S = 0.5, code
    //   (-1+7)<<3 = 0x30. e_b = 1/(0.5 * 1) = 2. NaN -> 0x7 (either sign, spec section 1),
    //   3*2 = 6 -> 0x7 (no clip), -1.5*2 = -3 -> 0xD. Dequantized: 6*0.5 = 3, 3, -1.5, 3.
    // Block 1 = [Inf, 448, -1, -Inf]: a_b = Inf -> Inf * (1/6) = Inf -> E4M3 saturates to 448:
    //   code 0x7e. e_b = 1/448 = 0x1.24924ap-9. +-Inf * e_b = +-Inf -> clipped to +-6: 0x7 / 0xF;
    //   448 * e_b = 1 + 3*2^-26 -> 1: code 0x2; -1 * e_b = -0.0022 -> -0: code 0x8.
    //   Dequantized: +-6 * 448 * 1 = +-2688, 1 * 448 = 448, -0.
    const Matrix x = concat_blocks({{kNaN, 3.0f, -1.5f, -kNaN}, {kInf, 448.0f, -1.0f, -kInf}});
    const QuantizedTensor q = quantize_cpu(x, spec_of("nvfp4"));
    CHECK(q.global.encode == 1.0f);
    CHECK(q.global.decode == 1.0f);
    REQUIRE(q.scale_codes.size() == 2);
    CHECK(q.scale_codes[0] == 0x30);
    CHECK(q.scale_codes[1] == 0x7e);
    const std::uint8_t c0[4] = {0x7, 0x7, 0xD, 0x7}, c1[4] = {0x7, 0x2, 0x8, 0xF};
    const float d0[4] = {3.0f, 3.0f, -1.5f, 3.0f}, d1[4] = {2688.0f, 448.0f, -0.0f, -2688.0f};
    for (int i = 0; i < 4; ++i) {
      INFO("element " << i);
      CHECK(q.code_at(0, i) == c0[i]);
      CHECK(q.code_at(0, 16 + i) == c1[i]);
      CHECK(same_bits(q.dequantized(0, i), d0[i]));
      CHECK(same_bits(q.dequantized(0, 16 + i), d1[i]));
    }
    CHECK(q.clipped == 0);  // the two infinities saturate but count as non-finite, not clipped
    CHECK(q.stats.nonfinite == 4);
    CHECK(q.stats.elements == 28);
  }
}

TEST_CASE("nvfp4 hand-worked (f): te and te-legacy scale rules differ") {
  SECTION("by hand: A = 6, a = 0x1.7ffffep-14 (the float below 3*2^-15)") {
    // a = 3*2^-15 - 2^-37. s_enc = 448, factor = 0x1.2aaaacp+6 (see (a)).
    // te: 1.5 * 0x1.2aaaac = 0x1.c00002 (0x12aaaac * 3 = 0x3800004), so
    //   a * factor = 0x1.c00002p-8 - 2^-37 * 0x1.2aaaacp+6 = 7*2^-10 + 2^-31 - 1.1667*2^-31
    //   = 7*2^-10 - 0.1667 ulp -> float 7*2^-10 = 3.5 * 2^-9, exactly the E4M3 midpoint between
    //   the subnormals 3*2^-9 (code 3) and 4*2^-9 (code 4): tie to even -> code 0x04.
    // legacy: a/6 = 2^-16 - 1.333*2^-40 -> float 2^-16 - 2^-40 (spacing 2^-40 below 2^-16);
    //   times 448: 7*2^-10 - 1.75*2^-32 = 7*2^-10 - 0.875*2^-31 -> float 7*2^-10 - 2^-31
    //   = 0x1.bffffep-8, below the midpoint -> code 0x03.
    const float a = 0x1.7ffffep-14f;
    CHECK(same_bits(f32mul(a, 0x1.2aaaacp+6f), 0x1.cp-8f));
    CHECK(same_bits(f32div(a, 6.0f), std::ldexp(1.0f, -16) - std::ldexp(1.0f, -40)));
    CHECK(same_bits(f32mul(f32div(a, 6.0f), 448.0f), 0x1.bffffep-8f));
    const Matrix x = concat_blocks({{6.0f}, {a, -a}});
    const QuantizedTensor qt = quantize_cpu(x, spec_of("nvfp4"));
    const QuantizedTensor ql = quantize_cpu(x, spec_of("nvfp4-legacy"));
    CHECK(qt.scale_codes[1] == 0x04);
    CHECK(ql.scale_codes[1] == 0x03);
    CHECK(qt.stats.subnormal_scale_blocks == 1);
    // te: S = 2^-7, e_b = 1/(2^-7 * s_dec) ~ 2^7 * 448 = 57344 (to a few ulps), a * e_b ~ 3*2^-15 *
    //   57344 = 5.25 -> 6 (above the midpoint 5), not clipped: codes 0x7, 0xF.
    // legacy: S = 3*2^-9, e_b ~ 448 * 2^9 / 3, a * e_b ~ 7 > 6: both elements clipped.
    CHECK(qt.code_at(0, 16) == 0x7);
    CHECK(ql.code_at(0, 16) == 0x7);
    CHECK(qt.clipped == 0);
    CHECK(ql.clipped == 2);
    // The same two numbers as 16x16 tiles (tile 0 holds 6, tile 1 holds +-a): same scale codes.
    Matrix w(16, 32, 0.0f);
    w(3, 5) = 6.0f;
    w(9, 20) = a;
    w(15, 31) = -a;
    QuantSpec two_d_legacy = spec_of("nvfp4-2d");
    two_d_legacy.nv_scale_rule = NvScaleRule::TeLegacy;
    const QuantizedTensor wt = quantize_cpu(w, spec_of("nvfp4-2d"));
    const QuantizedTensor wl = quantize_cpu(w, two_d_legacy);
    REQUIRE(wt.scale_codes.size() == 2);
    CHECK(wt.scale_codes[0] == 0x7e);
    CHECK(wt.scale_codes[1] == 0x04);
    CHECK(wl.scale_codes[1] == 0x03);
    CHECK(wt.clipped == 0);
    CHECK(wl.clipped == 2);
  }
  // te:     S = e4m3(float(a * float(s_enc * float(1/6))))
  // legacy: S = e4m3(float(float(a / 6) * s_enc))
  // Search, for a few global scales, the block amaxes a within +-6 ulps of the points where the
  // te product crosses an E4M3 midpoint, evaluating both formulas in float32 (double then one
  // rounding) and rounding to E4M3 with the table reference.
  static const std::vector<double> t = e4m3_table();
  int found = 0;
  for (float A : {6.0f, 3.0f, 10.0f, 1.0f, 0.7f}) {
    const float s_enc = f32div(2688.0f, A), factor = f32mul(s_enc, f32div(1.0f, 6.0f));
    for (std::size_t k = 0; k + 1 < t.size() && found < 4; ++k) {
      const float mid = static_cast<float>((t[k] + t[k + 1]) / 2);
      float a = f32div(mid, factor);
      for (int s = 0; s < 6; ++s) a = std::nextafter(a, 0.0f);
      for (int s = 0; s < 12 && found < 4; ++s, a = std::nextafter(a, kInf)) {
        if (!(a < A)) break;
        const std::uint8_t te = ref_e4m3_code(f32mul(a, factor));
        const std::uint8_t legacy = ref_e4m3_code(f32mul(f32div(a, 6.0f), s_enc));
        if (te == legacy) continue;
        ++found;
        // A tensor whose block 0 sets A and whose block 1 has amax a.
        const Matrix x = concat_blocks({{A, -0.5f * A}, {a, -0.5f * a, 0.25f * a}});
        const QuantizedTensor qt = quantize_cpu(x, spec_of("nvfp4"));
        const QuantizedTensor ql = quantize_cpu(x, spec_of("nvfp4-legacy"));
        INFO("A = " << hexf(A) << ", a = " << hexf(a) << ": te code " << int(te) << ", legacy code " << int(legacy));
        CHECK(qt.global.encode == s_enc);
        CHECK(ql.global.encode == s_enc);
        CHECK(qt.scale_codes[1] == te);
        CHECK(ql.scale_codes[1] == legacy);
        CHECK(std::abs(int(te) - int(legacy)) == 1);  // one rounding apart: neighbouring codes
        // The rest of both quantizations follows the reference for its rule.
        std::string first_te, first_legacy;
        const std::int64_t bad_te = compare_with_ref(qt, ref_nvfp4(x, false, false), &first_te);
        const std::int64_t bad_legacy = compare_with_ref(ql, ref_nvfp4(x, false, true), &first_legacy);
        INFO(first_te << " / " << first_legacy);
        CHECK(bad_te == 0);
        CHECK(bad_legacy == 0);
      }
    }
  }
  INFO("differing cases found: " << found);
  CHECK(found >= 1);
}

TEST_CASE("nvfp4 hand-worked (g): partial blocks equal zero padding") {
  const Matrix x = wide_range(5, 37, 7);
  Matrix padded(5, 48, 0.0f);
  for (std::int64_t r = 0; r < 5; ++r)
    for (std::int64_t c = 0; c < 37; ++c) padded(r, c) = x(r, c);
  SECTION("rowwise 5x37") {
    const QuantizedTensor q = quantize_cpu(x, spec_of("nvfp4"));
    const QuantizedTensor p = quantize_cpu(padded, spec_of("nvfp4"));
    CHECK(q.rows == 5);
    CHECK(q.cols == 37);
    CHECK(q.padded_cols == 48);
    CHECK(q.scale_rows == 5);
    CHECK(q.scale_cols == 3);  // ceil(37/16)
    CHECK(q.codes.size() == 5u * 24u);
    for (std::int64_t r = 0; r < 5; ++r)
      for (std::int64_t c = 37; c < 48; ++c) CHECK(q.code_at(r, c) == 0);
    CHECK(q.codes == p.codes);
    CHECK(q.scale_codes == p.scale_codes);
    CHECK(same_floats(q.scale_values, p.scale_values));
    CHECK(same_bits(q.global.encode, p.global.encode));
    for (std::int64_t r = 0; r < 5; ++r)
      for (std::int64_t c = 0; c < 37; ++c) CHECK(same_bits(q.dequantized(r, c), p.dequantized(r, c)));
    CHECK(q.clipped == p.clipped);
  }
  SECTION("columnwise 37x5 (axis 0)") {
    const Matrix xt = transpose(x), pt = transpose(padded);  // 37x5 and 48x5
    const QuantizedTensor q = quantize_cpu(xt, spec_of("nvfp4-col"));
    const QuantizedTensor p = quantize_cpu(pt, spec_of("nvfp4-col"));
    CHECK(q.input_rows == 37);
    CHECK(q.input_cols == 5);
    CHECK(q.rows == 5);  // stored transposed
    CHECK(q.cols == 37);
    CHECK(q.padded_cols == 48);
    CHECK(q.scale_cols == 3);
    for (std::int64_t r = 0; r < 5; ++r)
      for (std::int64_t c = 37; c < 48; ++c) CHECK(q.code_at(r, c) == 0);
    CHECK(q.codes == p.codes);
    CHECK(q.scale_codes == p.scale_codes);
    REQUIRE(q.dequantized.rows == 37);
    REQUIRE(q.dequantized.cols == 5);
    for (std::int64_t r = 0; r < 37; ++r)
      for (std::int64_t c = 0; c < 5; ++c) CHECK(same_bits(q.dequantized(r, c), p.dequantized(r, c)));
  }
}

// ============================================================================================
// Whole quantizations against the independent reference
// ============================================================================================

TEST_CASE("nvfp4 matches the independent reference quantizer (1x16, 16x16, te, te-legacy, rz, axis 0)") {
  struct Case {
    const char* name;
    bool two_d, legacy, rz;
  };
  const Case cases[] = {{"nvfp4", false, false, false},
                        {"nvfp4-legacy", false, true, false},
                        {"nvfp4-2d", true, false, false},
                        {"nvfp4-col", false, false, false}};
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{64, 64}, {40, 70}, {33, 17}, {1, 300}};
  // Global magnitude: ordinary, tiny (A ~ 2^-120: s_enc saturates at FLT_MAX, subnormal
  // inputs), huge (A ~ 2^120).
  const int shifts[] = {0, -123, 117};
  std::uint64_t seed = 100;
  std::int64_t total_zero = 0, total_sub = 0, total_clipped = 0;
  for (const Case& cs : cases)
    for (auto [rows, cols] : shapes)
      for (int rz = 0; rz < 2; ++rz) {
        const int shift = shifts[seed % 3];
        Matrix x = wide_range(rows, cols, ++seed);
        for (float& v : x.data) v = std::ldexp(v, shift);
        QuantSpec spec = spec_of(cs.name);
        if (rz) spec.rounding.mode = Rounding::TowardZero;
        const QuantizedTensor q = quantize_cpu(x, spec);
        const bool col = spec.axis == 0;
        const Matrix stored = col ? transpose(x) : x;
        const RefNv R = ref_nvfp4(stored, cs.two_d, cs.legacy, rz != 0);
        std::string first;
        const std::int64_t bad_ref = compare_with_ref(q, R, &first);
        INFO(cs.name << (rz ? " rz" : " rne") << " " << rows << "x" << cols << " shift " << shift << ": " << first);
        CHECK(bad_ref == 0);
        std::int64_t bad = 0;
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t c = 0; c < cols; ++c) {
            const float want = col ? R.deq[static_cast<std::size_t>(c * R.cols + r)] : R.deq[static_cast<std::size_t>(r * R.cols + c)];
            bad += !same_bits(q.dequantized(r, c), want);
          }
        CHECK(bad == 0);
        // Scale-class counts follow the scale codes.
        std::int64_t zero = 0, sub = 0;
        for (std::uint8_t s : R.scale_codes) {
          zero += s == 0;
          sub += s >= 1 && s <= 7;
        }
        total_zero += zero;
        total_sub += sub;
        total_clipped += R.clipped;
        CHECK(q.stats.zero_scale_blocks == zero);
        CHECK(q.stats.subnormal_scale_blocks == sub);
        CHECK(q.stats.blocks == static_cast<std::int64_t>(R.scale_codes.size()));
      }
  // The data exercised the interesting cases (zero and subnormal scales, clipping).
  CHECK(total_zero > 0);
  CHECK(total_sub > 0);
  CHECK(total_clipped > 0);
}

TEST_CASE("nvfp4 dequantization is exact: x_hat = (E2M1 * S_b) * s_dec, E2M1 * S_b fits BF16") {
  // Spec step 6: E2M1value * float(S_b) has at most 2 + 4 = 6 significant bits and lies in
  // [2^-10, 2688] (or is 0): representable in BF16 (8 bits), which bf16_round must leave alone.
  for (const char* name : {"nvfp4", "nvfp4-2d", "nvfp4-col", "nvfp4-legacy", "nvfp4-sr", "nvfp4-rht"}) {
    INFO(name);
    const Matrix x = wide_range(64, 48, 555);
    const QuantSpec spec = spec_of(name);
    const QuantizedTensor q = quantize_cpu(x, spec);
    const bool col = spec.stored_transposed();
    std::int64_t bad_deq = 0, bad_bits = 0, bad_bf16 = 0, bad_scale = 0;
    for (std::size_t i = 0; i < q.scale_codes.size(); ++i)
      bad_scale += !same_bits(q.scale_values[i], static_cast<float>(e4m3_value(q.scale_codes[i])));
    for (std::int64_t r = 0; r < x.rows; ++r)
      for (std::int64_t c = 0; c < x.cols; ++c) {
        const std::int64_t sr = col ? c : r, sc = col ? r : c;  // stored position
        const std::uint8_t code = q.code_at(sr, sc);
        const std::int64_t brow = spec.is_2d() ? sr / 16 : sr;
        const std::uint8_t s = q.scale_codes[static_cast<std::size_t>(brow * q.scale_cols + sc / 16)];
        const double prod = e2m1_value(code) * e4m3_value(s);  // exact in double
        const float pf = static_cast<float>(prod);
        bad_deq += !same_bits(q.dequantized(r, c), f32mul(pf, q.global.decode));
        if (prod != 0.0) {
          int e;
          const double m = std::frexp(std::fabs(prod), &e);  // m in [0.5, 1)
          const double scaled = std::ldexp(m, 6);           // integer iff <= 6 significant bits
          bad_bits += scaled != std::floor(scaled) || std::fabs(prod) < std::ldexp(1.0, -10) ||
                      std::fabs(prod) > 2688.0;
        }
        bad_bf16 += (fbits(pf) & 0xffffu) != 0 || !same_bits(bf16_round(pf), pf);
      }
    CHECK(bad_scale == 0);
    CHECK(bad_deq == 0);
    CHECK(bad_bits == 0);
    CHECK(bad_bf16 == 0);
  }
}

TEST_CASE("the table decode of the GEMM operands gives each element's exact E2M1 * S_b in BF16") {
  // nvfp4_unscaled_bf16x4 (the GPU quantizers' block decode) for every finite non-negative
  // E4M3 scale code and every 16 bits of codes (four elements, signs included), against the
  // exact product in double (e2m1_value, e4m3_value: this test's own tables), whose float
  // holds it exactly with a zero low half, and against the element-by-element form.
  std::int64_t bad = 0, bad_elementwise = 0, checked = 0;
  for (int sc = 0; sc <= 0x7e; ++sc) {
    const float s = static_cast<float>(e4m3_value(static_cast<std::uint8_t>(sc)));
    const UnscaledBf16Tables t = nvfp4_unscaled_bf16_tables(s);
    for (std::uint32_t c = 0; c < 65536; ++c) {
      const Bf16x4 v = nvfp4_unscaled_bf16x4(t, c);
      const std::uint32_t got[4] = {v.lo & 0xffffu, v.lo >> 16, v.hi & 0xffffu, v.hi >> 16};
      for (int k = 0; k < 4; ++k) {
        const auto code = static_cast<std::uint8_t>((c >> (4 * k)) & 0xfu);
        const std::uint32_t exact = fbits(static_cast<float>(e2m1_value(code) * e4m3_value(static_cast<std::uint8_t>(sc))));
        bad += (exact & 0xffffu) != 0 || got[k] != exact >> 16;
        bad_elementwise += got[k] != nvfp4_unscaled_bf16(code, s);
        ++checked;
      }
    }
  }
  CHECK(checked == 127LL * 65536 * 4);
  CHECK(bad == 0);
  CHECK(bad_elementwise == 0);
}

// ============================================================================================
// Layouts
// ============================================================================================

TEST_CASE("nvfp4 16x16 tiles: quantizing W^T gives the transposed codes, scales and values") {
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{48, 80}, {40, 70}}) {
    INFO(rows << "x" << cols);
    const Matrix w = wide_range(rows, cols, 31 + rows);
    const Matrix wt = transpose(w);
    const QuantizedTensor a = quantize_cpu(w, spec_of("nvfp4-2d"));
    const QuantizedTensor b = quantize_cpu(wt, spec_of("nvfp4-2d"));
    REQUIRE(a.scale_rows == (rows + 15) / 16);
    REQUIRE(a.scale_cols == (cols + 15) / 16);
    REQUIRE(b.scale_rows == a.scale_cols);
    REQUIRE(b.scale_cols == a.scale_rows);
    CHECK(same_bits(a.global.encode, b.global.encode));
    std::int64_t bad_s = 0, bad_c = 0, bad_d = 0;
    for (std::int64_t i = 0; i < a.scale_rows; ++i)
      for (std::int64_t j = 0; j < a.scale_cols; ++j) {
        bad_s += a.scale_codes[static_cast<std::size_t>(i * a.scale_cols + j)] !=
                 b.scale_codes[static_cast<std::size_t>(j * b.scale_cols + i)];
        bad_s += !same_bits(a.scale_values[static_cast<std::size_t>(i * a.scale_cols + j)],
                            b.scale_values[static_cast<std::size_t>(j * b.scale_cols + i)]);
      }
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        bad_c += a.code_at(r, c) != b.code_at(c, r);
        bad_d += !same_bits(a.dequantized(r, c), b.dequantized(c, r));
      }
    CHECK(bad_s == 0);
    CHECK(bad_c == 0);
    CHECK(bad_d == 0);
    CHECK(a.clipped == b.clipped);
    // One scale per tile: the tile's own amax decides it (reference, independent of layout code).
    std::string first;
    const std::int64_t bad_ref = compare_with_ref(a, ref_nvfp4(w, true, false), &first);
    INFO(first);
    CHECK(bad_ref == 0);
  }
}

TEST_CASE("nvfp4 columnwise (axis 0) of X equals rowwise of X^T") {
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{64, 48}, {37, 50}}) {
    INFO(rows << "x" << cols);
    const Matrix x = wide_range(rows, cols, 77 + cols);
    const QuantizedTensor c = quantize_cpu(x, spec_of("nvfp4-col"));
    const QuantizedTensor r = quantize_cpu(transpose(x), spec_of("nvfp4"));
    CHECK(c.rows == cols);
    CHECK(c.cols == rows);
    CHECK(c.codes == r.codes);
    CHECK(c.scale_codes == r.scale_codes);
    CHECK(same_floats(c.scale_values, r.scale_values));
    CHECK(same_bits(c.global.decode, r.global.decode));
    CHECK(same_matrix_bits(c.dequantized, transpose(r.dequantized)));
    CHECK(c.clipped == r.clipped);
  }
}

TEST_CASE("nvfp4 results do not depend on the number of threads") {
  const ParallelWorkThreshold every_loop_parallel(0);  // small tensors: the threads must take part
  Matrix x = wide_range(512, 256, 9);
  x(3, 5) = kNaN;
  const int saved = omp_get_max_threads();
  for (const char* name : {"nvfp4", "nvfp4-2d", "nvfp4-col", "nvfp4-sr", "nvfp4-rht", "nvfp4-rht-sr"}) {
    INFO(name);
    QuantSpec spec = spec_of(name);
    spec.rounding.rng.seed = 1234;
    omp_set_num_threads(1);
    const QuantizedTensor a = quantize_cpu(x, spec);
    omp_set_num_threads(2);
    const QuantizedTensor b = quantize_cpu(x, spec);
    CHECK(a.codes == b.codes);
    CHECK(a.scale_codes == b.scale_codes);
    CHECK(same_floats(a.scale_values, b.scale_values));
    CHECK(same_bits(a.global.encode, b.global.encode));
    CHECK(same_bits(a.global.decode, b.global.decode));
    CHECK(a.clipped == b.clipped);
    CHECK(same_matrix_bits(a.dequantized, b.dequantized));
    CHECK(same_matrix_bits(a.transformed, b.transformed));
    CHECK(same_stats(a.stats, b.stats));
  }
  omp_set_num_threads(saved);
}

// ============================================================================================
// Stochastic rounding
// ============================================================================================

namespace {
// The E2M1 neighbours lo <= |y| <= hi (|y| <= 6).
void e2m1_neighbours(double a, double* lo, double* hi) {
  int i = 0;
  while (i < 7 && kE2M1[i + 1] <= a) ++i;
  *lo = kE2M1[i];
  *hi = (kE2M1[i] == a || i == 7) ? kE2M1[i] : kE2M1[i + 1];
}
}  // namespace

TEST_CASE("nvfp4 SR: codes are neighbours of x*e_b, unbiased, deterministic in the seed") {
  // 64 elements (4 blocks) of N(0,1) data, with one block of larger magnitude; 2000 seeds.
  Matrix x = normal_matrix(1, 64, 42);
  for (int i = 16; i < 32; ++i) x.data[i] *= 8.0f;
  const int n_seeds = 2000;
  QuantSpec spec = spec_of("nvfp4-sr");
  const QuantizedTensor rne = quantize_cpu(x, spec_of("nvfp4"));
  // e_b and y = x * e_b per element from the (seed-independent) scales, recomputed in the test.
  std::vector<double> y(64);
  for (int i = 0; i < 64; ++i) {
    float e_b = f32div(1.0f, f32mul(static_cast<float>(e4m3_value(rne.scale_codes[i / 16])), rne.global.decode));
    if (e_b > kFMax) e_b = kFMax;
    y[i] = f32mul(x.data[i], e_b);
  }
  std::vector<double> sum(64, 0.0);
  std::int64_t not_neighbour = 0, sign_wrong = 0, scale_changed = 0;
  std::vector<std::uint8_t> codes_seed1, codes_seed1_again, codes_seed2;
  for (int s = 1; s <= n_seeds; ++s) {
    spec.rounding.rng.seed = static_cast<std::uint64_t>(s);
    const QuantizedTensor q = quantize_cpu(x, spec);
    scale_changed += q.scale_codes != rne.scale_codes || !same_bits(q.global.decode, rne.global.decode);
    for (int i = 0; i < 64; ++i) {
      const std::uint8_t c = q.code_at(0, i);
      const double v = kE2M1[c & 7];
      const double a = std::fabs(y[i]);
      if (a >= 6.0) {
        not_neighbour += v != 6.0;
      } else {
        double lo, hi;
        e2m1_neighbours(a, &lo, &hi);
        not_neighbour += v != lo && v != hi;
      }
      sign_wrong += ((c & 8) != 0) != std::signbit(y[i]);
      sum[i] += e2m1_value(c);
    }
    if (s == 1) codes_seed1 = q.codes;
    if (s == 2) codes_seed2 = q.codes;
  }
  spec.rounding.rng.seed = 1;
  codes_seed1_again = quantize_cpu(x, spec).codes;
  CHECK(scale_changed == 0);
  CHECK(not_neighbour == 0);
  CHECK(sign_wrong == 0);
  CHECK(codes_seed1 == codes_seed1_again);
  CHECK(codes_seed1 != codes_seed2);
  // Unbiasedness. For an unclipped element the decoded value lies in [lo, hi] and has mean y
  // (exact SR). Hoeffding: P(|mean - y| >= t) <= 2 exp(-2 n t^2 / (hi - lo)^2); with a union
  // bound over the 64 elements at total confidence 1e-9:
  //   t = (hi - lo) * sqrt(ln(2 * 64 / 1e-9) / (2 n)).
  int checked = 0;
  for (int i = 0; i < 64; ++i) {
    const double a = std::fabs(y[i]);
    if (a > 6.0) continue;  // clipped: always +-6, biased by construction
    double lo, hi;
    e2m1_neighbours(a, &lo, &hi);
    const double t = (hi - lo) * std::sqrt(std::log(2.0 * 64 / 1e-9) / (2.0 * n_seeds));
    const double mean = sum[i] / n_seeds;
    INFO("element " << i << ": y = " << y[i] << ", mean = " << mean << ", bound " << t);
    CHECK(std::fabs(mean - y[i]) <= t);
    ++checked;
  }
  CHECK(checked >= 48);
}

TEST_CASE("nvfp4 SR: P(up) over many identical scaled values, exact and 2-bit") {
  // 256 blocks [6, v x 15]: every block has a_b = 6 = A, hence (see (a)) S_b = 448 and e_b = 1,
  // so every v element has y = v exactly. v = 1.3f: lo = 1, hi = 1.5, f = (1.3f - 1)/0.5.
  // Over N = 3840 elements x 4 seeds, the fraction of round-ups p_hat satisfies (Hoeffding,
  // confidence 1e-9) |p_hat - P(up)| <= sqrt(ln(2/1e-9) / (2N)).
  // Exact SR: P(up) = f.  k-bit SR (rounding.hpp): P(up) = floor(f * 2^k) / 2^k; with k = 2:
  // f = 0.6000000238 -> floor(2.4)/4 = 0.5.
  const float v = 1.3f;
  const double f = (static_cast<double>(v) - 1.0) / 0.5;
  Matrix x(1, 16 * 256, 0.0f);
  for (int b = 0; b < 256; ++b) {
    x.data[16 * b] = 6.0f;
    for (int i = 1; i < 16; ++i) x.data[16 * b + i] = v;
  }
  for (int bits : {kSrExact, 2, kSrHw}) {
    INFO("sr bits " << bits);
    QuantSpec spec = spec_of("nvfp4-sr");
    spec.rounding.sr_bits = bits;
    std::int64_t up = 0, n = 0, other = 0;
    for (std::uint64_t seed = 10; seed < 14; ++seed) {
      spec.rounding.rng.seed = seed;
      const QuantizedTensor q = quantize_cpu(x, spec);
      for (int b = 0; b < 256; ++b) {
        CHECK(q.code_at(0, 16 * b) == 0x7);
        for (int i = 1; i < 16; ++i) {
          const std::uint8_t c = q.code_at(0, 16 * b + i);
          up += c == 3;
          other += c != 2 && c != 3;
          ++n;
        }
      }
    }
    const double p = bits == kSrExact ? f : bits == kSrHw ? std::floor(f * 256) / 256 : std::floor(f * 4) / 4;
    const double t = std::sqrt(std::log(2.0 / 1e-9) / (2.0 * static_cast<double>(n)));
    const double p_hat = static_cast<double>(up) / static_cast<double>(n);
    INFO("p_hat " << p_hat << " expected " << p << " +- " << t);
    CHECK(other == 0);
    CHECK(std::fabs(p_hat - p) <= t);
  }
}

TEST_CASE("nvfp4 SR in every layout: codes are the floor or ceiling neighbour of x*e_b") {
  for (const char* name : {"nvfp4-sr", "nvfp4-rht-sr"}) {
    for (bool two_d : {false, true}) {
      if (two_d && std::string(name) == "nvfp4-rht-sr") continue;
      QuantSpec spec = spec_of(name);
      if (two_d) spec.block_rows = 16;
      spec.rounding.rng.seed = 77;
      INFO(name << (two_d ? " 16x16" : ""));
      const Matrix x = wide_range(48, 40, 5150);
      const QuantizedTensor q = quantize_cpu(x, spec);
      const Matrix& src = spec.rht.enabled() ? q.transformed : x;
      const bool col = spec.stored_transposed();
      std::int64_t bad = 0, ups = 0, downs = 0;
      for (std::int64_t r = 0; r < src.rows; ++r)
        for (std::int64_t c = 0; c < src.cols; ++c) {
          const std::int64_t sr = col ? c : r, sc = col ? r : c;
          const std::int64_t brow = spec.is_2d() ? sr / 16 : sr;
          const std::uint8_t s = q.scale_codes[static_cast<std::size_t>(brow * q.scale_cols + sc / 16)];
          float e_b = f32div(1.0f, f32mul(static_cast<float>(e4m3_value(s)), q.global.decode));
          if (e_b > kFMax) e_b = kFMax;
          const double y = f32mul(src(r, c), e_b);
          const std::uint8_t code = q.code_at(sr, sc);
          const double v = kE2M1[code & 7], a = std::fabs(y);
          if (a >= 6.0) {
            bad += v != 6.0;
          } else {
            double lo, hi;
            e2m1_neighbours(a, &lo, &hi);
            bad += v != lo && v != hi;
            ups += lo != hi && v == hi;
            downs += lo != hi && v == lo;
          }
          bad += ((code & 8) != 0) != std::signbit(y);
        }
      CHECK(bad == 0);
      CHECK(ups > 0);  // both directions occur
      CHECK(downs > 0);
    }
  }
}

namespace {
// The signed error of SR in units of each element's E2M1 step, measured on a quantized tensor:
// y = x * e_b (the value the quantizer rounded, float32 as it computes it), e = (|q| - |y|) /
// step, over the elements with |y| < 6 in blocks with a non-zero scale (the clipped maxima
// round alike in every mode). For hw SR the expectation of e given y is -(f - floor(256 f) /
// 256), in (-2^-8, 0]; for exact SR 0. Also summed: that prediction for hw, and the relative
// magnitude bias sum(|x_hat| - |x|) / sum |x| over the same elements.
struct SrBias {
  double mean = 0, se = 0, predicted_hw = 0, rel = 0;
  std::int64_t n = 0;
};
SrBias sr_bias(const Matrix& x, const QuantizedTensor& q) {
  double sum = 0, sum2 = 0, pred = 0, dev = 0, mag = 0;
  std::int64_t n = 0;
  for (std::int64_t r = 0; r < x.rows; ++r)
    for (std::int64_t c = 0; c < x.cols; ++c) {
      const std::uint8_t s = q.scale_codes[static_cast<std::size_t>(r * q.scale_cols + c / 16)];
      if ((s & 0x7fu) == 0) continue;
      const float e_b = nvfp4_block_encode_scale(s, q.global.decode);
      const double a = std::fabs(static_cast<double>(x(r, c) * e_b));
      if (a >= 6.0) continue;
      const double step = a < 2.0 ? 0.5 : a < 4.0 ? 1.0 : 2.0;
      const double lo = std::floor(a / step) * step, f = (a - lo) / step;  // exact (dyadic)
      const double e = (std::fabs(static_cast<double>(e2m1_decode(q.code_at(r, c)))) - a) / step;
      sum += e;
      sum2 += e * e;
      pred += -(f - std::floor(f * 256.0) / 256.0);
      dev += std::fabs(static_cast<double>(q.dequantized(r, c))) - std::fabs(static_cast<double>(x(r, c)));
      mag += std::fabs(static_cast<double>(x(r, c)));
      ++n;
    }
  SrBias b;
  b.n = n;
  b.mean = sum / static_cast<double>(n);
  b.se = std::sqrt((sum2 / static_cast<double>(n) - b.mean * b.mean) / static_cast<double>(n - 1));
  b.predicted_hw = pred / static_cast<double>(n);
  b.rel = dev / mag;
  return b;
}
}  // namespace

TEST_CASE("hw SR bias against exact SR: measured mean error within the derived bounds", "[bias][hw]") {
  // z: the two-sided normal quantile for a false alarm of 1e-9 per comparison (the means are
  // of 2^22 .. 2^24 bounded, independent terms: the normal approximation holds to ~1e-3).
  constexpr double z = 6.109;
  // (1) 2^24 N(0,1) elements, NVFP4 1x16. (2) Values designed for the largest truncation: blocks
  // [6, 15 values] with A = 6 (S_b = 448, e_b = 1, y = x exactly, hand-worked case (a)) whose
  // fractions lie 2^-20 below k/256 on every interval, f - floor(256 f)/256 = 2^-8 - 2^-20.
  Matrix normal(4096, 4096);
  std::mt19937_64 gen(20261204);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : normal.data) v = nd(gen);
  Matrix designed(1024, 4096);
  const double los[] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0}, steps[] = {0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 2.0};
  for (std::int64_t i = 0; i < designed.size(); ++i) {
    const std::int64_t k = (i * 37) % 256, iv = (i / 256) % 7;
    const double f = std::ldexp(static_cast<double>(k + 1), -8) - std::ldexp(1.0, -20);
    designed.data[static_cast<std::size_t>(i)] =
        i % 16 == 0 ? 6.0f : static_cast<float>((i % 2 ? -1.0 : 1.0) * (los[iv] + f * steps[iv]));
  }
  for (const bool is_designed : {false, true}) {
    const Matrix& x = is_designed ? designed : normal;
    SrBias b[2];
    for (int m = 0; m < 2; ++m) {
      QuantSpec spec = spec_of("nvfp4-sr");
      spec.rounding.sr_bits = m == 0 ? kSrExact : kSrHw;
      spec.rounding.rng = RngStream{0xb1a5ull + static_cast<std::uint64_t>(m), 3};
      b[m] = sr_bias(x, quantize_cpu(x, spec));
    }
    const double diff = b[1].mean - b[0].mean, diff_se = std::hypot(b[0].se, b[1].se);
    std::printf("hw SR bias, %s: n = %lld; mean error in steps: exact %.4e +- %.1e, hw %.4e +- %.1e (predicted "
                "%.4e), hw - exact %.4e +- %.1e (1 s.e.); relative magnitude bias exact %.3e, hw %.3e\n",
                is_designed ? "f 2^-20 below k/256" : "2^24 N(0,1), 1x16", static_cast<long long>(b[0].n), b[0].mean,
                b[0].se, b[1].mean, b[1].se, b[1].predicted_hw, diff, diff_se, b[0].rel, b[1].rel);
    INFO((is_designed ? "designed" : "normal"));
    CHECK(b[0].n == b[1].n);
    CHECK(std::fabs(b[0].mean) <= z * b[0].se);                    // exact SR: unbiased
    CHECK(std::fabs(b[1].mean - b[1].predicted_hw) <= z * b[1].se);  // hw: its derived bias
    CHECK(b[1].predicted_hw <= 0.0);
    CHECK(b[1].predicted_hw > -std::ldexp(1.0, -8));                 // the 2^-8 step bound
    CHECK(diff - z * diff_se < 0.0);                                  // hw is measurably lower
    CHECK(diff + z * diff_se > -std::ldexp(1.0, -8));
    if (is_designed) CHECK(std::fabs(b[1].predicted_hw + (std::ldexp(1.0, -8) - std::ldexp(1.0, -20))) < 1e-12);
  }
}

TEST_CASE("the paper's recipe rounds gradients with hw SR; -sr-exact and -sr8 name the others", "[hw]") {
  const auto grad_bits = [](const std::string& name, bool wgrad) {
    const QuantSpec s = gemm_operand_spec(gemm_recipe(name), OperandKind::Gradient, wgrad, 1, 2);
    return std::pair<Rounding, int>{s.rounding.mode, s.rounding.sr_bits};
  };
  for (const bool wgrad : {false, true}) {
    CHECK(grad_bits("nvfp4", wgrad) == std::pair<Rounding, int>{Rounding::Stochastic, kSrHw});
    CHECK(grad_bits("nvfp4-no-rht", wgrad) == std::pair<Rounding, int>{Rounding::Stochastic, kSrHw});
    CHECK(grad_bits("nvfp4-sr-exact", wgrad) == std::pair<Rounding, int>{Rounding::Stochastic, kSrExact});
    CHECK(grad_bits("nvfp4-no-2d-sr-exact", wgrad) == std::pair<Rounding, int>{Rounding::Stochastic, kSrExact});
    CHECK(grad_bits("nvfp4-sr8-no-rht", wgrad) == std::pair<Rounding, int>{Rounding::Stochastic, 8});
    CHECK(grad_bits("nvfp4-no-sr", wgrad).first == Rounding::NearestEven);
  }
  // Activations and weights never take SR.
  CHECK(gemm_operand_spec(gemm_recipe("nvfp4"), OperandKind::Activation, true, 1, 2).rounding.mode ==
        Rounding::NearestEven);
  CHECK(gemm_operand_spec(gemm_recipe("nvfp4"), OperandKind::Weight, false, 1, 2).rounding.mode == Rounding::NearestEven);
  // One SR kind per name.
  CHECK_THROWS(gemm_recipe("nvfp4-sr8-sr-exact"));
  CHECK_THROWS(gemm_recipe("nvfp4-sr-exact-sr8"));
  CHECK_THROWS(gemm_recipe("nvfp4-sr-exact-sr-exact"));
}
