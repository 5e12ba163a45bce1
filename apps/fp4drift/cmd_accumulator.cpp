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
// Needs a CUDA build and a device; everything else exits 2 with the reason.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "format/bf16.hpp"
#include "quant/quantize.hpp"
#include "quant/tensor_core_model.hpp"
#include "quant/training_recipe.hpp"
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

int run_accumulator(const AccumulatorArgs& a) {
  check_accumulator_options(a);
  const Backend& device = cuda_backend();
  try {
    device.require_available();
  } catch (const BackendUnavailable& e) {
    throw UsageError(std::string("accumulator: ") + e.what());
  }
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
    const std::string meaning = kept == K - 1 ? "none lost (FP32 accumulation)"
                                : kept == 0   ? "all lost: no promotion to FP32 within K"
                                : kept > 0    ? "promoted every " + std::to_string(K - kept) + " products"
                                              : "not of the form 1 + m 2^-18 (another accumulation than assumed)";
    std::printf("%-22s K=%-7lld kept %lld of %lld: %s\n", p.path.c_str(), static_cast<long long>(K),
                static_cast<long long>(kept), static_cast<long long>(K - 1), meaning.c_str());
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
  return [a]() { return run_accumulator(*a); };
}

}  // namespace fp4d::cli
