// The tensor-core model GEMM (quant/tensor_core_gemm.hpp) and the accumulators of the emulated
// GEMMs (quant/gemm_emulated.hpp, `--accumulator`):
//  - the vectorised path equals tensor_core_dot output by output, bit for bit, for BF16 and FP16
//    operands of many shapes and distributions (normal, |normal|, exponents spread over 40
//    binades, cancelling pairs, heavy tails), alpha != 1, any thread count; operands outside its
//    window (infinities, extreme exponents) take the reference;
//  - hand-worked BF16 dot products where the three accumulators give three different answers
//    (absorption, truncation at alignment, a subnormal exact result rounded once);
//  - small-integer NVFP4 operands (every partial sum exact in any order: CUTLASS's testbed idea)
//    give the same bits under every accumulator, while N(0, 1) operands at K = 4096 do not;
//  - per-tensor FP8 under sm90: a hand-worked dot product where the promotion of partial sums
//    to FP32 every 128 products decides the result (and fast accumulation, without it, gives
//    another), and random E4M3 x E4M3 and E5M2 x E4M3 operands with decode scales that are not
//    powers of two equal fl(fl(d^A d^B) * model) output by output, bit for bit;
//  - what is not modelled (block-scaled FP8 among it) is refused with a message naming it.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "format/bf16.hpp"
#include "format/e2m1.hpp"
#include "format/fp16.hpp"
#include "format/fp8.hpp"
#include "quant/gemm_emulated.hpp"
#include "quant/presets.hpp"
#include "quant/quantize.hpp"
#include "quant/tensor_core_gemm.hpp"
#include "quant/tensor_core_hypotheses.hpp"
#include "support/catch.hpp"
#include "support/thrown.hpp"

using namespace fp4d;

namespace {

float p2(int e) { return std::ldexp(1.0f, e); }

bool same_bits(const Matrix& a, const Matrix& b) {
  return a.rows == b.rows && a.cols == b.cols &&
         (a.data.empty() || std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0);
}

std::int64_t differing(const Matrix& a, const Matrix& b) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i)
    n += std::memcmp(&a.data[i], &b.data[i], sizeof(float)) != 0;
  return n;
}

enum class Dist { Normal, AbsNormal, WideExponents, Cancelling, HeavyTail };

// rows x cols values of the distribution, rounded to BF16 or FP16.
Matrix sample(std::int64_t rows, std::int64_t cols, Dist d, bool fp16, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n01;
  std::uniform_int_distribution<int> ex(fp16 ? -6 : -20, fp16 ? 6 : 20);
  std::student_t_distribution<float> t2(2.0f);
  Matrix m(rows, cols);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      float v = 0;
      switch (d) {
        case Dist::Normal: v = n01(g); break;
        case Dist::AbsNormal: v = std::fabs(n01(g)); break;
        case Dist::WideExponents: v = n01(g) * p2(ex(g)); break;
        case Dist::Cancelling: v = (c % 2 == 0) ? n01(g) : -m(r, c - 1) * (1.0f + 0.01f * n01(g)); break;
        case Dist::HeavyTail: v = t2(g); break;
      }
      m(r, c) = fp16 ? fp16_to_float(fp16_rne_bits(v)) : bf16_round(v);
    }
  return m;
}

Matrix row(std::vector<float> v) {
  Matrix m(1, static_cast<std::int64_t>(v.size()));
  m.data = std::move(v);
  return m;
}

QuantizedTensor cast_of(const Matrix& x, const char* preset_name) { return quantize_cpu(x, preset(preset_name).spec); }

float only(const Matrix& c) {
  REQUIRE(c.data.size() == 1);
  return c.data[0];
}

}  // namespace

