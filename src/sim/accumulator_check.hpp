// The tensor-core model check (`fp4drift accumulator --model-check`, docs/numerics.md 8b): the
// sm90 model's FP32 output (quant/tensor_core_model.hpp) against a device GEMM's, output by
// output and bit for bit, over a fixed plan of cases (input type x distribution x K, operands of
// sim/accumulator_cases.hpp).
//
// Device paths per input type: "bf16", "fp16" (cuBLASLt GEMMs in that type, FP32 accumulation),
// "e4m3", "e5m2" (A E5M2, B E4M3) and each with "-fast-accum" (cuBLASLt's FP8 fast accumulation).
// The model each is compared with:
//   bf16, fp16, FP8 fast accumulation   tensor_core_dot over all of K (the published model);
//   FP8 without fast accumulation       tensor_core_dot_promoted every kSm90Fp8PromotionInterval
//                                       (128) products, which this check measured; every other
//                                       promotion hypothesis - none (tensor_core_dot over K), P in
//                                       {32, 64, 256, 512} - is compared beside it, so that a
//                                       device or library that promotes elsewhere shows where.
// A hypothesis is the answer where it has zero mismatches over every case. The check runs on the
// CPU only through DeviceProduct, so that it is testable without a device (the unit tests give
// it the model itself, and a deliberately wrong product).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "quant/matrix.hpp"
#include "quant/quantized.hpp"

namespace fp4d {

struct ModelCheckCase {
  std::string input;         // bf16, fp16, e4m3, e5m2
  std::string distribution;  // sim/accumulator_cases.hpp
  std::int64_t M = 0, N = 0, K = 0;
};

// The K of the plan: 16 .. 16384.
const std::vector<std::int64_t>& model_check_ks();
// Every input type x distribution x K, with M = N sized per K (fewer outputs as K grows; the BF16
// subnormal case, which the model computes output by output, smaller still). scale multiplies
// the outputs per case (M and N by sqrt(scale), multiples of 16, at least 16).
std::vector<ModelCheckCase> model_check_plan(double scale);
// The gpu test's subset: BF16 and FP16 every distribution at K 16 .. 1024, FP8 at K 16 .. 1024 on
// a few distributions; small shapes (seconds on the device and the CPU).
std::vector<ModelCheckCase> model_check_fast_subset();

// The promotion intervals compared for FP8 without fast accumulation: the model's
// (kSm90Fp8PromotionInterval) first, then the alternatives (0: no promotion, 32, 64, 256, 512).
const std::vector<std::int64_t>& model_check_promotion_intervals();

// The device's C = A B^T (M x N float32) of two exact operands; fast_accumulation for FP8.
// May throw: the case then records the message (std::exception::what()).
using DeviceProduct = std::function<Matrix(const QuantizedTensor& a, const QuantizedTensor& b, bool fast_accumulation)>;

// The operand as the device GEMM takes it, values exactly as given: a cast tensor (BF16/FP16
// codes) or a per-tensor FP8 tensor with decode scale 1. std::invalid_argument if a value is not
// exactly representable in the format.
QuantizedTensor exact_operand(const Matrix& values, const std::string& format);

struct ModelMismatch {
  std::int64_t i = 0, j = 0;
  std::uint32_t device = 0, model = 0;  // float32 bits
};

// Outputs as far apart as float32 values go: the count of floats between them (0 for +0 vs -0,
// which still mismatch bitwise); UINT64_MAX where one is NaN.
std::uint64_t ulp_distance(float a, float b);

struct HypothesisOutcome {
  std::int64_t interval = 0;  // 0: no promotion
  std::int64_t mismatches = 0;
  std::uint64_t worst_ulps = 0;
  std::vector<ModelMismatch> first;  // the first few mismatches in row-major order
};

struct PathOutcome {
  std::string path;  // bf16, fp16, e4m3, e4m3-fast-accum, e5m2, e5m2-fast-accum
  bool fast_accumulation = false;
  // true: hypotheses[0] is the model's and decides; false: no interval is known (never so for
  // sm90 today), the best hypothesis is reported.
  bool modelled = true;
  std::int64_t device_k = 0;  // K the device got (K, or K padded with zero products, see run)
  std::string error;          // the device's failure; empty when it ran
  // The failure was the library declining the shape (no algorithm that sums in k order, or "not
  // supported"): reported apart from failures, never counted as agreeing.
  bool refused = false;
  // Refused, and run again with the library's own algorithm choice (split-K allowed): the
  // hypotheses then compare that run, outside the totals, which count k-ordered GEMMs only.
  bool free_choice = false;
  // One per interval compared: bf16, fp16 and fast accumulation one (interval 0); FP8 without
  // fast accumulation model_check_promotion_intervals(), the model's first.
  std::vector<HypothesisOutcome> hypotheses;
};

// Whether a device error is the library declining a shape rather than a failure: cuBLASLt's
// NOT_SUPPORTED status or LtPlan's "no algorithm ... that sums in k order".
bool is_device_refusal(const std::string& error);

struct CaseOutcome {
  ModelCheckCase c;
  std::uint64_t seed = 0;
  std::vector<PathOutcome> paths;
  double device_seconds = 0, model_seconds = 0;
};

// One case: operands, the device's product on every path of the input type, the model's, the
// comparison. free_choice (optional): the device's product with the library free to choose any
// algorithm, run for a path whose k-ordered GEMM the library refused. Where the device refuses a K that is not a multiple of 16 (FP8 GEMMs may), the
// operands are padded with zero products to the next multiple (every hypothesis' value is the
// same: zero products are dropped, and an all-zero chunk adds +0) and device_k says so.
// keep: how many mismatches to keep per hypothesis.
CaseOutcome run_model_check_case(const ModelCheckCase& c, std::uint64_t seed, const DeviceProduct& device, int keep = 4,
                                 const DeviceProduct& free_choice = {});

// Totals over cases per path and hypothesis.
struct HypothesisTotal {
  std::int64_t interval = 0;
  std::int64_t inner_products = 0, mismatches = 0, cases = 0, cases_agreeing = 0;
  std::uint64_t worst_ulps = 0;
};
struct PathTotal {
  std::string path;
  bool modelled = true;
  std::int64_t errors = 0;   // cases whose device GEMM failed, refusals included
  std::int64_t refused = 0;  // of those, the library declined the shape (is_device_refusal)
  // Refused shapes run with the library's own algorithm choice: outputs compared with the model
  // (hypotheses[0]) and how many differ.
  std::int64_t free_choice_inner_products = 0, free_choice_mismatches = 0;
  std::vector<HypothesisTotal> hypotheses;
  // The hypothesis that decides: the model's (hypotheses[0]) where modelled, else best().
  const HypothesisTotal& verdict() const;
  // The hypothesis with the fewest mismatches (the first of equals, in the order compared).
  const HypothesisTotal& best() const;
};
std::vector<PathTotal> model_check_totals(const std::vector<CaseOutcome>& cases);

// "no promotion" or "promotion every P products".
std::string promotion_hypothesis_name(std::int64_t interval);

}  // namespace fp4d
