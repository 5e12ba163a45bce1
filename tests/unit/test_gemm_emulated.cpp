// Emulated low-precision GEMMs (quant/gemm_emulated.hpp): exactness on operands whose
// quantization and every partial sum are exact (CUTLASS-testbed style, against an int64
// reference), a hand-worked two-block NVFP4 example, the classical error bounds of the
// documented float32 order on random data (against exact references in cpp_bin_float_50),
// thread-count independence and the consistency of the NVFP4 1x16 / 16x16 layouts.
#include <boost/multiprecision/cpp_bin_float.hpp>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "quant/gemm_emulated.hpp"
#include "quant/quantize.hpp"
#include "quant/presets.hpp"
#include "support/catch.hpp"
#include "util/parallel_worth.hpp"

using namespace fp4d;
using Big = boost::multiprecision::cpp_bin_float_50;

namespace {

constexpr double kU32 = 1.0 / 16777216.0;  // 2^-24
constexpr double kU64 = 1.0 / 9007199254740992.0;  // 2^-53

double gamma_n(std::int64_t n, double u) { return static_cast<double>(n) * u / (1.0 - static_cast<double>(n) * u); }

QuantSpec spec_of(const char* name) { return preset(name).spec; }

bool same_bits(const Matrix& a, const Matrix& b) {
  return a.rows == b.rows && a.cols == b.cols &&
         std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
}

// ---------------------------------------------------------------------------------------
// Exact operands. x = n * unit with n a small integer (returned in `ints`).
//
// NVFP4: x = v * sigma * 2^m with v on the E2M1 grid and sigma in {224, 448} per block (per
// 16x16 tile when tile_rows == 16, else per 1x16 block); every 1x16 row block holds a +-6,
// and x(0, 0) = +6 * 448 * 2^m = 2688 * 2^m is the tensor's amax. Then s_enc = 2^-m and
// s_dec = 2^m exactly, each block's scale rounds to sigma (6 sigma * fl(1/6) is within 2 ulps of
// sigma, far from an E4M3 midpoint), x * e_b is within a few ulps of v, so q = v: the
// quantization is exact, checked below by deq(x) == x. x = n * 112 * 2^m with n = 2 v sigma/224.
const float kGrid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

Matrix exact_nvfp4_operand(std::int64_t rows, std::int64_t K, int m, std::int64_t tile_rows, std::mt19937_64& rng,
                           std::vector<std::int64_t>& ints) {
  Matrix x(rows, K);
  ints.assign(static_cast<std::size_t>(rows * K), 0);
  const std::int64_t nb = (K + 15) / 16;
  std::vector<int> sigma_mult(static_cast<std::size_t>(((rows + tile_rows - 1) / tile_rows) * nb));
  for (int& s : sigma_mult) s = 1 + static_cast<int>(rng() % 2);  // sigma = 224 * s
  sigma_mult[0] = 2;                                               // the amax block: sigma = 448
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t c0 = b * 16, c1 = std::min(K, c0 + 16);
      const int s = sigma_mult[static_cast<std::size_t>((r / tile_rows) * nb + b)];
      const std::int64_t six_at = c0 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c1 - c0));
      for (std::int64_t c = c0; c < c1; ++c) {
        float v = c == six_at ? 6.0f : kGrid[rng() % 8];
        if (rng() % 2) v = -v;
        if (r == 0 && c == 0) v = 6.0f;
        const std::int64_t n = static_cast<std::int64_t>(2.0f * v) * s;  // v sigma = n * 112
        ints[static_cast<std::size_t>(r * K + c)] = n;
        x(r, c) = std::ldexp(static_cast<float>(n) * 112.0f, m);
      }
    }
  if (rows > 0 && K > 0) x(0, 0) = std::ldexp(2688.0f, m), ints[0] = 24;
  return x;
}

// MXFP4 (floor rule): x = v * 2^e_b, every 1x32 block holds a +-6 (so its scale is 2^e_b),
// e_b in [-3, 0]; x = n * 2^-4 with n = 2 v 2^(e_b + 3).
Matrix exact_mxfp4_operand(std::int64_t rows, std::int64_t K, std::mt19937_64& rng, std::vector<std::int64_t>& ints) {
  Matrix x(rows, K);
  ints.assign(static_cast<std::size_t>(rows * K), 0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c0 = 0; c0 < K; c0 += 32) {
      const std::int64_t c1 = std::min(K, c0 + 32);
      const int e = -static_cast<int>(rng() % 4);
      const std::int64_t six_at = c0 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c1 - c0));
      for (std::int64_t c = c0; c < c1; ++c) {
        float v = c == six_at ? 6.0f : kGrid[rng() % 8];
        if (rng() % 2) v = -v;
        const std::int64_t n = static_cast<std::int64_t>(2.0f * v) << (e + 3);
        ints[static_cast<std::size_t>(r * K + c)] = n;
        x(r, c) = std::ldexp(static_cast<float>(n), -4);
      }
    }
  return x;
}

