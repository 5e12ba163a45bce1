// Reference scalars, the reference GEMM, its certification and the exact block GEMM.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "quant/quantize.hpp"
#include "quant/presets.hpp"
#include "quant/ref_operand.hpp"
#include "ref/exact_block_gemm.hpp"
#include "ref/mp_scalar.hpp"
#include "ref/reference_gemm.hpp"
#include "support/catch.hpp"

#include <omp.h>

using namespace fp4d;
using namespace fp4d::ref;

namespace {

// Random matrix whose blocks of 16 along a row have magnitudes spread over 10^lo .. 10^hi,
// some blocks all zero, one huge element (so NVFP4 scales of small blocks are subnormal).
Matrix spread_matrix(std::int64_t rows, std::int64_t cols, std::mt19937_64& rng, double lo, double hi) {
  Matrix m(rows, cols);
  std::uniform_real_distribution<double> u(-1, 1), ex(lo, hi);
  std::uniform_int_distribution<int> pick(0, 5);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t b = 0; b * 16 < cols; ++b) {
      const int kind = pick(rng);
      const double mag = std::pow(10.0, ex(rng));
      for (std::int64_t c = b * 16; c < std::min<std::int64_t>(cols, b * 16 + 16); ++c)
        m(r, c) = kind == 0 ? 0.0f : static_cast<float>(u(rng) * mag);
    }
  m(0, 0) = 3.0e4f;
  // row 1, block 0: amax ~0.5, far below the tensor's: a subnormal E4M3 scale under NVFP4
  if (rows > 1)
    for (std::int64_t c = 0; c < std::min<std::int64_t>(cols, 16); ++c) m(1, c) = static_cast<float>(0.5 * u(rng));
  return m;
}

// Exact dequantized value of stored element (r, c), from the codes with the format decoders
// (independent of block_operand).
mp512 dequant_exact(const QuantizedTensor& q, std::int64_t r, std::int64_t c) {
  const QuantSpec& sp = q.spec;
  const std::uint8_t code = q.code_at(r, c);
  float elem = 0;
  if (sp.scheme == Scheme::Nvfp4 || sp.scheme == Scheme::Mxfp4)
    elem = e2m1_decode(code);
  else
    elem = sp.element == ElementFormat::E5M2 ? e5m2_decode(code) : e4m3_decode(code);
  const std::int64_t br = sp.per_tensor() ? q.rows : sp.block_rows;
  const std::int64_t tc = sp.per_tensor() ? 0 : c / sp.block_cols;
  const float scale = q.scale_values[static_cast<std::size_t>((r / br) * q.scale_cols + tc)];
  mp512 v = mp512(elem) * mp512(scale);
  if (sp.scheme == Scheme::Nvfp4) v *= mp512(q.global.decode);
  return v;
}

// Checks exact_block_gemm_nt of two quantized operands against an mp512 computation.
void check_against_mp512(const QuantizedTensor& qa, const QuantizedTensor& qb) {
  const BlockOperand A = block_operand(qa), B = block_operand(qb);
  // The converter reproduces every dequantized value exactly.
  for (std::int64_t r = 0; r < qa.rows; ++r)
    for (std::int64_t c = 0; c < qa.cols; ++c) {
      const mp512 want = dequant_exact(qa, r, c);
      REQUIRE(A.value(r, c).to<mp512>() == want);
      // and the quantizer's float32 dequantized value is that value rounded once
      CHECK(A.value(r, c).to<mp512>().convert_to<float>() == qa.dequantized(r, c));
    }
  ExactGemmOptions opt;
  opt.keep_exact = true;
  const ExactGemmResult res = exact_block_gemm_nt(A, B, opt);
  REQUIRE(res.rows == qa.rows);
  REQUIRE(res.cols == qb.rows);
  for (std::int64_t i = 0; i < qa.rows; ++i)
    for (std::int64_t j = 0; j < qb.rows; ++j) {
      mp512 acc = 0;
      for (std::int64_t k = 0; k < qa.cols; ++k) acc += dequant_exact(qa, i, k) * dequant_exact(qb, j, k);
      const auto o = static_cast<std::size_t>(i * qb.rows + j);
      INFO("i=" << i << " j=" << j);
      REQUIRE(res.exact[o].to<mp512>() == acc);
      REQUIRE(res.rounded[o] == acc.convert_to<double>());
      REQUIRE(exact_block_dot(A, i, B, j).to<mp512>() == acc);
    }
}

