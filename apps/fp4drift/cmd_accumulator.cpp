// fp4drift accumulator: how many bits of the exact partial sums the GPU's tensor-core GEMMs keep
// (docs/numerics.md, "Tensor-core accumulation").
//  1. Probes: dot products 1 + 2^-t with the two terms in chosen K positions; the largest t
//     that survives exactly is the number of bits an addition keeps below the running sum's
//     leading bit (23 for a float32 accumulator with round-to-nearest).
//  2. A sweep over K: Fprop GEMMs of random operands (N(0,1), and |N(0,1)| where every partial
//     sum grows) quantized by the bf16 and fp8-tensor recipes, multiplied on the GPU, compared
//     with the exact product of the quantized operands: bits kept = -log2(|err| / sum|a b|)
//     per element (min, 1st percentile, median), beside the same figure for the CPU's
//     sequential float32 model of the same operands.
//  3. The tensor-core model (quant/tensor_core_model.hpp) against the GPU: BF16 operands of
//     several distributions, the GPU's FP32 output element by element against the model's and
//     against a sequential float32 sum of the same exact products: the fraction equal bit for
//     bit (cuBLASLt picks its kernel; a split-K or reordered kernel shows as disagreement).
// With --model-check, instead: the model against cuBLASLt bit for bit on a fixed plan of cases
// (sim/accumulator_check.hpp: every input type, twelve distributions, K 16 .. 16384), FP8 without
// fast accumulation against each promotion hypothesis, with the promotion probe beside them.
// Needs a CUDA build and a device; everything else exits 2 with the reason.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "commands.hpp"
#include "format/bf16.hpp"
#include "quant/quantize.hpp"
#include "quant/tensor_core_model.hpp"
#include "quant/training_recipe.hpp"
#include "sim/accumulator_cases.hpp"
#include "sim/accumulator_check.hpp"
#include "sim/gemm_experiment.hpp"
#include "sim/generators.hpp"