// FP8 E4M3 (per tensor or 1x128): integers in [-16, 16] (all exact in E4M3) and one +-448 in
// every 1x128 row block, so every scale is exactly 1.
Matrix exact_fp8_operand(std::int64_t rows, std::int64_t K, std::mt19937_64& rng, std::vector<std::int64_t>& ints) {
  Matrix x(rows, K);
  ints.assign(static_cast<std::size_t>(rows * K), 0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c0 = 0; c0 < K; c0 += 128) {
      const std::int64_t c1 = std::min(K, c0 + 128);
      const std::int64_t big_at = c0 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c1 - c0));
      for (std::int64_t c = c0; c < c1; ++c) {
        std::int64_t n = c == big_at ? 448 : static_cast<std::int64_t>(rng() % 17);
        if (rng() % 2) n = -n;
        ints[static_cast<std::size_t>(r * K + c)] = n;
        x(r, c) = static_cast<float>(n);
      }
    }
  return x;
}

std::vector<std::int64_t> int_gemm(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b, std::int64_t M,
                                   std::int64_t N, std::int64_t K) {
  std::vector<std::int64_t> c(static_cast<std::size_t>(M * N), 0);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      std::int64_t s = 0;
      for (std::int64_t k = 0; k < K; ++k) s += a[static_cast<std::size_t>(i * K + k)] * b[static_cast<std::size_t>(j * K + k)];
      c[static_cast<std::size_t>(i * N + j)] = s;
    }
  return c;
}

// Asserts that the operands cannot make a test pass vacuously.
void require_nonzero(const std::vector<std::int64_t>& ints) {
  std::int64_t nz = 0;
  for (std::int64_t v : ints) nz += v != 0;
  REQUIRE(nz * 2 > static_cast<std::int64_t>(ints.size()));
}

// C == I * unit exactly (the unit a power of two times a small integer, I * unit exact in double).
void check_equals_int(const Matrix& C, const std::vector<std::int64_t>& I, double unit) {
  std::int64_t mismatches = 0, nonzero = 0;
  for (std::size_t i = 0; i < I.size(); ++i) {
    const double expected = static_cast<double>(I[i]) * unit;
    REQUIRE(static_cast<double>(static_cast<float>(expected)) == expected);  // representable in float32
    mismatches += static_cast<double>(C.data[i]) != expected;
    nonzero += I[i] != 0;
  }
  CHECK(mismatches == 0);
  CHECK(nonzero * 10 > static_cast<std::int64_t>(I.size()) * 9);
}

// ---------------------------------------------------------------------------------------
// Exact per-element values of a block-scaled operand (stored orientation), in long double:
//   NVFP4: (q S) s_dec  (30 significant bits)   MXFP4: q 2^e   FP8: value * d  (28 bits)
// i.e. the operand the GEMM's semantics multiplies, without the float32 dequantization rounding.
std::vector<long double> exact_values(const QuantizedTensor& q) {
  std::vector<long double> v(static_cast<std::size_t>(q.rows * q.cols));
  const std::int64_t br = q.spec.is_2d() ? q.spec.block_rows : 1;
  for (std::int64_t r = 0; r < q.rows; ++r)
    for (std::int64_t k = 0; k < q.cols; ++k) {
      const std::size_t si = q.spec.per_tensor() ? 0 : static_cast<std::size_t>((r / br) * q.scale_cols + k / q.spec.block_cols);
      const std::uint8_t c = q.code_at(r, k);
      long double x;
      switch (q.spec.scheme) {
        case Scheme::Nvfp4:
          x = static_cast<long double>(e2m1_decode(c)) * q.scale_values[si] * static_cast<long double>(q.global.decode);
          break;
        case Scheme::Mxfp4: x = static_cast<long double>(e2m1_decode(c)) * q.scale_values[si]; break;
        default:
          x = static_cast<long double>(q.spec.element == ElementFormat::E5M2 ? e5m2_decode(c) : e4m3_decode(c)) *
              q.scale_values[si];
      }
      v[static_cast<std::size_t>(r * q.cols + k)] = x;
    }
  return v;
}

std::vector<long double> to_ld(const Matrix& m) {
  std::vector<long double> v(m.data.begin(), m.data.end());
  return v;
}

