#include "trace/mlp_trace.hpp"

#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <type_traits>

#include "sim/mlp_precision.hpp"
#include "trace/device_identity.hpp"
#include "trace/dims.hpp"
#include "trace/output_file.hpp"
#include "trace/run_files.hpp"
#include "trace/run_rows.hpp"
#include "trace/run_summary_attrs.hpp"

namespace fp4d {

namespace {

std::string run_group(const std::string& recipe) { return "mlp/runs/" + recipe; }

void write_root(h5::Group root, const MlpRunSpec& spec, const MlpRunControl& ctl, const std::string& run_id) {
  write_provenance(root, "fp4drift.run", 1, ctl.command_line);
  root.set_attr("backend", ctl.backend);
  write_device_attributes(root, ctl.device);
  root.set_attr("status", std::string("running"));
  root.set_attr("run_id", run_id);
  root.set_attr("workload", std::string("mlp"));
  root.set_attr("config", ctl.config_text);
  root.set_attr("config_source", ctl.config_source);
  h5::Group m = root.require_group(mlp_trace::kGroup);
  m.set_attr("widths", spec.model.widths);
  m.set_attr("steps", spec.steps);
  std::string names;
  for (const std::string& r : spec.recipes) names += (names.empty() ? "" : ",") + r;
  m.set_attr(mlp_trace::kRecipesAttr, names);
  m.set_attr("compare_every", spec.compare_every);
  m.set_attr("trace_every", spec.trace_every);
  m.set_attr("reference_precision", to_string(spec.reference_precision));
  m.set_attr("reference_enabled", std::int64_t{spec.reference_enabled ? 1 : 0});
  m.set_attr("check_precision", spec.check_precision ? to_string(*spec.check_precision) : std::string("none"));
  m.set_attr("activation", to_string(spec.model.activation));
  m.set_attr("norm", to_string(spec.model.norm));
  m.set_attr("norm_eps", spec.model.norm_eps);
  m.set_attr("residual", spec.model.residual);
  m.set_attr("operand_slots", std::string("layer * 6 + role * 2 + operand; role fprop 0, dgrad 1, wgrad 2; "
                                          "operand 0 = first (X, dY, X^T), 1 = second (W, W^T, dY^T)"));
}

}  // namespace

struct MlpTrace::Impl {
  using Id = RunRows::Id;
  h5::File file;
  RunRows rows;
  SwmrPhase swmr;
  Id step = 0, compare_step = 0, ref_loss = 0;
  struct Run {
    Id loss, gap, lost, nmse, clipped, underflow, zero_scales, weight_error, grad_cosine, grad_error, grad_bias;
  };
  std::vector<Run> runs;
  std::optional<Id> check_weight, check_loss;  // with check_precision: [C, L], [C]
  std::vector<std::string> recipes;
  // Per run, the layers its recipe quantizes and those it keeps in edge_recipe
  // (RecipeGemm::recipe_name: fp32 and bf16 runs have no edge layers).
  std::vector<std::vector<int>> quantized_layers, edge_layers;
  std::int64_t steps = 0;
  bool reference_enabled = true;
  DeviceIdentity device;  // this attempt's (a resume records it: set_resumed_at)
  std::uint64_t records = 0, compares = 0;   // rows staged so far
  std::vector<std::int64_t> compared_steps;  // the rows of compare_step, staged included