namespace fp4d::cli {

namespace {

struct AccumulatorArgs {
  std::vector<std::int64_t> probe_ks{32, 256, 4096};
  std::vector<std::int64_t> sweep_ks{64, 256, 1024, 4096, 16384};
  std::vector<std::int64_t> model_ks{16, 64, 256, 1024, 4096};
  std::int64_t m = 64, n = 64;
  std::uint64_t data_seed = 1;
  bool json = false;
  // --model-check and its options
  bool model_check = false;
  double scale = 1.0;
  std::uint64_t seed = 1;
  std::string out;
  bool require_agreement = false;
};

struct ModelRow {
  std::string data;
  std::int64_t K = 0, outputs = 0, model_equal = 0, fp32_equal = 0;
};

struct SweepRow {
  std::string data, path;
  std::int64_t K = 0;
  AccumulationBits gpu, cpu_fp32;
  double gpu_rel = 0, cpu_rel = 0;  // relative Frobenius accumulation error
};

std::vector<ModelRow> model_agreement(const AccumulatorArgs& a, const Backend& device) {
  const TensorCoreModel tc = sm90_tensor_core_model("bf16");
  const QuantSpec spec = gemm_operand_spec(gemm_recipe("bf16"), OperandKind::Activation, false, 0, 0);
  const QuantizedProduct gpu = device.gemm_product(GemmProductOptions{});
  const auto bits = [](float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
  };
  std::vector<ModelRow> rows;
  for (const char* data : {"N(0,1)", "|N(0,1)|", "mixed-exp", "cancelling"})
    for (const std::int64_t K : a.model_ks) {
      GeneratorSpec g;
      g.rows = a.m, g.cols = K, g.seed = a.data_seed + 7;
      Matrix x = generate(g);
      g.rows = a.n, g.seed = a.data_seed + 8;
      Matrix y = generate(g);
      const std::string d = data;
      for (Matrix* m : {&x, &y})
        for (std::size_t i = 0; i < m->data.size(); ++i) {
          float& v = m->data[i];
          if (d == "|N(0,1)|") v = std::fabs(v);
          if (d == "mixed-exp") v = std::ldexp(v, static_cast<int>(i * 2654435761u % 41) - 20);  // 2^-20 .. 2^20
          // Pairs of products that nearly cancel: x_2j+1 = -x_2j (1 + 2^-7), y_2j+1 = y_2j.
          if (d == "cancelling" && i % 2 == 1) v = m == &x ? -m->data[i - 1] * (1.0f + std::ldexp(1.0f, -7)) : m->data[i - 1];
        }
      const QuantizedTensor qa = quantize_cpu(x, spec), qb = quantize_cpu(y, spec);
      const Matrix c = gpu(qa, qb);
      std::vector<float> av(qa.codes16.size()), bv(qb.codes16.size());
      for (std::size_t i = 0; i < av.size(); ++i) av[i] = bf16_to_float(qa.codes16[i]);
      for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = bf16_to_float(qb.codes16[i]);
      ModelRow row;
      row.data = d, row.K = K, row.outputs = a.m * a.n;
      std::int64_t model_equal = 0, fp32_equal = 0;
#pragma omp parallel for reduction(+ : model_equal, fp32_equal) schedule(static)
      for (std::int64_t i = 0; i < a.m; ++i)
        for (std::int64_t j = 0; j < a.n; ++j) {
          const float* ai = av.data() + i * K;
          const float* bj = bv.data() + j * K;
          float seq = 0.0f;
          for (std::int64_t k = 0; k < K; ++k) seq = seq + ai[k] * bj[k];  // BF16 products are exact in float
          const float hw = c.data[static_cast<std::size_t>(i * a.n + j)];
          model_equal += bits(tensor_core_dot(ai, bj, K, 0.0f, tc)) == bits(hw) ? 1 : 0;
          fp32_equal += bits(seq) == bits(hw) ? 1 : 0;
        }
      row.model_equal = model_equal, row.fp32_equal = fp32_equal;
      rows.push_back(row);
    }
  return rows;
}

std::vector<SweepRow> sweep(const AccumulatorArgs& a, const Backend& device) {
  struct Path {
    const char* name;
    const char* recipe;
    bool fast;
  };
  const Path paths[] = {{"bf16", "bf16", false}, {"fp8-e4m3", "fp8-tensor", false}, {"fp8-e4m3-fast-accum", "fp8-tensor", true}};
  std::vector<SweepRow> rows;
  for (const bool positive : {false, true})
    for (const std::int64_t K : a.sweep_ks) {
      GemmOperands ops;
      ops.role = GemmRole::Fprop;
      GeneratorSpec g;
      g.rows = a.m, g.cols = K, g.seed = a.data_seed;
      ops.first = generate(g);
      g.rows = a.n, g.seed = a.data_seed + 1;
      ops.second = generate(g);
      if (positive)
        for (Matrix* m : {&ops.first, &ops.second})
          for (float& v : m->data) v = std::fabs(v);
      for (const Path& p : paths) {
        GemmProductOptions product;
        product.fp8_fast_accumulation = p.fast;
        GemmExperimentOptions opt;
        opt.product = device.gemm_product(product);
        opt.product_path = p.name;
        const GemmResult r = run_gemm_experiment(ops, gemm_recipe(p.recipe), opt);
        SweepRow row;
        row.data = positive ? "|N(0,1)|" : "N(0,1)";
        row.path = p.name;
        row.K = K;
        row.gpu = r.accumulation_bits;
        row.cpu_fp32 = r.accumulation_bits_dequant_fp32;
        row.gpu_rel = r.accumulation.rel_frobenius;
        row.cpu_rel = r.accumulation_dequant_fp32.rel_frobenius;
        rows.push_back(row);
      }
    }
  return rows;
}

// The values are checked before the device is looked for, so that a bad one is reported as
// such on any build, and in the option's words.
void check_accumulator_options(const AccumulatorArgs& a) {
  if (a.m < 16 || a.n < 16 || a.m % 16 || a.n % 16) throw UsageError("--m and --n must be multiples of 16, at least 16");
  if (a.probe_ks.empty() || a.sweep_ks.empty()) throw UsageError("--probe-k and --sweep-k need at least one value");
  for (const std::int64_t k : a.probe_ks)
    if (k < 32 || k % 16) throw UsageError("--probe-k values must be multiples of 16, at least 32, got " + std::to_string(k));
  for (const std::int64_t k : a.sweep_ks)
    if (k < 16 || k % 16) throw UsageError("--sweep-k values must be multiples of 16, at least 16, got " + std::to_string(k));
}

// ---- --model-check ----

// What a promotion probe's count of surviving small products says (accumulator_probe.hpp).
std::string promotion_meaning(const AccumulatorProbe& p) {
  const std::int64_t kept = p.promoted_small_terms, K = p.K;
  return kept == K - 1 ? "none lost (FP32 accumulation)"
         : kept == 0   ? "all lost: no promotion to FP32 within K"
         : kept > 0    ? "promoted every " + std::to_string(K - kept) + " products"
                       : "not of the form 1 + m 2^-18 (another accumulation than assumed)";
}

std::string hex_bits(std::uint32_t u) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", u);
  return b;
}

std::string hypothesis_label(std::int64_t interval) { return interval == 0 ? "none" : std::to_string(interval); }

nlohmann::ordered_json hypothesis_json(const HypothesisOutcome& h) {
  nlohmann::ordered_json first = nlohmann::ordered_json::array();
  for (const ModelMismatch& m : h.first)
    first.push_back({{"i", m.i}, {"j", m.j}, {"device", hex_bits(m.device)}, {"model", hex_bits(m.model)}});
  return {{"interval", h.interval}, {"mismatches", h.mismatches}, {"worst_ulps", h.worst_ulps}, {"first", first}};
}

// The case's mismatches against the hypothesis the path is judged by (its model, or the FP8
// verdict), nullptr where the device failed.
const HypothesisOutcome* judged(const PathOutcome& p, const std::vector<PathTotal>& totals) {
  if (!p.error.empty() || p.hypotheses.empty()) return nullptr;
  if (p.modelled) return &p.hypotheses.front();
  for (const PathTotal& t : totals)
    if (t.path == p.path)
      for (const HypothesisOutcome& h : p.hypotheses)
        if (h.interval == t.verdict().interval) return &h;
  return &p.hypotheses.front();
}

// Where --out or a sibling temporary cannot be written, say so before the device runs for minutes.
void check_model_check_out(const std::string& out) {
  if (out.empty()) return;
  const std::filesystem::path p(out);
  if (p.extension() != ".json") throw UsageError("--out must name a .json file, got '" + out + "'");
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw UsageError("--out " + out + ": directory " + dir.string() + " does not exist");
  if (std::filesystem::exists(p, ec) && !std::filesystem::is_regular_file(p, ec))
    throw UsageError("--out " + out + " exists and is not a regular file");
}

// The JSON written whole to OUT.partial, then renamed: a file under the final name is complete.
void write_json_file(const std::string& out, const nlohmann::ordered_json& j) {
  const std::string tmp = out + ".partial";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << j.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    f.flush();
    if (!f) {
      std::filesystem::remove(tmp);
      throw std::runtime_error("could not write " + tmp);
    }
  }
  std::filesystem::rename(tmp, out);
}

