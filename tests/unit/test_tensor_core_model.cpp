// The tensor-core accumulation model (quant/tensor_core_model.hpp) on hand-worked cases of its
// published semantics, each chosen so that the model's answer differs from what a sequential
// FP32 sum (round to nearest) or the exact sum gives - so a model that rounded instead of
// truncating, kept fewer or more bits, or grouped differently fails:
//  - two products of 2^-24 beside 1 in one block survive alignment (2 extra bits) and carry into
//    bit 2^-23: 1 + 2^-23, where sequential FP32 RNE gives 1;
//  - eight products of 2^-26 are truncated away one by one: 1, where the exact sum is 1 + 2^-23;
//  - the final normalisation truncates: 1 + 3 2^-25 -> 1 (RNE would give 1 + 2^-23), and
//    toward zero for negative sums (-1, not -1 - 2^-23);
//  - the group is 16: the same two 2^-24 products split across a block boundary vanish;
//  - FP8's 13 fraction bits: 2^-13 survives beside 1, 2^-14 does not;
//  - a zero sum is +0; infinities and NaN are decided over the whole dot product;
//  - FP32 subnormal results keep their bits; small-integer operands (every partial sum exact)
//    give the exact result in any model.
// The FP8 promotion variant (tensor_core_dot_promoted) on cases worked by hand: what each chunk
// from c = 0 keeps, the FP32 addition's round to nearest (where truncation differs) and its ties
// to even, and the promotion probe's 1 + (K - P) 2^-18. Mixed FP8 operands (E5M2 x E4M3): a
// subnormal input's exponent follows its own format. The whole-GEMM hypotheses
// (quant/tensor_core_hypotheses.hpp) against tensor_core_dot output by output, bit for bit.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "quant/tensor_core_hypotheses.hpp"
#include "quant/tensor_core_model.hpp"
#include "sim/accumulator_cases.hpp"
#include "support/catch.hpp"

using namespace fp4d;

namespace {

float p2(int e) { return std::ldexp(1.0f, e); }

float dot(const std::vector<float>& a, const std::vector<float>& b, float c, const TensorCoreModel& m) {
  return tensor_core_dot(a.data(), b.data(), static_cast<std::int64_t>(a.size()), c, m);
}

float sequential_fp32(const std::vector<float>& a, const std::vector<float>& b) {
  float s = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) s = s + a[i] * b[i];
  return s;
}

}  // namespace

TEST_CASE("tensor-core model: extra alignment bits keep and carry what sequential FP32 loses", "[tensor_core]") {
  const TensorCoreModel m = sm90_tensor_core_model("bf16");
  const std::vector<float> a{1.0f, p2(-24), p2(-24)}, ones(3, 1.0f);
  CHECK(dot(a, ones, 0.0f, m) == 1.0f + p2(-23));
  CHECK(sequential_fp32(a, ones) == 1.0f);
  // Below the kept bits: 2^-26 is truncated to zero before the sum, eight of them with it.
  std::vector<float> small(9, p2(-26)), ones9(9, 1.0f);
  small[0] = 1.0f;
  CHECK(dot(small, ones9, 0.0f, m) == 1.0f);
  // 2^-25 is kept (its bit is the grid's last): four of them make 2^-23.
  std::vector<float> quarter(5, p2(-25)), ones5(5, 1.0f);
  quarter[0] = 1.0f;
  CHECK(dot(quarter, ones5, 0.0f, m) == 1.0f + p2(-23));
}

TEST_CASE("tensor-core model: the block's result is truncated toward zero", "[tensor_core]") {
  const TensorCoreModel m = sm90_tensor_core_model("bf16");
  const std::vector<float> a{1.0f, p2(-24), p2(-25)}, ones(3, 1.0f);
  CHECK(dot(a, ones, 0.0f, m) == 1.0f);  // 1 + 3 2^-25: RNE would round up
  const std::vector<float> na{-1.0f, -p2(-24), -p2(-25)};
  CHECK(dot(na, ones, 0.0f, m) == -1.0f);  // toward zero, not down
}