struct BoundResult {
  double max_ratio = 0;         // max |C - ref| / bound
  std::int64_t violations = 0;  // elements over the bound
  std::int64_t inexact = 0;     // elements with C != ref
  std::int64_t elements = 0;
};

// |C - sum_k a_k b_k| <= gamma * sum_k |a_k b_k| elementwise, sums in cpp_bin_float_50 (exact here:
// the products have <= 60 significant bits and a small exponent spread).
BoundResult check_bound(const std::vector<double>& C, const std::vector<long double>& a,
                        const std::vector<long double>& b, std::int64_t M, std::int64_t N, std::int64_t K, double gamma) {
  BoundResult res;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      Big s = 0, sa = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const Big p = Big(a[static_cast<std::size_t>(i * K + k)]) * Big(b[static_cast<std::size_t>(j * K + k)]);
        s += p;
        sa += abs(p);
      }
      const Big err = abs(Big(C[static_cast<std::size_t>(i * N + j)]) - s);
      const Big bound = Big(gamma) * sa;
      ++res.elements;
      res.inexact += err != 0;
      if (err > bound) ++res.violations;
      if (bound > 0) res.max_ratio = std::max(res.max_ratio, static_cast<double>(err / bound));
    }
  return res;
}

std::vector<double> to_d(const Matrix& m) { return std::vector<double>(m.data.begin(), m.data.end()); }

Matrix normal_matrix(std::int64_t r, std::int64_t c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Matrix m(r, c);
  for (float& v : m.data) v = nd(rng);
  return m;
}

}  // namespace

TEST_CASE("small-integer operands: every path equals the int64 reference") {
  std::mt19937_64 rng(12345);
  SECTION("nvfp4 1x16, K = 64 and K = 40") {
    for (std::int64_t K : {64, 40}) {
      CAPTURE(K);
      const std::int64_t M = 24, N = 20;
      std::vector<std::int64_t> ia, ib;
      const int mA = -10, mB = 3;
      const Matrix a = exact_nvfp4_operand(M, K, mA, 1, rng, ia);
      const Matrix b = exact_nvfp4_operand(N, K, mB, 1, rng, ib);
      require_nonzero(ia);
      require_nonzero(ib);
      const QuantizedTensor qa = quantize_cpu(a, spec_of("nvfp4")), qb = quantize_cpu(b, spec_of("nvfp4"));
      REQUIRE(qa.dequantized.data == a.data);  // the quantization is exact
      REQUIRE(qb.dequantized.data == b.data);
      REQUIRE(qa.global.decode == std::ldexp(1.0f, mA));
      const std::vector<std::int64_t> I = int_gemm(ia, ib, M, N, K);
      const double unit = 112.0 * 112.0 * std::ldexp(1.0, mA + mB);
      check_equals_int(gemm_nvfp4_emulated(qa, qb), I, unit);
      check_equals_int(gemm_dequantized_fp32(qa, qb), I, unit);
      const GemmMatrixF64 c64 = gemm_dequantized_f64(qa, qb);
      std::int64_t bad = 0;
      for (std::size_t i = 0; i < I.size(); ++i) bad += c64.data[i] != static_cast<double>(I[i]) * unit;
      CHECK(bad == 0);
    }
  }
  SECTION("nvfp4 16x16-tiled B equals the GEMM from B's dequantized values requantized 1x16") {
    const std::int64_t M = 20, N = 40, K = 48;
    std::vector<std::int64_t> ia, ib;
    const Matrix a = exact_nvfp4_operand(M, K, -2, 1, rng, ia);
    const Matrix b = exact_nvfp4_operand(N, K, 1, 16, rng, ib);  // one sigma per 16x16 tile
    require_nonzero(ia);
    require_nonzero(ib);
    const QuantizedTensor qa = quantize_cpu(a, spec_of("nvfp4"));
    const QuantizedTensor qb2 = quantize_cpu(b, spec_of("nvfp4-2d"));
    REQUIRE(qb2.spec.is_2d());
    REQUIRE(qb2.dequantized.data == b.data);
    const QuantizedTensor qb1 = quantize_cpu(qb2.dequantized, spec_of("nvfp4"));  // from deq(B)
    const Matrix c2 = gemm_nvfp4_emulated(qa, qb2), c1 = gemm_nvfp4_emulated(qa, qb1);
    CHECK(same_bits(c1, c2));
    check_equals_int(c2, int_gemm(ia, ib, M, N, K), 112.0 * 112.0 * std::ldexp(1.0, -1));
  }
  SECTION("mxfp4 1x32, K = 96 and K = 40") {
    for (std::int64_t K : {96, 40}) {
      CAPTURE(K);
      const std::int64_t M = 16, N = 24;
      std::vector<std::int64_t> ia, ib;
      const Matrix a = exact_mxfp4_operand(M, K, rng, ia), b = exact_mxfp4_operand(N, K, rng, ib);
      require_nonzero(ia);
      require_nonzero(ib);
      const QuantizedTensor qa = quantize_cpu(a, spec_of("mxfp4")), qb = quantize_cpu(b, spec_of("mxfp4"));
      REQUIRE(qa.dequantized.data == a.data);
      REQUIRE(qb.dequantized.data == b.data);
      const std::vector<std::int64_t> I = int_gemm(ia, ib, M, N, K);
      check_equals_int(gemm_mxfp4_emulated(qa, qb), I, std::ldexp(1.0, -8));
      check_equals_int(gemm_dequantized_fp32(qa, qb), I, std::ldexp(1.0, -8));
    }
  }
  SECTION("fp8 e4m3 per tensor and 1x128, K = 256") {
    const std::int64_t M = 12, N = 10, K = 256;
    std::vector<std::int64_t> ia, ib;
    const Matrix a = exact_fp8_operand(M, K, rng, ia), b = exact_fp8_operand(N, K, rng, ib);
    require_nonzero(ia);
    require_nonzero(ib);
    const std::vector<std::int64_t> I = int_gemm(ia, ib, M, N, K);
    for (const char* name : {"fp8-e4m3-tensor", "fp8-e4m3-1x128"}) {
      CAPTURE(name);
      const QuantizedTensor qa = quantize_cpu(a, spec_of(name)), qb = quantize_cpu(b, spec_of(name));
      REQUIRE(qa.dequantized.data == a.data);
      REQUIRE(qb.dequantized.data == b.data);
      check_equals_int(gemm_fp8_emulated(qa, qb), I, 1.0);
      check_equals_int(gemm_dequantized_fp32(qa, qb), I, 1.0);
    }
  }
}