template <class E, class F>
bool throws_as(F&& f) {
  try {
    f();
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
  return false;
}

std::vector<double> random_doubles(std::size_t n, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

}  // namespace

TEST_CASE("precision names parse and list the choices") {
  for (Precision p : all_precisions()) CHECK(parse_precision(to_string(p)) == p);
  CHECK(parse_precision("mp256") == Precision::Mp256);
  CHECK(precision_bits(Precision::Binary128) == 113);
  try {
    parse_precision("quad");
    CHECK(false);
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK(msg.find("quad") != std::string::npos);
    CHECK(msg.find("double binary128 mp64 mp113 mp256 mp1024") != std::string::npos);
  }
}

TEST_CASE("round_to_double: hand-made ties, subnormals, overflow") {
  using bmp::cpp_int;
  const cpp_int two53 = cpp_int(1) << 53;
  CHECK(round_to_double(two53 + 1, 0) == 9007199254740992.0);          // tie -> even (down)
  CHECK(round_to_double(two53 + 3, 0) == 9007199254740996.0);          // tie -> even (up)
  CHECK(round_to_double(-(two53 + 3), 0) == -9007199254740996.0);
  CHECK(round_to_double(((two53 + 1) << 100) + 1, -100) == 9007199254740994.0);  // above the tie
  CHECK(round_to_double((two53 + 1) << 100, -100) == 9007199254740992.0);        // exact tie, far bits
  CHECK(round_to_double(cpp_int(1), -1075) == 0.0);                    // half of 2^-1074 -> 0 (even)
  CHECK(round_to_double(cpp_int(3), -1075) == std::ldexp(1.0, -1073)); // 1.5 ulp -> 2 ulp
  CHECK(round_to_double(cpp_int(3), -1076) == std::ldexp(1.0, -1074)); // 0.75 ulp -> 1 ulp
  CHECK(round_to_double((cpp_int(1) << 60) + 1, -1135) == std::ldexp(1.0, -1075 + 1));  // just above half
  const cpp_int max53 = two53 - 1;
  CHECK(round_to_double(max53, 971) == std::numeric_limits<double>::max());
  CHECK(std::isinf(round_to_double((cpp_int(1) << 54) - 1, 970)));   // DBL_MAX + half ulp: tie -> 2^1024
  CHECK(round_to_double((cpp_int(1) << 55) - 3, 969) == std::numeric_limits<double>::max());  // below the tie
  CHECK(round_to_double(cpp_int(0), 12) == 0.0);
  CHECK(round_to_double(cpp_int(5), -1) == 2.5);

  // Random: against Boost's conversion of the exact value.
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> nbits(1, 300), e(-1400, 900), coin(0, 3);
  for (int t = 0; t < 20000; ++t) {
    const int nb = nbits(rng);
    cpp_int s = 0;
    for (int b = 0; b < nb; b += 64) s = (s << 64) | cpp_int(rng());
    s >>= (((nb + 63) / 64) * 64 - nb);
    if (coin(rng) == 0) s |= cpp_int(1);                      // force sticky
    if (coin(rng) == 1 && nb > 60) { s >>= 10; s <<= 10; s |= cpp_int(1) << 9; }  // near-ties
    if (coin(rng) == 2) s = -s;
    const int ex = e(rng);
    mp_float<2048> x(s);  // exact: < 2048 bits
    x = ldexp(x, ex);
    INFO("t=" << t);
    REQUIRE(round_to_double(s, ex) == x.convert_to<double>());
    // ExactValue to the other scalars: one RNE from the exact value
    const ExactValue v{s, ex};
    if (t % 2 == 0) {
      REQUIRE(v.to<mp64>() == static_cast<mp64>(x));
      REQUIRE(v.to<mp256>() == static_cast<mp256>(x));
      REQUIRE(from_binary128<256>(v.to<binary128>()) == mp256(static_cast<mp113>(x)));
    }
  }
}

TEST_CASE("exact GEMM of NVFP4 operands equals the 512-bit product") {
  std::mt19937_64 rng(1);
  for (const std::int64_t K : {16, 50, 77}) {
    const Matrix a = spread_matrix(5, K, rng, -4, 3), b = spread_matrix(7, K, rng, -3, 2);
    const QuantizedTensor qa = quantize_cpu(a, preset("nvfp4").spec), qb = quantize_cpu(b, preset("nvfp4").spec);
    CAPTURE(K);
    CHECK(qa.stats.subnormal_scale_blocks > 0);
    CHECK(qa.stats.zero_scale_blocks > 0);
    check_against_mp512(qa, qb);
  }
  // columnwise (axis 0): the stored orientation is the transpose, read as M x K
  {
    const Matrix x = spread_matrix(24, 40, rng, -2, 2);
    const QuantizedTensor qc = quantize_cpu(x, preset("nvfp4-col").spec);
    const BlockOperand C = block_operand(qc);
    REQUIRE(C.rows == 40);
    REQUIRE(C.cols == 24);
    for (std::int64_t r = 0; r < C.rows; ++r)
      for (std::int64_t k = 0; k < C.cols; ++k)
        REQUIRE(C.value(r, k).to<mp512>().convert_to<float>() == qc.dequantized(k, r));
  }
  // 16x16 tiles (weights) as the B operand
  const Matrix a = spread_matrix(9, 40, rng, -2, 2), w = spread_matrix(20, 40, rng, -2, 2);
  check_against_mp512(quantize_cpu(a, preset("nvfp4").spec), quantize_cpu(w, preset("nvfp4-2d").spec));
}

TEST_CASE("exact GEMM of MXFP4 and FP8 operands equals the 512-bit product") {
  std::mt19937_64 rng(2);
  for (const std::int64_t K : {32, 45, 100}) {
    const Matrix a = spread_matrix(4, K, rng, -6, 6), b = spread_matrix(6, K, rng, -5, 5);
    CAPTURE(K);
    check_against_mp512(quantize_cpu(a, preset("mxfp4").spec), quantize_cpu(b, preset("mxfp4").spec));
    check_against_mp512(quantize_cpu(a, preset("mxfp4-ceil").spec), quantize_cpu(b, preset("mxfp4-rceil").spec));
  }
  const Matrix a = spread_matrix(3, 200, rng, -3, 3), b = spread_matrix(5, 200, rng, -3, 3);
  check_against_mp512(quantize_cpu(a, preset("fp8-e4m3-1x128").spec), quantize_cpu(b, preset("fp8-e4m3-1x128").spec));
  check_against_mp512(quantize_cpu(a, preset("fp8-e5m2-tensor").spec), quantize_cpu(b, preset("fp8-e4m3-tensor").spec));
  // mixed block lengths: NVFP4 (16) x MXFP4 (32)
  check_against_mp512(quantize_cpu(a, preset("nvfp4").spec), quantize_cpu(b, preset("mxfp4").spec));
}

TEST_CASE("integer operands give exactly the int64 dot product") {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> v(-100000, 100000);
  const std::int64_t M = 6, N = 5, K = 300;
  BlockOperand A, B;
  for (BlockOperand* op : {&A, &B}) {
    op->rows = op == &A ? M : N;
    op->cols = K;
    op->block = static_cast<int>(K);
    op->sig.resize(static_cast<std::size_t>(op->rows * K));
    for (auto& x : op->sig) x = v(rng);
    op->scale_sig.assign(static_cast<std::size_t>(op->rows), 1);
    op->scale_exp.assign(static_cast<std::size_t>(op->rows), 0);
  }
  ExactGemmOptions opt;
  opt.keep_exact = true;
  const ExactGemmResult r = exact_block_gemm_nt(A, B, opt);
  CHECK(!r.fast_path);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      std::int64_t s = 0;
      for (std::int64_t k = 0; k < K; ++k)
        s += std::int64_t(A.sig[static_cast<std::size_t>(i * K + k)]) * B.sig[static_cast<std::size_t>(j * K + k)];
      const auto o = static_cast<std::size_t>(i * N + j);
      CHECK(r.rounded[o] == static_cast<double>(s));
      CHECK(ldexp(mp512(r.exact[o].significand), static_cast<int>(r.exact[o].exponent)) == mp512(s));
    }
  // small integers in blocks of 16: the int32 fast path, same answer
  for (BlockOperand* op : {&A, &B}) {
    op->block = 16;
    for (auto& x : op->sig) x %= 100;
    op->scale_sig.assign(static_cast<std::size_t>(op->rows * op->blocks_per_row()), 1);
    op->scale_exp.assign(op->scale_sig.size(), 0);
  }
  const ExactGemmResult f = exact_block_gemm_nt(A, B);
  CHECK(f.fast_path);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      std::int64_t s = 0;
      for (std::int64_t k = 0; k < K; ++k)
        s += std::int64_t(A.sig[static_cast<std::size_t>(i * K + k)]) * B.sig[static_cast<std::size_t>(j * K + k)];
      CHECK(f.rounded[static_cast<std::size_t>(i * N + j)] == static_cast<double>(s));
    }
}

