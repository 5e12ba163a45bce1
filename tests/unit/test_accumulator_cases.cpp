// The model check's operands (sim/accumulator_cases.hpp) and its comparison (sim/accumulator_check.hpp),
// without a device:
//  - every generator's values are exact in their formats (round trip through the format's own
//    encoder), no operand is all zero, the same seed gives the same bits and another seed others;
//  - each adversarial generator has the property it is named for, measured on the operands
//    (exponent gaps of 23..26 - FP8 11..14 - inside blocks, exact zero sums, sums near 2^B,
//    ties at the truncation points, subnormal inputs and FP32-subnormal products, an accumulator
//    at least 16 times every later block);
//  - the check counts nothing against a "device" that is the model, finds the promotion interval
//    of one that promotes, fails against a sequential FP32 sum and against one wrong bit (and
//    names that output), retries a K the device refuses with zero products, records a failing
//    device; the plan covers at least 10^8 inner products.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/bf16.hpp"
#include "format/fp16.hpp"
#include "format/fp8.hpp"
#include "quant/tensor_core_hypotheses.hpp"
#include "quant/tensor_core_model.hpp"
#include "sim/accumulator_cases.hpp"
#include "sim/accumulator_check.hpp"
#include "support/catch.hpp"

using namespace fp4d;

namespace {

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }

// floor(log2 |x|), at least the format's minimum normal exponent (the model's exponent).
int model_exp(float x, const std::string& f) {
  const int emin = f == "bf16" ? -126 : (f == "e4m3" ? -6 : -14);
  int e = 0;
  std::frexp(static_cast<double>(x), &e);
  return std::max(e - 1, emin);
}

bool subnormal_in(float x, const std::string& f) {
  const double min_normal = f == "bf16" ? 0x1p-126 : (f == "e4m3" ? 0x1p-6 : 0x1p-14);
  return x != 0.0f && std::fabs(static_cast<double>(x)) < min_normal;
}

// The dot product of row i of A and row j of B in long double: exact for the operands used here
// (products of at most 2 x 11 significant bits over a range of exponents well inside 64 bits).
long double exact_dot(const AccumulatorOperands& o, std::int64_t i, std::int64_t j, std::int64_t k0, std::int64_t k1) {
  long double s = 0;
  for (std::int64_t k = k0; k < k1; ++k) s += static_cast<long double>(o.a(i, k)) * static_cast<long double>(o.b(j, k));
  return s;
}

Matrix decode(const QuantizedTensor& q) {
  Matrix x(q.rows, q.cols);
  for (std::size_t n = 0; n < x.data.size(); ++n) {
    switch (q.spec.element) {
      case ElementFormat::BF16:
        x.data[n] = bf16_to_float(q.codes16[n]);
        break;
      case ElementFormat::FP16:
        x.data[n] = fp16_to_float(q.codes16[n]);
        break;
      case ElementFormat::E4M3:
        x.data[n] = e4m3_decode(q.codes[n]) * q.scale_values.at(0);
        break;
      default:
        x.data[n] = e5m2_decode(q.codes[n]) * q.scale_values.at(0);
    }
  }
  return x;
}

std::string format_name(ElementFormat e) {
  return e == ElementFormat::BF16 ? "bf16" : e == ElementFormat::FP16 ? "fp16" : e == ElementFormat::E4M3 ? "e4m3" : "e5m2";
}

// A "device" that is the model, promoting FP8 partial sums every `promote` products without fast
// accumulation (0: never).
DeviceProduct model_device(std::int64_t promote) {
  return [promote](const QuantizedTensor& a, const QuantizedTensor& b, bool fast) {
    const bool fp8 = a.spec.scheme == Scheme::Fp8;
    const TensorCoreModel m = sm90_tensor_core_model(format_name(a.spec.element), format_name(b.spec.element));
    return tensor_core_gemm_hypotheses(decode(a), decode(b), m, {fp8 && !fast ? promote : 0})[0];
  };
}

}  // namespace