TEST_CASE("hand-worked NVFP4 1x32 example: two blocks, different scales") {
  // Element values (E2M1 grid) of A and B, two 16-element blocks each.
  const float va[32] = {6, -3, 1.5f, 0.5f, 4, 2, -1, 0, 3, 1, -6, 0.5f, 2, -1.5f, 1, 4,
                        1, 0.5f, -2, 3, 0, 6, -0.5f, 1.5f, 4, -1, 2, 0.5f, -3, 1, 0, 1.5f};
  const float vb[32] = {4, 0.5f, 1, -0.5f, 3, 6, 1.5f, 2, -1, 0.5f, -4, 1, 1, 0, 2, 0.5f,
                        -0.5f, 2, 1, 0.5f, 3, 1.5f, -4, 6, 0.5f, 0, -1, 1, 1.5f, 2, -6, 0.5f};
  // Block scales (E4M3 codes): A = {416, 13/16}, B = {448, 5 * 2^-9 (subnormal)}.
  const std::uint8_t sa[2] = {e4m3_rne_satfinite(416.0f), e4m3_rne_satfinite(0.8125f)};
  const std::uint8_t sb[2] = {e4m3_rne_satfinite(448.0f), e4m3_rne_satfinite(5.0f / 512.0f)};
  REQUIRE(e4m3_decode(sa[0]) == 416.0f);
  REQUIRE(e4m3_decode(sa[1]) == 0.8125f);
  REQUIRE(e4m3_decode(sb[0]) == 448.0f);
  REQUIRE(e4m3_decode(sb[1]) == 5.0f / 512.0f);
  REQUIRE(e4m3_is_subnormal(sb[1]));
  const GlobalScale ga = nvfp4_global_scale(5.3f), gb = nvfp4_global_scale(0.77f);  // non-power-of-two s_dec

  auto make = [](const float* v, const std::uint8_t* s, GlobalScale g) {
    QuantizedTensor q;
    q.spec = preset("nvfp4").spec;
    q.input_rows = q.rows = 1;
    q.input_cols = q.cols = q.padded_cols = 32;
    q.scale_rows = 1;
    q.scale_cols = 2;
    q.codes.assign(16, 0);
    for (int k = 0; k < 32; ++k) {
      const std::uint8_t c = e2m1_rne(v[k]);
      REQUIRE(e2m1_decode(c) == v[k]);
      q.codes[static_cast<std::size_t>(k / 2)] |= static_cast<std::uint8_t>((k & 1) ? c << 4 : c);
    }
    q.scale_codes = {s[0], s[1]};
    q.scale_values = {e4m3_decode(s[0]), e4m3_decode(s[1])};
    q.global = g;
    q.dequantized = Matrix(1, 32);
    for (int k = 0; k < 32; ++k) q.dequantized(0, k) = nvfp4_dequantize(q.code_at(0, k), s[k / 16], g.decode);
    return q;
  };
  const QuantizedTensor qa = make(va, sa, ga), qb = make(vb, sb, gb);

  // The documented steps, each as an exact double operation rounded once to float32.
  double p[2] = {0, 0};
  for (int k = 0; k < 32; ++k) p[k / 16] += static_cast<double>(va[k]) * vb[k];  // exact
  float t[2];
  for (int b = 0; b < 2; ++b) {
    const float s = static_cast<float>(static_cast<double>(e4m3_decode(sa[b])) * e4m3_decode(sb[b]));
    REQUIRE(static_cast<double>(s) == static_cast<double>(e4m3_decode(sa[b])) * e4m3_decode(sb[b]));  // exact
    t[b] = static_cast<float>(p[b] * s);
    REQUIRE(static_cast<double>(t[b]) == p[b] * s);  // block terms exact, as documented
  }
  const double exact_sum = static_cast<double>(t[0]) + t[1];  // exact in double (exponent gap < 29)
  const float acc = static_cast<float>(exact_sum);
  CHECK(static_cast<double>(acc) != exact_sum);  // the example exercises an accumulation rounding
  const float g = static_cast<float>(static_cast<double>(ga.decode) * gb.decode);
  const float expected = static_cast<float>(static_cast<double>(acc) * g);
  INFO("p = " << p[0] << ", " << p[1] << "; t = " << t[0] << ", " << t[1] << "; expected " << expected);

  const Matrix c = gemm_nvfp4_emulated(qa, qb);
  REQUIRE(c.rows == 1);
  REQUIRE(c.cols == 1);
  CHECK(c(0, 0) == expected);
  // and it is close to the exact value (bound of the header, n = nb + 1 = 3)
  const double exact = (static_cast<double>(t[0]) + t[1]) * ga.decode * gb.decode;
  CHECK(std::fabs(c(0, 0) - exact) <= gamma_n(3, kU32) * std::fabs(exact));
  CHECK(emulated_gemm_rounding_count(qa, qb) == 3);
}