TEST_CASE("exact GEMM rounds ties of the exact sum to even") {
  // 2^53 + 1 = sum of two terms: 2^53 (one block) + 1 (another): a tie, to even 2^53.
  BlockOperand A, B;
  A.rows = B.rows = 1;
  A.cols = B.cols = 3;
  A.block = B.block = 1;
  A.sig = {1, 1, 1};
  B.sig = {1, 1, 1};
  A.scale_sig = {1, 1, 0};
  A.scale_exp = {53, 0, 0};
  B.scale_sig = {1, 1, 1};
  B.scale_exp = {0, 0, 0};
  CHECK(exact_block_gemm_nt(A, B).rounded[0] == 9007199254740992.0);
  A.scale_sig = {1, 3, 0};  // 2^53 + 3 -> 2^53 + 4
  CHECK(exact_block_gemm_nt(A, B).rounded[0] == 9007199254740996.0);
  A.scale_sig = {1, 1, 1};  // 2^53 + 1 + 2^-200: above the tie
  A.scale_exp = {53, 0, -200};
  CHECK(exact_block_gemm_nt(A, B).rounded[0] == 9007199254740994.0);
  A.scale_sig = {-1, -1, 1};  // -(2^53 + 1) + 2^-200: just below the tie in magnitude
  CHECK(exact_block_gemm_nt(A, B).rounded[0] == -9007199254740992.0);
  // global scales multiply exactly: (2^53 + 1) * 3 = 3*2^53 + 3 -> tie? 3*2^53+3 needs 55 bits:
  // ulp 4, 3 = 0.75 ulp above 3*2^53 -> rounds up to 3*2^53 + 4
  A.scale_sig = {1, 1, 0};
  A.scale_exp = {53, 0, 0};
  A.global_sig = 3;
  CHECK(exact_block_gemm_nt(A, B).rounded[0] == 27021597764222980.0);
}

