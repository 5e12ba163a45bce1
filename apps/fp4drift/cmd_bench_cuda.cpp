// CUDA benchmarks beside quantize-cuda (cmd_bench.cpp).
// fp4drift bench gemm-cuda: the emulated NVFP4 GEMM on the GPU (amax + quantize of both
// BF16 operands, writing the BF16 decode q*S, cuBLASLt BF16 GEMM with the global scale as alpha) against
// the cuBLASLt BF16 GEMM of the same shape measured in the same run (the roofline),
// and the FP8 E4M3 tensor-core GEMM for reference. Best of --repeat, CUDA events.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>

#include "backend/cuda/bench.hpp"
#include "commands.hpp"
#include "model/lm_spec.hpp"
#include "sim/lm_run.hpp"
#include "sim/mlp_run.hpp"
#include "util/config.hpp"

namespace fp4d::cli {

int run_bench_gemm_cuda(std::int64_t size, int repeat, bool json) {
  const cuda::GemmCudaBench r = cuda::gemm_cuda_bench(size, size, size, repeat);
  const double tf = r.flops() / 1e12;
  if (json) {
    const nlohmann::ordered_json j = {{"benchmark", "gemm-cuda"}, {"m", r.M}, {"n", r.N}, {"k", r.K},
                                      {"seconds_bf16", r.bf16_s}, {"seconds_nvfp4_with_quantize", r.nvfp4_s},
                                      {"seconds_nvfp4_gemm_only", r.nvfp4_gemm_only_s}, {"seconds_fp8", r.fp8_s},
                                      {"tflops_bf16", tf / r.bf16_s}, {"tflops_nvfp4_with_quantize", tf / r.nvfp4_s},
                                      {"fraction_of_bf16", r.bf16_s / r.nvfp4_s}};
    // error_handler_t::replace: a string that is not UTF-8 (a path) prints as U+FFFD rather than
    // throwing after the work is done.
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("fp4drift bench gemm-cuda: M = N = K = %lld, best of %d\n", static_cast<long long>(size), repeat);
  std::printf("  cuBLASLt BF16 GEMM (FP32 out)          : %8.3f ms  %7.1f TFLOP/s\n", r.bf16_s * 1e3, tf / r.bf16_s);
  std::printf("  emulated NVFP4, quantize of A and B incl: %8.3f ms  %7.1f TFLOP/s  %5.1f%% of BF16\n", r.nvfp4_s * 1e3,
              tf / r.nvfp4_s, 100 * r.bf16_s / r.nvfp4_s);
  std::printf("  emulated NVFP4, GEMM alone              : %8.3f ms  %7.1f TFLOP/s\n", r.nvfp4_gemm_only_s * 1e3,
              tf / r.nvfp4_gemm_only_s);
  std::printf("  cuBLASLt FP8 E4M3 GEMM (per-tensor)     : %8.3f ms  %7.1f TFLOP/s\n", r.fp8_s * 1e3, tf / r.fp8_s);
  return 0;
}

// fp4drift bench quantize-dual-cuda: rowwise + columnwise NVFP4 of a rows x cols BF16 (or
// float32) tensor in one pass (both amaxes included), with and without RHT-16 on the columnwise
// side and SR (exact, and the paper's hardware form, hw), against the floors of its byte mixes
// on this device (cuda::dual_stream_bench: a streaming kernel that reads and writes the same
// bytes, and the device's copy beside it). rht+rne is the training step's activation pass (RNE
// both ways, RHT on the columnwise side), rht+srhw its gradient pass.
int run_bench_dual_cuda(std::int64_t rows, std::int64_t cols, bool bf16_input, int repeat, bool json) {
  struct Case {
    const char* name;
    bool rht, sr;
    int sr_bits;
  };
  const Case cases[] = {{"rne", false, false, kSrExact},
                        {"rht+rne", true, false, kSrExact},
                        {"rht+sr", true, true, kSrExact},
                        {"rht+srhw", true, true, kSrHw}};
  // Every case is measured before anything is printed: an error (no device, a build without
  // CUDA) then comes alone.
  cuda::DualBench results[std::size(cases)];
  for (std::size_t i = 0; i < std::size(cases); ++i)
    results[i] =
        cuda::nvfp4_quantize_dual_bench(rows, cols, bf16_input, cases[i].rht, cases[i].sr, cases[i].sr_bits, repeat);
  const cuda::DualStreamBench s = cuda::dual_stream_bench(rows, cols, bf16_input, repeat);
  const double pass_floor_bytes = s.input_bytes + s.pass_write_bytes;
  const double decode_floor_bytes = s.input_bytes + s.decode_write_bytes;
  const char* dtype = bf16_input ? "bf16" : "f32";
  if (json) {
    nlohmann::ordered_json j = {{"benchmark", "quantize-dual-cuda"},
                                {"dtype", dtype},
                                {"rows", rows},
                                {"cols", cols},
                                {"memcpy_seconds", s.memcpy_s},
                                {"memcpy_gbps", s.memcpy_gbps()},
                                {"stream_copy_seconds", s.stream_copy_s},
                                {"stream_pass_bytes", pass_floor_bytes},
                                {"stream_pass_seconds", s.stream_pass_s},
                                {"stream_decode_bytes", decode_floor_bytes},
                                {"stream_decode_seconds", s.stream_decode_s},
                                {"cases", nlohmann::ordered_json::array()}};
    for (std::size_t i = 0; i < std::size(cases); ++i) {
      const cuda::DualBench& r = results[i];
      j["cases"].push_back({{"name", cases[i].name}, {"seconds", r.seconds}, {"amax_seconds", r.amax_seconds},
                            {"quantize_pass_cold_l2_seconds", r.quantize_seconds},
                            {"counted_bytes", r.counted_bytes}, {"gbps_counted", r.counted_bytes / r.seconds * 1e-9},
                            {"quantize_pass_of_stream_floor", s.stream_pass_s / r.quantize_seconds},
                            {"quantize_pass_with_bf16_decodes_seconds", r.decode_seconds},
                            {"with_bf16_decodes_counted_bytes", r.decode_counted_bytes},
                            {"with_bf16_decodes_of_stream_floor", s.stream_decode_s / r.decode_seconds}});
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("fp4drift bench quantize-dual-cuda: rowwise + columnwise NVFP4 of %lld x %lld %s, best of %d\n",
              static_cast<long long>(rows), static_cast<long long>(cols), bf16_input ? "BF16" : "float32", repeat);
  std::printf("  bytes counted: input once + both codes and scales; every timed repetition from a cold L2\n");
  std::printf("  floors, the same bytes streamed (16-byte loads and stores, nothing computed): quantize pass %.3f ms "
              "(%.1f MB), with BF16 decodes %.3f ms (%.1f MB); as a copy %.3f ms, cudaMemcpy %.3f ms (%.1f GB/s)\n",
              s.stream_pass_s * 1e3, pass_floor_bytes * 1e-6, s.stream_decode_s * 1e3, decode_floor_bytes * 1e-6,
              s.stream_copy_s * 1e3, s.memcpy_s * 1e3, s.memcpy_gbps());
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    const cuda::DualBench& r = results[i];
    std::printf("  dual %-8s: %8.3f ms (amax pass %.3f ms, quantize pass alone %.3f ms = %.1f%% of its floor)"
                "  %8.1f GB/s counted\n",
                cases[i].name, r.seconds * 1e3, r.amax_seconds * 1e3, r.quantize_seconds * 1e3,
                100 * s.stream_pass_s / r.quantize_seconds, r.counted_bytes / r.seconds * 1e-9);
  }
  // The training step's form: the quantize pass also writing the GEMMs' BF16 operands.
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    const cuda::DualBench& r = results[i];
    std::printf("  dual %-8s quantize pass with BF16 decodes: %8.3f ms = %.1f%% of its floor"
                "  %8.1f GB/s counted (+4 bytes per element)\n",
                cases[i].name, r.decode_seconds * 1e3, 100 * s.stream_decode_s / r.decode_seconds,
                r.decode_counted_bytes / r.decode_seconds * 1e-9);
  }
  return 0;
}

// fp4drift bench mlp-cuda: the GPU-resident training step (backend/cuda/mlp.hpp), steps/s.
//  1. the quick default model (the [mlp] of CONFIG, data/configs/mlp-quick.toml by default) under
//     its recipes: small, launch-bound;
//  2. an MLP of width W (4 layers, W -> W) and batch B: the nvfp4 step against the bf16 step in the
//     same run, nvfp4 on every layer and with the
//     first/last layers in BF16.
// The batch is made and uploaded once (data generation and transfer excluded, as a data loader
// prefetches them); the stats of each step (loss, lost updates) come back every step, as a
// trace needs them.
int run_bench_mlp_cuda(const std::string& config, std::int64_t width, std::int64_t batch, std::int64_t steps, bool json) {
  Config cfg = Config::load(config);
  const std::string workload = cfg.get_string("workload", "");
  if (workload != "mlp") throw UsageError(config + ": not an mlp config (workload = \"" + workload + "\")");
  const MlpRunSpec quick = parse_mlp_run(cfg);
  struct Line {
    std::string model, recipe;
    cuda::MlpCudaBench r;
  };
  std::vector<Line> lines;
  // The quick model is launch-bound: each recipe with the step as one CUDA graph and kernel by
  // kernel, to show what the graph buys.
  for (const std::string& name : quick.recipes)
    for (const bool graphs : {true, false}) {
      RecipeGemmOptions o{name, quick.edge_recipe, quick.high_precision_layers, quick.model.seed, {}};
      lines.push_back({"quick", name + (graphs ? " (graph)" : " (kernels)"), cuda::mlp_cuda_bench(quick.model, o, 50, steps, graphs)});
    }
  const std::size_t first_big = lines.size();
  MlpSpec big;
  big.widths = {width, width, width, width, width};
  big.batch = batch;
  big.teacher_width = 128;
  big.lr = 1e-3;
  // At least 100 steps (~0.4 s at width 4096): the ratio to bf16 is taken at the clocks a
  // sustained run settles at, not in the first tens of milliseconds after the warm-up, when
  // the two recipes' GEMM-heavy and memory-bound phases have not yet drawn the power they will.
  const std::int64_t big_steps = std::max<std::int64_t>(100, steps / 20);
  const int L = static_cast<int>(big.widths.size() - 1);
  const std::vector<std::pair<std::string, std::vector<int>>> big_cases = {
      {"bf16", {}}, {"nvfp4", {}}, {"nvfp4", {0, L - 1}}};
  for (const auto& [name, edges] : big_cases) {
    RecipeGemmOptions o{name, "bf16", edges, 1, {}};
    lines.push_back({"width " + std::to_string(width), name + (edges.empty() ? "" : " (BF16 first/last)"),
                     cuda::mlp_cuda_bench(big, o, 3, big_steps)});
  }
  const double bf16_big = lines[first_big].r.step_s;
  if (json) {
    nlohmann::ordered_json j = {{"benchmark", "mlp-cuda"}, {"config", config}, {"width", width}, {"batch", batch},
                                {"cases", nlohmann::ordered_json::array()}};
    for (const Line& l : lines)
      j["cases"].push_back({{"model", l.model}, {"recipe", l.recipe}, {"launch", l.r.launch_mode}, {"steps", l.r.steps},
                            {"seconds_per_step", l.r.step_s}, {"steps_per_second", l.r.steps_per_s}});
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("fp4drift bench mlp-cuda: GPU-resident training steps (batch on the device, stats back each step)\n");
  std::printf("  %-12s %-30s %8s %12s %12s %10s\n", "model", "recipe", "steps", "ms/step", "steps/s", "vs bf16");
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    const bool is_big = i >= first_big;
    std::printf("  %-12s %-30s %8lld %12.4f %12.1f", l.model.c_str(), l.recipe.c_str(), static_cast<long long>(l.r.steps),
                l.r.step_s * 1e3, l.r.steps_per_s);
    if (is_big) std::printf(" %9.1f%%", 100 * bf16_big / l.r.step_s);
    else std::printf(" %10s  %s", "", l.r.launch_mode.c_str());
    std::printf("\n");
  }
  std::printf("  quick model: %s (widths", config.c_str());
  for (const auto w : quick.model.widths) std::printf(" %lld", static_cast<long long>(w));
  std::printf(", batch %lld); width model: 4 layers %lld -> %lld, batch %lld\n", static_cast<long long>(quick.model.batch),
              static_cast<long long>(width), static_cast<long long>(width), static_cast<long long>(batch));
  return 0;
}

// fp4drift bench lm-cuda: the GPU-resident lm training step (backend/cuda/lm.hpp) on the two
// ~21M-parameter models of the H200 configs (the transformer and the hybrid; seq 512, batch 16:
// 8192 tokens a step). Recipes: bf16, nvfp4 on every linear, nvfp4 with the head in BF16
// (lm_high_precision_linears(spec, 0, 0)), nvfp4 with the first and last blocks too (the
// paper's choice), fp32; then one Mamba mixer's kernels against their memory floor. The tokens are uploaded once; each step's
// statistics come back to the host. The floor: the linear GEMMs at the BF16 dense rate measured
// on the H200 (780 TFLOP/s, gemm-cuda) plus the attention products at the FP32 SIMT datasheet
// rate (67 TFLOP/s: they run as FP32 CUDA-core kernels).
namespace {

// The model of an H200 config (lm-h200.toml: the ~21M transformer; lm-h200-hybrid.toml: 6
// Mamba-2, 6 FFN and 2 attention blocks), so that the benchmark times what those runs train.
LmSpec h200_model(const std::string& path) {
  Config cfg = Config::load(path);
  if (cfg.get_string("workload") != "lm") throw UsageError("bench lm-cuda: " + path + " is not an lm config");
  const LmRunSpec spec = parse_lm_run(cfg);
  cfg.finish();
  return spec.model;
}

struct LmBenchLine {
  std::string name;
  cuda::LmCudaBench r;
};
constexpr double kBf16Flops = 780e12, kFp32Flops = 67e12;
double lm_floor_s(const cuda::LmCudaBench& r) { return r.linear_flops / kBf16Flops + r.attention_flops / kFp32Flops; }

std::vector<LmBenchLine> bench_lm_model(const LmSpec& s, std::int64_t steps) {
  // The paper's recipe keeps the first and last blocks in BF16 (its hybrid: the first 2 and last 8
  // of 62 blocks; here one of 14-16 at each end) and the head.
  const std::vector<std::pair<std::string, std::vector<int>>> cases = {
      {"bf16", {}}, {"nvfp4", {}}, {"nvfp4", lm_high_precision_linears(s, 0, 0)},
      {"nvfp4", lm_high_precision_linears(s, 1, 1)}, {"fp32", {}}};
  const auto label = [&](const std::string& name, const std::vector<int>& edges) {
    if (edges.empty()) return name;
    return name + (edges == lm_high_precision_linears(s, 0, 0) ? " (head BF16)" : " (paper BF16)");
  };
  std::vector<LmBenchLine> lines;
  for (const auto& [name, edges] : cases) {
    RecipeGemmOptions o{name, "bf16", edges, 1, {}};
    lines.push_back({label(name, edges), cuda::lm_cuda_bench(s, o, 3, steps)});
  }
  return lines;
}

nlohmann::ordered_json lm_bench_json(const LmSpec& s, const std::vector<LmBenchLine>& lines) {
  const double bf16 = lines[0].r.step_s;
  nlohmann::ordered_json j = {{"d_model", s.d_model}, {"heads", s.heads}, {"ffn", s.ffn}, {"pattern", s.pattern},
                              {"vocab", s.vocab}, {"seq_len", s.seq_len}, {"batch", s.batch},
                              {"parameters", lines[0].r.parameters}, {"cases", nlohmann::ordered_json::array()}};
  for (const LmBenchLine& l : lines)
    j["cases"].push_back({{"recipe", l.name}, {"launch", l.r.launch_mode}, {"steps", l.r.steps},
                          {"seconds_per_step", l.r.step_s}, {"ratio_to_bf16", l.r.step_s / bf16},
                          {"hours_per_100k_steps", l.r.step_s * 1e5 / 3600}, {"linear_flops", l.r.linear_flops},
                          {"attention_flops", l.r.attention_flops}, {"fraction_of_floor", lm_floor_s(l.r) / l.r.step_s}});
  return j;
}

void print_lm_bench(const LmSpec& s, const std::vector<LmBenchLine>& lines) {
  const double bf16 = lines[0].r.step_s;
  std::printf("fp4drift bench lm-cuda: GPU-resident lm training steps, %lld parameters (d_model %lld, %lld heads, ffn %lld, "
              "pattern %s, vocab %lld), seq %lld x batch %lld\n",
              static_cast<long long>(lines[0].r.parameters), static_cast<long long>(s.d_model),
              static_cast<long long>(s.heads), static_cast<long long>(s.ffn), s.pattern.c_str(),
              static_cast<long long>(s.vocab), static_cast<long long>(s.seq_len), static_cast<long long>(s.batch));
  std::printf("  %-20s %6s %10s %9s %14s %12s  %s\n", "recipe", "steps", "ms/step", "vs bf16", "100k steps (h)",
              "of floor", "launch");
  for (const LmBenchLine& l : lines)
    std::printf("  %-20s %6lld %10.3f %9.3f %14.3f %11.1f%%  %s\n", l.name.c_str(), static_cast<long long>(l.r.steps),
                l.r.step_s * 1e3, l.r.step_s / bf16, l.r.step_s * 1e5 / 3600, 100 * lm_floor_s(l.r) / l.r.step_s,
                l.r.launch_mode.c_str());
  std::printf("  floor: linear GEMMs %.3f TFLOP at 780 TFLOP/s (BF16) + attention %.3f TFLOP at 67 TFLOP/s (FP32 SIMT)%s\n",
              lines[0].r.linear_flops * 1e-12, lines[0].r.attention_flops * 1e-12,
              s.pattern.find('M') != std::string::npos ? "; the Mamba mixers' own work not counted" : "");
}

}  // namespace

int run_bench_lm_cuda(std::int64_t steps, bool json) {
  const LmSpec tf = h200_model("data/configs/lm-h200.toml"), hy = h200_model("data/configs/lm-h200-hybrid.toml");
  const std::vector<LmBenchLine> t_lines = bench_lm_model(tf, steps), h_lines = bench_lm_model(hy, steps);
  const cuda::MambaScanBench sc = cuda::mamba_scan_bench(hy, 10);
  const double bw = sc.copy_gbps * 1e9;
  const double fwd_floor = sc.forward_bytes / bw, bwd_floor = sc.backward_bytes / bw;
  const double bwd_design = (sc.backward_bytes + sc.checkpoint_bytes) / bw;
  if (json) {
    nlohmann::ordered_json j = lm_bench_json(tf, t_lines);
    j["benchmark"] = "lm-cuda";
    j["hybrid"] = lm_bench_json(hy, h_lines);
    j["mamba_mixer"] = {{"copy_gbps", sc.copy_gbps},
                        {"scan_forward_seconds", sc.forward_s},
                        {"scan_forward_bytes", sc.forward_bytes},
                        {"scan_forward_fraction_of_floor", fwd_floor / sc.forward_s},
                        {"mixer_forward_seconds", sc.mixer_forward_s},
                        {"mixer_backward_seconds", sc.backward_s},
                        {"mixer_backward_bytes", sc.backward_bytes},
                        {"mixer_backward_checkpoint_bytes", sc.checkpoint_bytes},
                        {"mixer_backward_fraction_of_floor", bwd_floor / sc.backward_s},
                        {"mixer_backward_kernels_seconds", nlohmann::ordered_json::object()}};
    for (const auto& [name, sec] : sc.backward_kernels) j["mamba_mixer"]["mixer_backward_kernels_seconds"][name] = sec;
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  print_lm_bench(tf, t_lines);
  print_lm_bench(hy, h_lines);
  std::printf("  one Mamba-2 mixer of the hybrid (per block; copy %.0f GB/s read + write, cold L2):\n", sc.copy_gbps);
  std::printf("    scan forward     %8.3f ms  %6.1f%% of its memory floor (%.1f MB: x, B, C, dt in, y out)\n",
              sc.forward_s * 1e3, 100 * fwd_floor / sc.forward_s, sc.forward_bytes * 1e-6);
  std::printf("    mixer forward    %8.3f ms  (conv, dt, scan, gated norm)\n", sc.mixer_forward_s * 1e3);
  std::printf("    mixer backward   %8.3f ms  %6.1f%% of its memory floor (%.1f MB), %.1f%% counting the scan "
              "checkpoints (+%.0f MB)\n",
              sc.backward_s * 1e3, 100 * bwd_floor / sc.backward_s, sc.backward_bytes * 1e-6,
              100 * bwd_design / sc.backward_s, sc.checkpoint_bytes * 1e-6);
  std::printf("    backward by kernel (one run, warm L2):");
  for (const auto& [name, sec] : sc.backward_kernels) std::printf(" %s %.3f", name.c_str(), sec * 1e3);
  std::printf(" ms\n");
  return 0;
}

}  // namespace fp4d::cli
