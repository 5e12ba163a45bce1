// Random Hadamard transform (quant/rht.{hpp,cpp}; nvfp4-spec.md section 3):
//   * H = diag(s) H_d / sqrt(d) against a Sylvester matrix built here by the recursion
//     H_2n = [[H_n, H_n], [H_n, -H_n]], and its orthogonality with a derived rounding bound;
//   * TE's sign vector for d = 16 as the spec writes it; validate() rules for the sizes;
//   * the float32 transform against x H in exact / long double arithmetic with a derived
//     error bound;
//   * the Wgrad identity (XH)^T (YH) = X^T Y exactly: integer inputs with d = 16 (values
//     exact in float32 and double) and Boost.Multiprecision rationals with d = 4;
//   * the BF16 output option, the size check and its message, and the RHT inside quantize_cpu.
#include <algorithm>
#include <boost/multiprecision/cpp_int.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "quant/quantize.hpp"
#include "quant/presets.hpp"
#include "quant/rht.hpp"
#include "support/catch.hpp"
#include "support/float_bits.hpp"

using namespace fp4d;
using namespace fp4d_test;
using boost::multiprecision::cpp_rational;

namespace {


// Sylvester Hadamard matrix (+-1 entries) by the recursion, row-major d x d.
std::vector<int> sylvester(int d) {
  std::vector<int> h{1};
  for (int n = 1; n < d; n *= 2) {
    std::vector<int> g(static_cast<std::size_t>(4 * n * n));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const int v = h[static_cast<std::size_t>(i * n + j)];
        g[static_cast<std::size_t>(i * 2 * n + j)] = v;
        g[static_cast<std::size_t>(i * 2 * n + j + n)] = v;
        g[static_cast<std::size_t>((i + n) * 2 * n + j)] = v;
        g[static_cast<std::size_t>((i + n) * 2 * n + j + n)] = -v;
      }
    h = std::move(g);
  }
  return h;
}

RhtSpec rht(int d, RhtSigns s, std::uint64_t seed = 0, bool bf16 = false) {
  RhtSpec r;
  r.size = d;
  r.signs = s;
  r.sign_seed = seed;
  r.bf16_output = bf16;
  return r;
}

// BF16 RNE from the bits (finite inputs).
float bf16_ref(float x) {
  std::uint32_t u = fbits(x);
  std::uint32_t hi = u >> 16;
  const std::uint32_t lo = u & 0xffffu;
  if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) ++hi;
  u = hi << 16;
  float y;
  std::memcpy(&y, &u, sizeof y);
  return y;
}

const int kTeSigns[16] = {+1, +1, +1, -1, +1, -1, -1, -1, -1, -1, -1, +1, -1, +1, -1, -1};

// Integer-valued matrix with entries in [-lim, lim].
Matrix int_matrix(std::int64_t rows, std::int64_t cols, int lim, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int> d(-lim, lim);
  Matrix m(rows, cols);
  for (float& v : m.data) v = static_cast<float>(d(g));
  return m;
}

}  // namespace

TEST_CASE("rht TE sign vector and validate() rules") {
  const std::vector<float> s = rht_signs(rht(16, RhtSigns::Te));
  REQUIRE(s.size() == 16);
  for (int i = 0; i < 16; ++i) {
    INFO("i = " << i);
    CHECK(s[static_cast<std::size_t>(i)] == static_cast<float>(kTeSigns[i]));
  }
  for (float v : rht_signs(rht(64, RhtSigns::None))) CHECK(v == 1.0f);
  // Seeded random signs: +-1, a function of the seed.
  const std::vector<float> r1 = rht_signs(rht(256, RhtSigns::Random, 1)), r1b = rht_signs(rht(256, RhtSigns::Random, 1)),
                           r2 = rht_signs(rht(256, RhtSigns::Random, 2));
  CHECK(r1 == r1b);
  CHECK(r1 != r2);
  CHECK(std::all_of(r1.begin(), r1.end(), [](float v) { return v == 1.0f || v == -1.0f; }));
  const auto negatives = std::count(r1.begin(), r1.end(), -1.0f);
  // Binomial(256, 1/2): P(|N - 128| > 64) < 2 exp(-2 * 64^2 / 256) = 2e-14 (Hoeffding).
  CHECK(std::abs(negatives - 128) <= 64);

  QuantSpec q = preset("nvfp4").spec;
  for (int d : {2, 4, 8, 32, 64, 128, 256}) {
    q.rht = rht(d, RhtSigns::Te);
    INFO("te signs with d = " << d);
    REQUIRE_THROWS(validate(q));
    q.rht = rht(d, RhtSigns::Random, 3);
    validate(q);  // fine
    q.rht = rht(d, RhtSigns::None);
    validate(q);
  }
  q.rht = rht(16, RhtSigns::Te);
  validate(q);
  for (int d : {1, 3, 12, 512}) {
    INFO("d = " << d);
    q.rht = rht(d, RhtSigns::None);
    REQUIRE_THROWS(validate(q));
  }
}

