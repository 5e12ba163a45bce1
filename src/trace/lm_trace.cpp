#include "trace/lm_trace.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "model/lm_spec.hpp"
#include "model/recipe_gemm.hpp"
#include "sim/mlp_precision.hpp"
#include "trace/device_identity.hpp"
#include "trace/dims.hpp"
#include "trace/output_file.hpp"
#include "trace/run_files.hpp"
#include "trace/run_rows.hpp"
#include "trace/run_summary_attrs.hpp"

namespace fp4d {

namespace {

std::string run_group(const std::string& recipe) { return std::string(lm_trace::kRunsGroup) + "/" + recipe; }

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

void write_root(h5::Group root, const LmRunSpec& spec, const LmRunControl& ctl, const LmTraceInfo& info,
                const std::string& run_id) {
  write_provenance(root, "fp4drift.run", 1, ctl.command_line);
  root.set_attr("backend", ctl.backend);
  write_device_attributes(root, ctl.device);
  root.set_attr("status", std::string("running"));
  root.set_attr("run_id", run_id);
  root.set_attr("workload", std::string("lm"));
  root.set_attr("config", ctl.config_text);
  root.set_attr("config_source", ctl.config_source);
  h5::Group g = root.require_group(lm_trace::kGroup);
  const LmSpec& m = spec.model;
  g.set_attr("steps", spec.steps);
  g.set_attr(lm_trace::kRecipesAttr, joined(spec.recipes));
  g.set_attr("compare_every", spec.compare_every);
  g.set_attr("trace_every", spec.trace_every);
  g.set_attr("reference_enabled", std::int64_t{spec.reference_enabled ? 1 : 0});
  g.set_attr("reference_precision", to_string(spec.reference_precision));
  g.set_attr("vocab", m.vocab);
  g.set_attr("d_model", m.d_model);
  g.set_attr("heads", m.heads);
  g.set_attr("kv_heads", m.kv_heads);
  g.set_attr("ffn", m.ffn);
  g.set_attr("seq_len", m.seq_len);
  g.set_attr("batch", m.batch);
  g.set_attr("pattern", m.pattern);
  if (m.pattern.find('M') != std::string::npos) {
    g.set_attr("mamba_state", m.mamba.state);
    g.set_attr("mamba_head_dim", m.mamba.head_dim);
    g.set_attr("mamba_expand", m.mamba.expand);
    g.set_attr("mamba_groups", m.mamba.groups);
    g.set_attr("mamba_conv_width", m.mamba.conv_width);
    g.set_attr("mamba_chunk", m.mamba.chunk);
  }
  std::vector<std::string> params, linears, kinds;
  std::int64_t count = 0;
  for (const LmParam& p : lm_params(m)) {
    params.push_back(p.name);
    count += p.rows * p.cols;
  }
  for (const LmLinear& l : lm_linears(m)) {
    linears.push_back(l.block < 0 ? std::string("head") : "blocks." + std::to_string(l.block) + "." + to_string(l.kind));
    kinds.push_back(to_string(l.kind));
  }
  g.set_attr("parameters", count);
  g.set_attr("param_names", joined(params));
  g.set_attr("linear_names", joined(linears));
  g.set_attr("linear_kinds", joined(kinds));
  std::vector<std::int64_t> hp(spec.high_precision_blocks.begin(), spec.high_precision_blocks.end());
  g.set_attr("high_precision_blocks", joined([&] {
               std::vector<std::string> s;
               for (const auto b : hp) s.push_back(std::to_string(b));
               return s;
             }()));
  g.set_attr("edge_recipe", spec.edge_recipe);
  g.set_attr("switch_to_bf16_step", lm_switch_step(spec) < spec.steps ? lm_switch_step(spec) : std::int64_t{-1});
  g.set_attr("data", info.data);
  g.set_attr("loss_floor_nats", info.loss_floor);
  g.set_attr("unigram_loss_nats", info.unigram_loss);
  g.set_attr("operand_slots", std::string("linear * 6 + role * 2 + operand; role fprop 0, dgrad 1, wgrad 2; "
                                          "operand 0 = first (X, dY, X^T), 1 = second (W, W^T, dY^T); "
                                          "linear in linear_names order"));
}

}  // namespace

template <class Ref>
void write_lm_states(h5::Group g, const LmState<Ref>& ref, const std::vector<LmState<float>>& runs, Fnv1a64* digest) {
  const auto put = [&](const std::string& prefix, const auto& s) {
    write_state_list(g, prefix + "_p", s.p, digest);
    write_state_list(g, prefix + "_m", s.m, digest);
    write_state_list(g, prefix + "_v", s.v, digest);
  };
  put("reference", ref);
  for (std::size_t r = 0; r < runs.size(); ++r) put("run_" + std::to_string(r), runs[r]);
}

template <class Ref>
void read_lm_states(h5::Group g, LmState<Ref>& ref, std::vector<LmState<float>>& runs, Fnv1a64* digest) {
  const auto get = [&](const std::string& prefix, auto& s) {
    read_state_list(g, prefix + "_p", s.p, digest);
    read_state_list(g, prefix + "_m", s.m, digest);
    read_state_list(g, prefix + "_v", s.v, digest);
  };
  get("reference", ref);
  for (std::size_t r = 0; r < runs.size(); ++r) get("run_" + std::to_string(r), runs[r]);
}

struct LmTrace::Impl {
  using Id = RunRows::Id;
  h5::File file;
  RunRows rows;
  SwmrPhase swmr;
  Id step = 0, lr = 0, compare_step = 0, ref_loss = 0, ref_grad_norm = 0;
  struct Run {
    Id loss, gap, grad_norm, clip, lost, nmse, clipped, underflow, zero_scales;
    Id weight_error, weight_error_total, grad_cosine, grad_error, grad_bias;
  };
  std::vector<Run> runs;
  std::vector<std::string> recipes;
  std::vector<std::vector<int>> quantized_params;
  std::int64_t steps = 0;
  bool reference_enabled = true;
  DeviceIdentity device;  // this attempt's (a resume records it: set_resumed_at)
  std::uint64_t records = 0, compares = 0;
  std::vector<std::int64_t> compared_steps;