TEST_CASE("the vectorised tensor-core GEMM equals the model output by output") {
  const TensorCoreModel bf16 = sm90_tensor_core_model("bf16"), fp16 = sm90_tensor_core_model("fp16");
  struct Shape {
    std::int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 1, 1}, {3, 5, 15}, {4, 16, 16}, {5, 17, 17}, {9, 33, 100}, {7, 20, 1024}};
  int cases = 0;
  for (const bool fp16_inputs : {false, true})
    for (const Dist d : {Dist::Normal, Dist::AbsNormal, Dist::WideExponents, Dist::Cancelling, Dist::HeavyTail})
      for (const Shape& s : shapes) {
        const std::uint64_t seed = 1000 + 10 * static_cast<std::uint64_t>(d) + static_cast<std::uint64_t>(cases);
        const Matrix A = sample(s.M, s.K, d, fp16_inputs, seed), B = sample(s.N, s.K, d, fp16_inputs, seed + 7);
        const TensorCoreModel& m = fp16_inputs ? fp16 : bf16;
        INFO("fp16 " << fp16_inputs << ", distribution " << static_cast<int>(d) << ", " << s.M << " x " << s.N << " x "
                     << s.K);
        REQUIRE(tensor_core_gemm_fast_path(A, B, m));
        CHECK(same_bits(tensor_core_gemm(A, B, m), tensor_core_gemm_reference(A, B, m)));
        const float alpha = 0.37109375f;
        CHECK(same_bits(tensor_core_gemm(A, B, m, alpha), tensor_core_gemm_reference(A, B, m, alpha)));
        ++cases;
      }
  CHECK(cases == 60);
}

TEST_CASE("the tensor-core GEMM is the same for every thread count") {
  const TensorCoreModel m = sm90_tensor_core_model("bf16");
  const Matrix A = sample(37, 300, Dist::WideExponents, false, 5), B = sample(29, 300, Dist::Normal, false, 6);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Matrix one = tensor_core_gemm(A, B, m);
  omp_set_num_threads(3);
  const Matrix three = tensor_core_gemm(A, B, m);
  omp_set_num_threads(before);
  CHECK(same_bits(one, three));
}

TEST_CASE("operands outside the vectorised path's window take the reference") {
  const TensorCoreModel m = sm90_tensor_core_model("bf16");
  Matrix A = sample(4, 40, Dist::Normal, false, 11), B = sample(6, 40, Dist::Normal, false, 12);
  SECTION("an infinity") {
    A(1, 3) = INFINITY;
    CHECK_FALSE(tensor_core_gemm_fast_path(A, B, m));
    const Matrix C = tensor_core_gemm(A, B, m);
    CHECK(same_bits(C, tensor_core_gemm_reference(A, B, m)));
    CHECK(std::isinf(C(1, 0)));
  }
  SECTION("products that would leave float32's normal range") {
    A(0, 0) = p2(-90);
    B(2, 5) = p2(-40);
    CHECK_FALSE(tensor_core_gemm_fast_path(A, B, m));
    CHECK(same_bits(tensor_core_gemm(A, B, m), tensor_core_gemm_reference(A, B, m)));
    A(0, 0) = p2(70);
    B(2, 5) = p2(60);
    CHECK_FALSE(tensor_core_gemm_fast_path(A, B, m));
    CHECK(same_bits(tensor_core_gemm(A, B, m), tensor_core_gemm_reference(A, B, m)));
  }
  SECTION("an operand with more bits than BF16 is refused") {
    A(2, 2) = 1.0f + p2(-10);
    CHECK_THROWS_AS(tensor_core_gemm(A, B, m), std::invalid_argument);
  }
}

