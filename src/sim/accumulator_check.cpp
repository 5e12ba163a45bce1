// The tensor-core model check (sim/accumulator_check.hpp).
#include "sim/accumulator_check.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/bf16.hpp"
#include "format/fp16.hpp"
#include "format/fp8.hpp"
#include "quant/tensor_core_hypotheses.hpp"
#include "quant/tensor_core_model.hpp"
#include "sim/accumulator_cases.hpp"

namespace fp4d {

namespace {

bool is_fp8(const std::string& input) { return input == "e4m3" || input == "e5m2"; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// M = N of a case at scale 1: about 9.3e8 inner products. The CPU's cost is outputs x K (the
// model); K >= 1000 carries most of it (6e9 of the 8.5e9 products per type and distribution),
// the small K most of the outputs. The BF16 subnormal case runs the model output by output (its
// products leave the vectorised path's exponent window, about 100 times slower per product)
// and is smaller. docs/numerics.md 8b gives the measured rates.
std::int64_t plan_side(std::int64_t K) {
  if (K <= 64) return 1536;
  if (K <= 100) return 1024;
  if (K <= 4096) return 768;
  return 512;
}

std::int64_t scaled_side(std::int64_t side, double scale) {
  const double s = std::round(static_cast<double>(side) * std::sqrt(scale) / 16.0) * 16.0;
  return std::max<std::int64_t>(16, static_cast<std::int64_t>(s));
}

Matrix pad_k(const Matrix& X, std::int64_t K) {
  Matrix P(X.rows, K);
  for (std::int64_t i = 0; i < X.rows; ++i) std::copy_n(X.data.begin() + i * X.cols, X.cols, P.data.begin() + i * K);
  return P;
}

HypothesisOutcome compare(const Matrix& device, const Matrix& model, std::int64_t interval, int keep) {
  HypothesisOutcome h;
  h.interval = interval;
  const auto n = static_cast<std::int64_t>(device.data.size());
  std::int64_t mismatches = 0;
  std::uint64_t worst = 0;
#pragma omp parallel for schedule(static) reduction(+ : mismatches) reduction(max : worst)
  for (std::int64_t x = 0; x < n; ++x) {
    const float d = device.data[static_cast<std::size_t>(x)], m = model.data[static_cast<std::size_t>(x)];
    if (std::bit_cast<std::uint32_t>(d) != std::bit_cast<std::uint32_t>(m)) {
      ++mismatches;
      worst = std::max(worst, ulp_distance(d, m));
    }
  }
  h.mismatches = mismatches;
  h.worst_ulps = worst;
  for (std::int64_t x = 0; x < n && mismatches > 0 && static_cast<int>(h.first.size()) < keep; ++x) {
    const std::uint32_t d = std::bit_cast<std::uint32_t>(device.data[static_cast<std::size_t>(x)]);
    const std::uint32_t m = std::bit_cast<std::uint32_t>(model.data[static_cast<std::size_t>(x)]);
    if (d != m) h.first.push_back({x / device.cols, x % device.cols, d, m});
  }
  return h;
}

}  // namespace

const std::vector<std::int64_t>& model_check_ks() {
  static const std::vector<std::int64_t> v{16, 32, 48, 64, 100, 256, 1000, 1024, 4096, 16384};
  return v;
}

const std::vector<std::int64_t>& model_check_promotion_intervals() {
  static const std::vector<std::int64_t> v{kSm90Fp8PromotionInterval, 0, 32, 64, 256, 512};
  return v;
}

bool is_device_refusal(const std::string& error) {
  return error.find("not supported") != std::string::npos ||
         error.find("that sums in k order without split-K") != std::string::npos;
}

std::vector<ModelCheckCase> model_check_plan(double scale) {
  if (!(scale > 0) || !std::isfinite(scale)) throw std::invalid_argument("model check: the scale must be positive");
  std::vector<ModelCheckCase> plan;
  for (const std::string& input : accumulator_input_types())
    for (const std::string& d : accumulator_distributions())
      for (const std::int64_t K : model_check_ks()) {
        std::int64_t side = plan_side(K);
        if (input == "bf16" && d == "subnormal") side /= 4;
        side = scaled_side(side, scale);
        plan.push_back({input, d, side, side, K});
      }
  return plan;
}

std::vector<ModelCheckCase> model_check_fast_subset() {
  std::vector<ModelCheckCase> plan;
  const std::vector<std::int64_t> ks{16, 48, 100, 256, 1024};
  for (const std::string& input : accumulator_input_types())
    for (const std::string& d : accumulator_distributions()) {
      if (is_fp8(input) && d != "normal" && d != "abs-normal" && d != "exp-gap" && d != "ties" && d != "big-accumulator")
        continue;
      for (const std::int64_t K : ks) plan.push_back({input, d, 64, 48, K});
    }
  return plan;
}

QuantizedTensor exact_operand(const Matrix& values, const std::string& format) {
  QuantizedTensor q;
  const bool fp8 = format == "e4m3" || format == "e5m2";
  if (!fp8 && format != "bf16" && format != "fp16")
    throw std::invalid_argument("model check: no device operand for format '" + format + "'");
  q.spec.scheme = fp8 ? Scheme::Fp8 : Scheme::Cast;
  q.spec.element = format == "bf16"   ? ElementFormat::BF16
                   : format == "fp16" ? ElementFormat::FP16
                   : format == "e4m3" ? ElementFormat::E4M3
                                      : ElementFormat::E5M2;
  q.spec.block_rows = 1;
  q.spec.block_cols = fp8 ? 0 : 1;  // per tensor (scale 1) / one element (casts)
  q.input_rows = q.rows = values.rows;
  q.input_cols = q.cols = q.padded_cols = values.cols;
  const std::size_t n = values.data.size();
  if (fp8) {
    q.codes.resize(n);
    q.scale_rows = q.scale_cols = 1;
    q.scale_values = {1.0f};
  } else {
    q.codes16.resize(n);
  }
  const auto count = static_cast<std::int64_t>(n);
  std::int64_t bad = count;  // the first element that is not a value of the format
  const int f = format == "bf16" ? 0 : format == "fp16" ? 1 : format == "e4m3" ? 2 : 3;
#pragma omp parallel for schedule(static) reduction(min : bad)
  for (std::int64_t x = 0; x < count; ++x) {
    const auto at = static_cast<std::size_t>(x);
    const float v = values.data[at];
    float back = 0;
    if (f == 0) {
      q.codes16[at] = bf16_rne_bits(v);
      back = bf16_to_float(q.codes16[at]);
    } else if (f == 1) {
      q.codes16[at] = fp16_rne_bits(v);
      back = fp16_to_float(q.codes16[at]);
    } else if (f == 2) {
      q.codes[at] = e4m3_rne_satfinite(v);
      back = e4m3_decode(q.codes[at]);
    } else {
      q.codes[at] = e5m2_rne_satfinite(v);
      back = e5m2_decode(q.codes[at]);
    }
    if (std::bit_cast<std::uint32_t>(back) != std::bit_cast<std::uint32_t>(v) || !std::isfinite(v)) bad = std::min(bad, x);
  }
  if (bad < count)
    throw std::invalid_argument("model check: element " + std::to_string(bad) + " (" +
                                std::to_string(values.data[static_cast<std::size_t>(bad)]) + ") is not a " + format +
                                " value");
  return q;
}

std::uint64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<std::uint64_t>::max();
  const auto key = [](float x) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    return (u >> 31) ? -static_cast<std::int64_t>(u & 0x7fffffffu) : static_cast<std::int64_t>(u);
  };
  const std::int64_t d = key(a) - key(b);
  return static_cast<std::uint64_t>(d < 0 ? -d : d);
}

