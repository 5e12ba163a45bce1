// fp4drift gemm: the Fprop / Dgrad / Wgrad GEMM of a linear layer under one or more recipes,
// each against the exact product, with the error split into its quantization and
// accumulation parts (sim/gemm_experiment.hpp). Output: HDF5 (trace/gemm_trace.hpp: written
// as OUT.partial and renamed when complete), a table on stdout, or JSON.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include <cmath>

#include "commands.hpp"

#include "quant/quantize.hpp"
#include "ref/exact_block_gemm.hpp"
#include "ref/reference_gemm.hpp"
#include "sim/gemm_experiment.hpp"
#include "sim/generators.hpp"
#include "trace/gemm_trace.hpp"
#include "trace/tensor_io.hpp"
#include "util/checked_size.hpp"
#include "util/memory.hpp"

namespace fp4d::cli {

namespace {

struct GemmArgs {
  std::string role = "fprop";
  std::int64_t m = 256, n = 256, k = 256;
  std::string generate = "normal";
  std::string input_first, input_second;
  std::uint64_t data_seed = 1, seed = 0;
  double nu = 3.0, outlier_fraction = 0.01, outlier_scale = 50.0;
  std::vector<std::string> recipes{"bf16,fp8,mxfp4,nvfp4"};
  int draws = 1;
  std::string out;
  bool json = false, save_tensors = false;
  std::string backend = "cpu";
  bool fp8_fast_accumulation = false;  // cuda: cuBLASLt's FP8 fast-accumulation mode
  std::string accumulator = "fp32-sequential";  // the emulation's; cuda: sm90 = compare with the model
  std::string reference_precision;  // also compute the product in this precision and certify it
  bool force_memory = false;        // skip the memory check (the estimate is rough)
};

// A floating-point reference (--reference-precision): the unquantized product computed in
// that precision, certified against cpp_bin_float<1024> on sampled rows, and compared with
// the exact product on every element.
struct FloatReferenceReport {
  std::string precision;
  double max_rel_vs_exact = 0;  // max |ref - exact| / |exact| over elements with exact != 0
  ref::Certification cert;
};

FloatReferenceReport float_reference(const GemmOperands& ops, const std::string& name) {
  const ref::Precision p = ref::parse_precision(name);
  Matrix A = ops.first, B = ops.second;  // NT form, as run_gemm_experiment builds it
  if (ops.role == GemmRole::Dgrad) B = transpose(ops.second);
  if (ops.role == GemmRole::Wgrad) A = transpose(ops.first), B = transpose(ops.second);
  std::vector<double> ad(A.data.begin(), A.data.end()), bd(B.data.begin(), B.data.end());
  FloatReferenceReport rep;
  rep.precision = name;
  const std::vector<double> c = ref::gemm_nt(ad.data(), bd.data(), A.rows, B.rows, A.cols, p);
  const ref::ExactGemmResult exact = ref::exact_block_gemm_nt(ref::block_operand_from_doubles(ad.data(), A.rows, A.cols),
                                                              ref::block_operand_from_doubles(bd.data(), B.rows, B.cols));
  for (std::size_t i = 0; i < c.size(); ++i)
    if (exact.rounded[i] != 0)
      rep.max_rel_vs_exact = std::max(rep.max_rel_vs_exact, std::fabs(c[i] - exact.rounded[i]) / std::fabs(exact.rounded[i]));
  std::vector<std::int64_t> rows;  // up to 8 rows spread over C: certification costs 1024-bit arithmetic
  for (std::int64_t r = 0; r < A.rows; r += std::max<std::int64_t>(1, A.rows / 8)) rows.push_back(r);
  rep.cert = ref::certify_gemm_nt(ad.data(), bd.data(), A.rows, B.rows, A.cols, p, ref::Precision::Mp1024, rows);
  return rep;
}

// *mask (when given): the generator's outlier channels of a generated operand, else empty.
Matrix operand(const GemmArgs& a, const std::string& input, std::int64_t rows, std::int64_t cols, std::uint64_t seed,
               const std::string& name, std::string* source, std::vector<std::uint8_t>* mask = nullptr) {
  if (!input.empty()) {
    const TensorSource src = parse_tensor_source(input);
    if (!std::filesystem::exists(src.file)) throw UsageError("input file '" + src.file + "' does not exist");
    refuse_output_over_input(a.out, src.file);
    const MatrixShape m_shape = inspect_matrix(src);  // the declared shape, checked before anything is read
    if (m_shape.rows != rows || m_shape.cols != cols)
      throw UsageError("operand " + name + " from " + src.text() + " is " + std::to_string(m_shape.rows) + " x " +
                       std::to_string(m_shape.cols) + ", the role needs " + std::to_string(rows) + " x " + std::to_string(cols));
    Matrix m = read_matrix(src);
    std::int64_t bad = 0;
    if (!all_finite(m, &bad))
      throw UsageError("operand " + name + " from " + src.text() + " has a non-finite value at element " +
                       std::to_string(bad));
    *source = src.text();
    return m;
  }
  GeneratorSpec g;
  g.kind = a.generate;
  g.rows = rows;
  g.cols = cols;
  g.seed = seed;
  g.nu = a.nu;
  g.outlier_fraction = a.outlier_fraction;
  g.outlier_scale = a.outlier_scale;
  *source = "generator:" + describe(g);
  if (mask) *mask = outlier_channel_mask(g);
  return generate(g);
}

// The sizes a gemm run forms, each refused (UsageError naming --m/--n/--k and the limit)
// beyond the per-tensor element limit: the two operands and the product, whose shapes
// depend on the role. Returns the operand and product element counts and the reduction
// length for the estimates below.
struct GemmSizes {
  std::int64_t operand_elements = 0, product_elements = 0, reduction = 0;
};

GemmSizes checked_gemm_sizes(const GemmArgs& a, GemmRole role, std::int64_t r1, std::int64_t c1, std::int64_t r2,
                             std::int64_t c2) {
  const std::string opts = "--m " + std::to_string(a.m) + " --n " + std::to_string(a.n) + " --k " + std::to_string(a.k);
  GemmSizes g;
  try {
    const std::int64_t rows_c = role == GemmRole::Wgrad ? a.k : a.m, cols_c = role == GemmRole::Dgrad ? a.k : a.n;
    g.reduction = role == GemmRole::Fprop ? a.k : role == GemmRole::Dgrad ? a.n : a.m;
    g.operand_elements = checked_add(checked_elements(r1, c1, opts + ": the first operand"),
                                     checked_elements(r2, c2, opts + ": the second operand"), opts);
    g.product_elements = checked_elements(rows_c, cols_c, opts + ": the product");
  } catch (const SizeError& e) {
    throw UsageError(e.what());
  }
  return g;
}

// Peak bytes of a gemm run, roughly, from what sim/gemm_experiment.cpp holds at once: per
// operand element about 60 (the operand, its NT copy, as doubles, its exact block operand,
// quantized with codes and scales, the dequantized copies of the error terms); per product
// element about 200 (two exact products kept exactly - a cpp_int and an exponent, 40 bytes
// each without heap limbs - and rounded, the computed product, the SR sums, three error
// terms, the FP32 model's product and error, the magnitudes).
double gemm_bytes(const GemmSizes& g) {
  return 60.0 * static_cast<double>(g.operand_elements) + 200.0 * static_cast<double>(g.product_elements);
}

// Seconds of the exact products: per recipe two exact GEMMs (of the operands and of the
// quantized operands), M*N*K block-product terms each, at kExactSecondsPerTerm per term on
// one thread, spread over the OpenMP threads. Measured as the wall time of `fp4drift gemm
// --recipe nvfp4` (normal operands, Release build, OMP_NUM_THREADS=1, one AMD EPYC core)
// over its 2*M*N*K terms: 4.0 s at M = N = K = 512 and 15.7 s at 512 x 512 x 2048, both
// 1.5e-8 s per term (everything else in the run is O(M*N + (M+N)*K) and negligible there).
// A rough figure: it only decides whether to announce the wait.
constexpr double kExactSecondsPerTerm = 1.5e-8;

double gemm_exact_seconds(const GemmSizes& g, std::size_t recipes) {
  const double terms = 2.0 * static_cast<double>(recipes) * static_cast<double>(g.product_elements) *
                       static_cast<double>(g.reduction);
  return terms * kExactSecondsPerTerm / std::max(1, omp_get_max_threads());
}

// Whether an option was given on the command line.
using Given = std::function<bool(const std::string&)>;

// An option is applied as recorded or refused: a parameter of another generator, generator
// options when both operands come from files, SR options without an SR recipe, or
// --save-tensors without a file would be accepted, ignored, and kept in the recorded command
// line as if applied.
void refuse_unapplied_options(const GemmArgs& a, const Given& given, const std::vector<std::string>& names) {
  if (!a.input_first.empty() && !a.input_second.empty()) {
    for (const char* o : {"--generate", "--nu", "--outlier-fraction", "--outlier-scale", "--data-seed"})
      if (given(o)) throw UsageError(std::string(o) + " applies to generated operands, and both come from files");
  } else {
    for (const auto& [option, parameter] : {std::pair{"--nu", "nu"}, std::pair{"--outlier-fraction", "outlier_fraction"},
                                            std::pair{"--outlier-scale", "outlier_scale"}})
      if (given(option) && !generator_uses(a.generate, parameter))
        throw UsageError(std::string(option) + " is not a parameter of --generate " + a.generate);
  }
  bool sr = false, fp8 = false;
  std::string fp8_blocked, blocked_layouts;  // an FP8 recipe whose operands have block scales, and those
  for (const std::string& nm : names) {
    const GemmRecipe g = gemm_recipe(nm);
    sr = sr || (g.kind == GemmRecipe::Kind::Nvfp4 && g.sr_gradients);
    fp8 = fp8 || g.kind == GemmRecipe::Kind::Fp8;
    if (fp8_blocked.empty()) {
      blocked_layouts = fp8_block_layouts(g);
      if (!blocked_layouts.empty()) fp8_blocked = nm;
    }
  }
  if (!sr && a.draws != 1) throw UsageError("--sr-draws applies only to stochastic rounding, which no recipe here uses");
  if (!fp8 && a.fp8_fast_accumulation) throw UsageError("--fp8-fast-accumulation: no FP8 recipe in --recipe");
  if (!fp8_blocked.empty() && a.accumulator == "sm90")
    throw UsageError("--accumulator sm90 models FP8 GEMMs with per-tensor scaling only (recipe " + fp8_blocked +
                     " scales FP8 operands in " + blocked_layouts +
                     " blocks, and cuBLASLt's per-block scale application on sm90 is not measured)");
  if (a.save_tensors && a.out.empty()) throw UsageError("--save-tensors writes into --out FILE, and none is given");
}

// What a gemm run will do, settled before anything is generated, read or written: a command
// line that would be refused is refused at once.
struct GemmPlan {
  GemmRole role = GemmRole::Fprop;
  std::vector<std::string> names;               // the recipes, in run order
  std::int64_t r1 = 0, c1 = 0, r2 = 0, c2 = 0;  // the operands' shapes
  bool long_run = false;                        // the exact products are announced and followed
};

// The options and sizes checked (UsageError), the memory need against what is available.
// --accumulator: a known name, and with a device backend only sm90 (checked before the
// backend is opened: a wrong combination is a usage error on any machine).
void refuse_bad_accumulator(const GemmArgs& a) {
  try {
    (void)parse_accumulator(a.accumulator);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--accumulator: ") + e.what());
  }
  if (a.backend != "cpu" && a.accumulator != "fp32-sequential" && a.accumulator != "sm90")
    throw UsageError("--accumulator " + a.accumulator + " with --backend " + a.backend +
                     ": the device accumulates as its hardware does; only sm90 (compare the device with the CPU "
                     "model) applies");
}

GemmPlan plan_gemm(const GemmArgs& a, const Backend& backend, const Given& given) {
  if (backend.is_device() && a.accumulator == "sm90") {
    backend.require_available();
    const std::string arch = backend.device_architecture();
    if (arch.rfind("sm_90 ", 0) != 0)
      throw UsageError("--accumulator sm90 models the tensor cores of sm_90 (H100, H200); this GPU is " + arch);
  }
  if (a.fp8_fast_accumulation && !backend.is_device() && a.accumulator != "sm90")
    throw UsageError("--fp8-fast-accumulation is a tensor-core mode: it needs --backend cuda, or --accumulator sm90 "
                     "(the CPU's model of it)");
  if (a.m <= 0 || a.n <= 0 || a.k <= 0) throw UsageError("--m, --n and --k must be positive");
  if (a.draws < 1 || a.draws > 10000) throw UsageError("--sr-draws must be in [1, 10000]");
  GemmPlan p;
  p.role = parse_gemm_role(a.role);
  p.names = expand_gemm_recipe_names(a.recipes);
  refuse_unapplied_options(a, given, p.names);
  expected_shapes(p.role, a.m, a.n, a.k, &p.r1, &p.c1, &p.r2, &p.c2);
  const GemmSizes sizes = checked_gemm_sizes(a, p.role, p.r1, p.c1, p.r2, p.c2);
  if (!a.force_memory) {
    const std::string short_by = memory_shortfall(static_cast<std::uint64_t>(gemm_bytes(sizes)));
    if (!short_by.empty())
      throw UsageError("gemm --m " + std::to_string(a.m) + " --n " + std::to_string(a.n) + " --k " + std::to_string(a.k) +
                       " " + short_by + "; --force-memory to try anyway");
  }
  // A long exact reference is announced (stderr: stdout may be JSON), and followed recipe by
  // recipe (run_recipes), so that a run of hours is not mistaken for a hang.
  const double exact_s = gemm_exact_seconds(sizes, p.names.size());
  p.long_run = exact_s > 60;
  if (p.long_run)
    std::fprintf(stderr, "fp4drift gemm: the exact products of %zu recipe(s) will take about %.0f minutes on %d threads\n",
                 p.names.size(), exact_s / 60, omp_get_max_threads());
  return p;
}

// The role's two operands, generated or read, and where each came from (for the trace).
struct LoadedOperands {
  GemmOperands ops;
  std::string first_source, second_source;
};

LoadedOperands load_operands(const GemmArgs& a, const GemmPlan& p) {
  LoadedOperands l;
  l.ops.role = p.role;
  l.ops.first_name = p.role == GemmRole::Dgrad ? "dY" : "X";
  l.ops.second_name = p.role == GemmRole::Fprop || p.role == GemmRole::Dgrad ? "W" : "dY";
  l.ops.first = operand(a, a.input_first, p.r1, p.c1, a.data_seed, l.ops.first_name, &l.first_source,
                        &l.ops.first_channel_mask);
  l.ops.second = operand(a, a.input_second, p.r2, p.c2, a.data_seed + 1, l.ops.second_name, &l.second_source);
  return l;
}

// RHT-16 along the token dimension (the Wgrad recipes that apply it) needs M in whole tiles.
void refuse_partial_rht_tiles(const GemmArgs& a, const GemmPlan& p) {
  if (p.role != GemmRole::Wgrad) return;
  for (const std::string& nm : p.names)
    if (gemm_recipe(nm).kind == GemmRecipe::Kind::Nvfp4 && gemm_recipe(nm).rht_wgrad && a.m % 16 != 0)
      throw UsageError("recipe " + nm + " applies RHT-16 along the token dimension: --m must be a multiple of 16");
}

// The trace's root attributes: the run as the command line gave it.
GemmTraceHeader trace_header(const GemmArgs& a, const LoadedOperands& l) {
  GemmTraceHeader h;
  h.role = a.role;
  h.m = a.m, h.n = a.n, h.k = a.k;
  h.backend = a.backend;
  h.first_source = l.first_source;
  h.second_source = l.second_source;
  return h;
}

// --reference-precision: the float reference's report, recorded in the trace.
std::optional<FloatReferenceReport> float_reference_if_asked(const GemmArgs& a, const GemmOperands& ops, GemmTrace& trace) {
  if (a.reference_precision.empty()) return std::nullopt;
  const FloatReferenceReport r = float_reference(ops, a.reference_precision);
  trace.set_float_reference(r.precision, r.max_rel_vs_exact, r.cert.digits, r.cert.compared);
  return r;
}

// The experiment's options; on a device backend its products run there, and *device_path
// names the path the last one took.
GemmExperimentOptions experiment_options(const GemmArgs& a, const Backend& backend, std::string* device_path) {
  GemmExperimentOptions opt;
  opt.seed = a.seed;
  opt.draws = a.draws;
  opt.emulation.accumulator = parse_accumulator(a.accumulator);
  // The CPU model of a device run (check_model) accumulates FP8 as the device was asked to.
  opt.emulation.fp8_fast_accumulation = a.fp8_fast_accumulation;
  opt.check_model = backend.is_device() && opt.emulation.accumulator == Accumulator::Sm90;
  if (backend.is_device()) {
    GemmProductOptions product_options;
    product_options.fp8_fast_accumulation = a.fp8_fast_accumulation;
    opt.product = [&backend, product_options, device_path, product = backend.gemm_product(product_options)](
                      const QuantizedTensor& A, const QuantizedTensor& B) {
      *device_path = backend.gemm_path(A, B, product_options);
      return product(A, B);
    };
  }
  return opt;
}

// Every recipe in turn, each result added to the trace and then kept as its statistics only
// (the products and quantized operands can be large, and the trace has them).
std::vector<GemmResult> run_recipes(const GemmPlan& p, const GemmOperands& ops, GemmExperimentOptions opt,
                                    const std::string& device_path, GemmTrace& trace) {
  std::vector<GemmResult> results;
  const auto started = std::chrono::steady_clock::now();
  std::string current;  // the recipe whose exact products are running
  if (p.long_run)
    opt.exact_progress = [&current, &p, &results](const char* which, std::int64_t done, std::int64_t rows) {
      std::fprintf(stderr, "fp4drift gemm: recipe %s (%zu of %zu): exact product of the %s, %.0f%% of %lld rows\n",
                   current.c_str(), results.size() + 1, p.names.size(), which,
                   100.0 * static_cast<double>(done) / static_cast<double>(rows), static_cast<long long>(rows));
    };
  for (const std::string& nm : p.names) {
    current = nm;
    GemmResult r = run_gemm_experiment(ops, gemm_recipe(nm), opt);
    if (p.long_run)
      std::fprintf(stderr, "fp4drift gemm: recipe %s done (%zu of %zu), %.1f minutes so far\n", nm.c_str(),
                   results.size() + 1, p.names.size(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() / 60);
    if (!device_path.empty()) r.product_path = device_path;
    trace.add(r, gemm_recipe(nm).description);
    r.computed.clear();
    r.exact.clear();
    r.exact_quantized.clear();
    r.qa = QuantizedTensor();
    r.qb = QuantizedTensor();
    results.push_back(std::move(r));
  }
  return results;
}

// --json: one line, every recipe's statistics.
void print_json(const GemmArgs& a, const std::vector<GemmResult>& results) {
  nlohmann::ordered_json j = {{"role", a.role}, {"backend", a.backend}, {"m", a.m}, {"n", a.n}, {"k", a.k},
                              {"recipes", nlohmann::ordered_json::array()}};
  for (const GemmResult& r : results) {
    nlohmann::ordered_json o = {{"name", r.recipe}, {"split_exact", r.split_exact}, {"sr_draws", r.draws}};
    for (const auto& [key, s] : {std::pair{"total", r.total}, std::pair{"quantization", r.quantization},
                                 std::pair{"accumulation", r.accumulation},
                                 std::pair{"accumulation_fp32_sequential", r.accumulation_fp32_sequential},
                                 std::pair{"accumulation_beyond_fp32_sequential", r.accumulation_beyond_fp32_sequential},
                                 std::pair{"accumulation_dequant_fp32", r.accumulation_dequant_fp32}})
      o[key] = {{"rel_frobenius", s.rel_frobenius}, {"max_abs", s.max_abs}, {"bias", s.bias}};
    for (const auto& [key, b] : {std::pair{"accumulation_bits", r.accumulation_bits},
                                 std::pair{"accumulation_dequant_fp32_bits", r.accumulation_bits_dequant_fp32}})
      o[key] = {{"min", b.min}, {"p01", b.p01}, {"median", b.median}, {"exact_fraction", b.exact_fraction}};
    {
      const GemmChannelErrors& c = r.channels;
      const char* terms[GemmChannelErrors::kTerms] = {"total", "quantization", "accumulation"};
      nlohmann::ordered_json rows, cols;
      for (int t = 0; t < GemmChannelErrors::kTerms; ++t) {
        rows[terms[t]] = c.row_rel[t].empty() ? 0.0 : *std::max_element(c.row_rel[t].begin(), c.row_rel[t].end());
        cols[terms[t]] = c.col_rel[t].empty() ? 0.0 : *std::max_element(c.col_rel[t].begin(), c.col_rel[t].end());
      }
      o["row_rel_frobenius_max"] = rows;
      o["col_rel_frobenius_max"] = cols;
      if (c.outlier_axis != "none") {
        nlohmann::ordered_json sp = {{"axis", c.outlier_axis}, {"outlier_channels", c.outlier_channels}};
        if (c.outlier_axis == "reduction") {
          if (c.quantization_from_outlier_rel >= 0) {
            sp["quantization_from_outlier_channels_rel_frobenius"] = c.quantization_from_outlier_rel;
            sp["quantization_from_normal_channels_rel_frobenius"] = c.quantization_from_normal_rel;
          }
        } else {
          for (int t = 0; t < GemmChannelErrors::kTerms; ++t) {
            sp[std::string(terms[t]) + "_outlier_rows_rel_frobenius"] = c.outlier_rows_rel[t];
            sp[std::string(terms[t]) + "_normal_rows_rel_frobenius"] = c.normal_rows_rel[t];
          }
        }
        o["outlier_split"] = std::move(sp);
      }
    }
    o["product_path"] = r.product_path;
    o["accumulator"] = r.accumulator;
    if (r.model_mismatches >= 0) o["model_mismatches"] = r.model_mismatches;
    if (r.draws > 1) {
      o["sr_rel_bias"] = r.sr_rel_bias;
      o["sr_rel_std"] = r.sr_rel_std;
      o["sr_mean_rel_noise"] = r.sr_mean_rel_noise;
      if (r.sr_own_rel_bias >= 0) {
        o["sr_own_rel_bias"] = r.sr_own_rel_bias;
        o["sr_deterministic_rel_bias"] = r.sr_deterministic_rel_bias;
      }
    }
    j["recipes"].push_back(std::move(o));
  }
  // error_handler_t::replace: a string that is not UTF-8 (a path) prints as U+FFFD rather than
  // throwing after the work is done.
  std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
}

std::string first_name(const GemmArgs& a) { return a.role == "dgrad" ? "dY" : "X"; }

// The table on stdout: a line per recipe (with the device's accumulation bits and path, and
// SR's bias and spread where they apply), the float reference's report, the output's name.
void print_table(const GemmArgs& a, const Backend& backend, const std::string& first_source,
                 const std::vector<GemmResult>& results, const std::optional<FloatReferenceReport>& fref) {
  std::printf("fp4drift gemm: %s, M=%lld N=%lld K=%lld, %s, backend %s%s\n", a.role.c_str(),
              static_cast<long long>(a.m), static_cast<long long>(a.n), static_cast<long long>(a.k),
              first_source.c_str(), a.backend.c_str(),
              backend.is_device() ? ""
                                  : (", accumulator " + a.accumulator +
                                     (a.fp8_fast_accumulation ? " (FP8 fast accumulation)" : ""))
                                        .c_str());
  std::printf("%-20s %12s %12s %12s %12s %12s %7s\n", "recipe", "total rel", "quant rel", "accum rel",
              "accum(deq32)", "total bias", "split");
  for (const GemmResult& r : results) {
    std::printf("%-20s %12.4e %12.4e %12.4e %12.4e %12.3e %7s\n", r.recipe.c_str(), r.total.rel_frobenius,
                r.quantization.rel_frobenius, r.accumulation.rel_frobenius, r.accumulation_dequant_fp32.rel_frobenius,
                r.total.bias, r.split_exact ? "exact" : "BROKEN");
    if (backend.is_device())
      std::printf("%-20s accumulation bits kept (-log2 |err| / sum|ab|): min %.1f, p01 %.1f, median %.1f "
                  "(FP32 sequential model: %.1f, %.1f, %.1f)\n%-20s via %s\n",
                  "", r.accumulation_bits.min, r.accumulation_bits.p01, r.accumulation_bits.median,
                  r.accumulation_bits_dequant_fp32.min, r.accumulation_bits_dequant_fp32.p01,
                  r.accumulation_bits_dequant_fp32.median, "", r.product_path.c_str());
    if (r.accumulator != "fp32-sequential")
      std::printf("%-20s accumulation = sequential FP32 %.4e + beyond it %.4e (relative Frobenius)\n", "",
                  r.accumulation_fp32_sequential.rel_frobenius, r.accumulation_beyond_fp32_sequential.rel_frobenius);
    const GemmChannelErrors& c = r.channels;
    if (c.outlier_axis == "reduction" && c.quantization_from_outlier_rel >= 0)
      std::printf("%-20s quantization from %s's %lld outlier channels (k) %.4e, from its other channels %.4e "
                  "(each ||.||_F / ||C||_F)\n",
                  "", first_name(a).c_str(), static_cast<long long>(c.outlier_channels), c.quantization_from_outlier_rel,
                  c.quantization_from_normal_rel);
    if (c.outlier_axis == "output_rows")
      std::printf("%-20s rows of C from %s's %lld outlier channels: total %.4e quant %.4e accum %.4e; other rows: "
                  "total %.4e quant %.4e accum %.4e\n",
                  "", first_name(a).c_str(), static_cast<long long>(c.outlier_channels), c.outlier_rows_rel[0],
                  c.outlier_rows_rel[1], c.outlier_rows_rel[2], c.normal_rows_rel[0], c.normal_rows_rel[1],
                  c.normal_rows_rel[2]);
    if (r.model_mismatches >= 0)
      std::printf("%-20s sm90 model: %lld of %lld outputs differ from the device's bits\n", "",
                  static_cast<long long>(r.model_mismatches), static_cast<long long>(r.rows * r.cols));
    if (r.draws > 1)
      std::printf("%-20s SR over %d draws: relative bias of the mean %.3e, relative std %.3e\n", "", r.draws,
                  r.sr_rel_bias, r.sr_rel_std);
    if (r.draws > 1 && r.sr_own_rel_bias >= 0)
      std::printf("%-20s   = SR's own bias %.3e (noise of a %d-draw mean: %.3e) + the deterministic operand's "
                  "rounding %.3e\n",
                  "", r.sr_own_rel_bias, r.draws, r.sr_mean_rel_noise, r.sr_deterministic_rel_bias);
  }
  if (fref)
    std::printf("float reference %s: max relative difference to the exact product %.3e; certified against "
                "mp1024 on %lld elements: %.1f correct digits\n",
                fref->precision.c_str(), fref->max_rel_vs_exact, static_cast<long long>(fref->cert.compared),
                fref->cert.digits);
  if (!a.out.empty()) std::printf("wrote %s\n", a.out.c_str());
}

// Exit status 0, or 1 when a recipe's error split did not hold exactly (a bug, not a finding).
int split_status(const std::vector<GemmResult>& results) {
  for (const GemmResult& r : results)
    if (!r.split_exact) return 1;
  return 0;
}

int run_gemm(const GemmArgs& a, const std::string& command_line, const Given& given) {
  refuse_bad_accumulator(a);
  const Backend& backend = select_backend(a.backend);
  const GemmPlan plan = plan_gemm(a, backend, given);
  const LoadedOperands operands = load_operands(a, plan);
  refuse_partial_rht_tiles(a, plan);
  GemmTrace trace(a.out, command_line, operands.ops, trace_header(a, operands), a.save_tensors);
  const std::optional<FloatReferenceReport> fref = float_reference_if_asked(a, operands.ops, trace);
  std::string device_path;  // the path the last device product took
  const std::vector<GemmResult> results =
      run_recipes(plan, operands.ops, experiment_options(a, backend, &device_path), device_path, trace);
  trace.complete();
  if (a.json) {
    print_json(a, results);
    return 0;
  }
  print_table(a, backend, operands.first_source, results, fref);
  return split_status(results);
}

}  // namespace

Runner add_gemm(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<GemmArgs>();
  app.add_option("--role", a->role, "fprop (X W^T) | dgrad (dY W) | wgrad (X^T dY)")->capture_default_str();
  app.add_option("--m", a->m, "Tokens M")->capture_default_str();
  app.add_option("--n", a->n, "Output features N")->capture_default_str();
  app.add_option("--k", a->k, "Input features K")->capture_default_str();
  app.add_option("--generate", a->generate, "Synthetic operands: normal | student-t | outliers")->capture_default_str();
  app.add_option("--nu", a->nu, "Student-t degrees of freedom")->capture_default_str();
  app.add_option("--outlier-fraction", a->outlier_fraction, "Fraction of outlier channels")->capture_default_str();
  app.add_option("--outlier-scale", a->outlier_scale, "Factor on the outlier channels")->capture_default_str();
  app.add_option("--input-first", a->input_first, "First operand FILE.h5:/ds (fprop/wgrad: X, dgrad: dY)");
  app.add_option("--input-second", a->input_second, "Second operand FILE.h5:/ds (fprop/dgrad: W, wgrad: dY)");
  add_seed_option(app, "--data-seed", a->data_seed, "Seed of the synthetic operands");
  add_seed_option(app, "--seed", a->seed, "Seed of SR draws and random signs");
  app.add_option("--recipe,-r", a->recipes, "GEMM recipes, comma-separated; 'all' for every one")->capture_default_str();
  app.add_option("--sr-draws", a->draws, "Repeat SR recipes with this many seeds (bias and variance)")->capture_default_str();
  app.add_option("--out,-o", a->out, "Output HDF5 file");
  app.add_flag("--save-tensors", a->save_tensors, "Also write operands, quantized operands and the exact product");
  app.add_flag("--json", a->json, "Print the results as JSON");
  app.add_option("--backend", a->backend,
                 "cpu (emulated GEMMs, gemm_emulated.hpp) | cuda (the GPU's tensor cores through cuBLASLt; the "
                 "operands are quantized identically)")
      ->capture_default_str();
  app.add_option("--accumulator", a->accumulator,
                 "cpu: how the emulated GEMMs accumulate: fp32-sequential | sm90 (the H100/H200 tensor-core model) | "
                 "exact (rounded once); cuda: sm90 also runs the model and counts the outputs that differ")
      ->capture_default_str();
  app.add_flag("--fp8-fast-accumulation", a->fp8_fast_accumulation,
               "cuda: run FP8 GEMMs in cuBLASLt's fast-accumulation mode (no periodic FP32 promotion); cpu with "
               "--accumulator sm90: model that mode");
  app.add_flag("--force-memory", a->force_memory,
               "Run even when the estimated memory need exceeds the memory available (MemAvailable)");
  app.add_option("--reference-precision", a->reference_precision,
                 "Also compute the unquantized product in double | binary128 | mp64 | mp113 | mp256 | mp1024, "
                 "compare it with the exact product and certify it against mp1024");
  return [a, command_line, &app]() {
    return run_gemm(*a, command_line, [&app](const std::string& name) { return app.get_option(name)->count() > 0; });
  };
}

}  // namespace fp4d::cli
