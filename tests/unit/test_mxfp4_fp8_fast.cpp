// The vectorised MXFP4 and FP8 quantizers (mxfp4.cpp, fp8_scaled.cpp) against a literal,
// element-by-element reading of the spec written here (nvfp4-spec.md sections 1, 4, 5;
// docs/numerics.md sections 2, 4, 5), independent of the library's conversions: block amax by
// double comparisons, UE8M0 exponents from frexp and exact double comparisons, float32
// products and quotients as one exact double operation and one rounding, E2M1 / FP8 codes from
// value tables (nearest-even, toward zero, stochastic with the Philox words of the spec's
// counter layout), FP8's NaN as the canonical 0x7F. Over shapes with partial blocks and tiles,
// special values (zeros of both signs, float32 subnormals, FLT_MAX, +-Inf, NaN, E2M1 and FP8
// ties), every rounding mode the quantizers take, and 1, 2 and 3 threads, every output must be
// the same bits. The branch-free FP8 conversion is also compared with the reference one of
// format/fp8.hpp on every float32 ([long]) and on a dense sample (unit).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "format/fp8.hpp"
#include "format/philox.hpp"
#include "quant/fp8_scaled.hpp"
#include "quant/mxfp4.hpp"
#include "quant/presets.hpp"
#include "support/catch.hpp"
#include "support/float_bits.hpp"
#include "util/parallel_worth.hpp"

using namespace fp4d;
using namespace fp4d_test;

namespace {

// ---- inputs ---------------------------------------------------------------------------------

// N(0, 1) values times a power of two per 32-column patch (2^-140 .. 2^120, so float32
// subnormal blocks and blocks near overflow occur), with special values and ties sprinkled in.
Matrix make_input(std::int64_t rows, std::int64_t cols, std::uint64_t seed, bool specials) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_int_distribution<int> kd(-140, 120);
  Matrix m(rows, cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    int k = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      if (c % 32 == 0) k = (g() % 4 == 0) ? 0 : kd(g);
      m(r, c) = std::ldexp(n01(g), k);
    }
  }
  if (!specials) return m;
  const float sub = std::numeric_limits<float>::denorm_min();
  // E2M1 midpoints (times the block scale they meet when the block max is 4 * 2^k: 0.25, 0.75,
  // 1.25, 1.75, 2.5, 3.5, 5) and FP8-style ties are reached by the fixed patterns below.
  const float fixed[] = {0.0f,     -0.0f,       sub,         -sub,        3 * sub,      std::ldexp(1.0f, -126),
                         kFMax,    -kFMax,      kInf,        -kInf,       kNaN,         -kNaN,
                         0.25f,    0.75f,       1.25f,       -1.75f,      2.5f,         3.5f,
                         -5.0f,    6.0f,        7.0f,        -8.0f,       448.0f,       464.0f,
                         -480.0f,  57344.0f,    61440.0f,    std::ldexp(1.0f, -9), std::ldexp(1.5f, -10),
                         std::ldexp(1.0f, -16), std::ldexp(3.0f, -17)};
  const int nfixed = static_cast<int>(sizeof fixed / sizeof fixed[0]);
  std::uniform_int_distribution<std::int64_t> rr(0, rows - 1), cc(0, cols - 1);
  const std::int64_t count = std::max<std::int64_t>(1, m.size() / 40);
  for (std::int64_t i = 0; i < count; ++i) m(rr(g), cc(g)) = fixed[i % nfixed];
  // A whole zero row-block, a block of subnormals, a block whose max is exactly 6 * 2^k.
  if (cols >= 2 && rows >= 3) {
    for (std::int64_t c = 0; c < std::min<std::int64_t>(cols, 32); ++c) {
      m(0, c) = (c % 2) ? -0.0f : 0.0f;
      m(1, c) = from_bits(static_cast<std::uint32_t>(1 + 37 * c)) * ((c % 3) ? 1.0f : -1.0f);
    }
    m(2, 0) = 6.0f;
  }
  return m;
}

// ---- E2M1, literally ------------------------------------------------------------------------

const double kE2M1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

// Index of the largest table value <= a (a >= 0, finite), and the table size n.
int floor_index(double a, const double* t, int n) {
  int i = 0;
  while (i + 1 < n && t[i + 1] <= a) ++i;
  return i;
}
std::uint8_t sign_nibble(float y) { return std::signbit(y) ? 8 : 0; }