TEST_CASE("exact GEMM refuses what its accumulator cannot hold") {
  BlockOperand A;
  A.rows = 1;
  A.cols = 2;
  A.block = 1;
  A.sig = {1, 1};
  A.scale_sig = {1, 1};
  A.scale_exp = {-20000, 20000};
  CHECK(throws_as<std::overflow_error>([&] { (void)exact_block_gemm_nt(A, A); }));
  ExactGemmOptions wide;
  wide.max_accumulator_bits = 100000;
  CHECK(exact_block_gemm_nt(A, A, wide).accumulator_bits > 80000);  // widened on request
  // elements of one block spanning more binades than a 62-bit integer holds
  BlockOperand E;
  E.rows = 1;
  E.cols = 2;
  E.block = 2;
  E.sig = {1, 1};
  E.exp = {0, 70};
  E.scale_sig = {1};
  E.scale_exp = {0};
  CHECK(throws_as<std::overflow_error>([&] { (void)exact_block_gemm_nt(E, E); }));
  // block products wider than 126 bits
  BlockOperand W;
  W.rows = 1;
  W.cols = 1;
  W.block = 1;
  W.sig = {std::numeric_limits<std::int32_t>::max()};
  W.scale_sig = {std::int64_t(1) << 62};
  W.scale_exp = {0};
  CHECK(throws_as<std::overflow_error>([&] { (void)exact_block_gemm_nt(W, W); }));
  // shape errors
  BlockOperand S = A;
  S.cols = 3;
  CHECK(throws_as<std::invalid_argument>([&] { (void)exact_block_gemm_nt(A, S); }));
  S = A;
  S.scale_sig.pop_back();
  CHECK(throws_as<std::invalid_argument>([&] { (void)exact_block_gemm_nt(S, A); }));
}