TEST_CASE("hand-worked BF16 dot products under the three accumulators") {
  const EmulatedGemmOptions seq{Accumulator::Fp32Sequential}, sm90{Accumulator::Sm90}, exact{Accumulator::Exact};
  const auto all3 = [&](std::vector<float> a, std::vector<float> b, float want_seq, float want_sm90, float want_exact) {
    const QuantizedTensor qa = cast_of(row(std::move(a)), "bf16"), qb = cast_of(row(std::move(b)), "bf16");
    CHECK(only(gemm_dequantized_fp32(qa, qb, seq)) == want_seq);
    CHECK(only(gemm_dequantized_fp32(qa, qb, sm90)) == want_sm90);
    CHECK(only(gemm_dequantized_fp32(qa, qb, exact)) == want_exact);
  };
  // 1 is absorbed by 2^30 in FP32 and truncated away at the alignment to 2^30 in the tensor core.
  all3({p2(30), 1.0f, -p2(30)}, {1, 1, 1}, 0.0f, 0.0f, 1.0f);
  // Two 2^-24 beside 1: ties to even twice in FP32; kept by the 2 extra alignment bits.
  all3({1.0f, p2(-24), p2(-24)}, {1, 1, 1}, 1.0f, 1.0f + p2(-23), 1.0f + p2(-23));
  // 1 + 2^-24 + 2^-30: above the midpoint, so the exact sum rounds up; FP32 drops both, the
  // tensor core keeps 2^-24 and truncates it away when it normalises.
  all3({1.0f, p2(-24), p2(-30)}, {1, 1, 1}, 1.0f, 1.0f, 1.0f + p2(-23));
  // A subnormal result: 2^-140 + 0.75 * 2^-149 rounds once, up, to 2^-140 + 2^-149 (FP32 rounds
  // the second product to 2^-149 itself, which gives the same here).
  {
    const QuantizedTensor qa = cast_of(row({p2(-130), 1.5f * p2(-75)}), "bf16"), qb = cast_of(row({p2(-10), p2(-75)}), "bf16");
    CHECK(only(gemm_dequantized_fp32(qa, qb, exact)) == p2(-140) + p2(-149));
  }
}

TEST_CASE("small-integer NVFP4 operands give the same bits under every accumulator") {
  // Codes times scales that are small multiples of 1/2 and K = 64: every partial sum is exact
  // in FP32, in the tensor core's 25 fraction bits and in the exact reference, so all three
  // accumulators must agree (and a wrong scale or order would still show).
  std::mt19937_64 g(3);
  std::uniform_int_distribution<int> v(-12, 12);
  Matrix a(8, 64), b(6, 64);
  for (float& x : a.data) x = 0.5f * static_cast<float>(v(g));
  for (float& x : b.data) x = 0.5f * static_cast<float>(v(g));
  a(0, 0) = 6.0f;  // each row a nonzero maximum, so no all-zero block hides a scale
  const QuantSpec s = preset("nvfp4").spec;
  const QuantizedTensor qa = quantize_cpu(a, s), qb = quantize_cpu(b, s);
  const Matrix c_seq = gemm_nvfp4_emulated(qa, qb);
  bool nonzero = false;
  for (float x : c_seq.data) nonzero = nonzero || x != 0.0f;
  REQUIRE(nonzero);
  CHECK(same_bits(gemm_nvfp4_emulated(qa, qb, {Accumulator::Sm90}), c_seq));
  CHECK(same_bits(gemm_nvfp4_emulated(qa, qb, {Accumulator::Exact}), c_seq));
}