TEST_CASE("random N(0,1) operands: errors within the classical bounds of the documented order") {
  for (std::int64_t K : {64, 40}) {
    CAPTURE(K);
    const std::int64_t M = 64, N = 64;
    const Matrix a = normal_matrix(M, K, 1 + static_cast<std::uint64_t>(K)), b = normal_matrix(N, K, 1000 + static_cast<std::uint64_t>(K));
    SECTION("nvfp4") {
      for (const char* bname : {"nvfp4", "nvfp4-2d"}) {
        CAPTURE(bname);
        const QuantizedTensor qa = quantize_cpu(a, spec_of("nvfp4")), qb = quantize_cpu(b, spec_of(bname));
        const Matrix c = gemm_nvfp4_emulated(qa, qb);
        const std::int64_t nb = (K + 15) / 16, n = emulated_gemm_rounding_count(qa, qb);
        REQUIRE(n == nb + 1);
        // against the exact value of the GEMM's semantics: n = nb + 1
        const BoundResult e = check_bound(to_d(c), exact_values(qa), exact_values(qb), M, N, K, gamma_n(n, kU32));
        INFO("vs exact semantics: max err/bound " << e.max_ratio << ", inexact " << e.inexact << "/" << e.elements);
        CHECK(e.violations == 0);
        CHECK(e.inexact * 2 > e.elements);  // not vacuous
        // against the exact product of the float32 dequantized operands: n = nb + 3, / (1-u)^2
        const BoundResult r = check_bound(to_d(c), to_ld(qa.dequantized), to_ld(qb.dequantized), M, N, K,
                                          gamma_n(n + 2, kU32) / ((1 - kU32) * (1 - kU32)));
        INFO("vs exact deq product: max err/bound " << r.max_ratio << ", inexact " << r.inexact << "/" << r.elements);
        CHECK(r.violations == 0);
        CHECK(r.inexact * 2 > r.elements);
        // dequantize-then-FP32: gamma_K; the f64 variant: gamma_K with u = 2^-53
        const BoundResult d = check_bound(to_d(gemm_dequantized_fp32(qa, qb)), to_ld(qa.dequantized),
                                          to_ld(qb.dequantized), M, N, K, gamma_n(K, kU32));
        INFO("deq fp32: max err/bound " << d.max_ratio << ", inexact " << d.inexact << "/" << d.elements);
        CHECK(d.violations == 0);
        CHECK(d.inexact * 2 > d.elements);
        const BoundResult d64 = check_bound(gemm_dequantized_f64(qa, qb).data, to_ld(qa.dequantized),
                                            to_ld(qb.dequantized), M, N, K, gamma_n(K, kU64));
        CHECK(d64.violations == 0);
      }
    }
    SECTION("nvfp4 columnwise operands (Wgrad layout X^T dY)") {
      // Inputs K x M and K x N quantized along axis 0: stored M x K and N x K.
      const Matrix xa = transpose(a), xb = transpose(b);
      const QuantizedTensor qa = quantize_cpu(xa, spec_of("nvfp4-col")), qb = quantize_cpu(xb, spec_of("nvfp4-col"));
      REQUIRE(qa.rows == M);
      REQUIRE(qa.cols == K);
      const Matrix c = gemm_nvfp4_emulated(qa, qb);
      const BoundResult e = check_bound(to_d(c), exact_values(qa), exact_values(qb), M, N, K,
                                        gamma_n(emulated_gemm_rounding_count(qa, qb), kU32));
      CHECK(e.violations == 0);
      CHECK(e.inexact * 2 > e.elements);
      const BoundResult d = check_bound(to_d(gemm_dequantized_fp32(qa, qb)), to_ld(stored_dequantized(qa)),
                                        to_ld(stored_dequantized(qb)), M, N, K, gamma_n(K, kU32));
      CHECK(d.violations == 0);
    }
    SECTION("mxfp4") {
      // On N(0,1) data the MXFP4 emulation is usually exact: the block terms have <= 13
      // significant bits and nearby exponents, so their float32 sum needs no rounding. The
      // bound is therefore checked on N(0,1) data and, non-vacuously, on data whose elements
      // have a magnitude 2^-30 .. 2^30 per block (block scales far apart, so the accumulation rounds).
      Matrix wa = a, wb = b;
      for (std::int64_t i = 0; i < M; ++i)
        for (std::int64_t k = 0; k < K; ++k) wa(i, k) = std::ldexp(wa(i, k), static_cast<int>(((k / 32) * 13 + i * 7) % 61) - 30);
      for (std::int64_t j = 0; j < N; ++j)
        for (std::int64_t k = 0; k < K; ++k) wb(j, k) = std::ldexp(wb(j, k), static_cast<int>(((k / 32) * 5 + j * 11) % 61) - 30);
      for (int wide = 0; wide < 2; ++wide) {
        CAPTURE(wide);
        const QuantizedTensor qa = quantize_cpu(wide ? wa : a, spec_of("mxfp4"));
        const QuantizedTensor qb = quantize_cpu(wide ? wb : b, spec_of("mxfp4"));
        const std::int64_t n = emulated_gemm_rounding_count(qa, qb);
        REQUIRE(n == (K + 31) / 32 - 1);
        const BoundResult e =
            check_bound(to_d(gemm_mxfp4_emulated(qa, qb)), exact_values(qa), exact_values(qb), M, N, K, gamma_n(n, kU32));
        INFO("mxfp4: max err/bound " << e.max_ratio << ", inexact " << e.inexact << "/" << e.elements);
        CHECK(e.violations == 0);
        if (wide) CHECK(e.inexact * 4 > e.elements);  // about half round here (2082 of 4096 for K = 64)
        const BoundResult d = check_bound(to_d(gemm_dequantized_fp32(qa, qb)), exact_values(qa), exact_values(qb), M,
                                          N, K, gamma_n(K, kU32));
        CHECK(d.violations == 0);
      }
    }
  }
  SECTION("fp8 e4m3: per tensor, 1x128, 1x128 x 128x128 (K = 200)") {
    const std::int64_t M = 32, N = 48, K = 200;
    const Matrix a = normal_matrix(M, K, 7), b = normal_matrix(N, K, 8);
    const char* pairs[3][2] = {{"fp8-e4m3-tensor", "fp8-e4m3-tensor"},
                               {"fp8-e4m3-1x128", "fp8-e4m3-1x128"},
                               {"fp8-e4m3-1x128", "fp8-e4m3-128x128"}};
    for (const auto& pr : pairs) {
      CAPTURE(pr[0], pr[1]);
      const QuantizedTensor qa = quantize_cpu(a, spec_of(pr[0])), qb = quantize_cpu(b, spec_of(pr[1]));
      const std::int64_t n = emulated_gemm_rounding_count(qa, qb);
      CHECK(n == (std::string(pr[0]) == "fp8-e4m3-tensor" ? K + 1 : 128 + 2));
      const Matrix c = gemm_fp8_emulated(qa, qb);
      const BoundResult e = check_bound(to_d(c), exact_values(qa), exact_values(qb), M, N, K, gamma_n(n, kU32));
      INFO("fp8: max err/bound " << e.max_ratio << ", inexact " << e.inexact << "/" << e.elements);
      CHECK(e.violations == 0);
      CHECK(e.inexact * 2 > e.elements);
      const BoundResult r = check_bound(to_d(c), to_ld(qa.dequantized), to_ld(qb.dequantized), M, N, K,
                                        gamma_n(n + 2, kU32) / ((1 - kU32) * (1 - kU32)));
      CHECK(r.violations == 0);
    }
  }
}