TEST_CASE("tensor-core model: blocks of 16 in ascending k, each result the next one's c", "[tensor_core]") {
  const TensorCoreModel m = sm90_tensor_core_model("bf16");
  REQUIRE(m.group == 16);
  std::vector<float> a(32, 0.0f), b(32, 1.0f);
  a[0] = 1.0f;
  a[1] = p2(-24), a[2] = p2(-24);  // same block as the 1
  CHECK(dot(a, b, 0.0f, m) == 1.0f + p2(-23));
  a[1] = 0.0f, a[2] = 0.0f;
  a[15] = p2(-24), a[16] = p2(-24);  // one in each block: each truncated away against 1
  CHECK(dot(a, b, 0.0f, m) == 1.0f);
  // c takes part in the alignment: c = 1 and the two small products in the first block.
  std::vector<float> c2{p2(-24), p2(-24)}, o2(2, 1.0f);
  CHECK(dot(c2, o2, 1.0f, m) == 1.0f + p2(-23));
}

TEST_CASE("tensor-core model: Hopper FP8 keeps 13 fraction bits", "[tensor_core]") {
  const TensorCoreModel m = sm90_tensor_core_model("e4m3");
  CHECK(m.group == 32);
  const std::vector<float> keep{1.0f, p2(-7), p2(-6)}, drop{1.0f, p2(-7), p2(-7)};
  const std::vector<float> b{1.0f, p2(-6), p2(-8)};  // products 1, 2^-13, 2^-14
  CHECK(dot(keep, b, 0.0f, m) == 1.0f + p2(-13));
  const std::vector<float> b14{1.0f, p2(-7), p2(-7)};  // products 1, 2^-14, 2^-14: both dropped
  CHECK(dot(drop, b14, 0.0f, m) == 1.0f);
  CHECK(dot(drop, b14, 0.0f, sm90_tensor_core_model("bf16")) == 1.0f + p2(-13));
}

TEST_CASE("tensor-core model: zeros, infinities, NaN and subnormal results", "[tensor_core]") {
  const TensorCoreModel m = sm90_tensor_core_model("bf16");
  const float z = dot({-1.0f, 1.0f}, {1.0f, 1.0f}, 0.0f, m);
  CHECK(z == 0.0f);
  CHECK_FALSE(std::signbit(z));
  CHECK_FALSE(std::signbit(dot({-1.0f}, {0.0f}, -0.0f, m)));
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(std::isnan(dot({inf, 1.0f}, {0.0f, 1.0f}, 0.0f, m)));
  CHECK(std::isnan(dot({inf, -inf}, {1.0f, 1.0f}, 0.0f, m)));
  CHECK(dot({inf, 1.0f}, {-1.0f, 1.0f}, 0.0f, m) == -inf);
  // 2^-70 * 2^-70 = 2^-140: an FP32 subnormal, kept exactly (the alignment floor is -133).
  CHECK(dot({p2(-70), p2(-70)}, {p2(-70), p2(-71)}, 0.0f, m) == p2(-140) + p2(-141));
  CHECK_THROWS_AS(sm90_tensor_core_model("fp32"), std::invalid_argument);
  CHECK_THROWS_AS(dot({1.0f + p2(-20)}, {1.0f}, 0.0f, m), std::invalid_argument);  // not a bf16 value
  CHECK_THROWS_AS(dot({1.0f + p2(-4)}, {1.0f}, 0.0f, sm90_tensor_core_model("e4m3")), std::invalid_argument);
}

TEST_CASE("tensor-core model: small-integer operands give the exact sum in every model", "[tensor_core]") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> v(-8, 8);
  for (const char* f : {"bf16", "fp16", "e4m3", "e5m2"}) {
    const TensorCoreModel m = sm90_tensor_core_model(f);
    for (int trial = 0; trial < 50; ++trial) {
      const int K = 1 + trial * 7;
      std::vector<float> a(static_cast<std::size_t>(K)), b(a.size());
      std::int64_t exact = 0;
      for (std::size_t k = 0; k < a.size(); ++k) {
        a[k] = static_cast<float>(v(rng)), b[k] = static_cast<float>(v(rng));
        exact += static_cast<std::int64_t>(a[k]) * static_cast<std::int64_t>(b[k]);
      }
      INFO(f << ", K " << K);
      // |partial sums| <= 64 K < 2^14: within FP8's 14 significant bits
      CHECK(dot(a, b, 0.0f, m) == static_cast<float>(exact));
    }
  }
}