TEST_CASE("the sm90 NVFP4 GEMM is the BF16 model of q S with g as the epilogue") {
  // Block scales spread over 16 binades: the block terms' common quantum is then far below the
  // partial sums, so FP32's round-to-nearest and the tensor core's truncation both lose bits,
  // differently. (With N(0, 1) operands every NVFP4 partial sum is a multiple of the smallest
  // block term's quantum and stays below 2^24 of them for K in the thousands: every accumulator
  // is exact before the epilogue and all three agree; the small-integer case above.)
  std::mt19937_64 g(9);
  std::normal_distribution<float> n01;
  std::uniform_int_distribution<int> spread(-8, 8);
  Matrix a(6, 4096), b(5, 4096);
  for (Matrix* m : {&a, &b})
    for (std::int64_t r = 0; r < m->rows; ++r)
      for (std::int64_t k0 = 0; k0 < m->cols; k0 += 16) {
        const float f = p2(spread(g));
        for (std::int64_t k = k0; k < k0 + 16; ++k) (*m)(r, k) = f * n01(g);
      }
  const QuantSpec s = preset("nvfp4").spec;
  const QuantizedTensor qa = quantize_cpu(a, s), qb = quantize_cpu(b, s);
  // The oracle builds q * S from the codes and scales by hand and multiplies through the
  // per-output reference.
  const auto scaled = [](const QuantizedTensor& q) {
    Matrix x(q.rows, q.cols);
    for (std::int64_t r = 0; r < q.rows; ++r)
      for (std::int64_t k = 0; k < q.cols; ++k)
        x(r, k) = e2m1_decode(q.code_at(r, k)) * q.scale_values[static_cast<std::size_t>(r * q.scale_cols + k / 16)];
    return x;
  };
  const float gg = qa.global.decode * qb.global.decode;
  const Matrix want = tensor_core_gemm_reference(scaled(qa), scaled(qb), sm90_tensor_core_model("bf16"), gg);
  const Matrix sm90 = gemm_nvfp4_emulated(qa, qb, {Accumulator::Sm90});
  CHECK(same_bits(sm90, want));
  const Matrix seq = gemm_nvfp4_emulated(qa, qb), exact = gemm_nvfp4_emulated(qa, qb, {Accumulator::Exact});
  CHECK(differing(sm90, seq) > 0);
  CHECK(differing(exact, seq) > 0);
  CHECK(differing(exact, sm90) > 0);
}

namespace {

// The decoded FP8 element values of a quantized operand (stored orientation, without the scale).
Matrix fp8_elements(const QuantizedTensor& q) {
  Matrix x(q.rows, q.cols);
  for (std::int64_t r = 0; r < q.rows; ++r)
    for (std::int64_t k = 0; k < q.cols; ++k)
      x(r, k) = q.spec.element == ElementFormat::E5M2 ? e5m2_decode(q.code_at(r, k)) : e4m3_decode(q.code_at(r, k));
  return x;
}

EmulatedGemmOptions sm90_fp8(bool fast) {
  EmulatedGemmOptions o{Accumulator::Sm90};
  o.fp8_fast_accumulation = fast;
  return o;
}

}  // namespace

TEST_CASE("sm90 FP8: promotion to FP32 every 128 products decides a hand-worked dot product") {
  // K = 256. A's row: 224, then 255 times 0.25 (amax 224: encode 448 / 224 = 2, decode 0.5; codes
  // 448 and 0.5). B's row: 112, then 255 times 0.125 (encode 4, decode 0.25; codes 448 and 0.5).
  // The decoded products: 448 * 448 = 200704 = 1.53125 * 2^17 at k = 0, then 0.25 at k = 1 .. 255.
  Matrix a(1, 256), b(1, 256);
  a(0, 0) = 224.0f;
  b(0, 0) = 112.0f;
  for (std::int64_t k = 1; k < 256; ++k) a(0, k) = 0.25f, b(0, k) = 0.125f;
  const QuantizedTensor qa = quantize_cpu(a, preset("fp8-e4m3-tensor").spec), qb = quantize_cpu(b, preset("fp8-e4m3-tensor").spec);
  REQUIRE(qa.scale_values.at(0) == 0.5f);
  REQUIRE(qb.scale_values.at(0) == 0.25f);
  const Matrix x = fp8_elements(qa), y = fp8_elements(qb);
  REQUIRE(x(0, 0) == 448.0f);
  REQUIRE(y(0, 0) == 448.0f);
  REQUIRE(x(0, 255) == 0.5f);
  REQUIRE(y(0, 255) == 0.5f);
  // Chunk k = 0 .. 127: the first block aligns to the product's exponent 8 + 8 = 16, whose 13 kept
  // fraction bits end at 2^3, so every 0.25 is truncated away, in that block and (beside the
  // accumulator 200704, exponent 17) in the next three: the chunk is 200704. Chunk k = 128 .. 255:
  // 128 * 0.25 = 32, exact. Promoted: fl(200704 + 32) = 200736 (exact in FP32). Fast accumulation
  // keeps the one accumulator: 200704. The epilogue multiplies by fl(0.5 * 0.25) = 0.125.
  const TensorCoreModel m = sm90_tensor_core_model("e4m3");
  CHECK(tensor_core_dot_promoted(x.data.data(), y.data.data(), 256, 0.0f, 128, m) == 200736.0f);
  CHECK(tensor_core_dot(x.data.data(), y.data.data(), 256, 0.0f, m) == 200704.0f);
  const float promoted = only(gemm_fp8_emulated(qa, qb, sm90_fp8(false)));
  const float fast = only(gemm_fp8_emulated(qa, qb, sm90_fp8(true)));
  CHECK(promoted == 25092.0f);  // 0.125 * 200736
  CHECK(fast == 25088.0f);      // 0.125 * 200704
  CHECK(promoted != fast);
  CHECK(only(gemm_fp8_emulated(qa, qb, {Accumulator::Sm90})) == 25092.0f);  // no fast accumulation by default
  // Sequential FP32 and the exact sum keep every 0.25: 0.125 * (200704 + 255 * 0.25).
  CHECK(only(gemm_fp8_emulated(qa, qb)) == 25095.96875f);
  CHECK(only(gemm_fp8_emulated(qa, qb, {Accumulator::Exact})) == 25095.96875f);
}

