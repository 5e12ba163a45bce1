#include "trace/sum_dot_trace.hpp"

#include <cstdint>
#include <vector>

#include "trace/device_identity.hpp"
#include "trace/dims.hpp"

namespace fp4d {

SumDotTrace::SumDotTrace(const std::string& path, const std::string& command_line, const SumDotRun& run,
                         const std::string& config_text, const std::string& config_source)
    : file_(path, "fp4drift.run", 1, command_line) {
  if (!enabled()) return;
  h5::Group root = file_.root();
  root.set_attr("workload", std::string(run.dot ? "dot" : "sum"));
  root.set_attr("config", config_text);
  root.set_attr("config_source", config_source);
  // sum and dot run on the CPU only (cmd_run refuses a device): their device attributes say so,
  // as an mlp or lm run's on the CPU do, so that every run trace and the sweep index name one.
  write_device_attributes(root, DeviceIdentity{});
}

void SumDotTrace::write(const SumDotRun& run, const SumDotResult& r) {
  if (!enabled()) return;
  h5::Group g = file_.root().create_group(sum_dot_trace::kGroup);
  g.set_attr("operation", std::string(run.dot ? "dot" : "sum"));
  g.set_attr("terms", run.a.kind);
  g.set_attr("c", run.a.c);
  if (run.dot) {
    g.set_attr("b_terms", run.b.kind);
    g.set_attr("b_c", run.b.c);
    g.set_attr("round_products", run.options.round_products);
  }
  g.set_attr("n_terms", run.n);
  g.set_attr("format", run.format_name);
  g.set_attr("precision_bits", static_cast<std::int64_t>(run.options.format.precision));
  g.set_attr("rounding", run.rounding_name);
  g.set_attr("sr_bits", static_cast<std::int64_t>(run.options.rounding.sr_bits));
  g.set_attr("seed", static_cast<std::uint64_t>(run.a.seed));
  g.set_attr("runs", static_cast<std::int64_t>(run.options.runs));
  g.set_attr("float32_terms", run.a.float32);
  const std::size_t P = r.points.size(), R = static_cast<std::size_t>(run.options.runs);
  std::vector<std::int64_t> n(P);
  std::vector<double> exact(P), mean(P), rms(P), var(P), half(P), computed(P * R), error(P * R);
  for (std::size_t i = 0; i < P; ++i) {
    const SumDotPoint& p = r.points[i];
    n[i] = p.n, exact[i] = p.exact, mean[i] = p.mean_error, rms[i] = p.rms_error;
    var[i] = p.sr_variance, half[i] = p.sr_half_step_sq;
    for (std::size_t k = 0; k < R; ++k) computed[i * R + k] = p.computed[k], error[i * R + k] = p.error[k];
  }
  const h5::Dims d1{static_cast<std::uint64_t>(P)}, d2{static_cast<std::uint64_t>(P), static_cast<std::uint64_t>(R)};
  g.write("n", n, d1);
  g.write(sum_dot_trace::kExact, exact, d1);
  g.write("computed", computed, d2);
  g.write("error", error, d2);
  g.write(sum_dot_trace::kMeanError, mean, d1);
  g.write(sum_dot_trace::kRmsError, rms, d1);
  g.write("sr_variance", var, d1);
  g.write("sr_half_step_sq", half, d1);
  g.write("first_stagnation", r.first_stagnation, h5::Dims{static_cast<std::uint64_t>(r.first_stagnation.size())});
  // Named axes (dims.hpp): the points by their n, the runs by their index. The terms are plain
  // numbers, so every sum, error and variance is dimensionless.
  const h5::Dataset n_dim = g.open_dataset("n");
  dims::coordinate(n_dim, "number of terms summed at the recorded point");
  const h5::Dataset run_dim = dims::index(g, "run", R, "run r, with SR seed seed + r");
  for (const char* name : {sum_dot_trace::kExact, sum_dot_trace::kMeanError, sum_dot_trace::kRmsError, "sr_variance",
                           "sr_half_step_sq"})
    dims::name_axes(g.open_dataset(name), {n_dim}, "1");
  for (const char* name : {"computed", "error"}) dims::name_axes(g.open_dataset(name), {n_dim, run_dim}, "1");
  dims::name_axes(g.open_dataset("first_stagnation"), {run_dim}, "");
}

}  // namespace fp4d