int run_model_check(const AccumulatorArgs& a, const Backend& device) {
  const std::vector<ModelCheckCase> plan = model_check_plan(a.scale);
  const QuantizedProduct plain = device.gemm_product(GemmProductOptions{});
  GemmProductOptions fast_opt;
  fast_opt.fp8_fast_accumulation = true;
  const QuantizedProduct fast = device.gemm_product(fast_opt);
  const DeviceProduct product = [&](const QuantizedTensor& x, const QuantizedTensor& y, bool fast_accumulation) {
    return fast_accumulation ? fast(x, y) : plain(x, y);
  };
  // For shapes cuBLASLt refuses to run in k order: the same GEMM with its own algorithm choice,
  // compared with the model apart from the totals (agreement there says its choice sums in k
  // order after all; disagreement, that it splits K).
  GemmProductOptions free_opt, free_fast_opt = fast_opt;
  free_opt.free_algorithm = free_fast_opt.free_algorithm = true;
  const QuantizedProduct free_plain = device.gemm_product(free_opt), free_fast = device.gemm_product(free_fast_opt);
  const DeviceProduct free_choice = [&](const QuantizedTensor& x, const QuantizedTensor& y, bool fast_accumulation) {
    return fast_accumulation ? free_fast(x, y) : free_plain(x, y);
  };
  // The promotion probe's answer, printed beside the hypotheses (K = 4096: promotion every n
  // products shows as K - n small products kept).
  std::vector<AccumulatorProbe> probe;
  std::string probe_error;
  try {
    for (const AccumulatorProbe& p : device.probe_accumulators({512, 4096}))
      if (p.placement == "promotion" && p.path.rfind("fp8", 0) == 0) probe.push_back(p);
  } catch (const std::exception& e) {
    probe_error = e.what();
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<CaseOutcome> cases;
  std::string current;
  for (std::size_t n = 0; n < plan.size(); ++n) {
    const ModelCheckCase& c = plan[n];
    if (c.input != current) {
      current = c.input;
      std::fprintf(stderr, "model check: %s (%.0f s)\n", c.input.c_str(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    cases.push_back(run_model_check_case(c, a.seed + n, product, 4, free_choice));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::vector<PathTotal> totals = model_check_totals(cases);

  std::int64_t errors = 0, refused = 0, modelled_mismatches = 0, device_gemms = 0;
  double device_seconds = 0, model_seconds = 0;
  for (const CaseOutcome& c : cases) {
    device_seconds += c.device_seconds, model_seconds += c.model_seconds;
    for (const PathOutcome& p : c.paths) {
      ++device_gemms;
      errors += p.error.empty() || p.refused ? 0 : 1;
      refused += p.refused ? 1 : 0;
    }
  }
  for (const PathTotal& t : totals)
    if (t.modelled) modelled_mismatches += t.verdict().mismatches;
  // FP8 without fast accumulation: the promotion intervals compared side by side.
  std::vector<const PathTotal*> promoted;
  for (const PathTotal& t : totals)
    if (t.hypotheses.size() > 1) promoted.push_back(&t);

  nlohmann::ordered_json j;
  j["device"] = device.device_architecture();
  j["scale"] = a.scale;
  j["seed"] = a.seed;
  j["seconds"] = seconds;
  j["device_seconds"] = device_seconds;
  j["model_seconds"] = model_seconds;
  j["totals"] = nlohmann::ordered_json::array();
  for (const PathTotal& t : totals) {
    nlohmann::ordered_json h = nlohmann::ordered_json::array();
    for (const HypothesisTotal& x : t.hypotheses)
      h.push_back({{"interval", x.interval}, {"inner_products", x.inner_products}, {"mismatches", x.mismatches},
                   {"worst_ulps", x.worst_ulps}, {"cases", x.cases}, {"cases_agreeing", x.cases_agreeing}});
    j["totals"].push_back({{"path", t.path}, {"modelled", t.modelled}, {"errors", t.errors}, {"refused", t.refused},
                           {"free_choice_inner_products", t.free_choice_inner_products},
                           {"free_choice_mismatches", t.free_choice_mismatches},
                           {"verdict_interval", t.verdict().interval}, {"best_interval", t.best().interval},
                           {"hypotheses", h}});
  }
  j["promotion_probe"] = nlohmann::ordered_json::array();
  for (const AccumulatorProbe& p : probe)
    j["promotion_probe"].push_back({{"path", p.path}, {"k", p.K}, {"promoted_small_terms", p.promoted_small_terms}});
  if (!probe_error.empty()) j["promotion_probe_error"] = probe_error;
  j["cases"] = nlohmann::ordered_json::array();
  for (const CaseOutcome& c : cases) {
    nlohmann::ordered_json paths = nlohmann::ordered_json::array();
    for (const PathOutcome& p : c.paths) {
      nlohmann::ordered_json h = nlohmann::ordered_json::array();
      for (const HypothesisOutcome& x : p.hypotheses) h.push_back(hypothesis_json(x));
      paths.push_back({{"path", p.path}, {"modelled", p.modelled}, {"device_k", p.device_k}, {"error", p.error},
                       {"refused", p.refused}, {"free_choice", p.free_choice}, {"hypotheses", h}});
    }
    j["cases"].push_back({{"input", c.c.input}, {"distribution", c.c.distribution}, {"k", c.c.K}, {"m", c.c.M},
                          {"n", c.c.N}, {"seed", c.seed}, {"device_seconds", c.device_seconds},
                          {"model_seconds", c.model_seconds}, {"paths", paths}});
  }
  if (!a.out.empty()) write_json_file(a.out, j);

  if (a.json) {
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  } else {
    std::printf("fp4drift accumulator --model-check: the sm90 tensor-core model against cuBLASLt, every FP32 output "
                "bit for bit\n");
    std::printf("%s; scale %g, seed %llu: %zu operand pairs, %lld device GEMMs in %.0f s (device %.0f s, model %.0f s)\n",
                device.device_architecture().c_str(), a.scale, static_cast<unsigned long long>(a.seed), cases.size(),
                static_cast<long long>(device_gemms), seconds, device_seconds, model_seconds);
    std::printf("FP8 without fast accumulation is judged by the model's promotion every %lld products; the other "
                "intervals are compared beside it (table below)\n\n",
                static_cast<long long>(kSm90Fp8PromotionInterval));
    std::printf("%-17s %-16s %-9s %15s %11s %11s\n", "type", "distribution", "K", "inner products", "mismatches",
                "worst ulps");
    // Per path and distribution, over every K of the plan.
    for (const PathTotal& t : totals)
      for (const std::string& d : accumulator_distributions()) {
        std::int64_t ip = 0, mm = 0, err = 0, declined = 0, kmin = -1, kmax = 0;
        std::uint64_t worst = 0;
        for (const CaseOutcome& c : cases) {
          if (c.c.distribution != d) continue;
          for (const PathOutcome& p : c.paths) {
            if (p.path != t.path) continue;
            kmin = kmin < 0 ? c.c.K : std::min(kmin, c.c.K);
            kmax = std::max(kmax, c.c.K);
            const HypothesisOutcome* h = judged(p, totals);
            if (!h) {
              ++(p.refused ? declined : err);
              continue;
            }
            ip += c.c.M * c.c.N, mm += h->mismatches, worst = std::max(worst, h->worst_ulps);
          }
        }
        if (kmin < 0) continue;
        const std::string ks = std::to_string(kmin) + ".." + std::to_string(kmax);
        std::string note;
        if (err) note += "  (" + std::to_string(err) + " device errors)";
        if (declined) note += "  (" + std::to_string(declined) + " refused by cuBLASLt)";
        std::printf("%-17s %-16s %-9s %15lld %11lld %11llu%s\n", t.path.c_str(), d.c_str(), ks.c_str(),
                    static_cast<long long>(ip), static_cast<long long>(mm), static_cast<unsigned long long>(worst),
                    note.c_str());
      }
    // Every case that disagrees or failed, with its first mismatches.
    int listed = 0;
    for (const CaseOutcome& c : cases)
      for (const PathOutcome& p : c.paths) {
        const HypothesisOutcome* h = judged(p, totals);
        if (h && h->mismatches == 0) continue;
        if (++listed > 40) continue;
        if (listed == 1) std::printf("\ncases that disagree or failed (type distribution K MxN):\n");
        std::printf("  %s %s K=%lld %lldx%lld", p.path.c_str(), c.c.distribution.c_str(), static_cast<long long>(c.c.K),
                    static_cast<long long>(c.c.M), static_cast<long long>(c.c.N));
        if (p.device_k != c.c.K) std::printf(" (device K %lld)", static_cast<long long>(p.device_k));
        if (!h) {
          std::printf(": %s: %s", p.refused ? "refused by cuBLASLt in k order" : "device error", p.error.c_str());
          if (p.free_choice && !p.hypotheses.empty())
            std::printf("; with its own algorithm choice %lld mismatches vs the model",
                        static_cast<long long>(p.hypotheses.front().mismatches));
          std::printf("\n");
          continue;
        }
        std::printf(": %lld mismatches vs %s, worst %llu ulps; first (i, j, device, model):", static_cast<long long>(h->mismatches),
                    p.modelled ? "the model" : promotion_hypothesis_name(h->interval).c_str(),
                    static_cast<unsigned long long>(h->worst_ulps));
        for (const ModelMismatch& m : h->first)
          std::printf(" (%lld, %lld, %s, %s)", static_cast<long long>(m.i), static_cast<long long>(m.j),
                      hex_bits(m.device).c_str(), hex_bits(m.model).c_str());
        std::printf("\n");
      }
    if (listed > 40) std::printf("  ... %d more (all in --out)\n", listed - 40);
    // Where cuBLASLt refused a K that is not a multiple of 16, the first such case says so.
    bool padded = false;
    for (const CaseOutcome& c : cases)
      for (const PathOutcome& p : c.paths)
        if (!padded && p.error.empty() && p.device_k != c.c.K) {
          padded = true;
          std::printf("\nK not a multiple of 16 was refused by cuBLASLt on the %s path (K=%lld first) and padded "
                      "with zero products to %lld; the model's values are the same\n",
                      p.path.c_str(), static_cast<long long>(c.c.K), static_cast<long long>(p.device_k));
        }
    if (!promoted.empty()) {
      std::printf("\nFP8 without fast accumulation: mismatches per promotion hypothesis (cases agreeing / cases)\n");
      std::printf("%-30s", "hypothesis");
      for (const PathTotal* t : promoted) std::printf(" %26s", t->path.c_str());
      std::printf("\n");
      for (std::size_t h = 0; h < promoted.front()->hypotheses.size(); ++h) {
        std::printf("%-30s", promotion_hypothesis_name(promoted.front()->hypotheses[h].interval).c_str());
        for (const PathTotal* t : promoted) {
          const HypothesisTotal& x = t->hypotheses[h];
          const std::string cell = std::to_string(x.mismatches) + " (" + std::to_string(x.cases_agreeing) + "/" +
                                   std::to_string(x.cases) + ")";
          std::printf(" %26s", cell.c_str());
        }
        std::printf("\n");
      }
      std::printf("per K, the hypotheses with zero mismatches on every distribution (promotion interval; none: no "
                  "promotion):\n%-8s", "K");
      for (const PathTotal* t : promoted) std::printf(" %-30s", t->path.c_str());
      std::printf("\n");
      for (const std::int64_t K : model_check_ks()) {
        std::printf("%-8lld", static_cast<long long>(K));
        for (const PathTotal* t : promoted) {
          std::map<std::int64_t, bool> agree;
          bool any = false;
          for (const CaseOutcome& c : cases)
            for (const PathOutcome& p : c.paths)
              if (c.c.K == K && p.path == t->path && p.error.empty()) {
                any = true;
                for (const HypothesisOutcome& h : p.hypotheses)
                  agree[h.interval] = (agree.count(h.interval) ? agree[h.interval] : true) && h.mismatches == 0;
              }
          std::string cell;
          for (const auto& [iv, ok] : agree)
            if (ok) cell += (cell.empty() ? "" : ",") + hypothesis_label(iv);
          std::printf(" %-30s", !any ? "(no data)" : cell.empty() ? "(none agrees)" : cell.c_str());
        }
        std::printf("\n");
      }
      for (const AccumulatorProbe& p : probe) {
        const std::int64_t kept = p.promoted_small_terms, K = p.K;
        std::printf("promotion probe %-20s K=%-5lld promoted_small_terms %lld of %lld: %s\n", p.path.c_str(),
                    static_cast<long long>(K), static_cast<long long>(kept), static_cast<long long>(K - 1),
                    promotion_meaning(p).c_str());
      }
      if (!probe_error.empty()) std::printf("promotion probe: failed: %s\n", probe_error.c_str());
    }
    std::printf("\n");
    for (const PathTotal& t : totals) {
      const HypothesisTotal& v = t.verdict();
      const std::string label = t.hypotheses.size() > 1 ? t.path + ", " + promotion_hypothesis_name(v.interval) : t.path;
      std::string note;
      if (t.errors > t.refused) note += ", " + std::to_string(t.errors - t.refused) + " device GEMMs failed";
      if (t.refused) note += ", " + std::to_string(t.refused) + " shapes refused by cuBLASLt in k order";
      if (t.free_choice_inner_products)
        note += " (with its own algorithm choice: " + std::to_string(t.free_choice_inner_products) +
                " inner products, " + std::to_string(t.free_choice_mismatches) + " mismatches)";
      std::printf("model vs cuBLASLt (%s): %lld inner products, %lld mismatches%s\n", label.c_str(),
                  static_cast<long long>(v.inner_products), static_cast<long long>(v.mismatches), note.c_str());
    }
    for (const PathTotal* t : promoted) {
      const HypothesisTotal& b = t->best();
      std::printf("FP8 promotion (%s): %s\n", t->path.c_str(),
                  b.mismatches == 0 ? (promotion_hypothesis_name(b.interval) + " agrees on every output").c_str()
                                    : ("no hypothesis agrees; closest " + promotion_hypothesis_name(b.interval) + " (" +
                                       std::to_string(b.mismatches) + " mismatches)").c_str());
    }
    if (refused > 0)
      std::printf("%lld of %lld device GEMMs were shapes cuBLASLt refused to run in k order (listed above): outside "
                  "the totals, never counted as agreeing\n",
                  static_cast<long long>(refused), static_cast<long long>(device_gemms));
  }
  if (errors > 0)
    throw std::runtime_error("accumulator --model-check: " + std::to_string(errors) + " of " +
                             std::to_string(device_gemms) + " device GEMMs failed (listed above)");
  if (a.require_agreement && modelled_mismatches > 0)
    throw std::runtime_error("accumulator --model-check: the model and cuBLASLt disagree on " +
                             std::to_string(modelled_mismatches) +
                             " outputs (bf16, fp16, FP8 with and without fast accumulation)");
  return 0;
}

// given: the options named on the command line (those of one mode are refused in the other).
int run_accumulator(const AccumulatorArgs& a, const std::set<std::string>& given) {
  if (a.model_check) {
    for (const char* o : {"--probe-k", "--sweep-k", "--m", "--n", "--data-seed"})
      if (given.count(o)) throw UsageError(std::string(o) + " belongs to the probes and sweep, not to --model-check");
    if (!(a.scale > 0) || !std::isfinite(a.scale) || a.scale > 1000)
      throw UsageError("--scale must be a number in (0, 1000], got " + nlohmann::json(a.scale).dump());
    check_model_check_out(a.out);
  } else {
    for (const char* o : {"--scale", "--seed", "--out", "--require-agreement"})
      if (given.count(o)) throw UsageError(std::string(o) + " needs --model-check");
    check_accumulator_options(a);
  }
  const Backend& device = cuda_backend();
  try {
    device.require_available();
  } catch (const BackendUnavailable& e) {
    throw UsageError(std::string("accumulator: ") + e.what());
  }
  if (a.model_check) return run_model_check(a, device);
  const std::vector<AccumulatorProbe> probes = device.probe_accumulators(a.probe_ks);
  const std::vector<SweepRow> rows = sweep(a, device);
  const std::vector<ModelRow> model = model_agreement(a, device);
  if (a.json) {
    nlohmann::ordered_json j;
    j["probes"] = nlohmann::ordered_json::array();
    j["promotion"] = nlohmann::ordered_json::array();
    for (const auto& p : probes) {
      if (p.placement == "promotion")
        j["promotion"].push_back({{"path", p.path}, {"k", p.K}, {"promoted_small_terms", p.promoted_small_terms}});
      else
        j["probes"].push_back({{"path", p.path}, {"placement", p.placement}, {"k", p.K}, {"kept_bits", p.kept_bits},
                               {"max_t", p.max_t}});
    }
    j["sweep"] = nlohmann::ordered_json::array();
    for (const SweepRow& r : rows)
      j["sweep"].push_back({{"data", r.data}, {"path", r.path}, {"k", r.K}, {"gpu_bits_min", r.gpu.min},
                            {"gpu_bits_p01", r.gpu.p01}, {"gpu_bits_median", r.gpu.median}, {"gpu_rel", r.gpu_rel},
                            {"fp32_bits_min", r.cpu_fp32.min}, {"fp32_bits_p01", r.cpu_fp32.p01},
                            {"fp32_bits_median", r.cpu_fp32.median}, {"fp32_rel", r.cpu_rel}});
    j["model"] = nlohmann::ordered_json::array();
    for (const ModelRow& r : model)
      j["model"].push_back({{"model", "sm90-bf16"}, {"data", r.data}, {"k", r.K}, {"outputs", r.outputs},
                            {"model_equal", r.model_equal}, {"fp32_sequential_equal", r.fp32_equal}});
    // error_handler_t::replace: a string that is not UTF-8 (a path) prints as U+FFFD rather than
    // throwing after the work is done.
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("fp4drift accumulator: probes 1 + 2^-t (bits kept below the running sum's leading bit; "
              "a float32 accumulator with RN keeps 23)\n");
  std::printf("%-22s %-12s %7s %10s %8s\n", "path", "placement", "K", "kept bits", "max t");
  for (const auto& p : probes)
    if (p.placement != "promotion")
      std::printf("%-22s %-12s %7lld %10d %8d\n", p.path.c_str(), p.placement.c_str(), static_cast<long long>(p.K),
                  p.kept_bits, p.max_t);
  std::printf("\npromotion: 1 then K - 1 products 2^-18 (lost beside 1 in 13 fraction bits, exact in FP32): how many "
              "reach the result, and what that says\n");
  for (const auto& p : probes) {
    if (p.placement != "promotion") continue;
    const std::int64_t kept = p.promoted_small_terms, K = p.K;
    std::printf("%-22s K=%-7lld kept %lld of %lld: %s\n", p.path.c_str(), static_cast<long long>(K),
                static_cast<long long>(kept), static_cast<long long>(K - 1), promotion_meaning(p).c_str());
  }
  std::printf("\nrandom operands, M=%lld N=%lld: bits kept = -log2(|C - exact| / sum|ab|) per element "
              "(GPU | CPU sequential float32 model of the same operands)\n",
              static_cast<long long>(a.m), static_cast<long long>(a.n));
  std::printf("%-9s %-22s %7s %8s %8s %8s %11s | %8s %8s %8s %11s\n", "data", "path", "K", "min", "p01", "median",
              "rel err", "min", "p01", "median", "rel err");
  for (const SweepRow& r : rows)
    std::printf("%-9s %-22s %7lld %8.1f %8.1f %8.1f %11.3e | %8.1f %8.1f %8.1f %11.3e\n", r.data.c_str(), r.path.c_str(),
                static_cast<long long>(r.K), r.gpu.min, r.gpu.p01, r.gpu.median, r.gpu_rel, r.cpu_fp32.min,
                r.cpu_fp32.p01, r.cpu_fp32.median, r.cpu_rel);
  std::printf("\ntensor-core model (sm90-bf16) against the GPU's FP32 output, BF16 operands M=%lld N=%lld: "
              "outputs equal bit for bit\n",
              static_cast<long long>(a.m), static_cast<long long>(a.n));
  std::printf("%-11s %7s %8s %10s %16s\n", "data", "K", "outputs", "model", "sequential fp32");
  for (const ModelRow& r : model)
    std::printf("%-11s %7lld %8lld %9.2f%% %15.2f%%\n", r.data.c_str(), static_cast<long long>(r.K),
                static_cast<long long>(r.outputs), 100.0 * static_cast<double>(r.model_equal) / static_cast<double>(r.outputs),
                100.0 * static_cast<double>(r.fp32_equal) / static_cast<double>(r.outputs));
  return 0;
}

}  // namespace

Runner add_accumulator(CLI::App& app) {
  auto a = std::make_shared<AccumulatorArgs>();
  app.add_option("--probe-k", a->probe_ks, "K of the 1 + 2^-t probes (multiples of 16, >= 32)")->delimiter(',')
      ->capture_default_str();
  app.add_option("--sweep-k", a->sweep_ks, "K of the random-operand sweep (multiples of 16)")->delimiter(',')
      ->capture_default_str();
  app.add_option("--m", a->m, "Rows of A in the sweep")->capture_default_str();
  app.add_option("--n", a->n, "Rows of B in the sweep")->capture_default_str();
  add_seed_option(app, "--data-seed", a->data_seed, "Seed of the random operands");
  app.add_flag("--json", a->json, "Print the results as JSON");
  app.add_flag("--model-check", a->model_check,
               "Instead of the probes and sweep: the sm90 tensor-core model against cuBLASLt bit for bit, every input "
               "type (BF16, FP16, FP8 E4M3, E5M2 x E4M3, FP8 with and without fast accumulation), twelve "
               "distributions, K 16 .. 16384 (docs/numerics.md 8b)");
  app.add_option("--scale", a->scale, "--model-check: outputs per case times this (1: about 9.3e8 inner products)")
      ->capture_default_str();
  add_seed_option(app, "--seed", a->seed, "--model-check: seed of the operands (case n uses seed + n)");
  app.add_option("--out", a->out, "--model-check: write every case's result to this .json file");
  app.add_flag("--require-agreement", a->require_agreement,
               "--model-check: exit 1 when a modelled path (BF16, FP16, FP8 fast accumulation) has a mismatch");
  return [a, &app]() {
    std::set<std::string> given;
    for (const char* o : {"--probe-k", "--sweep-k", "--m", "--n", "--data-seed", "--scale", "--seed", "--out",
                          "--require-agreement"})
      if (app.get_option(o)->count() > 0) given.insert(o);
    return run_accumulator(*a, given);
  };
}

}  // namespace fp4d::cli