  // The datasets, created (an empty trace) or opened (to continue one), in one order. A new
  // trace also names their axes (dims.hpp): the rows by step or compare_step, the columns by
  // layer or operand_slot; an opened one has them already.
  Impl(h5::File f, const MlpRunSpec& spec, bool create) : file(std::move(f)), recipes(spec.recipes), steps(spec.steps),
                                                          reference_enabled(spec.reference_enabled) {
    h5::Group root = file.root();
    const auto L = static_cast<std::uint64_t>(spec.model.widths.size() - 1);
    for (const std::string& r : spec.recipes) {
      const RecipeGemm gemm(RecipeGemmOptions{r, spec.edge_recipe, spec.high_precision_layers, 0, {}}, static_cast<int>(L));
      std::vector<int> q, e;
      for (int l = 0; l < static_cast<int>(L); ++l) (gemm.recipe_name(l) == r ? q : e).push_back(l);
      quantized_layers.push_back(std::move(q)), edge_layers.push_back(std::move(e));
    }
    using C = RunRows::Counts;
    // The loss's unit: cross-entropy in nats, or half a mean square of the (dimensionless)
    // teacher outputs.
    const std::string loss_units = spec.model.task == "classification" ? "nat" : "1";
    enum class Col { None, Layer, Slot };
    h5::Dataset step_dim, compare_dim, layer_dim, slot_dim;
    if (create) {
      h5::Group m = root.require_group(mlp_trace::kGroup);
      layer_dim = dims::index(m, "layer", L, "layer l: widths[l] inputs -> widths[l+1] outputs");
      slot_dim = dims::index(m, "operand_slot", L * 6, "GEMM operand: layer * 6 + role * 2 + operand (operand_slots)");
    }
    const auto ints = [&](const std::string& name, C c) { return rows.ints(root, name, c, create); };
    const auto doubles = [&](const std::string& name, C c, Col col, const std::string& units) {
      const Id id = rows.doubles(root, name, col == Col::Layer ? h5::Dims{L} : col == Col::Slot ? h5::Dims{L * 6} : h5::Dims{},
                                 c, create);
      if (create) {
        std::vector<h5::Dataset> axes{c == C::Records ? step_dim : compare_dim};
        if (col != Col::None) axes.push_back(col == Col::Layer ? layer_dim : slot_dim);
        dims::name_axes(rows.doubles_at(id), axes, units);
      }
      return id;
    };
    step = ints("mlp/step", C::Records);
    compare_step = ints("mlp/compare_step", C::Compares);
    if (create) {
      step_dim = rows.ints_at(step), compare_dim = rows.ints_at(compare_step);
      dims::coordinate(step_dim, "training step of the record (its batch's losses, before its update)");
      dims::coordinate(compare_dim, "training steps done when the weights were compared with the reference's");
    }
    ref_loss = doubles(mlp_trace::kReferenceLoss, C::Records, Col::None, loss_units);
    for (const std::string& r : spec.recipes) {
      const std::string g = run_group(r);
      runs.push_back(Run{doubles(g + "/loss", C::Records, Col::None, loss_units),
                         doubles(g + "/rel_loss_gap", C::Records, Col::None, "1"),
                         doubles(g + "/lost_update_fraction", C::Records, Col::Layer, "1"),
                         doubles(g + "/operand_nmse", C::Records, Col::Slot, "1"),
                         doubles(g + "/operand_clipped_fraction", C::Records, Col::Slot, "1"),
                         doubles(g + "/operand_underflow_fraction", C::Records, Col::Slot, "1"),
                         doubles(g + "/operand_zero_scale_fraction", C::Records, Col::Slot, "1"),
                         doubles(g + "/weight_rel_error", C::Compares, Col::Layer, "1"),
                         doubles(g + "/grad_cosine", C::Compares, Col::Layer, "1"),
                         doubles(g + "/grad_rel_error", C::Compares, Col::Layer, "1"),
                         doubles(g + "/grad_sr_mean_rel_error", C::Compares, Col::Layer, "1")});
    }
    if (spec.check_precision) {
      check_weight = doubles("mlp/reference/check_weight_rel_error", C::Compares, Col::Layer, "1");
      check_loss = doubles("mlp/reference/check_loss_rel_error", C::Compares, Col::None, "1");
    }
  }
};

MlpTrace::MlpTrace(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MlpTrace::MlpTrace(MlpTrace&&) noexcept = default;
MlpTrace& MlpTrace::operator=(MlpTrace&&) noexcept = default;
MlpTrace::~MlpTrace() = default;

void MlpTrace::create(const MlpRunSpec& spec, const MlpRunControl& ctl, const std::string& file, const std::string& run_id) {
  require_output_directory(ctl.path);
  h5::File f = h5::File::create(file, h5::Format::Swmr);
  write_root(f.root(), spec, ctl, run_id);
  Impl t(std::move(f), spec, true);
  t.file.sync();
}

void MlpTrace::rebuild(const MlpRunSpec& spec, const MlpRunControl& ctl, const CheckpointMark& m, const RowJournal& journal) {
  replace_trace_file(ctl.path, [&](h5::File f) {
    write_root(f.root(), spec, ctl, m.run_id);
    Impl t(std::move(f), spec, true);
    t.rows.replay(journal, m.journal_length);
    t.file.root().set_attr("rebuilt_at_step", m.step);
    t.file.sync();
  });
}

bool MlpTrace::is_complete(const std::string& path) { return run_trace_is_complete(path); }

MlpTrace MlpTrace::open(const MlpRunSpec& spec, const MlpRunControl& ctl) {
  auto impl = std::make_unique<Impl>(open_run_trace(ctl.path, "mlp", ctl.config_text), spec, false);
  impl->device = ctl.device;
  return MlpTrace(std::move(impl));
}

std::string MlpTrace::run_id() const { return impl_->file.root().get_attr_string("run_id"); }

void MlpTrace::verify_and_truncate(const CheckpointMark& m) {
  Impl& t = *impl_;
  t.rows.verify_and_truncate(m);
  t.records = t.rows.ints_at(t.step).rows();
  t.compares = t.rows.ints_at(t.compare_step).rows();
  t.compared_steps = t.compares ? t.rows.ints_at(t.compare_step).read<std::int64_t>() : std::vector<std::int64_t>{};
}

std::uint64_t MlpTrace::records() const { return impl_->records; }
std::uint64_t MlpTrace::compares() const { return impl_->compares; }

void MlpTrace::start_swmr_write() { impl_->swmr.start(impl_->file); }

void MlpTrace::set_status(const std::string& status) {
  impl_->swmr.end(impl_->file, impl_->rows);
  impl_->file.root().set_attr("status", status);
}
void MlpTrace::set_resumed_at(std::int64_t step) {
  impl_->swmr.set_attrs(impl_->file, [step, d = impl_->device](h5::Group root) {
    root.set_attr("resumed_at_step", step);
    write_device_attributes(root, d);
  });
}
void MlpTrace::set_concurrent_runs(bool concurrent) {
  impl_->swmr.set_attrs(impl_->file, [concurrent](h5::Group root) {
    root.set_attr("concurrent_runs", std::int64_t{concurrent ? 1 : 0});
  });
}
void MlpTrace::set_gemm_path(std::size_t run, const std::string& path) {
  impl_->swmr.set_attrs(impl_->file, [g = run_group(impl_->recipes.at(run)), path](h5::Group root) {
    root.open_group(g).set_attr("gemm_path", path);
  });
}

void MlpTrace::stage(const MlpRecordRow& row) {
  Impl& t = *impl_;
  t.rows.stage(t.step, std::vector<std::int64_t>{row.step});
  t.rows.stage(t.ref_loss, std::vector<double>{row.reference_loss});
  for (std::size_t r = 0; r < row.runs.size(); ++r) {
    const MlpRecordRow::Run& x = row.runs[r];
    Impl::Run& d = t.runs[r];
    t.rows.stage(d.loss, std::vector<double>{x.loss});
    t.rows.stage(d.gap, std::vector<double>{x.rel_loss_gap});
    t.rows.stage(d.lost, x.lost_update_fraction);
    t.rows.stage_operands({d.nmse, d.clipped, d.underflow, d.zero_scales}, x.operands);
  }
  ++t.records;
}

void MlpTrace::stage(const MlpCompareRow& row) {
  Impl& t = *impl_;
  t.rows.stage(t.compare_step, std::vector<std::int64_t>{row.step + 1});
  t.compared_steps.push_back(row.step + 1);
  for (std::size_t r = 0; r < row.runs.size(); ++r) {
    const MlpCompareRow::Run& x = row.runs[r];
    t.rows.stage(t.runs[r].weight_error, x.weight_rel_error);
    t.rows.stage(t.runs[r].grad_cosine, x.grad_cosine);
    t.rows.stage(t.runs[r].grad_error, x.grad_rel_error);
    t.rows.stage(t.runs[r].grad_bias, x.grad_sr_mean_rel_error);
  }
  if (row.check_weight_rel_error) {
    t.rows.stage(*t.check_weight, *row.check_weight_rel_error);
    t.rows.stage(*t.check_loss, std::vector<double>{row.check_loss_rel_error});
  }
  ++t.compares;
}

void MlpTrace::commit(RowJournal& journal) { impl_->rows.commit(journal); }

std::map<std::string, std::uint64_t> MlpTrace::digests() const { return impl_->rows.digests(); }

void MlpTrace::sync() { impl_->file.sync(); }
void MlpTrace::flush() { impl_->file.flush(); }
void MlpTrace::close() { impl_->file.close(); }

MlpRunSummary MlpTrace::write_final_attributes(const std::vector<double>& ref_sq_norm) {
  Impl& t = *impl_;
  t.swmr.end(t.file, t.rows);
  h5::Group root = t.file.root();
  MlpRunSummary s;
  // Divergence: the first recorded step whose loss is not finite (-1: none).
  const std::vector<std::int64_t> steps = t.rows.ints_at(t.step).read<std::int64_t>();
  const auto first_nonfinite = [&](const std::vector<double>& loss) {
    for (std::size_t i = 0; i < loss.size(); ++i)
      if (!std::isfinite(loss[i])) return steps[i];
    return std::int64_t{-1};
  };
  const auto int64s = [](const std::vector<int>& v) { return std::vector<std::int64_t>(v.begin(), v.end()); };
  const std::size_t L = t.runs.empty() ? 0 : t.rows.doubles_at(t.runs.front().weight_error).row_elements();
  const std::size_t C = t.compared_steps.size();
  h5::Group m = root.open_group(mlp_trace::kGroup);
  m.set_attr("gap_window_fraction", run_metrics::kGapWindowFraction);
  m.set_attr("gap_window_min_records", run_metrics::kGapWindowMinRecords);
  m.set_attr("growth_window_factor", run_metrics::kWindowFactor);
  m.set_attr("growth_confidence", run_metrics::kSlopeConfidence);
  if (C) root.open_group("mlp/reference").set_attr("final_weight_sq_norm", ref_sq_norm);
  for (std::size_t r = 0; r < t.runs.size(); ++r) {
    const std::vector<double> e = t.rows.doubles_at(t.runs[r].weight_error).read<double>();
    // Growth exponent of the accumulated weight error, last layer, over the whole run (kept
    // for the readers of weight_error_growth_exponent; the headline is the quantized layers').
    std::vector<double> last(C);
    for (std::size_t i = 0; i < C; ++i) last[i] = e[i * L + (L - 1)];
    MlpRunSummary::Run x;
    x.recipe = t.recipes[r];
    const std::vector<double> loss = t.rows.doubles_at(t.runs[r].loss).read<double>(), gap = t.rows.doubles_at(t.runs[r].gap).read<double>();
    x.final_loss = loss.back();
    x.final_rel_loss_gap = gap.back();
    x.final_weight_rel_error = e.empty() ? std::nan("") : e.back();  // no compares without a reference
    x.growth_exponent = growth_exponent(t.compared_steps, last);
    x.first_nonfinite_step = first_nonfinite(loss);
    x.loss_gap = run_metrics::trailing_gap_mean(steps, gap);
    x.quantized_layers = t.quantized_layers[r], x.edge_layers = t.edge_layers[r];
    // The quantized layers' error at each compare as one Frobenius ratio, weighted by the
    // reference's final norms: exact at the last compare (the last step), and at earlier
    // compares as far as the reference's layer norms stay near their final ones.
    std::vector<double> agg(C, std::nan(""));
    std::vector<double> qn;
    for (const int l : x.quantized_layers) qn.push_back(ref_sq_norm.at(static_cast<std::size_t>(l)));
    for (std::size_t i = 0; i < C; ++i) {
      std::vector<double> q;
      for (const int l : x.quantized_layers) q.push_back(e[i * L + static_cast<std::size_t>(l)]);
      agg[i] = run_metrics::aggregate_rel_error(q, qn);
    }
    if (C) {
      for (const int l : x.quantized_layers) x.quantized_layer_weight_rel_error.push_back(e[(C - 1) * L + static_cast<std::size_t>(l)]);
      for (const int l : x.edge_layers) x.edge_layer_weight_rel_error.push_back(e[(C - 1) * L + static_cast<std::size_t>(l)]);
    }
    x.quantized_weight_rel_error = C ? agg.back() : std::nan("");
    x.quantized_growth = run_metrics::final_growth_window(t.compared_steps, agg);
    x.quantized_local_exponents = run_metrics::local_exponents(t.compared_steps, agg);
    h5::Group g = root.open_group(run_group(t.recipes[r]));
    g.set_attr(mlp_trace::kGrowthExponentAttr, x.growth_exponent);
    g.set_attr(mlp_trace::kFirstNonfiniteStepAttr, x.first_nonfinite_step);
    g.set_attr(mlp_trace::kLossGapMeanAttr, x.loss_gap.mean);
    g.set_attr("gap_window_first_step", x.loss_gap.first_step);
    g.set_attr("gap_window_last_step", x.loss_gap.last_step);
    g.set_attr(mlp_trace::kQuantizedLayersAttr, int64s(x.quantized_layers));
    g.set_attr("edge_layers", int64s(x.edge_layers));
    g.set_attr(mlp_trace::kQuantizedWeightRelErrorAttr, x.quantized_weight_rel_error);
    write_run_growth_attributes(g, x.quantized_growth, x.quantized_local_exponents);
    s.runs.push_back(std::move(x));
  }
  const std::vector<double> ref_loss = t.rows.doubles_at(t.ref_loss).read<double>();
  s.reference_final_loss = ref_loss.back();
  s.reference_first_nonfinite_step = t.reference_enabled ? first_nonfinite(ref_loss) : std::int64_t{-1};
  root.open_group("mlp/reference").set_attr(mlp_trace::kFirstNonfiniteStepAttr, s.reference_first_nonfinite_step);
  return s;
}

template <class Ref>
MlpRunSummary MlpTrace::finish(const MlpState<Ref>& ref, const std::vector<MlpState<float>>& runs) {
  const MlpRunSummary s = write_final_attributes(squared_norms(ref.w));
  h5::Group root = impl_->file.root();
  // The final states stay in the trace, in the checkpoint's layout.
  h5::Group ck = root.require_group("mlp/checkpoint");
  write_run_states(ck, ref, runs);
  ck.set_attr("step", impl_->steps);
  ck.set_attr("records", static_cast<std::int64_t>(impl_->records));
  ck.set_attr("compares", static_cast<std::int64_t>(impl_->compares));
  root.set_attr("status", std::string("complete"));
  impl_->file.sync();
  impl_->file.close();
  return s;
}

template MlpRunSummary MlpTrace::finish<double>(const MlpState<double>&, const std::vector<MlpState<float>>&);
template MlpRunSummary MlpTrace::finish<mlp_binary128>(const MlpState<mlp_binary128>&, const std::vector<MlpState<float>>&);
template MlpRunSummary MlpTrace::finish<mlp_mp256>(const MlpState<mlp_mp256>&, const std::vector<MlpState<float>>&);

}  // namespace fp4d