TEST_CASE("tensor-core model: FP8 promotion keeps what the 13-bit accumulator drops", "[tensor_core]") {
  const TensorCoreModel m = sm90_tensor_core_model("e4m3");
  // The promotion probe: 1, then K - 1 products 2^-9 x 2^-9 = 2^-18. Without promotion every small
  // product is lost beside 1 (13 fraction bits); promoted every P, the first chunk's are lost
  // beside the 1 and every later chunk's sum (from c = 0: exact) reaches the FP32 accumulator.
  const std::int64_t K = 256;
  std::vector<float> a(K, p2(-9)), b(K, p2(-9));
  a[0] = b[0] = 1.0f;
  CHECK(tensor_core_dot(a.data(), b.data(), K, 0.0f, m) == 1.0f);
  for (const std::int64_t P : {32, 64, 128}) {
    INFO("P " << P);
    CHECK(tensor_core_dot_promoted(a.data(), b.data(), K, 0.0f, P, m) == 1.0f + static_cast<float>(K - P) * p2(-18));
  }
  CHECK(tensor_core_dot_promoted(a.data(), b.data(), K, 0.0f, 256, m) == 1.0f);  // one chunk: no promotion
  CHECK(tensor_core_dot_promoted(a.data(), b.data(), K, 0.0f, 4096, m) == 1.0f);
  // Chunks are consecutive from k = 0, the last one shorter: K = 80, P = 32 -> 32 + 32 + 16.
  CHECK(tensor_core_dot_promoted(a.data(), b.data(), 80, 0.0f, 32, m) == 1.0f + 48.0f * p2(-18));
  CHECK_THROWS_AS(tensor_core_dot_promoted(a.data(), b.data(), K, 0.0f, 0, m), std::invalid_argument);
}

TEST_CASE("tensor-core model: promoted chunks are added in FP32 with round to nearest even", "[tensor_core]") {
  const TensorCoreModel m = sm90_tensor_core_model("e4m3");
  // Chunk 1: 2^6 x 2^6 = 2^12 (FP32 ulp 2^-11 there). Chunk 2: 2^-6 x 2^-7 + 2^-6 x 2^-6 =
  // 3 2^-13, three quarters of an ulp: round to nearest gives 2^12 + 2^-11, truncation 2^12;
  // the plain model (one accumulator) drops both products beside 2^12 (grid 2^-1).
  std::vector<float> a(64, 0.0f), b(64, 0.0f);
  a[0] = b[0] = p2(6);
  a[32] = p2(-6), b[32] = p2(-7);  // 2^-7: an E4M3 subnormal (4 x 2^-9)
  a[33] = p2(-6), b[33] = p2(-6);
  CHECK(tensor_core_dot_promoted(a.data(), b.data(), 64, 0.0f, 32, m) == p2(12) + p2(-11));
  CHECK(tensor_core_dot(a.data(), b.data(), 64, 0.0f, m) == p2(12));
  // Negative: -(2^12) - 3 2^-13 rounds away from zero to -(2^12 + 2^-11), where truncation toward
  // zero would keep -2^12.
  std::vector<float> na = a;
  for (float& v : na) v = -v;
  CHECK(tensor_core_dot_promoted(na.data(), b.data(), 64, 0.0f, 32, m) == -(p2(12) + p2(-11)));
  // A tie: chunk 2 = 2^-12, half an ulp of 2^12. To even: 2^12 stays; 2^12 + 2^-11 (odd last
  // bit) goes up to 2^12 + 2^-10.
  std::vector<float> t(64, 0.0f), tb(64, 0.0f);
  t[0] = tb[0] = p2(6);
  t[32] = p2(-6), tb[32] = p2(-6);
  CHECK(tensor_core_dot_promoted(t.data(), tb.data(), 64, 0.0f, 32, m) == p2(12));
  CHECK(tensor_core_dot_promoted(t.data(), tb.data(), 64, p2(-11), 32, m) == p2(12) + p2(-10));
  // c starts the FP32 accumulator, not the first chunk's: fl(c + chunk).
  CHECK(tensor_core_dot_promoted(t.data(), tb.data(), 1, p2(-11), 32, m) == p2(12) + p2(-11));
}

