// fp4drift bench quantize: CPU quantizer throughput in elements/s (and per core) for
// 1..N threads, input read and codes + scales written, plus a check that the output is
// bit-identical for every thread count. The baseline is the same E2M1 element-rounding
// loop (no block scales) compiled scalar and vectorised. Timing is the best of --repeat
// runs (steady state, after one warm-up).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "backend/cuda/bench.hpp"
#include "commands.hpp"
#include "quant/fp8_scaled.hpp"
#include "quant/gemm_emulated.hpp"
#include "quant/mxfp4.hpp"
#include "quant/nvfp4.hpp"
#include "quant/quantize.hpp"
#include "quant/presets.hpp"
#include "quant/ref_operand.hpp"
#include "ref/exact_block_gemm.hpp"
#include "ref/reference_gemm.hpp"
#include "sim/generators.hpp"

namespace fp4d::cli {

namespace {

// The baseline loops: float32 -> E2M1 code per element, one byte out per element.
__attribute__((optimize("no-tree-vectorize"))) void e2m1_loop_scalar(const float* x, std::uint8_t* q, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) q[i] = e2m1_rne(x[i]);
}
void e2m1_loop_vector(const float* x, std::uint8_t* q, std::int64_t n) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) q[i] = e2m1_rne(x[i]);
}