TEST_CASE("rht_matrix is diag(s) H_d / sqrt(d) and orthogonal") {
  // Entries: +-scale with scale = fl(1 / fl(sqrt(d))) = (1/sqrt d)(1 + theta), |theta| <= 2u + u^2,
  // u = 2^-53. H H^T computed in double (recursive dot products) satisfies
  //   |fl(H H^T) - (H H^T)_exact| <= gamma_d * d * scale^2,   (H H^T)_exact = d scale^2 I,
  //   |d scale^2 - 1| <= (1 + theta)^2 - 1,
  // so |fl(H H^T) - I| <= gamma_d (1 + theta)^2 + (1 + theta)^2 - 1 with gamma_d = d u / (1 - d u).
  // (For d >= 4 this is below the d * 2^-52 one might guess; for d = 2 it is not.)
  const long double u = std::ldexp(1.0L, -53), theta = 2 * u + u * u;
  for (int d = 2; d <= 256; d *= 2) {
    const std::vector<int> syl = sylvester(d);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    CHECK(std::fabs(static_cast<long double>(scale) - 1.0L / std::sqrt(static_cast<long double>(d))) <=
          theta / std::sqrt(static_cast<long double>(d)));
    std::vector<RhtSpec> specs = {rht(d, RhtSigns::None), rht(d, RhtSigns::Random, 11), rht(d, RhtSigns::Random, 12)};
    if (d == 16) specs.push_back(rht(16, RhtSigns::Te));
    for (const RhtSpec& spec : specs) {
      INFO("d = " << d << ", signs " << to_string(spec.signs) << ", seed " << spec.sign_seed);
      const std::vector<double> h = rht_matrix(spec);
      const std::vector<float> s = rht_signs(spec);
      REQUIRE(h.size() == static_cast<std::size_t>(d * d));
      std::int64_t bad_entry = 0;
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j)
          bad_entry += h[static_cast<std::size_t>(i * d + j)] !=
                       static_cast<double>(s[static_cast<std::size_t>(i)]) * syl[static_cast<std::size_t>(i * d + j)] * scale;
      CHECK(bad_entry == 0);
      const long double gam = d * u / (1 - d * u);
      const double bound = static_cast<double>(gam * (1 + theta) * (1 + theta) + (1 + theta) * (1 + theta) - 1);
      double worst = 0;
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) {
          double acc = 0;
          for (int k = 0; k < d; ++k) acc += h[static_cast<std::size_t>(i * d + k)] * h[static_cast<std::size_t>(j * d + k)];
          worst = std::max(worst, std::fabs(acc - (i == j ? 1.0 : 0.0)));
        }
      INFO("max |H H^T - I| = " << worst << ", bound " << bound);
      CHECK(worst <= bound);
    }
  }
}

