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
// Needs a CUDA build and a device; everything else exits 2 with the reason.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "sim/gemm_experiment.hpp"
#include "sim/generators.hpp"

namespace fp4d::cli {

namespace {

struct AccumulatorArgs {
  std::vector<std::int64_t> probe_ks{32, 256, 4096};
  std::vector<std::int64_t> sweep_ks{64, 256, 1024, 4096, 16384};
  std::int64_t m = 64, n = 64;
  std::uint64_t data_seed = 1;
  bool json = false;
};

struct SweepRow {
  std::string data, path;
  std::int64_t K = 0;
  AccumulationBits gpu, cpu_fp32;
  double gpu_rel = 0, cpu_rel = 0;  // relative Frobenius accumulation error
};

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
  if (a.json) {
    nlohmann::ordered_json j;
    j["probes"] = nlohmann::ordered_json::array();
    for (const auto& p : probes)
      j["probes"].push_back({{"path", p.path}, {"placement", p.placement}, {"k", p.K}, {"kept_bits", p.kept_bits},
                             {"max_t", p.max_t}});
    j["sweep"] = nlohmann::ordered_json::array();
    for (const SweepRow& r : rows)
      j["sweep"].push_back({{"data", r.data}, {"path", r.path}, {"k", r.K}, {"gpu_bits_min", r.gpu.min},
                            {"gpu_bits_p01", r.gpu.p01}, {"gpu_bits_median", r.gpu.median}, {"gpu_rel", r.gpu_rel},
                            {"fp32_bits_min", r.cpu_fp32.min}, {"fp32_bits_p01", r.cpu_fp32.p01},
                            {"fp32_bits_median", r.cpu_fp32.median}, {"fp32_rel", r.cpu_rel}});
    // error_handler_t::replace: a string that is not UTF-8 (a path) prints as U+FFFD rather than
    // throwing after the work is done.
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("fp4drift accumulator: probes 1 + 2^-t (bits kept below the running sum's leading bit; "
              "a float32 accumulator with RN keeps 23)\n");
  std::printf("%-22s %-12s %7s %10s %8s\n", "path", "placement", "K", "kept bits", "max t");
  for (const auto& p : probes)
    std::printf("%-22s %-12s %7lld %10d %8d\n", p.path.c_str(), p.placement.c_str(), static_cast<long long>(p.K),
                p.kept_bits, p.max_t);
  std::printf("\nrandom operands, M=%lld N=%lld: bits kept = -log2(|C - exact| / sum|ab|) per element "
              "(GPU | CPU sequential float32 model of the same operands)\n",
              static_cast<long long>(a.m), static_cast<long long>(a.n));
  std::printf("%-9s %-22s %7s %8s %8s %8s %11s | %8s %8s %8s %11s\n", "data", "path", "K", "min", "p01", "median",
              "rel err", "min", "p01", "median", "rel err");
  for (const SweepRow& r : rows)
    std::printf("%-9s %-22s %7lld %8.1f %8.1f %8.1f %11.3e | %8.1f %8.1f %8.1f %11.3e\n", r.data.c_str(), r.path.c_str(),
                static_cast<long long>(r.K), r.gpu.min, r.gpu.p01, r.gpu.median, r.gpu_rel, r.cpu_fp32.min,
                r.cpu_fp32.p01, r.cpu_fp32.median, r.cpu_rel);
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