std::uint8_t ref_e2m1_rne(float y) {
  if (std::isnan(y)) return 0x7;  // NaN -> +6, no sign
  const double a = std::fabs(static_cast<double>(y));
  int c;
  if (a >= 6.0) {
    c = 7;
  } else {
    const int i = floor_index(a, kE2M1, 8);
    const double mid = (kE2M1[i] + kE2M1[i + 1]) / 2;
    c = a < mid ? i : a > mid ? i + 1 : (i % 2 == 0 ? i : i + 1);
  }
  return static_cast<std::uint8_t>(c | sign_nibble(y));
}
std::uint8_t ref_e2m1_rz(float y) {
  if (std::isnan(y)) return 0x7;
  const double a = std::fabs(static_cast<double>(y));
  return static_cast<std::uint8_t>((a >= 6.0 ? 7 : floor_index(a, kE2M1, 8)) | sign_nibble(y));
}
// Stochastic rounding (numerics.md section 2): f = (|y| - lo) / (hi - lo), exact in double;
// k bits: up iff (w >> (32 - k)) < floor(f 2^k); exact: up iff w < floor(f 2^32), and on
// equality the remainder's base-2^32 digits against the extension block's words 0..3; hw: the
// element's random byte r (philox.hpp's packed layout: block i / 16 of the hw counters, word
// (i / 4) % 4, the byte at bit 0, 16, 8, 24 for i % 4 = 0, 1, 2, 3), up iff r + floor(f 2^8)
// carries out of 8 bits.
std::uint8_t ref_e2m1_sr(float y, int sr_bits, RngStream s, std::uint64_t index) {
  if (std::isnan(y)) return 0x7;
  const double a = std::fabs(static_cast<double>(y));
  if (a >= 6.0) return static_cast<std::uint8_t>(7 | sign_nibble(y));
  const int i = floor_index(a, kE2M1, 8);
  const double f = (a - kE2M1[i]) / (kE2M1[i + 1] - kE2M1[i]);
  const std::uint32_t w = philox_block(s, index / 4).v[index % 4];
  bool up;
  if (sr_bits == kSrHw) {
    const int shift[4] = {0, 16, 8, 24};
    const std::uint32_t r = (philox_hw_block(s, index / 16).v[(index / 4) % 4] >> shift[index % 4]) & 0xffu;
    up = r + static_cast<std::uint32_t>(std::floor(std::ldexp(f, 8))) >= 256u;
  } else if (sr_bits != kSrExact) {
    up = (w >> (32 - sr_bits)) < static_cast<std::uint32_t>(std::floor(std::ldexp(f, sr_bits)));
  } else {
    double rest = std::ldexp(f, 32);
    const std::uint32_t digit = static_cast<std::uint32_t>(std::floor(rest));
    rest -= digit;
    if (w != digit) {
      up = w < digit;
    } else {
      up = false;
      const Philox4x32 ext = philox_extension(s, index);
      for (int k = 0; k < 4 && rest != 0; ++k) {
        rest = std::ldexp(rest, 32);
        const std::uint32_t d = static_cast<std::uint32_t>(std::floor(rest));
        rest -= d;
        if (ext.v[k] != d) {
          up = ext.v[k] < d;
          break;
        }
      }
    }
  }
  return static_cast<std::uint8_t>((i + (up ? 1 : 0)) | sign_nibble(y));
}

// ---- MXFP4, literally -----------------------------------------------------------------------

// floor(log2 a) for finite a > 0 (frexp: a = m 2^ex, m in [0.5, 1)).
int floor_log2(double a) {
  int ex;
  std::frexp(a, &ex);
  return ex - 1;
}
int mx_exponent(float amax, MxScaleRule rule) {
  if (amax == 0.0f) return -127;
  if (std::isinf(amax)) return 127;
  int e = 0;
  switch (rule) {
    case MxScaleRule::Floor: e = floor_log2(amax) - 2; break;
    case MxScaleRule::Ceil:  // the smallest e with 6 * 2^e >= a
      e = floor_log2(amax) - 3;
      while (std::ldexp(6.0, e) < static_cast<double>(amax)) ++e;
      break;
    case MxScaleRule::Rceil: {  // the float32 product a * float32(1/6), rounded up to a power of two
      const float q = f32mul(amax, f32div(1.0f, 6.0f));
      if (q == 0.0f) return -127;
      e = floor_log2(q);
      if (std::ldexp(1.0, e) < static_cast<double>(q)) ++e;
      break;
    }
  }
  return std::max(-127, std::min(127, e));
}