TEST_CASE("tensor-core model: E5M2 x E4M3 operands, each subnormal at its own format's scale", "[tensor_core]") {
  const TensorCoreModel m = sm90_tensor_core_model("e5m2", "e4m3");
  CHECK(m.group == 32);
  CHECK(m.input_min_exponent == -14);
  CHECK(m.b_input_min_exponent == -6);
  CHECK(m.b_input_fraction_bits == 3);
  // b = 2^-9 is an E4M3 subnormal: significand 1/8 at exponent -6, so the product 1 x 2^-9 aligns
  // the block at 2^-6 (grid 2^-19) and 2^-12 x 2^-9 = 2^-21 is truncated. Read as E5M2 (a normal
  // 2^-9) the block aligns at 2^-9 (grid 2^-22) and keeps it.
  const std::vector<float> a{1.0f, p2(-12)}, b{p2(-9), p2(-9)};
  CHECK(dot(a, b, 0.0f, m) == p2(-9));
  CHECK(dot(a, b, 0.0f, sm90_tensor_core_model("e5m2")) == p2(-9) + p2(-21));
  // The same pair either way round, and the one-format forms unchanged.
  CHECK(dot(b, a, 0.0f, sm90_tensor_core_model("e4m3", "e5m2")) == p2(-9));
  CHECK(sm90_tensor_core_model("bf16", "bf16").name == "sm90-bf16");
  CHECK_THROWS_AS(sm90_tensor_core_model("bf16", "e4m3"), std::invalid_argument);
  CHECK_THROWS_AS(sm90_tensor_core_model("fp16", "bf16"), std::invalid_argument);
  // E5M2's 2 fraction bits bind a, E4M3's 3 bind b.
  CHECK_THROWS_AS(dot({1.125f}, {1.0f}, 0.0f, m), std::invalid_argument);
  CHECK_NOTHROW(dot({1.0f}, {1.125f}, 0.0f, m));
}

namespace {

void check_hypotheses_bitwise(const Matrix& A, const Matrix& B, const TensorCoreModel& m,
                              const std::vector<std::int64_t>& intervals) {
  const std::vector<Matrix> fast = tensor_core_gemm_hypotheses(A, B, m, intervals);
  const std::vector<Matrix> ref = tensor_core_gemm_hypotheses_reference(A, B, m, intervals);
  REQUIRE(fast.size() == intervals.size());
  REQUIRE(ref.size() == intervals.size());
  for (std::size_t h = 0; h < intervals.size(); ++h) {
    std::int64_t differ = 0;
    for (std::size_t x = 0; x < ref[h].data.size(); ++x) {
      std::uint32_t u, v;
      std::memcpy(&u, &fast[h].data[x], 4);
      std::memcpy(&v, &ref[h].data[x], 4);
      differ += u != v;
    }
    INFO("interval " << intervals[h]);
    CHECK(differ == 0);
  }
}

}  // namespace

TEST_CASE("tensor-core hypotheses: the FP8 integer path equals tensor_core_dot bit for bit", "[tensor_core]") {
  const std::vector<std::int64_t> intervals{0, 32, 64, 128, 256, 512};
  for (const std::string input : {"e4m3", "e5m2"})
    for (const std::string& d : accumulator_distributions())
      for (const std::int64_t K : {16, 100, 600}) {
        INFO(input << " " << d << " K " << K);
        const AccumulatorOperands o = accumulator_operands(input, d, 9, 37, K, 11);
        const TensorCoreModel m = sm90_tensor_core_model(o.a_format, o.b_format);
        REQUIRE(tensor_core_hypotheses_fp8_path(o.a, o.b, m, intervals));
        check_hypotheses_bitwise(o.a, o.b, m, intervals);
      }
  // The reverse pairing (E4M3 x E5M2) and intervals that do not divide K.
  const AccumulatorOperands o = accumulator_operands("e5m2", "mixed-exp", 20, 11, 300, 3);
  const TensorCoreModel m = sm90_tensor_core_model("e4m3", "e5m2");
  REQUIRE(tensor_core_hypotheses_fp8_path(o.b, o.a, m, {0, 96}));
  check_hypotheses_bitwise(o.b, o.a, m, {0, 96});
}

TEST_CASE("tensor-core hypotheses: other models and intervals take the reference", "[tensor_core]") {
  const AccumulatorOperands o = accumulator_operands("e4m3", "normal", 8, 8, 64, 1);
  const TensorCoreModel m = sm90_tensor_core_model("e4m3");
  CHECK_FALSE(tensor_core_hypotheses_fp8_path(o.a, o.b, m, {0, 48}));  // 48: not a multiple of the group
  check_hypotheses_bitwise(o.a, o.b, m, {0, 48});
  const AccumulatorOperands h = accumulator_operands("bf16", "ties", 8, 8, 64, 1);
  CHECK_FALSE(tensor_core_hypotheses_fp8_path(h.a, h.b, sm90_tensor_core_model("bf16"), {0}));
  check_hypotheses_bitwise(h.a, h.b, sm90_tensor_core_model("bf16"), {0, 16});
  CHECK_THROWS_AS(tensor_core_gemm_hypotheses(o.a, o.b, m, {-1}), std::invalid_argument);
  CHECK_THROWS_AS(tensor_core_gemm_hypotheses(o.a, Matrix(8, 63), m, {0}), std::invalid_argument);  // K mismatch
}