TEST_CASE("rht float32 transform equals x H within the derived bound") {
  // Inputs x_i = k_i 2^-24 with integers |k_i| < 2^24: y = x diag(s) H_d (the unnormalised sum)
  // is a multiple of 2^-24 below 2^8 in magnitude, exact in double; the reference y / sqrt(d) in
  // long double has relative error <= 2^-63.
  // apply_rht: signs (exact), L = log2 d butterfly stages, each output a tree of L roundings of
  // (a +- b): |yhat - y| <= ((1 + u)^L - 1) sum_i |x_i| (u = 2^-24); then one product with
  // shat = float(1/sqrt d) = (1/sqrt d)(1 + t), |t| <= u (rht_scale_f32 is correctly rounded),
  // rounded once more:
  //   |out - y / sqrt d| <= ((1 + u)^(L + 2) - 1) sum_i |x_i| / sqrt(d)  (+ 2^-62 sum|x|/sqrt d
  //   for the reference).
  std::mt19937_64 g(8);
  std::uniform_int_distribution<std::int32_t> kd(-(1 << 24) + 1, (1 << 24) - 1);
  for (int d : {2, 8, 16, 32, 256}) {
    std::vector<RhtSpec> specs = {rht(d, RhtSigns::Random, 5), rht(d, RhtSigns::None)};
    if (d == 16) specs.push_back(rht(16, RhtSigns::Te));
    int L = 0;
    while ((1 << L) < d) ++L;
    const long double u = std::ldexp(1.0L, -24);
    const long double rel = std::pow(1 + u, static_cast<long double>(L + 2)) - 1 + std::ldexp(1.0L, -62);
    const long double inv_sqrt = 1.0L / std::sqrt(static_cast<long double>(d));
    const std::vector<int> syl = sylvester(d);
    for (const RhtSpec& spec : specs)
      for (int axis : {0, 1}) {
        INFO("d = " << d << ", signs " << to_string(spec.signs) << ", axis " << axis);
        const std::int64_t len = 2 * d, lines = 6;
        Matrix x(axis == 0 ? len : lines, axis == 0 ? lines : len);
        for (float& v : x.data) v = std::ldexp(static_cast<float>(kd(g)), -24);
        const Matrix out = apply_rht(x, spec, axis);
        const std::vector<float> s = rht_signs(spec);
        std::int64_t bad = 0;
        long double worst_ratio = 0;
        for (std::int64_t line = 0; line < lines; ++line)
          for (std::int64_t run = 0; run < len / d; ++run)
            for (int j = 0; j < d; ++j) {
              double y = 0, sum_abs = 0;  // exact (see above)
              for (int i = 0; i < d; ++i) {
                const float xi = axis == 0 ? x(run * d + i, line) : x(line, run * d + i);
                y += static_cast<double>(xi) * s[static_cast<std::size_t>(i)] * syl[static_cast<std::size_t>(i * d + j)];
                sum_abs += std::fabs(static_cast<double>(xi));
              }
              const float o = axis == 0 ? out(run * d + j, line) : out(line, run * d + j);
              const long double err = std::fabs(static_cast<long double>(o) - static_cast<long double>(y) * inv_sqrt);
              const long double bound = rel * sum_abs * inv_sqrt;
              bad += err > bound;
              if (bound > 0) worst_ratio = std::max(worst_ratio, err / bound);
            }
        INFO("worst error / bound = " << static_cast<double>(worst_ratio));
        CHECK(bad == 0);
      }
  }
  // The scale itself: float(1/sqrt d), correctly rounded (exact 2^-k/2 for even log2 d).
  for (int d = 2; d <= 256; d *= 2) {
    INFO("d = " << d);
    const float sc = rht_scale_f32(d);
    const long double r = 1.0L / std::sqrt(static_cast<long double>(d));
    const long double lo = std::nextafter(sc, 0.0f), hi = std::nextafter(sc, 1.0f);
    CHECK(std::fabs(sc - r) <= std::fabs(lo - r));
    CHECK(std::fabs(sc - r) <= std::fabs(hi - r));
  }
}