struct RefQ {
  std::vector<std::uint8_t> codes;        // unpacked, rows x padded_cols
  std::vector<std::uint8_t> scale_codes;  // UE8M0 (mxfp4)
  std::vector<float> scale_values, deq;
  std::int64_t clipped = 0, padded_cols = 0, scale_rows = 0, scale_cols = 0;
};

RefQ ref_mxfp4(const Matrix& x, const QuantSpec& spec) {
  RefQ R;
  R.scale_rows = x.rows;
  R.scale_cols = (x.cols + 31) / 32;
  R.padded_cols = 32 * R.scale_cols;
  R.codes.assign(static_cast<std::size_t>(x.rows * R.padded_cols), 0);
  R.deq.assign(static_cast<std::size_t>(x.size()), 0.0f);
  for (std::int64_t r = 0; r < x.rows; ++r)
    for (std::int64_t b = 0; b < R.scale_cols; ++b) {
      const std::int64_t c0 = 32 * b, c1 = std::min(x.cols, c0 + 32);
      double amax = 0;
      for (std::int64_t c = c0; c < c1; ++c)
        if (!std::isnan(x(r, c))) amax = std::max(amax, std::fabs(static_cast<double>(x(r, c))));
      const int e = mx_exponent(static_cast<float>(amax), spec.mx_scale_rule);
      const float scale = static_cast<float>(std::ldexp(1.0, e));
      R.scale_codes.push_back(static_cast<std::uint8_t>(e + 127));
      R.scale_values.push_back(scale);
      for (std::int64_t c = c0; c < c1; ++c) {
        const float y = f32mul(x(r, c), static_cast<float>(std::ldexp(1.0, -e)));  // x / X, one rounding
        R.clipped += std::isfinite(y) && std::fabs(y) > 6.0f;
        const std::uint64_t index = static_cast<std::uint64_t>(r * R.padded_cols + c);
        std::uint8_t q = 0;
        switch (spec.rounding.mode) {
          case Rounding::NearestEven: q = ref_e2m1_rne(y); break;
          case Rounding::TowardZero: q = ref_e2m1_rz(y); break;
          case Rounding::Stochastic: q = ref_e2m1_sr(y, spec.rounding.sr_bits, spec.rounding.rng, index); break;
        }
        R.codes[index] = q;
        const double v = (q & 8) ? -kE2M1[q & 7] : kE2M1[q & 7];
        R.deq[static_cast<std::size_t>(r * x.cols + c)] = f32mul(static_cast<float>(v), scale);
      }
    }
  return R;
}

// ---- FP8, literally -------------------------------------------------------------------------

struct Fp8Def {
  int man, bias;
  std::uint8_t max_code;
  std::vector<double> t;  // values of codes 0..max_code
  Fp8Def(int m, int b, std::uint8_t maxc) : man(m), bias(b), max_code(maxc) {
    for (int c = 0; c <= maxc; ++c) {
      const int e = c >> m, f = c & ((1 << m) - 1);
      t.push_back(e == 0 ? std::ldexp(f, 1 - b - m) : std::ldexp((1 << m) + f, e - b - m));
    }
  }
  double max() const { return t.back(); }
  // RNE, saturating (finite overflow and Inf to max), sign kept; NaN -> 0x7F.
  std::uint8_t encode(float x) const {
    if (std::isnan(x)) return 0x7f;
    const double a = std::fabs(static_cast<double>(x));
    const int n = static_cast<int>(t.size());
    int c;
    if (a >= t[n - 1]) {
      c = n - 1;
    } else {
      const int i = floor_index(a, t.data(), n);
      const double mid = (t[i] + t[i + 1]) / 2;
      c = a < mid ? i : a > mid ? i + 1 : (i % 2 == 0 ? i : i + 1);
    }
    return static_cast<std::uint8_t>(c | (std::signbit(x) ? 0x80 : 0));
  }
  double value(std::uint8_t c) const { return (c & 0x80) ? -t[c & 0x7f] : t[c & 0x7f]; }
};
const Fp8Def& e4m3_def() {
  static const Fp8Def d(3, 7, 0x7e);
  return d;
}
const Fp8Def& e5m2_def() {
  static const Fp8Def d(2, 15, 0x7b);
  return d;
}

