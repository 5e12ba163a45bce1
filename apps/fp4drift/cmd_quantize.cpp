// fp4drift quantize: one tensor through one or more quantization presets (or one custom
// spec), with the error statistics of each against the exact values. Output: an HDF5 file
// (trace/quantize_trace.hpp: written to OUT.partial and renamed only when complete), a table
// on stdout, or JSON with --json.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "quant/quantize.hpp"
#include "quant/presets.hpp"
#include "quant/stats.hpp"
#include "sim/generators.hpp"
#include "trace/quantize_trace.hpp"
#include "trace/tensor_io.hpp"
#include "util/checked_size.hpp"
#include "util/memory.hpp"

namespace fp4d::cli {

namespace {

struct QuantizeArgs {
  std::string input;
  std::string generate;
  std::string shape = "1024x1024";
  std::uint64_t data_seed = 1;
  double dist_scale = 1.0, nu = 3.0, outlier_fraction = 0.01, outlier_scale = 50.0;
  std::vector<std::string> presets;
  CustomQuantOptions custom;
  std::string out;
  bool json = false, allow_nonfinite = false;
  bool force_memory = false;  // skip the memory check (the estimate is rough)
  std::string backend = "cpu";
  std::string outlier_channels;  // a user's outlier mask: "3,17,40-47"
};

void parse_shape(const std::string& s, std::int64_t* rows, std::int64_t* cols) {
  try {
    std::size_t p = 0;
    const auto x = s.find('x');
    if (x == std::string::npos) {
      *rows = 1;
      *cols = std::stoll(s, &p);
      if (p == s.size() && *cols > 0) return;
    } else {
      *rows = std::stoll(s.substr(0, x), &p);
      std::size_t p2 = 0;
      *cols = std::stoll(s.substr(x + 1), &p2);
      if (p == x && p2 == s.size() - x - 1 && *rows > 0 && *cols > 0) return;
    }
  } catch (const std::exception&) {
  }
  throw UsageError("shape '" + s + "' is not ROWSxCOLS or N with positive integers");
}

void check_shape_limit(const std::string& s, std::int64_t rows, std::int64_t cols) {
  try {
    (void)checked_elements(rows, cols, "--shape " + s);
  } catch (const SizeError& e) {
    throw UsageError(e.what());
  }
}

// Peak bytes of a quantize run, roughly: the float32 input, and for the preset that needs
// most what quantize_with_kernels (quant/quantize.cpp) holds at once - dequantized values,
// codes, scales (a code and a float per block of 16 at most), the RHT output with its
// double-precision copy for the statistics, the transposed copies of axis 0. Presets run
// one at a time and keep only their statistics.
double quantize_bytes(std::int64_t rows, std::int64_t cols, const std::vector<std::pair<std::string, QuantSpec>>& specs) {
  const double n = static_cast<double>(rows) * static_cast<double>(cols);
  double worst = 0;
  for (const auto& [name, s] : specs) {
    double b = 4 * n + 5 * n / 16;
    b += s.scheme == Scheme::Cast ? 2 * n : s.scheme == Scheme::Fp8 ? n : n / 2;
    // The RHT output with its double copy; after the quantization the channel statistics hold
    // the transform's target, the dequantized values and their inverse transform in double.
    if (s.rht.enabled()) b += 28 * n;
    if (s.stored_transposed()) b += 8 * n;
    worst = std::max(worst, b);
  }
  return 4 * n + worst;
}

void check_memory(const QuantizeArgs& a, const std::string& what, std::int64_t rows, std::int64_t cols,
                  const std::vector<std::pair<std::string, QuantSpec>>& specs) {
  if (a.force_memory) return;
  const std::string short_by = memory_shortfall(static_cast<std::uint64_t>(quantize_bytes(rows, cols, specs)));
  if (!short_by.empty()) throw UsageError(what + " " + short_by + "; --force-memory to try anyway");
}

std::string pct(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f%%", 100.0 * f);
  return b;
}
std::string sci(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3e", v);
  return b;
}

void print_table(std::ostream& os, const std::vector<std::pair<std::string, QuantizedTensor>>& results) {
  char line[512];
  std::snprintf(line, sizeof line, "%-18s %11s %8s %11s %11s %9s %10s %10s %9s\n", "recipe", "NMSE", "SNR dB",
                "bias", "max|err|", "clipped", "underflow", "zero-scl", "subn-scl");
  os << line;
  for (const auto& [name, q] : results) {
    const QuantStats& s = q.stats;
    const double snr = s.nmse > 0 ? -10.0 * std::log10(s.nmse) : INFINITY;
    char zs[32], ss[32];
    std::snprintf(zs, sizeof zs, "%lld", static_cast<long long>(s.zero_scale_blocks));
    std::snprintf(ss, sizeof ss, "%lld", static_cast<long long>(s.subnormal_scale_blocks));
    std::snprintf(line, sizeof line, "%-18s %11s %8.2f %11s %11s %9s %10s %10s %9s\n", name.c_str(),
                  sci(s.nmse).c_str(), snr, sci(s.bias).c_str(), sci(s.max_abs_error).c_str(),
                  pct(s.clipped_fraction).c_str(), pct(s.underflow_fraction).c_str(), zs, ss);
    os << line;
  }
}

// The outlier / normal split, one line per recipe, where a mask was given or generated.
void print_split(std::ostream& os, const std::vector<std::pair<std::string, QuantizedTensor>>& results) {
  bool header = false;
  char line[512];
  for (const auto& [name, q] : results) {
    const ChannelStats& c = q.channels;
    if (c.outlier_mask.empty()) continue;
    if (!header) {
      std::snprintf(line, sizeof line,
                    "outlier channels (%lld of %lld, %s of the input's energy; mask: %s), NMSE in the original basis:\n",
                    static_cast<long long>(c.split.outlier_channels),
                    static_cast<long long>(c.split.outlier_channels + c.split.normal_channels),
                    pct(c.split.outlier_energy_fraction).c_str(), c.outlier_mask_source.c_str());
      os << line;
      std::snprintf(line, sizeof line, "%-18s %11s %11s %11s %15s\n", "recipe", "global", "outlier ch", "normal ch",
                    "normal/global");
      os << line;
      header = true;
    }
    std::snprintf(line, sizeof line, "%-18s %11s %11s %11s %15.2f\n", name.c_str(), sci(c.nmse_original_basis).c_str(),
                  sci(c.split.outlier_nmse).c_str(), sci(c.split.normal_nmse).c_str(),
                  c.split.normal_nmse / c.nmse_original_basis);
    os << line;
  }
}

// Median and maximum of the per-channel NMSE over channels with energy, and the worst channel.
struct ChannelSummary {
  double median = NAN, max = NAN;
  std::int64_t worst = -1;
};
ChannelSummary summarize_channels(const ChannelStats& c) {
  ChannelSummary s;
  std::vector<double> v;
  for (std::size_t j = 0; j < c.channel_err2.size(); ++j) {
    if (!(c.channel_ref2[j] > 0)) continue;
    const double r = c.channel_err2[j] / c.channel_ref2[j];
    if (s.worst < 0 || r > s.max) s.max = r, s.worst = static_cast<std::int64_t>(j);
    v.push_back(r);
  }
  if (!v.empty()) {
    std::sort(v.begin(), v.end());
    s.median = v[(v.size() - 1) / 2];
  }
  return s;
}

nlohmann::ordered_json channel_json(const QuantizedTensor& q) {
  const ChannelStats& c = q.channels;
  const ChannelSummary cs = summarize_channels(c);
  nlohmann::ordered_json j = {{"channels",
                               {{"nmse_original_basis", c.nmse_original_basis},
                                {"channel_nmse_median", cs.median},
                                {"channel_nmse_max", cs.max},
                                {"worst_channel", cs.worst}}}};
  if (!c.block_nmse.empty()) {
    nlohmann::ordered_json worst = nlohmann::ordered_json::array();
    for (std::size_t k = 0; k < c.worst_blocks.size(); ++k)
      worst.push_back({{"block", {c.worst_blocks[k] / q.scale_cols, c.worst_blocks[k] % q.scale_cols}},
                       {"error_share", c.worst_block_error_share[k]}});
    j["blocks"] = {{"with_energy", c.blocks_with_energy},
                   {"nmse_p50", c.block_nmse_p50},
                   {"nmse_p90", c.block_nmse_p90},
                   {"nmse_p99", c.block_nmse_p99},
                   {"nmse_max", c.block_nmse_max},
                   {"worst", std::move(worst)}};
  }
  if (!c.outlier_mask.empty())
    j["outlier_split"] = {{"mask_source", c.outlier_mask_source},
                          {"outlier_channels", c.split.outlier_channels},
                          {"normal_channels", c.split.normal_channels},
                          {"outlier_nmse", c.split.outlier_nmse},
                          {"normal_nmse", c.split.normal_nmse},
                          {"outlier_energy_fraction", c.split.outlier_energy_fraction}};
  return j;
}

void print_json(std::ostream& os, const std::string& source, const std::string& out,
                const std::vector<std::pair<std::string, QuantizedTensor>>& results) {
  nlohmann::ordered_json j = {{"source", source}, {"output", out}, {"recipes", nlohmann::ordered_json::array()}};
  for (const auto& [name, q] : results) {
    const QuantStats& s = q.stats;
    j["recipes"].push_back({{"name", name},
                            {"format", format_string(q.spec)},
                            {"layout", layout_string(q.spec)},
                            {"axis", q.spec.axis},
                            {"rounding", to_string(q.spec.rounding.mode)},
                            {"sr_bits", sr_bits_string(q.spec.rounding.sr_bits)},
                            {"scale_rule", scale_rule_string(q.spec)},
                            {"rht_size", q.spec.rht.size},
                            {"global_decode_scale", static_cast<double>(q.global.decode)},
                            {"stats",
                             {{"elements", s.elements},
                              {"nmse", s.nmse},
                              {"bias", s.bias},
                              {"relative_bias", s.relative_bias},
                              {"max_abs_error", s.max_abs_error},
                              {"clipped_fraction", s.clipped_fraction},
                              {"underflow_fraction", s.underflow_fraction},
                              {"blocks", s.blocks},
                              {"zero_scale_blocks", s.zero_scale_blocks},
                              {"subnormal_scale_blocks", s.subnormal_scale_blocks}}}});
    const nlohmann::ordered_json cj = channel_json(q);
    for (auto it = cj.begin(); it != cj.end(); ++it) j["recipes"].back()[it.key()] = it.value();
  }
  // error_handler_t::replace: a string that is not UTF-8 (a path) prints as U+FFFD rather than
  // throwing after the work is done.
  os << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
}

// Whether an option was given on the command line.
using Given = std::function<bool(const std::string&)>;

// An option is applied as recorded or refused. One that the rest of the command line makes
// irrelevant - a parameter of another generator, a generator option with --input, --sr-bits
// without SR, an RHT setting without the RHT - would be accepted,
// ignored, and kept in the recorded command line (and the custom spec's in the trace's
// attributes) as if it had been applied.
void refuse_unapplied_options(const QuantizeArgs& a, const Given& given) {
  const std::pair<const char*, const char*> generator_options[] = {
      {"--dist-scale", "scale"}, {"--nu", "nu"}, {"--outlier-fraction", "outlier_fraction"}, {"--outlier-scale", "outlier_scale"}};
  if (!a.input.empty()) {
    for (const char* o : {"--shape", "--data-seed", "--dist-scale", "--nu", "--outlier-fraction", "--outlier-scale"})
      if (given(o)) throw UsageError(std::string(o) + " applies to --generate only (the tensor comes from --input)");
  } else if (!a.generate.empty()) {
    for (const auto& [option, parameter] : generator_options)
      if (given(option) && !generator_uses(a.generate, parameter))
        throw UsageError(std::string(option) + " is not a parameter of --generate " + a.generate);
    if (given("--allow-nonfinite"))
      throw UsageError("--allow-nonfinite applies to --input only (a generated tensor is finite)");
    if (given("--outlier-channels") && a.generate == "outliers")
      throw UsageError("--outlier-channels: --generate outliers records the mask it applied; give a mask only for "
                       "--input or another generator");
  }
  const int d = a.custom.rht;
  if (d != 0 && !(d >= 2 && d <= 256 && (d & (d - 1)) == 0))
    throw UsageError("--rht must be 0 (off) or a power of two in [2, 256], got " + std::to_string(d));
  if (d == 0)
    for (const char* o : {"--rht-signs", "--rht-axis", "--rht-bf16"})
      if (given(o)) throw UsageError(std::string(o) + " applies only with --rht D (the RHT is off)");
  if (given("--sr-bits") && a.custom.rounding != "sr")
    throw UsageError("--sr-bits applies only with --rounding sr (this run rounds " + a.custom.rounding + ")");
  // --seed and --stream are accepted with deterministic presets: they are the RNG key, recorded
  // beside a rounding mode that says nothing was drawn, so that one command line can run
  // deterministic and stochastic presets alike.
}

int run_quantize(const QuantizeArgs& a, const std::string& command_line, bool custom_given, const Given& given) {
  const Backend& backend = select_backend(a.backend);
  // ---- what to run -------------------------------------------------------------------
  std::vector<std::pair<std::string, QuantSpec>> specs;
  if (!a.presets.empty() && custom_given)
    throw UsageError("--preset and the custom options (--format, --layout, ...) are mutually exclusive");
  if (a.presets.empty()) {
    specs.emplace_back(a.custom.format == "nvfp4" && !custom_given ? "nvfp4" : "custom", spec_from_options(a.custom));
  } else {
    for (const std::string& n : expand_recipe_names(a.presets)) {
      QuantSpec s = preset(n).spec;
      s.rounding.rng = RngStream{a.custom.seed, a.custom.stream};
      s.rht.sign_seed = a.custom.seed;
      specs.emplace_back(n, s);
    }
  }
  refuse_unapplied_options(a, given);

  // ---- the tensor --------------------------------------------------------------------
  if (a.input.empty() == a.generate.empty()) throw UsageError("give exactly one of --input FILE.h5:/dataset and --generate KIND");
  Matrix x;
  h5::Dims dims;
  std::string source;
  std::vector<std::uint8_t> mask;  // outlier channels, if known
  std::string mask_source;
  if (!a.input.empty()) {
    const TensorSource src = parse_tensor_source(a.input);
    if (!std::filesystem::exists(src.file)) throw UsageError("input file '" + src.file + "' does not exist");
    refuse_output_over_input(a.out, src.file);
    const MatrixShape shape = inspect_matrix(src);  // the element limit, from the declared dims
    check_memory(a, "input " + src.text() + " (" + std::to_string(shape.rows) + " x " + std::to_string(shape.cols) + ")",
                 shape.rows, shape.cols, specs);
    x = read_matrix(src, &dims);
    source = src.text();
  } else {
    GeneratorSpec g;
    g.kind = a.generate;
    parse_shape(a.shape, &g.rows, &g.cols);
    check_shape_limit(a.shape, g.rows, g.cols);
    check_memory(a, "--shape " + a.shape, g.rows, g.cols, specs);
    g.seed = a.data_seed;
    g.scale = a.dist_scale;
    g.nu = a.nu;
    g.outlier_fraction = a.outlier_fraction;
    g.outlier_scale = a.outlier_scale;
    x = generate(g);
    if (g.kind == "outliers") {
      mask = outlier_channel_mask(g);
      mask_source = "generator";
    }
    dims = g.rows == 1 ? h5::Dims{static_cast<std::uint64_t>(g.cols)}
                       : h5::Dims{static_cast<std::uint64_t>(g.rows), static_cast<std::uint64_t>(g.cols)};
    source = "generator:" + describe(g);
  }
  std::int64_t bad = 0;
  if (!a.allow_nonfinite && !all_finite(x, &bad))
    throw UsageError("input " + source + " has a non-finite value (" +
                     std::to_string(x.data[static_cast<std::size_t>(bad)]) + ") at element " + std::to_string(bad) +
                     " (row " + std::to_string(bad / x.cols) + ", column " + std::to_string(bad % x.cols) +
                     "); pass --allow-nonfinite to quantize it with the spec's Inf/NaN semantics");
  for (const auto& [name, s] : specs)
    if (s.rht.enabled()) {
      const std::int64_t n = s.rht_axis == 0 ? x.rows : x.cols;
      if (n % s.rht.size != 0)
        throw UsageError((name == "custom" ? std::string("--rht ") : "preset " + name + ": RHT size ") +
                         std::to_string(s.rht.size) + " does not divide the length " + std::to_string(n) +
                         " of axis " + std::to_string(s.rht_axis) + " of the input");
    }

  if (!a.outlier_channels.empty()) {
    try {
      mask = parse_channel_list(a.outlier_channels, x.cols);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--outlier-channels: ") + e.what());
    }
    mask_source = "--outlier-channels " + a.outlier_channels;
  }

  // ---- output file: written as OUT.partial, renamed when complete --------------------
  QuantizeTrace trace(a.out, command_line, source, a.backend, x, dims);
  std::vector<std::pair<std::string, QuantizedTensor>> results;
  for (const auto& [name, s] : specs) {
    QuantizedTensor q = backend.quantize(x, s);
    q.channels = compute_channel_stats(x, q);
    if (!mask.empty()) {
      q.channels.outlier_mask = mask;
      q.channels.outlier_mask_source = mask_source;
      q.channels.split = split_channels(q.channels, mask);
    }
    trace.add(name, q);
    q.codes.clear();  // keep the statistics only
    q.codes16.clear();
    q.dequantized = Matrix();
    q.transformed = Matrix();
    results.emplace_back(name, std::move(q));
  }
  trace.complete();

  if (a.json) {
    print_json(std::cout, source, a.out, results);
  } else {
    std::cout << "fp4drift quantize: " << source << ", " << x.rows << " x " << x.cols << "\n";
    print_table(std::cout, results);
    print_split(std::cout, results);
    if (!a.out.empty()) std::cout << "wrote " << a.out << "\n";
  }
  return 0;
}

}  // namespace

Runner add_quantize(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<QuantizeArgs>();
  app.add_option("--input,-i", a->input, "Input tensor FILE.h5:/dataset (float32/float64, 1-D or 2-D)");
  app.add_option("--generate,-g", a->generate, "Synthetic input: normal | student-t | outliers");
  app.add_option("--shape", a->shape, "Synthetic shape ROWSxCOLS or N")->capture_default_str();
  add_seed_option(app, "--data-seed", a->data_seed, "Seed of the synthetic generator");
  app.add_option("--dist-scale", a->dist_scale, "Standard deviation / scale of the generator")->capture_default_str();
  app.add_option("--nu", a->nu, "Student-t degrees of freedom")->capture_default_str();
  app.add_option("--outlier-fraction", a->outlier_fraction, "Fraction of outlier channels (columns)")->capture_default_str();
  app.add_option("--outlier-scale", a->outlier_scale, "Factor on the outlier channels")->capture_default_str();
  app.add_option("--outlier-channels", a->outlier_channels,
                 "Outlier channels (input columns) of an --input tensor, e.g. 3,17,40-47: the error is also reported "
                 "over them and over the other channels (--generate outliers records its own)");
  // --recipe stays an alias: the command lines recorded in traces, and scripts, use it.
  app.add_option("--preset,--recipe,-r", a->presets, "Preset(s), comma-separated or repeated; 'all' for every preset");
  auto* f = app.add_option("--format", a->custom.format, "nvfp4 | mxfp4 | fp8-e4m3 | fp8-e5m2 | bf16 | fp16");
  auto* l = app.add_option("--layout", a->custom.layout, "1x16 | 16x16 (nvfp4), 1x32 (mxfp4), tensor | 1x128 | 128x128 (fp8)");
  auto* ax = app.add_option("--axis", a->custom.axis, "Block axis: 1 = along rows (last dim), 0 = along columns");
  auto* ro = app.add_option("--rounding", a->custom.rounding, "rne | rz | sr");
  auto* sb = app.add_option("--sr-bits", a->custom.sr_bits, "Random bits of SR: exact | hw (cvt.rs: 8 bits per element, carry form) | 1..32");
  auto* sc = app.add_option("--scale-rule", a->custom.scale_rule, "nvfp4: te | te-legacy; mxfp4: floor | ceil | rceil");
  auto* rh = app.add_option("--rht", a->custom.rht, "Random Hadamard transform size d (0 = off, 2..256)");
  auto* rs = app.add_option("--rht-signs", a->custom.rht_signs, "te | random | none");
  auto* ra = app.add_option("--rht-axis", a->custom.rht_axis, "Axis the RHT runs along (0 = token dim)");
  auto* rb = app.add_flag("--rht-bf16", a->custom.rht_bf16, "Round the RHT output to BF16 before quantizing");
  add_seed_option(app, "--seed", a->custom.seed, "Seed of the SR draws and random RHT signs");
  add_seed_option(app, "--stream", a->custom.stream, "RNG stream id of the SR draws");
  app.add_option("--out,-o", a->out, "Output HDF5 file");
  app.add_flag("--json", a->json, "Print the results as JSON instead of a table");
  app.add_option("--backend", a->backend, "cpu | cuda (every scheme; the RHT, orientation and statistics run on the host)")
      ->capture_default_str();
  app.add_flag("--allow-nonfinite", a->allow_nonfinite, "Quantize Inf/NaN inputs with the spec's semantics instead of refusing");
  app.add_flag("--force-memory", a->force_memory,
               "Run even when the estimated memory need exceeds the memory available (MemAvailable)");
  std::vector<CLI::Option*> custom{f, l, ax, ro, sb, sc, rh, rs, ra, rb};
  return [a, command_line, custom, &app]() {
    bool custom_given = false;
    for (CLI::Option* o : custom) custom_given = custom_given || o->count() > 0;
    return run_quantize(*a, command_line, custom_given,
                        [&app](const std::string& name) { return app.get_option(name)->count() > 0; });
  };
}

}  // namespace fp4d::cli