TEST_CASE("rht Wgrad identity (XH)^T (YH) = X^T Y holds exactly") {
  SECTION("integers, d = 16, TE signs, through the float32 transform") {
    // X, Y: 64 tokens (axis 0) x 5 and x 3, entries in [-8, 8]. Each transformed value is
    // (sum of 16 +-x) / 4: the butterfly sums are integers below 2^8 and the scale 1/4 is exact,
    // so XH is exact in float32 and equals the integer sum / 4. The products of two such values
    // are multiples of 1/16 below 2^14, their sums over 64 tokens exact in double.
    const Matrix X = int_matrix(64, 5, 8, 1), Y = int_matrix(64, 3, 8, 2);
    const RhtSpec spec = rht(16, RhtSigns::Te);
    const Matrix XH = apply_rht(X, spec, 0), YH = apply_rht(Y, spec, 0);
    const std::vector<int> syl = sylvester(16);
    std::int64_t inexact = 0;
    for (std::int64_t c = 0; c < 5; ++c)
      for (std::int64_t run = 0; run < 4; ++run)
        for (int j = 0; j < 16; ++j) {
          long long four_y = 0;
          for (int i = 0; i < 16; ++i)
            four_y += static_cast<long long>(X(run * 16 + i, c)) * kTeSigns[i] * syl[static_cast<std::size_t>(i * 16 + j)];
          inexact += static_cast<double>(XH(run * 16 + j, c)) * 4.0 != static_cast<double>(four_y);
        }
    CHECK(inexact == 0);
    std::int64_t bad = 0;
    for (std::int64_t a = 0; a < 5; ++a)
      for (std::int64_t b = 0; b < 3; ++b) {
        double lhs = 0;
        long long rhs = 0;
        for (std::int64_t t = 0; t < 64; ++t) {
          lhs += static_cast<double>(XH(t, a)) * static_cast<double>(YH(t, b));
          rhs += static_cast<long long>(X(t, a)) * static_cast<long long>(Y(t, b));
        }
        bad += lhs != static_cast<double>(rhs);
      }
    CHECK(bad == 0);
  }
  SECTION("rationals, d = 4, random signs (Boost.Multiprecision cpp_rational)") {
    // H = diag(s) H_4 / 2 has entries +-1/2, exact rationals; XH for integer X is exact in float32
    // too (half-integers), so the float transform must equal the rational one, and the identity
    // holds in exact rational arithmetic.
    const int d = 4;
    const RhtSpec spec = rht(d, RhtSigns::Random, 77);
    const std::vector<double> h = rht_matrix(spec);
    std::vector<cpp_rational> H(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) {
      REQUIRE(std::fabs(h[i]) == 0.5);
      H[i] = cpp_rational(h[i] > 0 ? 1 : -1, 2);
    }
    const Matrix X = int_matrix(12, 3, 50, 3), Y = int_matrix(12, 4, 50, 4);
    auto transform = [&](const Matrix& M) {
      std::vector<cpp_rational> R(static_cast<std::size_t>(M.size()));
      for (std::int64_t c = 0; c < M.cols; ++c)
        for (std::int64_t run = 0; run < M.rows / d; ++run)
          for (int j = 0; j < d; ++j) {
            cpp_rational acc = 0;
            for (int i = 0; i < d; ++i)
              acc += cpp_rational(static_cast<long long>(M(run * d + i, c))) * H[static_cast<std::size_t>(i * d + j)];
            R[static_cast<std::size_t>((run * d + j) * M.cols + c)] = acc;
          }
      return R;
    };
    const std::vector<cpp_rational> XHr = transform(X), YHr = transform(Y);
    const Matrix XHf = apply_rht(X, spec, 0);
    std::int64_t bad_float = 0;
    for (std::int64_t i = 0; i < X.size(); ++i) {
      const double twice = 2.0 * XHf.data[static_cast<std::size_t>(i)];
      bad_float += twice != std::floor(twice) ||
                   cpp_rational(static_cast<long long>(twice), 2) != XHr[static_cast<std::size_t>(i)];
    }
    CHECK(bad_float == 0);
    std::int64_t bad = 0;
    for (std::int64_t a = 0; a < X.cols; ++a)
      for (std::int64_t b = 0; b < Y.cols; ++b) {
        cpp_rational lhs = 0, rhs = 0;
        for (std::int64_t t = 0; t < X.rows; ++t) {
          lhs += XHr[static_cast<std::size_t>(t * X.cols + a)] * YHr[static_cast<std::size_t>(t * Y.cols + b)];
          rhs += cpp_rational(static_cast<long long>(X(t, a)) * static_cast<long long>(Y(t, b)));
        }
        bad += lhs != rhs;
      }
    CHECK(bad == 0);
  }
}

TEST_CASE("rht BF16 output: every element is BF16 and the RNE of the float32 output") {
  std::mt19937_64 g(21);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  Matrix x(64, 32);
  for (float& v : x.data) v = n01(g) * 3.0f;
  for (int axis : {0, 1}) {
    INFO("axis " << axis);
    const Matrix f = apply_rht(x, rht(16, RhtSigns::Te), axis);
    const Matrix b = apply_rht(x, rht(16, RhtSigns::Te, 0, true), axis);
    std::int64_t not_bf16 = 0, not_rne = 0, changed = 0;
    for (std::size_t i = 0; i < f.data.size(); ++i) {
      not_bf16 += (fbits(b.data[i]) & 0xffffu) != 0;
      not_rne += !same_bits(b.data[i], bf16_ref(f.data[i]));
      changed += !same_bits(b.data[i], f.data[i]);
    }
    CHECK(not_bf16 == 0);
    CHECK(not_rne == 0);
    CHECK(changed > 0);  // the option does something
  }
  // Through the quantizer: q.transformed is the BF16-rounded transform.
  QuantSpec spec = preset("nvfp4-rht").spec;
  spec.rht.bf16_output = true;
  const QuantizedTensor q = quantize_cpu(x, spec);
  const Matrix b = apply_rht(x, spec.rht, 0);
  CHECK(q.transformed.data == b.data);
}