RefQ ref_fp8(const Matrix& x, const QuantSpec& spec) {
  const Fp8Def& f = spec.element == ElementFormat::E5M2 ? e5m2_def() : e4m3_def();
  const bool whole = spec.block_cols == 0;
  const std::int64_t br = whole ? std::max<std::int64_t>(x.rows, 1) : spec.block_rows;
  const std::int64_t bc = whole ? std::max<std::int64_t>(x.cols, 1) : spec.block_cols;
  RefQ R;
  R.scale_rows = (x.rows + br - 1) / br;
  R.scale_cols = (x.cols + bc - 1) / bc;
  R.padded_cols = whole ? x.cols : R.scale_cols * bc;
  R.codes.assign(static_cast<std::size_t>(x.rows * R.padded_cols), 0);
  R.deq.assign(static_cast<std::size_t>(x.size()), 0.0f);
  R.scale_values.assign(static_cast<std::size_t>(R.scale_rows * R.scale_cols), 0.0f);
  for (std::int64_t i = 0; i < R.scale_rows; ++i)
    for (std::int64_t j = 0; j < R.scale_cols; ++j) {
      const std::int64_t r0 = i * br, r1 = std::min(x.rows, r0 + br), c0 = j * bc, c1 = std::min(x.cols, c0 + bc);
      double amax = 0;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c)
          if (!std::isnan(x(r, c))) amax = std::max(amax, std::fabs(static_cast<double>(x(r, c))));
      float enc = 1.0f;
      if (amax != 0) {
        enc = f32div(static_cast<float>(f.max()), static_cast<float>(amax));
        if (enc > kFMax) enc = kFMax;
        if (enc == 0) enc = 1.0f;
      }
      const float dec = f32div(1.0f, enc);
      R.scale_values[static_cast<std::size_t>(i * R.scale_cols + j)] = dec;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) {
          const float y = f32mul(x(r, c), enc);
          R.clipped += std::isfinite(y) && std::fabs(static_cast<double>(y)) > f.max();
          const std::uint8_t q = f.encode(y);
          R.codes[static_cast<std::size_t>(r * R.padded_cols + c)] = q;
          // The NaN code dequantizes to NaN (any payload: compared as "is NaN" below).
          R.deq[static_cast<std::size_t>(r * x.cols + c)] =
              (q & 0x7f) == 0x7f ? kNaN : f32mul(static_cast<float>(f.value(q)), dec);
        }
    }
  return R;
}

// ---- comparison -----------------------------------------------------------------------------

bool same_value(float a, float b) { return std::isnan(a) ? std::isnan(b) : same_bits(a, b); }

std::uint8_t code_of(const QuantizedTensor& q, std::int64_t r, std::int64_t c, bool fp4) {
  if (!fp4) return q.codes[static_cast<std::size_t>(r * q.padded_cols + c)];
  const std::uint8_t byte = q.codes[static_cast<std::size_t>((r * q.padded_cols + c) / 2)];
  return (c & 1) ? static_cast<std::uint8_t>(byte >> 4) : static_cast<std::uint8_t>(byte & 0x0f);
}

// Mismatches between the quantizer's output and the reference (0 when equal), with the first
// one described in *what.
std::int64_t mismatches(const QuantizedTensor& q, const RefQ& R, const Matrix& x, bool fp4, std::string* what) {
  std::int64_t bad = 0;
  auto note = [&](const std::string& s) {
    if (bad++ == 0) *what = s;
  };
  if (q.padded_cols != R.padded_cols || q.scale_rows != R.scale_rows || q.scale_cols != R.scale_cols) {
    note("shape of the output or the scale grid");
    return bad;
  }
  if (q.codes.size() != static_cast<std::size_t>(x.rows * R.padded_cols / (fp4 ? 2 : 1))) note("codes size");
  if (q.scale_values.size() != R.scale_values.size()) note("scale_values size");
  if (fp4 && q.scale_codes != R.scale_codes) note("scale codes");
  if (bad) return bad;
  for (std::size_t i = 0; i < R.scale_values.size(); ++i)
    if (!same_bits(q.scale_values[i], R.scale_values[i])) note("scale value " + std::to_string(i));
  for (std::int64_t r = 0; r < x.rows; ++r)
    for (std::int64_t c = 0; c < R.padded_cols; ++c)  // padding included: its codes are 0
      if (code_of(q, r, c, fp4) != R.codes[static_cast<std::size_t>(r * R.padded_cols + c)])
        note("code at (" + std::to_string(r) + ", " + std::to_string(c) + ") of input " + hexf(c < x.cols ? x(r, c) : 0.0f));
  for (std::int64_t i = 0; i < x.size(); ++i)
    if (!same_value(q.dequantized.data[static_cast<std::size_t>(i)], R.deq[static_cast<std::size_t>(i)]))
      note("dequantized element " + std::to_string(i));
  if (q.clipped != R.clipped) note("clipped " + std::to_string(q.clipped) + " vs " + std::to_string(R.clipped));
  return bad;
}

