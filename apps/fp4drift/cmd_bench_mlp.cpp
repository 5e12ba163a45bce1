// fp4drift bench mlp-ref: the double-precision reference's training step (sim/mlp.hpp, plain
// fixed-order GEMMs, OpenMP over output rows) against this machine's double GEMM throughput
// measured with Eigen in the same run, on the same GEMM shapes.
// FLOPs counted: 2 M N K per GEMM; per step fprop for every layer, wgrad for every layer,
// dgrad for every layer but the first (3L - 1 GEMMs); element-wise work is not counted.
#include <Eigen/Dense>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "quant/dense_gemm.hpp"
#include "sim/mlp.hpp"

namespace fp4d::cli {

namespace {
template <class F>
double best_seconds(int repeat, F&& f) {
  f();
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}
}  // namespace

int run_bench_mlp_ref(std::int64_t width, std::int64_t batch, int layers, int repeat, bool json) {
  if (width < 16 || batch < 16 || layers < 1) throw UsageError("bench mlp-ref: --width and --batch >= 16, layers >= 1");
  MlpSpec s;
  s.widths.assign(static_cast<std::size_t>(layers) + 1, width);
  s.batch = batch;
  s.teacher_width = 64;
  s.total_steps = 1000000;
  validate(s);
  MlpState<double> st = init_state<double>(s);
  const double step_s = best_seconds(repeat, [&] { train_step<double>(s, st, nullptr); });
  std::int64_t b = 1000;
  const double data_s = best_seconds(repeat, [&] { (void)make_batch(s, b++); });  // inputs + teacher targets
  const double gemms = 3.0 * layers - 1.0;
  const double flops = gemms * 2.0 * static_cast<double>(batch) * static_cast<double>(width) * static_cast<double>(width);
  // The reference's GEMM kernel alone (quant/dense_gemm), in the step's three orientations:
  // fprop X W^T, wgrad dZ^T X, dgrad dZ W (layers - 1 of them).
  std::vector<double> ka(static_cast<std::size_t>(batch * width), 0.5), kb(static_cast<std::size_t>(width * width), 0.25),
      kc(static_cast<std::size_t>(batch * width));
  const double kernel_s = best_seconds(repeat, [&] {
    for (int l = 0; l < layers; ++l) {
      dense_gemm(ka.data(), false, kb.data(), true, kc.data(), batch, width, width);
      dense_gemm(ka.data(), true, ka.data(), false, kb.data(), width, batch, width);
      if (l > 0) dense_gemm(ka.data(), false, kb.data(), false, kc.data(), batch, width, width);
    }
  });
  // Eigen: the fprop shape (batch x width) * (width x width)^T, same count of GEMMs.
  const Eigen::MatrixXd x = Eigen::MatrixXd::Random(batch, width), w = Eigen::MatrixXd::Random(width, width);
  Eigen::MatrixXd y(batch, width);
  const double eigen_s = best_seconds(repeat, [&] {
    for (int g = 0; g < static_cast<int>(gemms); ++g) y.noalias() = x * w.transpose();
  });
  const double ref_gf = flops / step_s * 1e-9, eigen_gf = flops / eigen_s * 1e-9, kernel_gf = flops / kernel_s * 1e-9;
  if (json) {
    const nlohmann::ordered_json j = {
        {"benchmark", "mlp-ref"},         {"width", width},
        {"batch", batch},                 {"layers", layers},
        {"threads", Eigen::nbThreads()},  {"seconds_per_step", step_s},
        {"gflops_reference", ref_gf},     {"gflops_eigen", eigen_gf},
        {"gflops_kernel", kernel_gf},     {"seconds_data_per_step", data_s},
        {"fraction_of_eigen", ref_gf / eigen_gf}};
    // error_handler_t::replace: a string that is not UTF-8 (a path) prints as U+FFFD rather than
    // throwing after the work is done.
    std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("fp4drift bench mlp-ref: %d layers of %lld x %lld, batch %lld, double, best of %d (%d threads)\n", layers,
              static_cast<long long>(width), static_cast<long long>(width), static_cast<long long>(batch), repeat,
              Eigen::nbThreads());
  std::printf("  reference train_step : %9.3f ms  %8.2f GFLOP/s (GEMMs only counted)\n", step_s * 1e3, ref_gf);
  std::printf("    of which the batch  : %9.3f ms  (inputs and teacher targets, make_batch)\n", data_s * 1e3);
  std::printf("  its GEMMs alone      : %9.3f ms  %8.2f GFLOP/s (quant/dense_gemm, the same shapes)\n", kernel_s * 1e3,
              kernel_gf);
  std::printf("  Eigen double GEMMs   : %9.3f ms  %8.2f GFLOP/s\n", eigen_s * 1e3, eigen_gf);
  std::printf("  reference / Eigen    : %8.1f%%\n", 100 * ref_gf / eigen_gf);
  return 0;
}

}  // namespace fp4d::cli