CaseOutcome run_model_check_case(const ModelCheckCase& c, std::uint64_t seed, const DeviceProduct& device, int keep,
                                 const DeviceProduct& free_choice) {
  CaseOutcome out;
  out.c = c;
  out.seed = seed;
  const AccumulatorOperands ops = accumulator_operands(c.input, c.distribution, c.M, c.N, c.K, seed);
  const TensorCoreModel m = sm90_tensor_core_model(ops.a_format, ops.b_format);
  const bool fp8 = is_fp8(c.input);
  const std::vector<std::int64_t> intervals = fp8 ? model_check_promotion_intervals() : std::vector<std::int64_t>{0};
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<Matrix> model = tensor_core_gemm_hypotheses(ops.a, ops.b, m, intervals);
  out.model_seconds = seconds_since(t0);
  const QuantizedTensor qa = exact_operand(ops.a, ops.a_format), qb = exact_operand(ops.b, ops.b_format);
  for (const bool fast : fp8 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
    PathOutcome p;
    p.path = c.input + (fast ? "-fast-accum" : "");
    p.fast_accumulation = fast;
    p.modelled = true;
    p.device_k = c.K;
    Matrix d;
    t0 = std::chrono::steady_clock::now();
    try {
      d = device(qa, qb, fast);
    } catch (const std::exception& e) {
      p.error = e.what();
    }
    if (!p.error.empty() && c.K % 16 != 0) {
      const std::int64_t Kp = (c.K + 15) / 16 * 16;
      try {
        d = device(exact_operand(pad_k(ops.a, Kp), ops.a_format), exact_operand(pad_k(ops.b, Kp), ops.b_format), fast);
        p.error.clear();
        p.device_k = Kp;
      } catch (const std::exception& e) {
        p.error += std::string("; padded to K = ") + std::to_string(Kp) + ": " + e.what();
      }
    }
    out.device_seconds += seconds_since(t0);
    if (p.error.empty() && (d.rows != c.M || d.cols != c.N))
      p.error = "the device returned " + std::to_string(d.rows) + " x " + std::to_string(d.cols) + " outputs";
    p.refused = !p.error.empty() && is_device_refusal(p.error);
    if (p.refused && free_choice) {
      try {
        d = free_choice(qa, qb, fast);
        p.free_choice = d.rows == c.M && d.cols == c.N;
      } catch (const std::exception& e) {
        p.error += std::string("; with the library's own choice: ") + e.what();
      }
    }
    if (p.error.empty() || p.free_choice)
      for (std::size_t h = 0; h < intervals.size(); ++h)
        if (!fast || intervals[h] == 0)  // fast accumulation: no promotion, the one model
          p.hypotheses.push_back(compare(d, model[h], intervals[h], keep));
    out.paths.push_back(std::move(p));
  }
  return out;
}