TEST_CASE("sm90 FP8 per tensor: fl(fl(d_A d_B) * the promoted model) output by output") {
  // Decode scales 0.37 and 1.9 set by hand (not powers of two, so the epilogue's roundings show);
  // the GEMM reads only the codes and these scales. Values spread over 12 binades reach the FP8
  // subnormals; K = 100 is a multiple of neither 16 nor the model's group of 32.
  std::mt19937_64 g(11);
  std::normal_distribution<float> n01;
  std::uniform_int_distribution<int> spread(-6, 6);
  for (const char* a_preset : {"fp8-e4m3-tensor", "fp8-e5m2-tensor"})
    for (const std::int64_t K : {16, 100, 384}) {
      CAPTURE(a_preset, K);
      Matrix a(7, K), b(9, K);
      for (float& v : a.data) v = n01(g) * p2(spread(g));
      for (float& v : b.data) v = n01(g) * p2(spread(g));
      QuantizedTensor qa = quantize_cpu(a, preset(a_preset).spec), qb = quantize_cpu(b, preset("fp8-e4m3-tensor").spec);
      qa.scale_values.at(0) = 0.37f;
      qb.scale_values.at(0) = 1.9f;
      const Matrix x = fp8_elements(qa), y = fp8_elements(qb);
      const TensorCoreModel m = sm90_tensor_core_model(to_string(qa.spec.element), "e4m3");
      REQUIRE(tensor_core_hypotheses_fp8_path(x, y, m, {128}));  // the integer path is what runs
      const float s = 0.37f * 1.9f;
      Matrix want(7, 9), want_fast(7, 9);
      std::int64_t nonzero = 0;
      for (std::int64_t i = 0; i < 7; ++i)
        for (std::int64_t j = 0; j < 9; ++j) {
          const float* xi = x.data.data() + i * K;
          const float* yj = y.data.data() + j * K;
          want(i, j) = s * tensor_core_dot_promoted(xi, yj, K, 0.0f, 128, m);
          want_fast(i, j) = s * tensor_core_dot(xi, yj, K, 0.0f, m);
          nonzero += want(i, j) != 0.0f;
        }
      REQUIRE(nonzero > 50);
      const Matrix got = gemm_fp8_emulated(qa, qb, sm90_fp8(false)), got_fast = gemm_fp8_emulated(qa, qb, sm90_fp8(true));
      CHECK(same_bits(got, want));
      CHECK(same_bits(got_fast, want_fast));
      // Up to 128 products promotion changes nothing; at K = 384 it does in some output.
      if (K <= 128) CHECK(same_bits(got, got_fast));
      if (K == 384) CHECK(differing(got, got_fast) > 0);
      CHECK(differing(got, gemm_fp8_emulated(qa, qb)) > 0);
      // The GPU path pads K with zeros to a multiple of 16: the same bits.
      const std::int64_t Kp = (K + 15) / 16 * 16;
      Matrix ap(7, Kp), bp(9, Kp);
      for (std::int64_t k = 0; k < K; ++k) {
        for (std::int64_t i = 0; i < 7; ++i) ap(i, k) = a(i, k);
        for (std::int64_t j = 0; j < 9; ++j) bp(j, k) = b(j, k);
      }
      QuantizedTensor qap = quantize_cpu(ap, preset(a_preset).spec), qbp = quantize_cpu(bp, preset("fp8-e4m3-tensor").spec);
      qap.scale_values.at(0) = 0.37f;
      qbp.scale_values.at(0) = 1.9f;
      CHECK(same_bits(gemm_fp8_emulated(qap, qbp, sm90_fp8(false)), got));
      CHECK(same_bits(gemm_fp8_emulated(qap, qbp, sm90_fp8(true)), got_fast));
    }
}

