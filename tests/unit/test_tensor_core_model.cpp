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
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "quant/tensor_core_model.hpp"
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