  // The datasets, created (an empty trace) or opened (to continue one), in one order. A new
  // trace also names their axes (dims.hpp): the rows by step or compare_step, the columns by
  // param or operand_slot; an opened one has them already.
  Impl(h5::File f, const LmRunSpec& spec, bool create)
      : file(std::move(f)), recipes(spec.recipes), steps(spec.steps), reference_enabled(spec.reference_enabled) {
    // Per run, the parameters that are weights of the linears its recipe quantizes
    // (RecipeGemm::recipe_name; a tied embedding is the head's weight, kept in edge_recipe).
    const std::vector<LmParam> params = lm_params(spec.model);
    const auto linears = static_cast<int>(lm_linears(spec.model).size());
    for (const std::string& r : spec.recipes) {
      const RecipeGemm gemm(RecipeGemmOptions{r, spec.edge_recipe, lm_run_high_precision_linears(spec), 0, {}}, linears);
      std::vector<int> q;
      for (std::size_t i = 0; i < params.size(); ++i)
        if (params[i].linear >= 0 && gemm.recipe_name(params[i].linear) == r) q.push_back(static_cast<int>(i));
      quantized_params.push_back(std::move(q));
    }
    h5::Group root = file.root();
    const auto P = static_cast<std::uint64_t>(lm_params(spec.model).size());
    const auto L = static_cast<std::uint64_t>(lm_linears(spec.model).size());
    using C = RunRows::Counts;
    enum class Col { None, Param, Slot };
    h5::Dataset step_dim, compare_dim, param_dim, slot_dim;
    if (create) {
      h5::Group g = root.require_group(lm_trace::kGroup);
      param_dim = dims::index(g, "param", P, "parameter, in param_names order");
      slot_dim = dims::index(g, "operand_slot", L * 6,
                             "GEMM operand: linear * 6 + role * 2 + operand, linear in linear_names order (operand_slots)");
    }
    const auto ints = [&](const std::string& name, C c) { return rows.ints(root, name, c, create); };
    const auto doubles = [&](const std::string& name, C c, Col col, const std::string& units) {
      const Id id = rows.doubles(root, name, col == Col::Param ? h5::Dims{P} : col == Col::Slot ? h5::Dims{L * 6} : h5::Dims{},
                                 c, create);
      if (create) {
        std::vector<h5::Dataset> axes{c == C::Records ? step_dim : compare_dim};
        if (col != Col::None) axes.push_back(col == Col::Param ? param_dim : slot_dim);
        dims::name_axes(rows.doubles_at(id), axes, units);
      }
      return id;
    };
    step = ints("lm/step", C::Records);
    if (create) {
      step_dim = rows.ints_at(step);
      dims::coordinate(step_dim, "training step of the record (its batch's losses, before its update)");
    }
    lr = doubles("lm/lr", C::Records, Col::None, "1");
    compare_step = ints("lm/compare_step", C::Compares);
    if (create) {
      compare_dim = rows.ints_at(compare_step);
      dims::coordinate(compare_dim, "training steps done when the parameters were compared with the reference's");
    }
    ref_loss = doubles(lm_trace::kReferenceLoss, C::Records, Col::None, "nat");
    // Gradient norms are in the loss's unit (nats) per unit of the dimensionless parameters.
    ref_grad_norm = doubles("lm/reference/grad_norm", C::Records, Col::None, "nat");
    for (const std::string& r : spec.recipes) {
      const std::string g = run_group(r);
      Run x{};
      x.loss = doubles(g + "/" + lm_trace::kLoss, C::Records, Col::None, "nat");
      x.gap = doubles(g + "/" + lm_trace::kRelLossGap, C::Records, Col::None, "1");
      x.grad_norm = doubles(g + "/grad_norm", C::Records, Col::None, "nat");
      x.clip = doubles(g + "/clip_factor", C::Records, Col::None, "1");
      x.lost = doubles(g + "/lost_update_fraction", C::Records, Col::Param, "1");
      x.nmse = doubles(g + "/operand_nmse", C::Records, Col::Slot, "1");
      x.clipped = doubles(g + "/operand_clipped_fraction", C::Records, Col::Slot, "1");
      x.underflow = doubles(g + "/operand_underflow_fraction", C::Records, Col::Slot, "1");
      x.zero_scales = doubles(g + "/operand_zero_scale_fraction", C::Records, Col::Slot, "1");
      x.weight_error = doubles(g + "/weight_rel_error", C::Compares, Col::Param, "1");
      x.weight_error_total = doubles(g + "/" + lm_trace::kWeightRelErrorTotal, C::Compares, Col::None, "1");
      x.grad_cosine = doubles(g + "/grad_cosine", C::Compares, Col::Param, "1");
      x.grad_error = doubles(g + "/grad_rel_error", C::Compares, Col::Param, "1");
      x.grad_bias = doubles(g + "/grad_sr_mean_rel_error", C::Compares, Col::Param, "1");
      runs.push_back(x);
    }
  }
};

LmTrace::LmTrace(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LmTrace::LmTrace(LmTrace&&) noexcept = default;
LmTrace& LmTrace::operator=(LmTrace&&) noexcept = default;
LmTrace::~LmTrace() = default;

void LmTrace::create(const LmRunSpec& spec, const LmRunControl& ctl, const LmTraceInfo& info, const std::string& file,
                     const std::string& run_id) {
  require_output_directory(ctl.path);
  h5::File f = h5::File::create(file, h5::Format::Swmr);
  write_root(f.root(), spec, ctl, info, run_id);
  Impl t(std::move(f), spec, true);
  t.file.sync();
}

void LmTrace::rebuild(const LmRunSpec& spec, const LmRunControl& ctl, const LmTraceInfo& info, const CheckpointMark& m,
                      const RowJournal& journal) {
  replace_trace_file(ctl.path, [&](h5::File f) {
    write_root(f.root(), spec, ctl, info, m.run_id);
    Impl t(std::move(f), spec, true);
    t.rows.replay(journal, m.journal_length);
    t.file.root().set_attr("rebuilt_at_step", m.step);
    t.file.sync();
  });
}

bool LmTrace::is_complete(const std::string& path) { return run_trace_is_complete(path); }

LmTrace LmTrace::open(const LmRunSpec& spec, const LmRunControl& ctl) {
  auto impl = std::make_unique<Impl>(open_run_trace(ctl.path, "lm", ctl.config_text), spec, false);
  impl->device = ctl.device;
  return LmTrace(std::move(impl));
}

std::string LmTrace::run_id() const { return impl_->file.root().get_attr_string("run_id"); }

void LmTrace::verify_and_truncate(const CheckpointMark& m) {
  Impl& t = *impl_;
  t.rows.verify_and_truncate(m);
  t.records = t.rows.ints_at(t.step).rows();
  t.compares = t.rows.ints_at(t.compare_step).rows();
  t.compared_steps = t.compares ? t.rows.ints_at(t.compare_step).read<std::int64_t>() : std::vector<std::int64_t>{};
}

std::uint64_t LmTrace::records() const { return impl_->records; }
std::uint64_t LmTrace::compares() const { return impl_->compares; }
void LmTrace::start_swmr_write() { impl_->swmr.start(impl_->file); }
void LmTrace::set_status(const std::string& status) {
  impl_->swmr.end(impl_->file, impl_->rows);
  impl_->file.root().set_attr("status", status);
}
void LmTrace::set_resumed_at(std::int64_t step) {
  impl_->swmr.set_attrs(impl_->file, [step, d = impl_->device](h5::Group root) {
    root.set_attr("resumed_at_step", step);
    write_device_attributes(root, d);
  });
}
void LmTrace::set_gemm_path(std::size_t run, const std::string& path) {
  impl_->swmr.set_attrs(impl_->file, [g = run_group(impl_->recipes.at(run)), path](h5::Group root) {
    root.open_group(g).set_attr("gemm_path", path);
  });
}

void LmTrace::stage(const LmRecordRow& row) {
  Impl& t = *impl_;
  t.rows.stage(t.step, std::vector<std::int64_t>{row.step});
  t.rows.stage(t.lr, std::vector<double>{row.lr});
  t.rows.stage(t.ref_loss, std::vector<double>{row.reference_loss});
  t.rows.stage(t.ref_grad_norm, std::vector<double>{row.reference_grad_norm});
  for (std::size_t r = 0; r < row.runs.size(); ++r) {
    const LmRecordRow::Run& x = row.runs[r];
    const Impl::Run& d = t.runs[r];
    t.rows.stage(d.loss, std::vector<double>{x.loss});
    t.rows.stage(d.gap, std::vector<double>{x.rel_loss_gap});
    t.rows.stage(d.grad_norm, std::vector<double>{x.grad_norm});
    t.rows.stage(d.clip, std::vector<double>{x.clip_factor});
    t.rows.stage(d.lost, x.lost_update_fraction);
    t.rows.stage_operands({d.nmse, d.clipped, d.underflow, d.zero_scales}, x.operands);
  }
  ++t.records;
}

void LmTrace::stage(const LmCompareRow& row) {
  Impl& t = *impl_;
  t.rows.stage(t.compare_step, std::vector<std::int64_t>{row.step + 1});
  t.compared_steps.push_back(row.step + 1);
  for (std::size_t r = 0; r < row.runs.size(); ++r) {
    const LmCompareRow::Run& x = row.runs[r];
    const Impl::Run& d = t.runs[r];
    t.rows.stage(d.weight_error, x.weight_rel_error);
    t.rows.stage(d.weight_error_total, std::vector<double>{x.weight_rel_error_total});
    t.rows.stage(d.grad_cosine, x.grad_cosine);
    t.rows.stage(d.grad_error, x.grad_rel_error);
    t.rows.stage(d.grad_bias, x.grad_sr_mean_rel_error);
  }
  ++t.compares;
}

void LmTrace::commit(RowJournal& journal) { impl_->rows.commit(journal); }
std::map<std::string, std::uint64_t> LmTrace::digests() const { return impl_->rows.digests(); }
void LmTrace::sync() { impl_->file.sync(); }
void LmTrace::flush() { impl_->file.flush(); }
void LmTrace::close() { impl_->file.close(); }

template <class Ref>
LmRunSummary LmTrace::finish(const LmState<Ref>& ref, const std::vector<LmState<float>>& runs) {
  Impl& t = *impl_;
  t.swmr.end(t.file, t.rows);
  h5::Group root = t.file.root();
  h5::Group lm = root.open_group(lm_trace::kGroup);
  LmRunSummary s;
  s.loss_floor = lm.get_attr_double("loss_floor_nats");
  s.unigram_loss = lm.get_attr_double("unigram_loss_nats");
  const std::vector<std::int64_t> steps = t.rows.ints_at(t.step).read<std::int64_t>();
  const auto first_nonfinite = [&](const std::vector<double>& loss) {
    for (std::size_t i = 0; i < loss.size(); ++i)
      if (!std::isfinite(loss[i])) return steps[i];
    return std::int64_t{-1};
  };
  // The last tenth of the records (at least one): per-batch losses are noisy, their tail mean
  // is what a loss gap is read from.
  const auto tail_mean = [](const std::vector<double>& v) {
    const std::size_t n = std::max<std::size_t>(1, v.size() / 10);
    double sum = 0;
    for (std::size_t i = v.size() - n; i < v.size(); ++i) sum += v[i];
    return sum / static_cast<double>(n);
  };
  const std::vector<double> ref_loss = t.rows.doubles_at(t.ref_loss).read<double>();
  s.reference_final_loss = ref_loss.back();
  s.reference_tail_loss = tail_mean(ref_loss);
  s.reference_first_nonfinite_step = t.reference_enabled ? first_nonfinite(ref_loss) : std::int64_t{-1};
  root.require_group("lm/reference").set_attr(lm_trace::kFirstNonfiniteStepAttr, s.reference_first_nonfinite_step);
  root.open_group("lm/reference").set_attr(lm_trace::kTailLossAttr, s.reference_tail_loss);
  const std::vector<double> ref_sq_norm = squared_norms(ref.p);
  if (!t.compared_steps.empty()) root.open_group("lm/reference").set_attr("final_weight_sq_norm", ref_sq_norm);
  lm.set_attr("gap_window_fraction", run_metrics::kGapWindowFraction);
  lm.set_attr("gap_window_min_records", run_metrics::kGapWindowMinRecords);
  lm.set_attr("growth_window_factor", run_metrics::kWindowFactor);
  lm.set_attr("growth_confidence", run_metrics::kSlopeConfidence);
  for (std::size_t r = 0; r < t.runs.size(); ++r) {
    LmRunSummary::Run x;
    x.recipe = t.recipes[r];
    const std::vector<double> loss = t.rows.doubles_at(t.runs[r].loss).read<double>();
    const std::vector<double> total = t.rows.doubles_at(t.runs[r].weight_error_total).read<double>();
    x.final_loss = loss.back();
    x.tail_loss = tail_mean(loss);
    x.tail_rel_loss_gap = (x.tail_loss - s.reference_tail_loss) / s.reference_tail_loss;  // NaN without a reference
    x.final_weight_rel_error = total.empty() ? std::nan("") : total.back();
    x.growth_exponent = growth_exponent(t.compared_steps, total);
    x.first_nonfinite_step = first_nonfinite(loss);
    x.loss_gap = run_metrics::trailing_gap_mean(steps, t.rows.doubles_at(t.runs[r].gap).read<double>());
    x.quantized_params = t.quantized_params[r];
    // The quantized parameters' error, and the rest's, at each compare as one Frobenius ratio
    // each, weighted by the reference's final norms: exact at the last compare (the last step).
    const std::vector<double> e = t.rows.doubles_at(t.runs[r].weight_error).read<double>();
    const std::size_t P = ref_sq_norm.size(), C = t.compared_steps.size();
    std::vector<bool> quantized(P, false);
    for (const int i : x.quantized_params) quantized[static_cast<std::size_t>(i)] = true;
    std::vector<double> agg(C), other(C);
    for (std::size_t c = 0; c < C; ++c) {
      std::vector<double> qe, qn, oe, on;
      for (std::size_t i = 0; i < P; ++i) {
        (quantized[i] ? qe : oe).push_back(e[c * P + i]);
        (quantized[i] ? qn : on).push_back(ref_sq_norm[i]);
      }
      agg[c] = run_metrics::aggregate_rel_error(qe, qn), other[c] = run_metrics::aggregate_rel_error(oe, on);
    }
    x.quantized_weight_rel_error = C ? agg.back() : std::nan("");
    x.other_weight_rel_error = C ? other.back() : std::nan("");
    x.quantized_growth = run_metrics::final_growth_window(t.compared_steps, agg);
    x.quantized_local_exponents = run_metrics::local_exponents(t.compared_steps, agg);
    h5::Group g = root.open_group(run_group(t.recipes[r]));
    g.set_attr(lm_trace::kLossGapMeanAttr, x.loss_gap.mean);
    g.set_attr("gap_window_first_step", x.loss_gap.first_step);
    g.set_attr("gap_window_last_step", x.loss_gap.last_step);
    g.set_attr(lm_trace::kQuantizedParamsAttr, std::vector<std::int64_t>(x.quantized_params.begin(), x.quantized_params.end()));
    g.set_attr(lm_trace::kQuantizedWeightRelErrorAttr, x.quantized_weight_rel_error);
    g.set_attr("other_weight_rel_error", x.other_weight_rel_error);
    write_run_growth_attributes(g, x.quantized_growth, x.quantized_local_exponents);
    g.set_attr(lm_trace::kTailLossAttr, x.tail_loss);
    g.set_attr(lm_trace::kTailRelLossGapAttr, x.tail_rel_loss_gap);
    g.set_attr(lm_trace::kGrowthExponentAttr, x.growth_exponent);
    g.set_attr(lm_trace::kFirstNonfiniteStepAttr, x.first_nonfinite_step);
    s.runs.push_back(std::move(x));
  }
  h5::Group ck = root.require_group("lm/checkpoint");
  write_lm_states(ck, ref, runs, nullptr);
  ck.set_attr("step", t.steps);
  ck.set_attr("records", static_cast<std::int64_t>(t.records));
  ck.set_attr("compares", static_cast<std::int64_t>(t.compares));
  root.set_attr("status", std::string("complete"));
  t.file.sync();
  t.file.close();
  return s;
}

#define FP4D_LM_TRACE_FOR(Ref)                                                                                       \
  template void write_lm_states<Ref>(h5::Group, const LmState<Ref>&, const std::vector<LmState<float>>&, Fnv1a64*); \
  template void read_lm_states<Ref>(h5::Group, LmState<Ref>&, std::vector<LmState<float>>&, Fnv1a64*);            \
  template LmRunSummary LmTrace::finish<Ref>(const LmState<Ref>&, const std::vector<LmState<float>>&);
FP4D_LM_TRACE_FOR(double)
FP4D_LM_TRACE_FOR(mlp_binary128)
FP4D_LM_TRACE_FOR(mlp_mp256)
#undef FP4D_LM_TRACE_FOR

}  // namespace fp4d
