// Subcommands of the fp4drift CLI. Each registers its options on the CLI11 app and returns
// the function that runs it (exit status).
#pragma once

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "backend/backend.hpp"

namespace fp4d::cli {

using Runner = std::function<int()>;

Runner add_quantize(CLI::App& app, const std::string& command_line);
Runner add_bench(CLI::App& app);
Runner add_gemm(CLI::App& app, const std::string& command_line);
Runner add_accumulator(CLI::App& app);
Runner add_run(CLI::App& app, const std::string& command_line);
Runner add_sweep(CLI::App& app, const std::string& command_line);  // cmd_sweep.cpp
// fp4drift bench gemm-cuda, quantize-dual-cuda, mlp-cuda and lm-cuda (cmd_bench_cuda.cpp).
int run_bench_gemm_cuda(std::int64_t size, int repeat, bool json);
int run_bench_dual_cuda(std::int64_t rows, std::int64_t cols, bool bf16_input, int repeat, bool json);
int run_bench_mlp_cuda(const std::string& config, std::int64_t width, std::int64_t batch, std::int64_t steps, bool json);
int run_bench_lm_cuda(std::int64_t steps, bool json);
// fp4drift bench mlp-ref (cmd_bench_mlp.cpp).
int run_bench_mlp_ref(std::int64_t width, std::int64_t batch, int layers, int repeat, bool json);
// fp4drift bench lm-ref (cmd_bench_lm.cpp); precision: the reference's (empty: the config's).
int run_bench_lm_ref(const std::string& config, const std::string& precision, int repeat, bool json);

// Errors meant for the user: printed as one line "fp4drift: error: ..." with exit status 2
// (bad input or usage) by main().
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The output replaces --out by a rename when complete: if --out is the input file, the input
// (with every other dataset in it) would be gone. UsageError then.
inline void refuse_output_over_input(const std::string& out, const std::string& input_file) {
  std::error_code ec;
  if (!out.empty() && std::filesystem::equivalent(out, input_file, ec))
    throw UsageError("--out " + out + " is also the input file " + input_file + ": the output would replace it");
}

// A seed or RNG stream id: a decimal integer in [0, 2^64 - 1], refused otherwise. CLI11
// converts into std::uint64_t with strtoull, which wraps "-1" to 2^64 - 1 and clamps anything
// above 2^64 - 1 to it, so the value would be recorded as a seed the user did not give.
inline std::uint64_t parse_seed(const std::string& option, const std::string& text) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, v);  // digits only: no sign, no base prefix
  if (text.empty() || ec != std::errc() || stop != end)
    throw CLI::ValidationError(option, "must be an integer in [0, 18446744073709551615] (2^64 - 1), got '" + text + "'");
  return v;
}

// Every seed and stream option goes through parse_seed (a CLI11 parse error: exit 2).
inline CLI::Option* add_seed_option(CLI::App& app, const std::string& name, std::uint64_t& target,
                                    const std::string& description) {
  const std::string shown = name.substr(0, name.find(','));
  CLI::Option* o = app.add_option_function<std::string>(
      name, [&target, shown](const std::string& s) { target = parse_seed(shown, s); }, description);
  o->default_str(std::to_string(target));
  return o;
}

// --backend: the backend of that name (backend/backend.hpp), checked to be usable here: a
// UsageError with the reason otherwise (an unknown name, a build without CUDA, no device).
const Backend& select_backend(const std::string& name);

}  // namespace fp4d::cli