TEST_CASE("rht axis length not a multiple of d throws std::invalid_argument naming the numbers") {
  auto message_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return e.what();
    } catch (...) {
      return "<other exception>";
    }
    return "<no exception>";
  };
  const Matrix x(20, 32);
  const std::string m0 = message_of([&] { (void)apply_rht(x, rht(16, RhtSigns::Te), 0); });
  INFO(m0);
  CHECK(m0.find("16") != std::string::npos);
  CHECK(m0.find("20") != std::string::npos);
  // Along axis 1 the length 32 is fine; 64 does not divide it.
  CHECK(apply_rht(x, rht(16, RhtSigns::Te), 1).rows == 20);
  const std::string m1 = message_of([&] { (void)apply_rht(x, rht(64, RhtSigns::None), 1); });
  INFO(m1);
  CHECK(m1.find("64") != std::string::npos);
  CHECK(m1.find("32") != std::string::npos);
  // quantize_cpu passes it on.
  const std::string mq = message_of([&] { (void)quantize_cpu(x, preset("nvfp4-rht").spec); });
  INFO(mq);
  CHECK(mq.find("20") != std::string::npos);
  REQUIRE_THROWS(quantize_cpu(x, preset("nvfp4-rht-sr").spec));
}

TEST_CASE("nvfp4-rht: quantizes the transform, global amax after it, stats against the exact RHT") {
  std::mt19937_64 g(5);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  Matrix x(48, 20);
  for (float& v : x.data) v = n01(g);
  x(7, 3) = 40.0f;  // an outlier: the transform spreads it over its run of 16 tokens
  const QuantSpec spec = preset("nvfp4-rht").spec;
  const QuantizedTensor q = quantize_cpu(x, spec);
  const Matrix t = apply_rht(x, spec.rht, 0);
  CHECK(q.transformed.data == t.data);
  // Quantizing the transform columnwise without an RHT gives the same tensor.
  const QuantizedTensor r = quantize_cpu(t, preset("nvfp4-col").spec);
  CHECK(q.codes == r.codes);
  CHECK(q.scale_codes == r.scale_codes);
  CHECK(q.dequantized.data == r.dequantized.data);
  // Global amax of the transform, not of the input (40 would give s_enc = 67.2).
  float amax = 0;
  for (float v : t.data) amax = std::max(amax, std::fabs(v));
  CHECK(amax < 40.0f);
  CHECK(q.global.encode == static_cast<float>(2688.0 / static_cast<double>(amax)));
  // The statistics compare with the exact transform (double), not with the float32 one.
  const std::vector<double> exact = apply_rht_double(x, spec.rht, 0);
  long double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const long double e = static_cast<long double>(q.dequantized.data[i]) - exact[i];
    err2 += e * e;
    ref2 += static_cast<long double>(exact[i]) * exact[i];
  }
  // Double sums over at most 4096 + 2 terms: relative error <= 2 * 4100 * 2^-53 (+ one division).
  CHECK(std::fabs(q.stats.nmse - static_cast<double>(err2 / ref2)) <= 8201 * std::ldexp(1.0, -53) * q.stats.nmse);
  // And the double transform is x H to double accuracy (its rounding: L + 2 steps of 2^-53).
  const std::vector<int> syl = sylvester(16);
  const std::vector<float> s = rht_signs(spec.rht);
  double worst = 0;
  for (std::int64_t c = 0; c < 20; ++c)
    for (std::int64_t run = 0; run < 3; ++run)
      for (int j = 0; j < 16; ++j) {
        long double y = 0, sa = 0;
        for (int i = 0; i < 16; ++i) {
          y += static_cast<long double>(x(run * 16 + i, c)) * s[static_cast<std::size_t>(i)] * syl[static_cast<std::size_t>(i * 16 + j)];
          sa += std::fabs(static_cast<long double>(x(run * 16 + i, c)));
        }
        const long double e = std::fabs(exact[static_cast<std::size_t>((run * 16 + j) * 20 + c)] - y / 4);
        worst = std::max(worst, static_cast<double>(e / (sa / 4)));
      }
  CHECK(worst <= 6 * std::ldexp(1.0, -53));
}
