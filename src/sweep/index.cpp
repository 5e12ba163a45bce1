#include "sweep/index.hpp"

#include <cmath>
#include <filesystem>

#include "trace/sweep_index.hpp"

namespace fp4d::sweep {

namespace {

SweepIndexRun index_run(const std::string& outdir, const Sweep& s, const SweepRun& r, const RunRecord& rec,
                        const RunMetrics& m) {
  SweepIndexRun x;
  x.id = r.id;
  x.label = r.label;
  for (const Override& o : r.overrides) x.overrides += (x.overrides.empty() ? "" : "\n") + o.key + " = " + o.value;
  for (const std::string& axis : s.axes) {
    std::string v;
    for (const Override& o : r.overrides)
      if (o.key == axis) v = o.value;
    x.params.push_back(v);
  }
  x.workload = r.workload;
  x.status = rec.status;
  x.error = rec.error;
  x.exit_code = rec.exit_code;
  x.attempts = rec.attempts;
  x.rank = rec.rank;
  x.cuda_visible_devices = rec.cuda_visible_devices;
  x.wall_s = rec.wall_s < 0 ? NAN : rec.wall_s;  // -1 in a record: unknown
  x.reference_final_loss = m.reference_final_loss;
  x.final_rms_error = m.final_rms_error;
  x.final_mean_error = m.final_mean_error;
  x.final_exact = m.final_exact;
  if (std::filesystem::exists(RunPaths(outdir, r.id).trace)) x.trace_link = "runs/" + r.id + "/trace.h5";
  return x;
}

}  // namespace

void write_index(const std::string& outdir, const Sweep& s, const std::vector<RunRecord>& records,
                 const std::vector<RunMetrics>& metrics, const IndexInfo& info) {
  SweepIndex x;
  x.command_line = info.command_line;
  x.status = info.status;
  x.backend = s.backend;
  x.mode = info.mode;
  x.ranks = info.ranks;
  x.workers = s.workers;
  x.sweep_text = s.text;
  x.sweep_source = s.source;
  x.base_text = s.base_text;
  x.base_source = s.base_source;
  x.axes = s.axes;
  for (const RunRecord& r : records) {
    std::int64_t& count = r.status == "complete"      ? x.runs_complete
                          : r.status == "failed"      ? x.runs_failed
                          : r.status == "interrupted" ? x.runs_interrupted
                                                      : x.runs_pending;
    ++count;
  }
  for (std::size_t i = 0; i < s.runs.size(); ++i) {
    x.runs.push_back(index_run(outdir, s, s.runs[i], records[i], metrics[i]));
    for (const RecipeMetrics& m : metrics[i].recipes) {
      SweepIndexRecipe y{static_cast<std::int64_t>(i), s.runs[i].id, m.recipe, m.final_loss,
                         m.final_rel_loss_gap, m.final_weight_rel_error, m.growth_exponent,
                         m.first_nonfinite_step, m.tail_loss, m.tail_rel_loss_gap};
      y.rel_loss_gap_window_mean = m.rel_loss_gap_window_mean;
      y.gap_window_first_step = m.gap_window_first_step;
      y.gap_window_last_step = m.gap_window_last_step;
      y.quantized_weight_rel_error = m.quantized_weight_rel_error;
      y.quantized_growth_exponent = m.quantized_growth_exponent;
      y.quantized_growth_ci_low = m.quantized_growth_ci_low;
      y.quantized_growth_ci_high = m.quantized_growth_ci_high;
      y.quantized_growth_first_step = m.quantized_growth_first_step;
      y.quantized_growth_last_step = m.quantized_growth_last_step;
      x.recipes.push_back(y);
    }
  }
  write_sweep_index((std::filesystem::path(outdir) / "sweep.h5").string(), x);
}

}  // namespace fp4d::sweep
