#include "sim/sum_dot_run.hpp"

#include <cmath>

namespace fp4d {

namespace {

const std::vector<std::string> kTermKinds{"uniform", "normal", "constant", "harmonic", "alternating",
                                          "alternating-harmonic"};

TermSpec term_spec(Config& cfg, const std::string& kind_key, const std::string& c_key, const std::string& kind_def,
                   double c_def, std::uint64_t seed, bool float32) {
  TermSpec t;
  t.kind = kind_def.empty() ? cfg.get_string(kind_key) : cfg.get_string(kind_key, kind_def);
  bool known = false;
  for (const std::string& k : kTermKinds) known = known || k == t.kind;
  std::string list;
  for (const std::string& k : kTermKinds) list += (list.empty() ? "" : ", ") + k;
  cfg.require(known, kind_key, "unknown term kind '" + t.kind + "' (known: " + list + ")");
  t.c = cfg.get_double(c_key, c_def);
  cfg.require(std::isfinite(t.c) && t.c != 0.0, c_key, "must be finite and non-zero");
  t.seed = seed;
  t.float32 = float32;
  return t;
}

}  // namespace

SumDotRun parse_sum_dot_run(Config& cfg, const std::string& workload, std::int64_t steps) {
  SumDotRun r;
  r.dot = workload == "dot";
  const std::string s = workload + ".";
  r.n = cfg.get_int(s + "n");
  if (steps > 0) r.n = steps;
  cfg.require(r.n >= 1 && r.n <= (std::int64_t{1} << 34), s + "n", "must be in [1, 2^34]");
  const auto seed = cfg.get_int(s + "seed", 1);
  cfg.require(seed >= 0, s + "seed", "must be >= 0");
  const bool f32 = cfg.get_bool(s + "float32_terms", true);
  r.a = term_spec(cfg, s + "terms", s + "c", "", 1.0, static_cast<std::uint64_t>(seed), f32);

  r.format_name = cfg.get_string(s + "format", "fp32");
  cfg.require(r.format_name != "ue8m0", s + "format", "ue8m0 has no sign or zero: not an accumulator");
  try {
    r.options.format = format_by_name(r.format_name);
  } catch (const std::exception& e) {
    cfg.require(false, s + "format", e.what());
  }
  cfg.require(r.options.format.precision <= 53, s + "format", "accumulators wider than double are not supported");
  r.rounding_name = cfg.get_string(s + "rounding", "rne");
  if (r.rounding_name == "rne") r.options.rounding.mode = Rounding::NearestEven;
  else if (r.rounding_name == "rz") r.options.rounding.mode = Rounding::TowardZero;
  else if (r.rounding_name == "sr") r.options.rounding.mode = Rounding::Stochastic;
  else cfg.require(false, s + "rounding", "must be rne, rz or sr (got '" + r.rounding_name + "')");
  const auto sr_bits = cfg.get_int(s + "sr_bits", 0);
  cfg.require(sr_bits >= 0 && sr_bits <= 32, s + "sr_bits", "must be in [0, 32] (0 = exact SR)");
  // The trace records sr_bits; a k-bit SR setting under RNE/RZ would read as an SR run.
  cfg.require(sr_bits == 0 || r.options.rounding.mode == Rounding::Stochastic, s + "sr_bits",
              "applies to rounding = \"sr\" only (this run rounds " + r.rounding_name + ")");
  r.options.rounding.sr_bits = static_cast<int>(sr_bits);
  r.options.rounding.rng = RngStream{static_cast<std::uint64_t>(seed), 0x53554d0000000000ull};  // "SUM"
  const auto runs = cfg.get_int(s + "runs", 1);
  cfg.require(runs >= 1 && runs <= 100000, s + "runs", "must be in [1, 100000]");
  cfg.require(runs == 1 || r.options.rounding.mode == Rounding::Stochastic, s + "runs",
              "more than one run only makes sense with rounding = \"sr\" (RNE/RZ runs are identical)");
  r.options.runs = static_cast<int>(runs);
  if (r.dot) {
    r.options.round_products = cfg.get_bool(s + "round_products", true);
    r.b = term_spec(cfg, s + "b_terms", s + "b_c", r.a.kind, r.a.c, static_cast<std::uint64_t>(seed), f32);
  }
  return r;
}

SumDotResult run_sum_dot(const SumDotRun& run, const std::atomic<bool>* stop) {
  SumDotOptions options = run.options;
  options.stop = stop;
  const std::vector<double> a = make_terms(run.a, run.n, 0, stop);
  if (!run.dot) return sum_dot(options, a);
  const std::vector<double> b = make_terms(run.b, run.n, 1, stop);
  return sum_dot(options, a, b);
}

}  // namespace fp4d