TEST_CASE("reference GEMM over every scalar; exact GEMM of doubles") {
  std::mt19937_64 rng(4);
  const std::int64_t M = 4, N = 6, K = 37;
  const auto a = random_doubles(static_cast<std::size_t>(M * K), rng), b = random_doubles(static_cast<std::size_t>(N * K), rng);
  // The exact product of the double matrices, rounded once.
  const ExactGemmResult ex = exact_block_gemm_nt(block_operand_from_doubles(a.data(), M, K),
                                                 block_operand_from_doubles(b.data(), N, K));
  // mp256 / mp1024 hold every partial sum exactly here (products span < 200 bits)
  CHECK(gemm_nt(a.data(), b.data(), M, N, K, Precision::Mp256) == ex.rounded);
  CHECK(gemm_nt(a.data(), b.data(), M, N, K, Precision::Mp1024) == ex.rounded);
  for (Precision p : {Precision::Double, Precision::Binary128, Precision::Mp64, Precision::Mp113}) {
    const auto c = gemm_nt(a.data(), b.data(), M, N, K, p);
    for (std::size_t i = 0; i < c.size(); ++i) CHECK(std::abs(c[i] - ex.rounded[i]) <= 1e-13 * (1 + std::abs(ex.rounded[i])));
  }
  // binary128 conversions round-trip through cpp_bin_float
  const binary128 q = static_cast<binary128>(a[0]) / 3;
  CHECK(to_binary128(from_binary128<256>(q)) == q);
  CHECK(convert<mp113>(q) == from_binary128<113>(q));
  for (const int e : {-16440, -16382, -1100, 0, 1100, 16383}) {  // beyond double's range, subnormal
    const binary128 z = scale_binary128(q, e);
    CHECK(to_binary128(from_binary128<256>(z)) == z);
  }
}

TEST_CASE("reference certification") {
  std::mt19937_64 rng(5);
  const std::int64_t M = 3, N = 4, K = 64;
  // well conditioned: all positive
  const auto a = random_doubles(static_cast<std::size_t>(M * K), rng, 0.5, 1), b = random_doubles(static_cast<std::size_t>(N * K), rng, 0.5, 1);
  const Certification c1 = certify_gemm_nt(a.data(), b.data(), M, N, K, Precision::Mp256, Precision::Mp1024);
  CHECK(c1.compared == M * N);
  CHECK(c1.max_rel_diff < 1e-70);
  CHECK(c1.digits > 70);
  // positive, with exponents over 2^-30..2^30: binary128 rounds, within K * 2^-113
  std::vector<double> aw = a, bw = b;
  std::uniform_int_distribution<int> ex(-30, 30);
  for (auto& v : aw) v = std::ldexp(v, ex(rng));
  for (auto& v : bw) v = std::ldexp(v, ex(rng));
  const Certification c2 = certify_gemm_nt(aw.data(), bw.data(), M, N, K, Precision::Binary128, Precision::Mp1024, {1});
  CHECK(c2.compared == N);
  CHECK(c2.max_rel_diff < 1e-30);
  CHECK(c2.max_rel_diff > 0);
  CHECK(c2.digits > 30);
  const Certification c2d = certify_gemm_nt(aw.data(), bw.data(), M, N, K, Precision::Double, Precision::Mp256);
  CHECK(c2d.max_rel_diff > 1e-18);
  CHECK(c2d.max_rel_diff < 1e-14);
  CHECK(c2d.digits > 14);
  CHECK(c2d.digits < 18);
  // cancellation: row 1 = [1e20, 1, -1e20, 0, ...] . ones = 1 exactly, 0 in double
  // (a dot product 1e-20 of its terms); row 0 well conditioned
  std::vector<double> x(static_cast<std::size_t>(2 * K), 0.0), y(static_cast<std::size_t>(K), 1.0);
  for (std::int64_t k = 0; k < K; ++k) x[static_cast<std::size_t>(k)] = 1.0 + k;
  x[static_cast<std::size_t>(K)] = 1e20;
  x[static_cast<std::size_t>(K + 1)] = 1.0;
  x[static_cast<std::size_t>(K + 2)] = -1e20;
  const Certification c3 = certify_gemm_nt(x.data(), y.data(), 2, 1, K, Precision::Double, Precision::Mp256);
  CHECK(c3.max_rel_diff > 0.5);
  CHECK(c3.digits == 0);
  CHECK(c3.worst_index == 1);
  const Certification c4 = certify_gemm_nt(x.data(), y.data(), 2, 1, K, Precision::Mp256, Precision::Mp1024);
  CHECK(c4.max_rel_diff == 0);
}