bool same_output(const QuantizedTensor& a, const QuantizedTensor& b) {
  if (a.codes != b.codes || a.scale_codes != b.scale_codes || a.clipped != b.clipped) return false;
  if (a.scale_values.size() != b.scale_values.size() || a.dequantized.data.size() != b.dequantized.data.size()) return false;
  for (std::size_t i = 0; i < a.scale_values.size(); ++i)
    if (!same_bits(a.scale_values[i], b.scale_values[i])) return false;
  for (std::size_t i = 0; i < a.dequantized.data.size(); ++i)
    if (!same_bits(a.dequantized.data[i], b.dequantized.data[i])) return false;
  return true;
}

struct Shape {
  std::int64_t rows, cols;
};
// Partial blocks of 32 and of 128 (both sides of the block length), single rows and columns,
// more than one 128-row tile row, and an output buffer reused across shapes.
const Shape kShapes[] = {{1, 1},   {1, 31},  {1, 32},  {1, 33},  {3, 63},  {2, 64},   {5, 65},  {4, 127},
                         {3, 128}, {3, 129}, {7, 200}, {33, 45}, {1, 300}, {130, 1},  {129, 130}, {260, 257},
                         {17, 1000}};

template <class Quantize, class Reference>
void check_against_reference(const QuantSpec& spec, bool fp4, Quantize&& quantize, Reference&& reference) {
  const ParallelWorkThreshold every_loop_parallel(0);  // small tensors: the threads must take part
  const int saved = omp_get_max_threads();
  QuantizedTensor reused;  // outputs are overwritten in place: stale contents must not survive
  std::uint64_t seed = 11;
  for (const Shape& s : kShapes) {
    for (const bool specials : {false, true}) {
      const Matrix x = make_input(s.rows, s.cols, seed++, specials);
      const RefQ R = reference(x, spec);
      QuantizedTensor first;
      for (const int threads : {1, 2, 3}) {
        INFO(s.rows << " x " << s.cols << (specials ? " with special values" : "") << ", " << threads << " threads");
        omp_set_num_threads(threads);
        QuantizedTensor q;
        quantize(x, spec, q);
        std::string what;
        CHECK(mismatches(q, R, x, fp4, &what) == 0);
        INFO("first mismatch: " << what);
        CHECK(what.empty());
        if (threads == 1) first = q;
        else CHECK(same_output(first, q));
        quantize(x, spec, reused);
        CHECK(same_output(first, reused));
      }
    }
  }
  omp_set_num_threads(saved);
}

QuantSpec mx_spec(MxScaleRule rule, Rounding mode, int sr_bits) {
  QuantSpec s = preset("mxfp4").spec;
  s.mx_scale_rule = rule;
  s.rounding.mode = mode;
  s.rounding.sr_bits = sr_bits;
  s.rounding.rng = RngStream{0x0123456789abcdefull, 42};
  return s;
}

}  // namespace