TEST_CASE("results do not depend on the number of threads") {
  const ParallelWorkThreshold every_loop_parallel(0);  // small tensors: the threads must take part
  const Matrix a = normal_matrix(67, 80, 21), b = normal_matrix(45, 80, 22);
  const QuantizedTensor na = quantize_cpu(a, spec_of("nvfp4")), nb = quantize_cpu(b, spec_of("nvfp4-2d"));
  const QuantizedTensor ma = quantize_cpu(a, spec_of("mxfp4")), mb = quantize_cpu(b, spec_of("mxfp4"));
  const QuantizedTensor fa = quantize_cpu(a, spec_of("fp8-e4m3-1x128")), fb = quantize_cpu(b, spec_of("fp8-e4m3-tensor"));
  const int saved = omp_get_max_threads();
  std::vector<Matrix> runs[3];
  const int threads[3] = {1, 2, 3};
  for (int t = 0; t < 3; ++t) {
    omp_set_num_threads(threads[t]);
    runs[t] = {gemm_nvfp4_emulated(na, nb), gemm_mxfp4_emulated(ma, mb), gemm_fp8_emulated(fa, fb),
               gemm_dequantized_fp32(na, nb)};
    const GemmMatrixF64 d = gemm_dequantized_f64(na, nb);
    Matrix bits(1, static_cast<std::int64_t>(d.data.size() * 2));
    std::memcpy(bits.data.data(), d.data.data(), d.data.size() * sizeof(double));
    runs[t].push_back(bits);
  }
  omp_set_num_threads(saved);
  for (int t = 1; t < 3; ++t)
    for (std::size_t r = 0; r < runs[0].size(); ++r) {
      CAPTURE(t, r);
      CHECK(same_bits(runs[0][r], runs[t][r]));
    }
}