// Benchmark (hidden: run with  test_ref_exact_gemm "[.bench]"): exact NVFP4 block GEMM on
// 256^3 and 1024^3, one thread and all threads, and the same product in cpp_bin_float<256>
// (reference gemm_nt<mp256>, one thread) on 96^3, extrapolated per multiply-add.
TEST_CASE("bench: exact block GEMM vs cpp_bin_float<256>", "[.bench][long]") {
  auto now = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  std::mt19937_64 rng(11);
  std::normal_distribution<double> nd;
  auto operand = [&](std::int64_t n) {
    Matrix m(n, n);
    for (auto& x : m.data) x = static_cast<float>(nd(rng));
    return block_operand(quantize_cpu(m, preset("nvfp4").spec));
  };
  const int maxth = omp_get_max_threads();
  double exact_rate_1024 = 0;
  for (const std::int64_t n : {256, 1024}) {
    const BlockOperand A = operand(n), B = operand(n);
    (void)exact_block_gemm_nt(A, B);  // warm-up
    for (const int th : {1, maxth}) {
      omp_set_num_threads(th);
      const double t0 = now();
      const ExactGemmResult r = exact_block_gemm_nt(A, B);
      const double t = now() - t0, macs = double(n) * n * n;
      std::printf("exact nvfp4 %lld^3, %d thread(s): %.3f s, %.0f M MAC/s, %.0f M MAC/s per core (%d-bit accumulator)\n",
                  static_cast<long long>(n), th, t, macs / t / 1e6, macs / t / 1e6 / th, r.accumulator_bits);
      if (n == 1024 && th == 1) exact_rate_1024 = macs / t;
    }
    omp_set_num_threads(maxth);
  }
  const std::int64_t n = 96;
  const BlockOperand A = operand(n), B = operand(n);
  std::vector<double> a(static_cast<std::size_t>(n * n)), b(a.size());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < n; ++k) {
      a[static_cast<std::size_t>(i * n + k)] = A.value_double(i, k);  // exact in double
      b[static_cast<std::size_t>(i * n + k)] = B.value_double(i, k);
    }
  omp_set_num_threads(1);
  const double t0 = now();
  const auto c = gemm_nt<mp256>(a.data(), b.data(), n, n, n);
  const double t = now() - t0, rate = double(n) * n * n / t;
  omp_set_num_threads(maxth);
  std::printf("cpp_bin_float<256> %lld^3, 1 thread: %.3f s, %.2f M MAC/s; 1024^3 extrapolated: %.0f s; exact/mp256 speed ratio: %.0f\n",
              static_cast<long long>(n), t, rate / 1e6, 1024.0 * 1024 * 1024 / rate, exact_rate_1024 / rate);
  const ExactGemmResult ex = exact_block_gemm_nt(A, B);
  for (std::size_t i = 0; i < c.size(); ++i) REQUIRE(to_double(c[i]) == ex.rounded[i]);  // exact in mp256 too
  CHECK(exact_rate_1024 >= 200e6);
  CHECK(exact_rate_1024 >= 50 * rate);
}

TEST_CASE("exact GEMM reports its progress in rows, one report at a time, and computes the same") {
  const std::int64_t M = 96, N = 24, K = 64;
  std::vector<double> a(static_cast<std::size_t>(M * K)), b(static_cast<std::size_t>(N * K));
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> small(-7, 7);
  for (double& x : a) x = small(rng);
  for (double& x : b) x = small(rng);
  const ExactGemmResult plain = exact_block_gemm_nt(block_operand_from_doubles(a.data(), M, K),
                                                    block_operand_from_doubles(b.data(), N, K));
  ExactGemmOptions opt;
  opt.progress_every_s = 0;  // a report before every row whose thread finds no report going on
  std::vector<std::pair<std::int64_t, std::int64_t>> calls;
  opt.progress = [&](std::int64_t done, std::int64_t rows) { calls.emplace_back(done, rows); };  // never concurrent: no lock
  const ExactGemmResult watched = exact_block_gemm_nt(block_operand_from_doubles(a.data(), M, K),
                                                      block_operand_from_doubles(b.data(), N, K), opt);
  CHECK(watched.rounded == plain.rounded);
  REQUIRE(!calls.empty());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    CHECK(calls[i].second == M);
    CHECK(calls[i].first >= 0);
    CHECK(calls[i].first < M);  // reported before a row is computed, so never all M
    if (i > 0) CHECK(calls[i].first >= calls[i - 1].first);
  }
}