TEST_CASE("mxfp4 equals the literal reference: every scale rule and rounding mode, special values, partial blocks, 1-3 threads") {
  struct Mode {
    const char* name;
    Rounding mode;
    int sr_bits;
  };
  const Mode modes[] = {{"rne", Rounding::NearestEven, kSrExact}, {"rz", Rounding::TowardZero, kSrExact},
                        {"sr exact", Rounding::Stochastic, kSrExact}, {"sr 8 bits", Rounding::Stochastic, 8},
                        {"sr 1 bit", Rounding::Stochastic, 1},       {"sr 32 bits", Rounding::Stochastic, 32},
                        {"sr hw", Rounding::Stochastic, kSrHw}};
  const std::pair<const char*, MxScaleRule> rules[] = {
      {"floor", MxScaleRule::Floor}, {"ceil", MxScaleRule::Ceil}, {"rceil", MxScaleRule::Rceil}};
  for (const auto& [rule_name, rule] : rules)
    for (const Mode& m : modes) {
      // SR under every rule would repeat the same element path; floor covers it.
      if (m.mode == Rounding::Stochastic && rule != MxScaleRule::Floor) continue;
      INFO("mxfp4, scale rule " << rule_name << ", " << m.name);
      check_against_reference(
          mx_spec(rule, m.mode, m.sr_bits), true,
          [](const Matrix& x, const QuantSpec& s, QuantizedTensor& q) { mxfp4_quantize_cpu(x, s, q, true); }, ref_mxfp4);
    }
}

TEST_CASE("mxfp4 reference check can fail: one changed code is found") {
  const Matrix x = make_input(3, 70, 5, true);
  const QuantSpec spec = mx_spec(MxScaleRule::Floor, Rounding::NearestEven, kSrExact);
  QuantizedTensor q;
  mxfp4_quantize_cpu(x, spec, q, true);
  const RefQ R = ref_mxfp4(x, spec);
  std::string what;
  REQUIRE(mismatches(q, R, x, true, &what) == 0);
  q.codes[53] ^= 0x10;  // padded rows of 96: element 96 + 11 = 107, the high nibble of byte 53
  CHECK(mismatches(q, R, x, true, &what) == 1);
  CHECK(what.rfind("code at (1, 11)", 0) == 0);
}

TEST_CASE("mxfp4 exact SR where the first 32 random bits tie: the extension words decide") {
  // Blocks of 32 whose first element, 4, sets X = 1 (floor rule: floor(log2 4) - 2 = 0), so
  // y = x. Where an element's primary word w is below 2^23, x = (w + 1/2) 2^-33 is a float
  // (24 significant bits) in [0, 0.5): lo = 0, step 0.5, f = (w + 1/2) 2^-32, so floor(f 2^32)
  // equals w with a remainder of 1/2: a tie that only the extension block decides (up iff its
  // word 0 is below 2^31). Elsewhere a small value without a tie.
  const QuantSpec spec = mx_spec(MxScaleRule::Floor, Rounding::Stochastic, kSrExact);
  const std::int64_t rows = 2048, cols = 32;
  Matrix x(rows, cols);
  std::int64_t ties = 0, up = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    x(r, 0) = 4.0f;
    for (std::int64_t c = 1; c < cols; ++c) {
      const std::uint64_t index = static_cast<std::uint64_t>(r * cols + c);
      const std::uint32_t w = philox_block(spec.rounding.rng, index / 4).v[index % 4];
      if (w < (1u << 23)) {
        x(r, c) = static_cast<float>(std::ldexp(w + 0.5, -33));
        ++ties;
        up += philox_extension(spec.rounding.rng, index).v[0] < 0x80000000u;
      } else {
        x(r, c) = 0.3f;
      }
    }
  }
  INFO(ties << " ties, " << up << " rounded up");
  REQUIRE(ties >= 40);                     // 2048 * 31 / 512 = 124 expected
  REQUIRE((up > 0 && up < ties));          // both outcomes occur: the extension decides
  QuantizedTensor q;
  mxfp4_quantize_cpu(x, spec, q, true);
  const RefQ R = ref_mxfp4(x, spec);
  std::string what;
  CHECK(mismatches(q, R, x, true, &what) == 0);
  INFO("first mismatch: " << what);
  std::int64_t ones = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 1; c < cols; ++c) ones += x(r, c) < 0.25f && code_of(q, r, c, true) == 1;
  CHECK(ones == up);
}