namespace {
// The documented loop of gemm_emulated.hpp written out element by element, from the
// QuantizedTensor's public fields (codes via code_at, block scales from scale_values on the
// scale grid, UE8M0 exponents from scale_codes): the oracle for the vectorised
// implementation's order. reverse_blocks sums the block terms in the other order, to show
// that the comparison can fail.
Matrix documented_loop(const QuantizedTensor& A, const QuantizedTensor& B, bool reverse_blocks = false,
                       std::int64_t* blocks = nullptr) {
  const Scheme scheme = A.spec.scheme;
  const auto k_block = [](const QuantizedTensor& q) { return q.spec.per_tensor() ? std::int64_t{0} : q.spec.block_cols; };
  const std::int64_t K = A.cols;
  std::int64_t L = scheme == Scheme::Nvfp4 ? 16 : scheme == Scheme::Mxfp4 ? 32 : std::max(k_block(A), k_block(B));
  if (L == 0) L = std::max<std::int64_t>(K, 1);
  const std::int64_t nb = (K + L - 1) / L;
  if (blocks) *blocks = nb;
  const auto value = [&](const QuantizedTensor& q, std::int64_t r, std::int64_t k) {
    const std::uint8_t c = q.code_at(r, k);
    if (scheme == Scheme::Fp8) return q.spec.element == ElementFormat::E5M2 ? e5m2_decode(c) : e4m3_decode(c);
    return e2m1_decode(c);
  };
  const auto grid = [&](const QuantizedTensor& q, std::int64_t r, std::int64_t b) {
    if (q.spec.per_tensor()) return std::size_t{0};
    const std::int64_t br = q.spec.is_2d() ? q.spec.block_rows : 1;
    return static_cast<std::size_t>((r / br) * q.scale_cols + b);
  };
  Matrix C(A.rows, B.rows);
  for (std::int64_t i = 0; i < A.rows; ++i)
    for (std::int64_t j = 0; j < B.rows; ++j) {
      float acc = 0.0f;
      for (std::int64_t bi = 0; bi < nb; ++bi) {
        const std::int64_t b = reverse_blocks ? nb - 1 - bi : bi;
        float p = 0.0f;
        for (std::int64_t k = b * L; k < std::min(K, (b + 1) * L); ++k) p = p + value(A, i, k) * value(B, j, k);
        float t;
        if (scheme == Scheme::Mxfp4)
          t = std::ldexp(p, ue8m0_exponent(A.scale_codes[grid(A, i, b)]) + ue8m0_exponent(B.scale_codes[grid(B, j, b)]));
        else
          t = p * (A.scale_values[grid(A, i, b)] * B.scale_values[grid(B, j, b)]);
        acc = acc + t;
      }
      C(i, j) = scheme == Scheme::Nvfp4 ? acc * (A.global.decode * B.global.decode) : acc;
    }
  return C;
}
}  // namespace