const HypothesisTotal& PathTotal::verdict() const {
  if (hypotheses.empty()) throw std::logic_error("model check: a path without hypotheses");
  return modelled ? hypotheses.front() : best();
}

const HypothesisTotal& PathTotal::best() const {
  if (hypotheses.empty()) throw std::logic_error("model check: a path without hypotheses");
  const HypothesisTotal* b = &hypotheses.front();
  for (const HypothesisTotal& h : hypotheses)
    if (h.mismatches < b->mismatches) b = &h;
  return *b;
}

std::vector<PathTotal> model_check_totals(const std::vector<CaseOutcome>& cases) {
  std::vector<PathTotal> totals;
  for (const CaseOutcome& c : cases)
    for (const PathOutcome& p : c.paths) {
      auto it = std::find_if(totals.begin(), totals.end(), [&](const PathTotal& t) { return t.path == p.path; });
      if (it == totals.end()) {
        totals.push_back({p.path, p.modelled, 0, 0, 0, 0, {}});
        it = totals.end() - 1;
        const bool promoted = is_fp8(p.path) && !p.fast_accumulation;
        const std::vector<std::int64_t> ivs = promoted ? model_check_promotion_intervals() : std::vector<std::int64_t>{0};
        for (const std::int64_t iv : ivs) it->hypotheses.push_back({iv, 0, 0, 0, 0, 0});
      }
      if (!p.error.empty()) {
        ++it->errors;
        it->refused += p.refused ? 1 : 0;
        if (p.free_choice && !p.hypotheses.empty()) {
          it->free_choice_inner_products += c.c.M * c.c.N;
          it->free_choice_mismatches += p.hypotheses.front().mismatches;
        }
        continue;
      }
      for (const HypothesisOutcome& h : p.hypotheses)
        for (HypothesisTotal& t : it->hypotheses)
          if (t.interval == h.interval) {
            t.inner_products += c.c.M * c.c.N;
            t.mismatches += h.mismatches;
            t.cases += 1;
            t.cases_agreeing += h.mismatches == 0 ? 1 : 0;
            t.worst_ulps = std::max(t.worst_ulps, h.worst_ulps);
          }
    }
  return totals;
}

std::string promotion_hypothesis_name(std::int64_t interval) {
  return interval == 0 ? "no promotion" : "promotion every " + std::to_string(interval) + " products";
}

}  // namespace fp4d