TEST_CASE("accumulators that are not modelled are refused by name") {
  std::mt19937_64 g(4);
  std::normal_distribution<float> n01;
  Matrix a(4, 256), b(4, 256);
  for (float& x : a.data) x = n01(g);
  for (float& x : b.data) x = n01(g);
  // FP8 with block scales: sm90 models per-tensor scaling only.
  const QuantizedTensor fa = quantize_cpu(a, preset("fp8-e4m3-tensor").spec);
  const QuantizedTensor va = quantize_cpu(a, preset("fp8-e4m3-1x128").spec), vb = quantize_cpu(b, preset("fp8-e4m3-1x128").spec);
  const QuantizedTensor tb = quantize_cpu(b, preset("fp8-e4m3-128x128").spec);
  for (const auto& pair : {std::pair{&va, &vb}, std::pair{&va, &tb}, std::pair{&fa, &vb}}) {
    const QuantizedTensor *x = pair.first, *y = pair.second;
    const std::string what = fp4d_test::message_of<std::invalid_argument>([&] { (void)gemm_fp8_emulated(*x, *y, {Accumulator::Sm90}); });
    CHECK(what.find("accumulator sm90: FP8 operands with block scales") != std::string::npos);
    CHECK(what.find("sm90 models FP8 with per-tensor scaling only") != std::string::npos);
    CHECK_NOTHROW(gemm_fp8_emulated(*x, *y, {Accumulator::Exact}));
  }
  CHECK(fp4d_test::message_of<std::invalid_argument>([&] { (void)gemm_fp8_emulated(va, tb, sm90_fp8(true)); }).find("block scales") !=
        std::string::npos);
  // E5M2 x E5M2: cuBLASLt has no such GEMM to model.
  const QuantizedTensor ea = quantize_cpu(a, preset("fp8-e5m2-tensor").spec), eb = quantize_cpu(b, preset("fp8-e5m2-tensor").spec);
  CHECK(fp4d_test::message_of<std::invalid_argument>([&] { (void)gemm_fp8_emulated(ea, eb, {Accumulator::Sm90}); }).find("E5M2 x E5M2") !=
        std::string::npos);
  CHECK_NOTHROW(gemm_fp8_emulated(ea, fa, {Accumulator::Sm90}));
  const QuantizedTensor na = quantize_cpu(a, preset("nvfp4").spec);
  CHECK_THROWS_AS(gemm_dequantized_fp32(na, na, {Accumulator::Sm90}), std::invalid_argument);
  const QuantizedTensor ba = cast_of(a, "bf16"), ha = cast_of(b, "fp16");
  CHECK_THROWS_AS(gemm_dequantized_fp32(ba, ha, {Accumulator::Sm90}), std::invalid_argument);
}