TEST_CASE("every path follows the documented float32 order bit for bit (a scalar transcription)") {
  // Shapes around the implementation's register tiles (rows and columns that are not
  // multiples of 4 or 16) and K that is not a multiple of the block length; A's magnitudes
  // spread over 2^+-11 across rows and 16-element blocks so that block terms differ and
  // their order matters.
  struct Case {
    const char* a;
    const char* b;
  };
  const Case cases[] = {{"nvfp4", "nvfp4"},        {"nvfp4", "nvfp4-2d"},          {"mxfp4", "mxfp4"},
                        {"fp8-e4m3-1x128", "fp8-e4m3-128x128"}, {"fp8-e4m3-tensor", "fp8-e4m3-1x128"},
                        {"fp8-e4m3-tensor", "fp8-e4m3-tensor"}};
  const std::int64_t shapes[][3] = {{1, 1, 1}, {5, 17, 3}, {37, 53, 200}, {64, 32, 400}};
  std::uint64_t seed = 40;
  for (const Case& c : cases)
    for (const auto& sh : shapes) {
      const std::int64_t M = sh[0], N = sh[1], K = sh[2];
      INFO(c.a << " x " << c.b << ", M " << M << " N " << N << " K " << K);
      Matrix a = normal_matrix(M, K, ++seed), b = normal_matrix(N, K, ++seed);
      for (std::int64_t r = 0; r < M; ++r)
        for (std::int64_t k = 0; k < K; ++k) a(r, k) = std::ldexp(a(r, k), static_cast<int>((r * 7 + (k / 16) * 5) % 23) - 11);
      const QuantizedTensor qa = quantize_cpu(a, spec_of(c.a)), qb = quantize_cpu(b, spec_of(c.b));
      std::int64_t blocks = 0;
      const Matrix want = documented_loop(qa, qb, false, &blocks);
      CHECK(same_bits(gemm_block_scaled_emulated(qa, qb), want));
      if (blocks >= 3 && M * N >= 64) {  // (two terms add the same in either order)
        const Matrix rev = documented_loop(qa, qb, true);
        std::int64_t differ = 0;
        for (std::size_t e = 0; e < rev.data.size(); ++e) differ += rev.data[e] != want.data[e];
        CHECK(differ > 0);
      }
    }
}

TEST_CASE("invalid operands are refused") {
  const Matrix a = normal_matrix(8, 32, 1), b = normal_matrix(8, 48, 2);
  const QuantizedTensor na = quantize_cpu(a, spec_of("nvfp4")), nb = quantize_cpu(b, spec_of("nvfp4"));
  const QuantizedTensor ma = quantize_cpu(a, spec_of("mxfp4"));
  const QuantizedTensor cast = quantize_cpu(a, spec_of("bf16"));
  REQUIRE_THROWS(gemm_nvfp4_emulated(na, nb));  // K mismatch
  REQUIRE_THROWS(gemm_nvfp4_emulated(na, ma));  // scheme mismatch
  REQUIRE_THROWS(gemm_mxfp4_emulated(na, na));
  REQUIRE_THROWS(gemm_block_scaled_emulated(cast, cast));
  REQUIRE_THROWS(gemm_fp32(a, b));
  CHECK(to_string(Accumulator::Fp32Sequential) == "fp32-sequential");
  CHECK(parse_accumulator("sm90") == Accumulator::Sm90);
  try {
    parse_accumulator("fp32");
    FAIL("an unknown accumulator name was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("(fp32-sequential, sm90, exact)") != std::string::npos);
  }
  CHECK(same_bits(gemm_block_scaled_emulated(na, na), gemm_nvfp4_emulated(na, na)));
}