TEST_CASE("accumulator cases: exact in their formats, not all zero, seeded", "[accumulator_cases]") {
  for (const std::string& input : accumulator_input_types())
    for (const std::string& d : accumulator_distributions())
      for (const std::int64_t K : {16, 100, 1024}) {
        INFO(input << " " << d << " K " << K);
        const AccumulatorOperands o = accumulator_operands(input, d, 12, 20, K, 5);
        REQUIRE(o.a.rows == 12);
        REQUIRE(o.b.rows == 20);
        REQUIRE(o.a.cols == K);
        REQUIRE(o.b.cols == K);
        CHECK(o.a_format == input);
        CHECK(o.b_format == (input == "e5m2" ? "e4m3" : input));
        std::int64_t bad = 0, nonzero_a = 0, nonzero_b = 0;
        for (const float v : o.a.data) bad += !representable_in(v, o.a_format), nonzero_a += v != 0.0f;
        for (const float v : o.b.data) bad += !representable_in(v, o.b_format), nonzero_b += v != 0.0f;
        CHECK(bad == 0);
        CHECK(nonzero_a > 0);
        CHECK(nonzero_b > 0);
        CHECK_NOTHROW(exact_operand(o.a, o.a_format));
        const AccumulatorOperands again = accumulator_operands(input, d, 12, 20, K, 5);
        const AccumulatorOperands other = accumulator_operands(input, d, 12, 20, K, 6);
        CHECK(std::equal(o.a.data.begin(), o.a.data.end(), again.a.data.begin(),
                         [](float x, float y) { return bits(x) == bits(y); }));
        CHECK_FALSE(std::equal(o.a.data.begin(), o.a.data.end(), other.a.data.begin(),
                               [](float x, float y) { return bits(x) == bits(y); }));
      }
  CHECK_THROWS_AS(accumulator_operands("fp32", "normal", 4, 4, 16, 1), std::invalid_argument);
  CHECK_THROWS_AS(accumulator_operands("bf16", "gaussian", 4, 4, 16, 1), std::invalid_argument);
  CHECK_THROWS_AS(accumulator_operands("bf16", "normal", 4, 4, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(refuse_all_zero(Matrix(3, 5), "A"), std::logic_error);
  Matrix one(3, 5);
  one(2, 4) = -0.5f;
  CHECK_NOTHROW(refuse_all_zero(one, "A"));
}

TEST_CASE("accumulator cases: exp-gap puts products 23..26 binades (FP8 11..14) below each block's leader",
          "[accumulator_cases]") {
  for (const std::string& input : accumulator_input_types()) {
    const AccumulatorModelBits mb = accumulator_model_bits(input);
    const std::int64_t K = 8 * mb.group;
    const AccumulatorOperands o = accumulator_operands(input, "exp-gap", 6, 6, K, 2);
    INFO(input);
    for (std::int64_t i = 0; i < 6; ++i)
      for (std::int64_t j = 0; j < 6; ++j)
        for (std::int64_t k0 = 0; k0 < K; k0 += mb.group) {
          int top = std::numeric_limits<int>::min();
          std::vector<int> e;
          for (std::int64_t k = k0; k < k0 + mb.group; ++k) {
            e.push_back(model_exp(o.a(i, k), o.a_format) + model_exp(o.b(j, k), o.b_format));
            top = std::max(top, e.back());
          }
          const bool gap = std::any_of(e.begin(), e.end(), [&](int x) { return top - x >= mb.kept - 2 && top - x <= mb.kept + 1; });
          CHECK(gap);
        }
  }
}

TEST_CASE("accumulator cases: zero-sum cancels exactly, in and across blocks", "[accumulator_cases]") {
  for (const std::string& input : accumulator_input_types()) {
    const std::int64_t G = accumulator_model_bits(input).group, K = 6 * G;
    const AccumulatorOperands o = accumulator_operands(input, "zero-sum", 8, 8, K, 3);
    INFO(input);
    bool crossing = false;
    for (std::int64_t i = 0; i < 8; ++i)
      for (std::int64_t j = 0; j < 8; ++j) {
        CHECK(exact_dot(o, i, j, 0, K) == 0.0L);
        // Pairs that straddle blocks leave a block's own sum nonzero.
        for (std::int64_t k0 = 0; k0 < K; k0 += G) crossing = crossing || exact_dot(o, i, j, k0, k0 + G) != 0.0L;
      }
    CHECK(crossing);
  }
}

TEST_CASE("accumulator cases: near-2^B sums of non-negative integers end around 2^B", "[accumulator_cases]") {
  for (const std::string& input : accumulator_input_types())
    for (const std::int64_t K : {16, 1000, 16384}) {
      INFO(input << " K " << K);
      const int B = accumulator_boundary_exponent(input);
      CHECK(B == (input == "e4m3" || input == "e5m2" ? 14 : 24));
      const AccumulatorOperands o = accumulator_operands(input, "near-2^B", 16, 16, K, 4);
      for (const Matrix* x : {&o.a, &o.b})
        for (const float v : x->data) {
          CHECK(v >= 0.0f);
          CHECK(v == std::floor(v));
        }
      int below = 0, above = 0;
      for (std::int64_t i = 0; i < 16; ++i)
        for (std::int64_t j = 0; j < 16; ++j) {
          const long double s = exact_dot(o, i, j, 0, K);
          CHECK(s >= std::ldexp(1.0L, B - 1));
          CHECK(s <= std::ldexp(1.0L, B + 1));
          (s < std::ldexp(1.0L, B) ? below : above) += 1;
        }
      CHECK(below > 0);
      CHECK(above > 0);
    }
}

TEST_CASE("accumulator cases: ties sit exactly at the alignment grid's and the output's half units", "[accumulator_cases]") {
  for (const std::string& input : accumulator_input_types()) {
    const AccumulatorModelBits mb = accumulator_model_bits(input);
    const std::int64_t K = 6 * mb.group;
    const AccumulatorOperands o = accumulator_operands(input, "ties", 5, 5, K, 6);
    INFO(input);
    const std::set<long double> allowed{1.0L, std::ldexp(1.0L, -mb.kept - 1), std::ldexp(1.0L, -mb.output - 1),
                                        1.5L * std::ldexp(1.0L, -mb.output - 1), std::ldexp(1.0L, -mb.output), 0.0L};
    int half_grid = 0, half_output = 0;
    for (std::int64_t i = 0; i < 5; ++i)
      for (std::int64_t j = 0; j < 5; ++j)
        for (std::int64_t k0 = 0; k0 < K; k0 += mb.group) {
          long double lead = 0;
          for (std::int64_t k = k0; k < k0 + mb.group; ++k)
            lead = std::max(lead, std::fabs(static_cast<long double>(o.a(i, k)) * o.b(j, k)));
          REQUIRE(lead > 0);
          for (std::int64_t k = k0; k < k0 + mb.group; ++k) {
            const long double r = std::fabs(static_cast<long double>(o.a(i, k)) * o.b(j, k)) / lead;
            CHECK(allowed.count(r) == 1);
            half_grid += r == std::ldexp(1.0L, -mb.kept - 1);
            half_output += r == std::ldexp(1.0L, -mb.output - 1);
          }
        }
    CHECK(half_grid > 0);
    CHECK(half_output > 0);
  }
}

TEST_CASE("accumulator cases: subnormal inputs, and FP32-subnormal products for BF16", "[accumulator_cases]") {
  for (const std::string& input : accumulator_input_types()) {
    const AccumulatorOperands o = accumulator_operands(input, "subnormal", 8, 8, 256, 7);
    INFO(input);
    for (const auto& [x, f] : {std::pair{&o.a, o.a_format}, std::pair{&o.b, o.b_format}}) {
      const auto sub = std::count_if(x->data.begin(), x->data.end(), [&](float v) { return subnormal_in(v, f); });
      CHECK(sub * 5 >= static_cast<std::int64_t>(x->data.size()));  // at least a fifth
    }
    if (input == "bf16") {
      int below_normal = 0, below_floor = 0;
      for (std::int64_t i = 0; i < 8; ++i)
        for (std::int64_t k = 0; k < 256; ++k) {
          const double p = std::fabs(static_cast<double>(o.a(i, k)) * o.b(i, k));
          below_normal += p != 0 && p < 0x1p-126;
          below_floor += p != 0 && p < 0x1p-133;
        }
      CHECK(below_normal > 0);
      CHECK(below_floor > 0);
    }
  }
}

TEST_CASE("accumulator cases: big-accumulator's first block is at least 16 times any later block", "[accumulator_cases]") {
  for (const std::string& input : accumulator_input_types()) {
    const std::int64_t G = accumulator_model_bits(input).group, K = 10 * G;
    const AccumulatorOperands o = accumulator_operands(input, "big-accumulator", 6, 6, K, 8);
    INFO(input);
    for (std::int64_t i = 0; i < 6; ++i)
      for (std::int64_t j = 0; j < 6; ++j) {
        const long double first = exact_dot(o, i, j, 0, G);
        for (std::int64_t k0 = G; k0 < K; k0 += G) {
          long double mag = 0;
          for (std::int64_t k = k0; k < k0 + G; ++k) mag += std::fabs(static_cast<long double>(o.a(i, k)) * o.b(j, k));
          CHECK(16 * mag <= first);
        }
      }
  }
}

TEST_CASE("model check: a device that is the model agrees; the promotion interval is found", "[accumulator_cases]") {
  std::vector<CaseOutcome> cases;
  for (const std::string& input : accumulator_input_types())
    for (const std::string d : {"normal", "ties", "big-accumulator"})
      for (const std::int64_t K : {48, 1000}) cases.push_back(run_model_check_case({input, d, 24, 16, K}, 9, model_device(128)));
  const std::vector<PathTotal> totals = model_check_totals(cases);
  REQUIRE(totals.size() == 6);
  for (const PathTotal& t : totals) {
    INFO(t.path);
    CHECK(t.errors == 0);
    CHECK(t.verdict().mismatches == 0);
    CHECK(t.verdict().inner_products == 6 * 24 * 16);
    CHECK(t.modelled);
    const bool promoted = t.path == "e4m3" || t.path == "e5m2";  // FP8 without fast accumulation
    REQUIRE(t.hypotheses.size() == (promoted ? model_check_promotion_intervals().size() : 1));
    if (promoted) {
      CHECK(t.verdict().interval == kSm90Fp8PromotionInterval);
      CHECK(t.best().interval == kSm90Fp8PromotionInterval);
      for (const HypothesisTotal& h : t.hypotheses)
        if (h.interval != 128) CHECK(h.mismatches > 0);  // K = 1000 tells them apart
    } else {
      CHECK(t.verdict().interval == 0);
    }
  }
}

TEST_CASE("model check: a sequential FP32 sum and one wrong bit are caught", "[accumulator_cases]") {
  // Round to nearest in one FP32 accumulator, ascending k: differs from the model's truncation on ties.
  const DeviceProduct sequential = [](const QuantizedTensor& a, const QuantizedTensor& b, bool) {
    const Matrix x = decode(a), y = decode(b);
    Matrix c(x.rows, y.rows);
    for (std::int64_t i = 0; i < x.rows; ++i)
      for (std::int64_t j = 0; j < y.rows; ++j) {
        float s = 0.0f;
        for (std::int64_t k = 0; k < x.cols; ++k) s = s + x(i, k) * y(j, k);
        c(i, j) = s;
      }
    return c;
  };
  const CaseOutcome t = run_model_check_case({"bf16", "ties", 16, 16, 256}, 1, sequential);
  REQUIRE(t.paths.size() == 1);
  REQUIRE(t.paths[0].hypotheses.size() == 1);
  CHECK(t.paths[0].hypotheses[0].mismatches > 0);
  CHECK_FALSE(t.paths[0].hypotheses[0].first.empty());

  // The model with one output's last bit flipped: exactly that output, 1 ulp.
  const DeviceProduct flipped = [](const QuantizedTensor& a, const QuantizedTensor& b, bool fast) {
    Matrix c = model_device(0)(a, b, fast);
    c(3, 5) = std::bit_cast<float>(std::bit_cast<std::uint32_t>(c(3, 5)) ^ 1u);
    return c;
  };
  const CaseOutcome f = run_model_check_case({"fp16", "normal", 8, 8, 64}, 1, flipped, 2);
  const HypothesisOutcome& h = f.paths[0].hypotheses[0];
  CHECK(h.mismatches == 1);
  CHECK(h.worst_ulps == 1);
  REQUIRE(h.first.size() == 1);
  CHECK(h.first[0].i == 3);
  CHECK(h.first[0].j == 5);
  CHECK((h.first[0].device ^ h.first[0].model) == 1u);
}

TEST_CASE("model check: a refused K is padded with zero products; a failing device is recorded", "[accumulator_cases]") {
  const DeviceProduct picky = [](const QuantizedTensor& a, const QuantizedTensor& b, bool fast) {
    if (a.cols % 16 != 0) throw std::invalid_argument("K must be a multiple of 16");
    return model_device(64)(a, b, fast);
  };
  const CaseOutcome c = run_model_check_case({"e4m3", "big-accumulator", 16, 16, 100}, 2, picky);
  REQUIRE(c.paths.size() == 2);
  for (const PathOutcome& p : c.paths) {
    CHECK(p.error.empty());
    CHECK(p.device_k == 112);
  }
  // A device promoting every 64 products: the model's 128 disagrees, the check names 64 as closest.
  CHECK(model_check_totals({c}).at(0).verdict().interval == 128);
  CHECK(model_check_totals({c}).at(0).verdict().mismatches > 0);
  CHECK(model_check_totals({c}).at(0).best().mismatches == 0);
  CHECK(model_check_totals({c}).at(0).best().interval == 64);
  const DeviceProduct broken = [](const QuantizedTensor&, const QuantizedTensor&, bool) -> Matrix {
    throw std::runtime_error("no kernel");
  };
  const CaseOutcome e = run_model_check_case({"bf16", "normal", 16, 16, 64}, 2, broken);
  CHECK(e.paths.at(0).error == "no kernel");
  CHECK_FALSE(e.paths.at(0).refused);
  CHECK(e.paths.at(0).hypotheses.empty());
  CHECK(model_check_totals({e}).at(0).errors == 1);
  CHECK(model_check_totals({e}).at(0).refused == 0);
  // The library declining the shape is recorded as a refusal, still not as agreement.
  const DeviceProduct declining = [](const QuantizedTensor&, const QuantizedTensor&, bool) -> Matrix {
    throw std::runtime_error("cuBLASLt error in cublasLtMatmulAlgoGetHeuristic: the requested functionality is not supported");
  };
  const CaseOutcome r = run_model_check_case({"e4m3", "normal", 16, 16, 64}, 2, declining);
  REQUIRE(r.paths.size() == 2);
  for (const PathOutcome& p : r.paths) {
    CHECK(p.refused);
    CHECK(p.hypotheses.empty());
  }
  CHECK(model_check_totals({r}).at(0).errors == 1);
  CHECK(model_check_totals({r}).at(0).refused == 1);
  CHECK(model_check_totals({r}).at(0).free_choice_inner_products == 0);
  // Run again with the library's own choice: compared with the model, outside the totals.
  const CaseOutcome f = run_model_check_case({"e4m3", "big-accumulator", 16, 16, 384}, 2, declining, 4, model_device(64));
  REQUIRE(f.paths.size() == 2);
  for (const PathOutcome& p : f.paths) {
    INFO(p.path);
    CHECK(p.refused);
    CHECK(p.free_choice);
    REQUIRE_FALSE(p.hypotheses.empty());
  }
  const PathTotal promoted = model_check_totals({f}).at(0), fast = model_check_totals({f}).at(1);
  CHECK(promoted.refused == 1);
  CHECK(promoted.hypotheses.front().cases == 0);  // not in the totals
  CHECK(promoted.free_choice_inner_products == 16 * 16);
  CHECK(promoted.free_choice_mismatches > 0);  // a device promoting every 64, not the model's 128
  CHECK(fast.free_choice_inner_products == 16 * 16);
  CHECK(fast.free_choice_mismatches == 0);  // fast accumulation: no promotion on either side
  CHECK(is_device_refusal("cuBLASLt has no algorithm for this GEMM (512 x 512 x 16384) that sums in k order without split-K"));
  CHECK_FALSE(is_device_refusal("cudaMalloc (C): out of memory"));
}

TEST_CASE("model check: the plan, operands and ulp distances", "[accumulator_cases]") {
  const std::vector<ModelCheckCase> plan = model_check_plan(1.0);
  double inner = 0;
  std::set<std::int64_t> ks;
  std::set<std::string> inputs, dists;
  for (const ModelCheckCase& c : plan) {
    inner += static_cast<double>(c.M * c.N) * (c.input == "e4m3" || c.input == "e5m2" ? 2 : 1);
    ks.insert(c.K), inputs.insert(c.input), dists.insert(c.distribution);
    CHECK(c.M % 16 == 0);
  }
  CHECK(inner >= 1e8);
  CHECK(inner == 931'430'400);  // the figure the docs and --help give
  CHECK(ks == std::set<std::int64_t>(model_check_ks().begin(), model_check_ks().end()));
  CHECK(ks.count(16) == 1);
  CHECK(ks.count(16384) == 1);
  CHECK(inputs.size() == 4);
  CHECK(dists.size() == accumulator_distributions().size());
  CHECK(model_check_plan(0.01).size() == plan.size());
  CHECK(model_check_plan(0.01).front().M == 160);
  CHECK_THROWS_AS(model_check_plan(0), std::invalid_argument);
  std::int64_t subset = 0;
  for (const ModelCheckCase& c : model_check_fast_subset()) subset += c.M * c.N * c.K;
  CHECK(subset < 200'000'000);  // seconds of model time

  Matrix v(1, 3);
  v(0, 0) = 448.0f, v(0, 1) = -0.001953125f, v(0, 2) = 0.0f;  // E4M3's largest and smallest
  const QuantizedTensor q = exact_operand(v, "e4m3");
  CHECK(q.spec.scheme == Scheme::Fp8);
  CHECK(q.spec.per_tensor());
  CHECK(q.scale_values == std::vector<float>{1.0f});
  CHECK(decode(q).data == v.data);
  v(0, 2) = 1.0625f;  // 4 fraction bits
  CHECK_THROWS_AS(exact_operand(v, "e4m3"), std::invalid_argument);
  CHECK_NOTHROW(exact_operand(v, "bf16"));
  v(0, 2) = 1.0f + 0x1p-9f;
  CHECK_THROWS_AS(exact_operand(v, "bf16"), std::invalid_argument);
  CHECK_NOTHROW(exact_operand(v, "fp16"));

  CHECK(ulp_distance(1.0f, std::nextafter(1.0f, 2.0f)) == 1);
  CHECK(ulp_distance(0.0f, -0.0f) == 0);
  const float tiny = std::numeric_limits<float>::denorm_min();
  CHECK(ulp_distance(-tiny, tiny) == 2);
  CHECK(ulp_distance(std::nanf(""), 1.0f) == std::numeric_limits<std::uint64_t>::max());
}