TEST_CASE("fp8 equals the literal reference: E4M3 and E5M2, per tensor, 1x128, 128x128, special values, 1-3 threads") {
  for (const char* name : {"fp8-e4m3-tensor", "fp8-e5m2-tensor", "fp8-e4m3-1x128", "fp8-e4m3-128x128"})
    for (const ElementFormat fmt : {ElementFormat::E4M3, ElementFormat::E5M2}) {
      QuantSpec spec = preset(name).spec;
      if (spec.per_tensor() && fmt != spec.element) continue;  // both per-tensor presets are listed
      spec.element = fmt;
      INFO(name << " as " << (fmt == ElementFormat::E5M2 ? "e5m2" : "e4m3"));
      check_against_reference(
          spec, false, [](const Matrix& x, const QuantSpec& s, QuantizedTensor& q) { fp8_quantize_cpu(x, s, q, true); },
          ref_fp8);
    }
}

namespace {
// Every float32 bit pattern in [lo, hi) with the given stride: fast conversion vs reference.
template <class Fast, class Ref>
std::uint64_t fp8_conversion_mismatches(Fast fast, Ref ref, std::uint64_t stride, std::uint32_t* first) {
  std::uint64_t bad = 0;
#pragma omp parallel for schedule(static) reduction(+ : bad)
  for (std::int64_t hi = 0; hi < 65536; ++hi) {
    std::uint64_t local = 0;
    for (std::uint64_t lo = 0; lo < 65536; lo += stride) {
      const std::uint32_t u = static_cast<std::uint32_t>((static_cast<std::uint64_t>(hi) << 16) | lo);
      const float v = from_bits(u);
      local += fast(v) != ref(v);
    }
    if (local) {
#pragma omp critical
      *first = static_cast<std::uint32_t>(hi << 16);
    }
    bad += local;
  }
  return bad;
}
// Lambdas, not function pointers, so that the exhaustive loops inline both conversions.
const auto kE4m3Fast = [](float v) { return e4m3_rne_satfinite_fast(v); };
const auto kE4m3Ref = [](float v) { return e4m3_rne_satfinite(v); };
const auto kE5m2Fast = [](float v) { return e5m2_rne_satfinite_fast(v); };
const auto kE5m2Ref = [](float v) { return e5m2_rne_satfinite(v); };
}  // namespace

TEST_CASE("branch-free FP8 conversions equal format/fp8.hpp's: dense sample and boundaries") {
  std::uint32_t first = 0;
  // Every 7th low half of every high half of the bit pattern (low half 0 included, so every
  // exponent's power of two and the ties on it), plus the exact boundaries below.
  CHECK(fp8_conversion_mismatches(kE4m3Fast, kE4m3Ref, 7, &first) == 0);
  CHECK(fp8_conversion_mismatches(kE5m2Fast, kE5m2Ref, 7, &first) == 0);
  INFO("first mismatching block " << hexf(from_bits(first)));
  std::vector<float> edges = {0.0f, -0.0f, kInf, -kInf, kNaN, -kNaN, from_bits(0x7f800001u), from_bits(0xffffffffu), kFMax};
  for (const double v : {448.0, 464.0, 480.0, 57344.0, 61440.0, 65536.0, std::ldexp(1.0, -6), std::ldexp(1.0, -9),
                         std::ldexp(1.0, -10), std::ldexp(15.0, -13), std::ldexp(1.0, -14), std::ldexp(1.0, -16),
                         std::ldexp(1.0, -17), std::ldexp(7.0, -19)})
    for (int s = -3; s <= 3; ++s) {
      float f = static_cast<float>(v);
      for (int k = 0; k < std::abs(s); ++k) f = std::nextafter(f, s < 0 ? 0.0f : kInf);
      edges.push_back(f);
      edges.push_back(-f);
    }
  for (const float v : edges) {
    INFO(hexf(v));
    CHECK(e4m3_rne_satfinite_fast(v) == e4m3_rne_satfinite(v));
    CHECK(e5m2_rne_satfinite_fast(v) == e5m2_rne_satfinite(v));
    CHECK(e4m3_rne_satfinite_fast(v) == e4m3_def().encode(v));
    CHECK(e5m2_rne_satfinite_fast(v) == e5m2_def().encode(v));
  }
}

TEST_CASE("branch-free FP8 conversions equal format/fp8.hpp's on every float32", "[long]") {
  std::uint32_t first = 0;
  CHECK(fp8_conversion_mismatches(kE4m3Fast, kE4m3Ref, 1, &first) == 0);
  CHECK(fp8_conversion_mismatches(kE5m2Fast, kE5m2Ref, 1, &first) == 0);
  INFO("first mismatching block " << hexf(from_bits(first)));
}