std::uint64_t fnv1a(std::uint64_t h, const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

struct Case {
  std::string name;
  std::function<void()> run;             // the timed work
  std::function<std::uint64_t()> hash;   // hash of its output (not timed)
  bool threaded = true;
};

struct BenchArgs {
  std::string what = "quantize";
  std::int64_t log2_elements = 24;
  std::vector<int> threads{1, 2};
  int repeat = 5;
  std::vector<std::string> only;  // case names to run (all when empty)
  std::vector<std::int64_t> sizes{256, 1024};  // gemm-ref
  std::int64_t cuda_rows = 8192, cuda_cols = 8192;  // quantize-cuda
  std::string cuda_dtype = "bf16";                  // quantize-cuda, quantize-dual-cuda: bf16 | f32
  std::int64_t gemm_size = 8192;                    // gemm-cuda: M = N = K
  std::int64_t mlp_width = 512, mlp_batch = 512;    // mlp-ref (mlp-cuda: 4096, 4096)
  std::string mlp_config = "data/configs/mlp-quick.toml";  // mlp-cuda: the quick model
  std::int64_t mlp_steps = 2000;                    // mlp-cuda: timed steps of the quick model (lm-cuda: 20)
  std::string precision;                            // lm-ref: the reference's (empty: the config's)
  bool width_set = false, batch_set = false;
  bool json = false;
};

double best_seconds(int repeat, const std::function<void()>& f) {
  f();  // warm-up
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// fp4drift bench gemm-ref: the exact fixed-point GEMM of NVFP4 operands (M = N = K = size)
// in multiply-adds per second, against the same product of the dequantized values in
// cpp_bin_float<256> (on a size of at most 128, where it takes seconds, as MAC/s); and the
// emulated NVFP4 GEMM under each accumulator (fp32-sequential, sm90, exact).
int run_bench_gemm_ref(const BenchArgs& a) {
  struct Row {
    std::string what;
    std::int64_t size;
    int threads;
    double seconds, macs;
  };
  std::vector<Row> rows;
  for (const std::int64_t size : a.sizes) {
    if (size < 16 || size > 4096) throw UsageError("--sizes must be in [16, 4096]");
    GeneratorSpec g;
    g.rows = g.cols = size;
    g.seed = 11;
    const Matrix x = generate(g);
    g.seed = 12;
    const Matrix w = generate(g);
    const QuantizedTensor qa = quantize_cpu(x, preset("nvfp4").spec), qb = quantize_cpu(w, preset("nvfp4").spec);
    const ref::BlockOperand A = block_operand(qa), B = block_operand(qb);
    const double macs = static_cast<double>(size) * size * size;
    for (const int t : a.threads) {
      omp_set_num_threads(t);
      const double s = best_seconds(a.repeat, [&] { (void)ref::exact_block_gemm_nt(A, B); });
      rows.push_back({"exact-block (Kulisch)", size, t, s, macs / s});
      // The emulated GEMM under each accumulator (the sm90 model's cost against sequential FP32).
      for (const Accumulator acc : {Accumulator::Fp32Sequential, Accumulator::Sm90, Accumulator::Exact}) {
        const double se = best_seconds(a.repeat, [&] { (void)gemm_nvfp4_emulated(qa, qb, {acc}); });
        rows.push_back({"emulated " + to_string(acc), size, t, se, macs / se});
      }
    }
    const std::int64_t ms = std::min<std::int64_t>(size, 128);
    std::vector<double> ad(static_cast<std::size_t>(ms * ms)), bd(ad.size());
    for (std::int64_t r = 0; r < ms; ++r)
      for (std::int64_t c = 0; c < ms; ++c) {
        ad[static_cast<std::size_t>(r * ms + c)] = qa.dequantized(r, c);
        bd[static_cast<std::size_t>(r * ms + c)] = qb.dequantized(r, c);
      }
    omp_set_num_threads(1);
    const double s = best_seconds(1, [&] { (void)ref::gemm_nt<ref::mp256>(ad.data(), bd.data(), ms, ms, ms); });
    rows.push_back({"cpp_bin_float<256>", ms, 1, s, static_cast<double>(ms) * ms * ms / s});
  }
  if (a.json) {
    nlohmann::ordered_json j = {{"benchmark", "gemm-ref"}, {"results", nlohmann::ordered_json::array()}};
    for (const Row& r : rows)
      j["results"].push_back({{"case", r.what}, {"size", r.size}, {"threads", r.threads}, {"seconds", r.seconds},
                              {"mac_per_s", r.macs}, {"mac_per_s_per_core", r.macs / r.threads}});
    // error_handler_t::replace: a string that is not UTF-8 (a path) prints as U+FFFD rather than
    // throwing after the work is done.
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("fp4drift bench gemm-ref: exact GEMM of NVFP4 operands (M = N = K = size), best of %d\n", a.repeat);
  std::printf("%-26s %6s %7s %11s %14s %16s\n", "case", "size", "threads", "seconds", "MMAC/s", "MMAC/s/core");
  for (const Row& r : rows)
    std::printf("%-26s %6lld %7d %11.4f %14.1f %16.1f\n", r.what.c_str(), static_cast<long long>(r.size), r.threads,
                r.seconds, r.macs / 1e6, r.macs / 1e6 / r.threads);
  return 0;
}

// --dtype of the quantize benchmarks: true for bf16, false for f32.
bool bench_bf16_input(const BenchArgs& a) {
  if (a.cuda_dtype != "bf16" && a.cuda_dtype != "f32") throw UsageError("--dtype must be bf16 or f32");
  return a.cuda_dtype == "bf16";
}

// fp4drift bench quantize-cuda: NVFP4 1x16 RNE (TE rule) of a BF16 or float32 tensor on the
// GPU against the device's measured copy bandwidth (the roofline). Bandwidths count (a) the
// bytes read once + written (input + codes + scales) and (b) the bytes actually moved (the
// separate amax pass reads the input a second time).
int run_bench_quantize_cuda(const BenchArgs& a) {
  const auto dtype = bench_bf16_input(a) ? cuda::InputDtype::Bf16 : cuda::InputDtype::F32;
  const cuda::Nvfp4BenchResult r = cuda::nvfp4_quantize_cuda_bench(a.cuda_rows, a.cuda_cols, a.repeat, dtype);
  const double copy = r.copy_gbps(), counted = r.counted_bytes(), moved = r.moved_bytes_amax_and_quantize();
  struct Line {
    const char* name;
    double seconds, bytes_counted, bytes_moved;
  };
  const Line lines[] = {{"amax + quantize", r.amax_and_quantize_s, counted, moved},
                        {"quantize only", r.quantize_only_s, counted, counted},
                        {"amax only", r.amax_only_s, r.input_bytes(), r.input_bytes()}};
  auto gbps = [](double bytes, double s) { return bytes / s * 1e-9; };
  const double cub_gbps = gbps(r.cub_read_bytes, r.cub_read_s);
  const double amax_over_cub = gbps(r.input_bytes(), r.amax_only_s) / cub_gbps;
  if (a.json) {
    nlohmann::ordered_json j = {{"benchmark", "quantize-cuda"}, {"dtype", a.cuda_dtype}, {"rows", r.rows},
                                {"cols", r.cols}, {"repeat", a.repeat}, {"bytes_counted", counted},
                                {"bytes_moved_amax_and_quantize", moved}, {"copy_seconds", r.copy_s}, {"copy_gbps", copy},
                                {"cub_read_seconds", r.cub_read_s},
                                {"cub_read_gbps", cub_gbps},
                                {"amax_gbps_over_cub_read_gbps", amax_over_cub},
                                {"l2_bytes_flushed_before_each_repetition", r.l2_bytes},
                                {"results", nlohmann::ordered_json::array()}};
    for (const Line& l : lines)
      j["results"].push_back({{"case", l.name}, {"seconds", l.seconds},
                              {"gbps_counted", gbps(l.bytes_counted, l.seconds)},
                              {"fraction_of_copy_counted", gbps(l.bytes_counted, l.seconds) / copy},
                              {"gbps_moved", gbps(l.bytes_moved, l.seconds)},
                              {"fraction_of_copy_moved", gbps(l.bytes_moved, l.seconds) / copy}});
    j["quantize_only_variants"] = nlohmann::ordered_json::array();
    for (const auto& v : r.variants)
      j["quantize_only_variants"].push_back({{"variant", v.name}, {"seconds", v.seconds}, {"bytes", v.bytes},
                                             {"gbps", gbps(v.bytes, v.seconds)},
                                             {"fraction_of_copy", gbps(v.bytes, v.seconds) / copy}});
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("fp4drift bench quantize-cuda: NVFP4 1x16 RNE (TE rule) of %lld x %lld %s, best of %d\n",
              static_cast<long long>(r.rows), static_cast<long long>(r.cols), a.cuda_dtype.c_str(), a.repeat);
  std::printf("  (a) counted: input read once + codes + scales = %.1f MB; (b) moved: amax + quantize also\n"
              "      reads the input a second time = %.1f MB\n", counted / 1e6, moved / 1e6);
  std::printf("  device copy of the input (read + write): %.3f ms, %.1f GB/s\n", r.copy_s * 1e3, copy);
  std::printf("  read-only reference, cub::DeviceReduce::Max over the input's words: %.4f ms, %.1f GB/s, %.1f%% of "
              "copy; the amax pass reads at %.1f%% of its rate\n",
              r.cub_read_s * 1e3, cub_gbps, 100 * cub_gbps / copy, 100 * amax_over_cub);
  std::printf("  every timed repetition starts from a cold L2 (%.0f MiB, read over before it)\n", r.l2_bytes / 1048576.0);
  std::printf("  %-24s %10s %12s %10s %12s %10s\n", "case", "ms", "GB/s (a)", "copy (a)", "GB/s (b)", "copy (b)");
  for (const Line& l : lines)
    std::printf("  %-24s %10.4f %12.1f %9.1f%% %12.1f %9.1f%%\n", l.name, l.seconds * 1e3,
                gbps(l.bytes_counted, l.seconds), 100 * gbps(l.bytes_counted, l.seconds) / copy,
                gbps(l.bytes_moved, l.seconds), 100 * gbps(l.bytes_moved, l.seconds) / copy);
  std::printf("  quantize-only variants (each its own bytes read once + written):\n");
  for (const auto& v : r.variants)
    std::printf("    %-36s %7.1f MB %10.4f ms %9.1f GB/s %6.1f%%\n", v.name.c_str(), v.bytes / 1e6, v.seconds * 1e3,
                gbps(v.bytes, v.seconds), 100 * gbps(v.bytes, v.seconds) / copy);
  return 0;
}

// A CUDA benchmark in a build without CUDA is refused as bad input (exit 2), as --backend cuda
// is; a missing or failing device stays a run-time error.
template <class F>
int cuda_bench(F&& run) {
  try {
    return run();
  } catch (const BackendUnavailable& e) {
    throw UsageError(e.what());
  }
}

// Whether an option was given on the command line.
using Given = std::function<bool(const std::string&)>;

// Each option belongs to some benchmarks: given to another one it would be accepted and
// ignored, so it is refused, as are values no benchmark can run with.
void check_bench_options(const BenchArgs& a, const Given& given) {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> owners = {
      {"--gemm-size", {"gemm-cuda"}},
      {"--width", {"mlp-ref", "mlp-cuda"}},
      {"--batch", {"mlp-ref", "mlp-cuda"}},
      {"--config", {"mlp-cuda", "lm-ref"}},
      {"--precision", {"lm-ref"}},
      {"--steps", {"mlp-cuda", "lm-cuda"}},
      {"--sizes", {"gemm-ref"}},
      {"--rows", {"quantize-cuda", "quantize-dual-cuda"}},
      {"--cols", {"quantize-cuda", "quantize-dual-cuda"}},
      {"--dtype", {"quantize-cuda", "quantize-dual-cuda"}},
      {"--log2-elements", {"quantize"}},
      {"--threads", {"quantize", "gemm-ref"}},
      {"--repeat", {"quantize", "gemm-ref", "quantize-cuda", "quantize-dual-cuda", "gemm-cuda", "mlp-ref", "lm-ref"}},
      {"--cases", {"quantize"}},
  };
  static const std::vector<std::string> known = {"quantize", "gemm-ref", "quantize-cuda", "quantize-dual-cuda",
                                                 "gemm-cuda", "mlp-ref", "mlp-cuda", "lm-ref", "lm-cuda"};
  if (std::find(known.begin(), known.end(), a.what) == known.end())
    throw UsageError("unknown benchmark '" + a.what + "' (known: quantize, gemm-ref, quantize-cuda, quantize-dual-cuda, gemm-cuda, mlp-ref, mlp-cuda, lm-ref, lm-cuda)");
  for (const auto& [option, benchmarks] : owners) {
    if (!given(option) || std::find(benchmarks.begin(), benchmarks.end(), a.what) != benchmarks.end()) continue;
    std::string list;
    for (const std::string& b : benchmarks) list += (list.empty() ? "" : ", ") + b;
    throw UsageError(option + " does not apply to bench " + a.what + " (it is an option of: " + list + ")");
  }
  if (a.repeat < 1) throw UsageError("--repeat must be at least 1, got " + std::to_string(a.repeat));
  if (a.threads.empty()) throw UsageError("--threads needs at least one thread count");
  for (const int t : a.threads)
    if (t < 1) throw UsageError("--threads values must be at least 1, got " + std::to_string(t));
  if (a.gemm_size < 1 || a.cuda_rows < 1 || a.cuda_cols < 1 || a.mlp_steps < 1)
    throw UsageError("--gemm-size, --rows, --cols and --steps must be positive");
  if (a.what == "mlp-cuda" && ((a.width_set && a.mlp_width < 16) || (a.batch_set && a.mlp_batch < 16)))
    throw UsageError("bench mlp-cuda: --width and --batch must be at least 16");
}

int run_bench(const BenchArgs& a, const Given& given) {
  check_bench_options(a, given);
  if (a.what == "gemm-ref") return run_bench_gemm_ref(a);
  if (a.what == "quantize-cuda") return cuda_bench([&] { return run_bench_quantize_cuda(a); });
  if (a.what == "gemm-cuda") return cuda_bench([&] { return run_bench_gemm_cuda(a.gemm_size, a.repeat, a.json); });
  if (a.what == "mlp-ref") return run_bench_mlp_ref(a.mlp_width, a.mlp_batch, 3, a.repeat, a.json);
  if (a.what == "lm-ref")
    return run_bench_lm_ref(given("--config") ? a.mlp_config : "data/configs/lm-quick.toml", a.precision, a.repeat,
                            a.json);
  if (a.what == "mlp-cuda")
    return cuda_bench([&] {
      return run_bench_mlp_cuda(a.mlp_config, a.width_set ? a.mlp_width : 4096, a.batch_set ? a.mlp_batch : 4096,
                                a.mlp_steps, a.json);
    });
  if (a.what == "lm-cuda")
    return cuda_bench([&] { return run_bench_lm_cuda(given("--steps") ? a.mlp_steps : 20, a.json); });
  if (a.what == "quantize-dual-cuda")
    return cuda_bench(
        [&] { return run_bench_dual_cuda(a.cuda_rows, a.cuda_cols, bench_bf16_input(a), a.repeat, a.json); });
  if (a.what != "quantize")
    throw UsageError("unknown benchmark '" + a.what + "' (known: quantize, gemm-ref, quantize-cuda, quantize-dual-cuda, gemm-cuda, mlp-ref, mlp-cuda, lm-ref, lm-cuda)");
  if (a.log2_elements < 8 || a.log2_elements > 30) throw UsageError("--log2-elements must be in [8, 30]");
  const std::int64_t n = std::int64_t{1} << a.log2_elements;
  GeneratorSpec g;
  g.rows = std::int64_t{1} << (a.log2_elements / 2);
  g.cols = n / g.rows;
  g.seed = 7;
  const Matrix x = generate(g);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n));

  QuantizedTensor q;  // reused: steady state, no page faults in the timed runs
  auto quant = [&](const QuantSpec& s, void (*fn)(const Matrix&, const QuantSpec&, QuantizedTensor&, bool)) {
    return [&x, &q, s, fn]() {
      q.spec = s;
      fn(x, s, q, false);
    };
  };
  auto quant_hash = [&q]() {
    std::uint64_t h = fnv1a(0xcbf29ce484222325ull, q.codes.data(), q.codes.size());
    h = fnv1a(h, q.scale_codes.data(), q.scale_codes.size());
    return fnv1a(h, q.scale_values.data(), q.scale_values.size() * sizeof(float));
  };
  auto bytes_hash = [&bytes]() { return fnv1a(0xcbf29ce484222325ull, bytes.data(), bytes.size()); };
  QuantSpec sr8 = preset("nvfp4-sr").spec, srhw = sr8;
  sr8.rounding.sr_bits = 8;
  srhw.rounding.sr_bits = kSrHw;
  QuantSpec mx_sr = preset("mxfp4").spec, mx_srhw;
  mx_sr.rounding = preset("nvfp4-sr").spec.rounding;
  mx_srhw = mx_sr;
  mx_srhw.rounding.sr_bits = kSrHw;
  const std::vector<Case> cases = {
      {"e2m1-loop-scalar", [&] { e2m1_loop_scalar(x.data.data(), bytes.data(), n); }, bytes_hash, false},
      {"e2m1-loop", [&] { e2m1_loop_vector(x.data.data(), bytes.data(), n); }, bytes_hash},
      {"nvfp4-1x16-rne", quant(preset("nvfp4").spec, nvfp4_quantize_cpu), quant_hash},
      {"nvfp4-1x16-sr", quant(preset("nvfp4-sr").spec, nvfp4_quantize_cpu), quant_hash},
      {"nvfp4-1x16-sr8", quant(sr8, nvfp4_quantize_cpu), quant_hash},
      {"nvfp4-1x16-srhw", quant(srhw, nvfp4_quantize_cpu), quant_hash},
      {"nvfp4-16x16-rne", quant(preset("nvfp4-2d").spec, nvfp4_quantize_cpu), quant_hash},
      {"mxfp4-1x32-rne", quant(preset("mxfp4").spec, mxfp4_quantize_cpu), quant_hash},
      {"mxfp4-1x32-sr", quant(mx_sr, mxfp4_quantize_cpu), quant_hash},
      {"mxfp4-1x32-srhw", quant(mx_srhw, mxfp4_quantize_cpu), quant_hash},
      {"fp8-e4m3-tensor", quant(preset("fp8-e4m3-tensor").spec, fp8_quantize_cpu), quant_hash},
      {"fp8-e4m3-1x128", quant(preset("fp8-e4m3-1x128").spec, fp8_quantize_cpu), quant_hash},
  };

  for (const std::string& name : a.only)  // an unknown name would make the run time nothing
    if (std::none_of(cases.begin(), cases.end(), [&](const Case& c) { return c.name == name; }))
    {
      std::string list;
      for (const Case& c : cases) list += (list.empty() ? "" : ", ") + c.name;
      throw UsageError("--cases: unknown case '" + name + "' (known: " + list + ")");
    }
  struct Row {
    std::string name;
    int threads;
    double seconds, eps;
    bool identical;
  };
  std::vector<Row> rows;
  for (const Case& c : cases) {
    if (!a.only.empty() && std::find(a.only.begin(), a.only.end(), c.name) == a.only.end()) continue;
    std::uint64_t first_hash = 0;
    for (std::size_t ti = 0; ti < a.threads.size(); ++ti) {
      const int t = a.threads[ti];
      if (!c.threaded && t != 1) continue;
      omp_set_num_threads(t);
      c.run();  // warm-up (allocates the outputs)
      double best = 1e30;
      for (int r = 0; r < a.repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        c.run();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, s);
      }
      const std::uint64_t h = c.hash();
      if (ti == 0) first_hash = h;
      rows.push_back({c.name, t, best, static_cast<double>(n) / best, h == first_hash});
    }
  }

  bool all_identical = true;
  for (const Row& r : rows) all_identical = all_identical && r.identical;
  if (a.json) {
    nlohmann::ordered_json j = {{"benchmark", "quantize"}, {"elements", n}, {"results", nlohmann::ordered_json::array()}};
    for (const Row& r : rows)
      j["results"].push_back({{"case", r.name},
                              {"threads", r.threads},
                              {"seconds", r.seconds},
                              {"elements_per_s", r.eps},
                              {"elements_per_s_per_core", r.eps / r.threads},
                              {"bit_identical_to_1_thread", r.identical}});
    j["all_bit_identical"] = all_identical;
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  } else {
    std::printf("fp4drift bench quantize: %lld float32 elements (%lld x %lld), best of %d, input read + codes/scales written\n",
                static_cast<long long>(n), static_cast<long long>(g.rows), static_cast<long long>(g.cols), a.repeat);
    std::printf("%-18s %7s %10s %14s %16s %10s\n", "case", "threads", "ms", "Melem/s", "Melem/s/core", "identical");
    for (const Row& r : rows)
      std::printf("%-18s %7d %10.2f %14.1f %16.1f %10s\n", r.name.c_str(), r.threads, r.seconds * 1e3, r.eps / 1e6,
                  r.eps / 1e6 / r.threads, r.identical ? "yes" : "NO");
  }
  return all_identical ? 0 : 1;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("what", a->what, "Benchmark: quantize | gemm-ref | quantize-cuda | quantize-dual-cuda | gemm-cuda | mlp-ref | mlp-cuda | lm-ref | lm-cuda")->capture_default_str();
  app.add_option("--gemm-size", a->gemm_size, "gemm-cuda: M = N = K")->capture_default_str();
  app.add_option("--width", a->mlp_width, "mlp-ref, mlp-cuda: layer width (mlp-cuda default 4096)")->capture_default_str()
      ->each([a](const std::string&) { a->width_set = true; });
  app.add_option("--batch", a->mlp_batch, "mlp-ref, mlp-cuda: batch (mlp-cuda default 4096)")->capture_default_str()
      ->each([a](const std::string&) { a->batch_set = true; });
  app.add_option("--config", a->mlp_config, "mlp-cuda: the quick model's config; lm-ref: an lm config (default data/configs/lm-quick.toml)")->capture_default_str();
  app.add_option("--precision", a->precision,
                 "lm-ref: the reference's precision, double | binary128 | mp256 (default: the config's [reference] precision)");
  app.add_option("--steps", a->mlp_steps, "mlp-cuda: timed steps of the quick model (the wide one: steps / 20, >= 100); lm-cuda: timed steps per recipe (default 20)")
      ->capture_default_str();
  app.add_option("--sizes", a->sizes, "gemm-ref: M = N = K sizes (list)")->delimiter(',');
  app.add_option("--rows", a->cuda_rows, "quantize-cuda, quantize-dual-cuda: rows")->capture_default_str();
  app.add_option("--cols", a->cuda_cols, "quantize-cuda, quantize-dual-cuda: cols")->capture_default_str();
  app.add_option("--dtype", a->cuda_dtype, "quantize-cuda, quantize-dual-cuda: input type, bf16 | f32")->capture_default_str();
  app.add_option("--log2-elements", a->log2_elements, "Tensor size 2^N elements")->capture_default_str();
  app.add_option("--threads", a->threads, "Thread counts to run (list)")->delimiter(',');
  app.add_option("--repeat", a->repeat, "Timed repetitions (best is reported)")->capture_default_str();
  app.add_option("--cases", a->only, "Only these cases (comma-separated)")->delimiter(',');
  app.add_flag("--json", a->json, "JSON output");
  return [a, &app]() {
    return run_bench(*a, [&app](const std::string& name) { return app.get_option(name)->count() > 0; });
  };
}

}  // namespace fp4d::cli
