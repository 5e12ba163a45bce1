#include "trace/mlp_trace.hpp"

#include <cmath>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <type_traits>

#include "sim/mlp_precision.hpp"
#include "trace/output_file.hpp"

namespace fp4d {

namespace {

std::string run_group(const std::string& recipe) { return "mlp/runs/" + recipe; }

void sync_directory_of(const std::string& path) {
  const auto dir = std::filesystem::path(path).parent_path();
  h5::File::sync_directory(dir.empty() ? "." : dir.string());
}

// Rows staged per dataset until commit(); the digests run over every row committed.
class StagedRows {
 public:
  template <class T>
  void add(h5::Appendable<T>& ds, const std::vector<T>& row) {
    auto& v = buffer<T>()[&ds];
    v.insert(v.end(), row.begin(), row.end());
  }
  void commit(RowJournal& journal) {
    const auto put = [&](auto& buffers) {
      for (auto& [ds, v] : buffers) {
        if (v.empty()) continue;
        ds->append(v);
        journal.append(ds->path(), v);
        digests_.try_emplace(ds->path()).first->second.add(v);
        v.clear();
      }
    };
    put(d_);
    put(i_);
  }
  std::map<std::string, Fnv1a64>& digests() { return digests_; }

 private:
  std::map<std::string, Fnv1a64> digests_;
  template <class T>
  std::map<h5::Appendable<T>*, std::vector<T>>& buffer() {
    if constexpr (std::is_same_v<T, double>) return d_;
    else return i_;
  }
  std::map<h5::Appendable<double>*, std::vector<double>> d_;
  std::map<h5::Appendable<std::int64_t>*, std::vector<std::int64_t>> i_;
};

// Least-squares slope of log(err) against log(step) over the compared steps with err > 0.
double growth_exponent(const std::vector<std::int64_t>& steps, const std::vector<double>& err) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (!(err[i] > 0) || steps[i] <= 0) continue;
    const double x = std::log(static_cast<double>(steps[i])), y = std::log(err[i]);
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double den = n * sxx - sx * sx;
  return n >= 2 && den > 0 ? (n * sxy - sx * sy) / den : std::nan("");
}

void write_root(h5::Group root, const MlpRunSpec& spec, const MlpRunControl& ctl, const std::string& run_id) {
  write_provenance(root, "fp4drift.run", 1, ctl.command_line);
  root.set_attr("backend", ctl.backend);
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
  h5::File file;
  h5::Appendable<std::int64_t> step, compare_step;
  h5::Appendable<double> ref_loss;
  struct Run {
    h5::Appendable<double> loss, gap, lost, nmse, clipped, underflow, zero_scales, weight_error, grad_cosine, grad_error,
        grad_bias;
  };
  std::vector<Run> runs;
  h5::Appendable<double> check_weight, check_loss;  // with check_precision: [C, L], [C]
  std::vector<std::string> recipes;
  std::int64_t steps = 0;
  bool reference_enabled = true;
  StagedRows staged;
  std::uint64_t records = 0, compares = 0;   // rows staged so far
  std::vector<std::int64_t> compared_steps;  // the rows of compare_step, staged included

  // The datasets, created (an empty trace) or opened (to continue one), in one order.
  Impl(h5::File f, const MlpRunSpec& spec, bool create) : file(std::move(f)), recipes(spec.recipes), steps(spec.steps),
                                                          reference_enabled(spec.reference_enabled) {
    h5::Group root = file.root();
    const auto L = static_cast<std::uint64_t>(spec.model.widths.size() - 1);
    const auto get = [&]<class T>(const std::string& name, h5::Dims row, T*) {
      return create ? root.create_appendable<T>(name, std::move(row)) : root.open_appendable<T>(name);
    };
    const auto ints = [&](const std::string& name) { return get(name, {}, static_cast<std::int64_t*>(nullptr)); };
    const auto doubles = [&](const std::string& name, h5::Dims row) { return get(name, std::move(row), static_cast<double*>(nullptr)); };
    step = ints("mlp/step");
    compare_step = ints("mlp/compare_step");
    ref_loss = doubles(mlp_trace::kReferenceLoss, {});
    for (const std::string& r : spec.recipes) {
      const std::string g = run_group(r);
      runs.push_back(Run{doubles(g + "/loss", {}), doubles(g + "/rel_loss_gap", {}),
                         doubles(g + "/lost_update_fraction", {L}), doubles(g + "/operand_nmse", {L * 6}),
                         doubles(g + "/operand_clipped_fraction", {L * 6}),
                         doubles(g + "/operand_underflow_fraction", {L * 6}),
                         doubles(g + "/operand_zero_scale_fraction", {L * 6}), doubles(g + "/weight_rel_error", {L}),
                         doubles(g + "/grad_cosine", {L}), doubles(g + "/grad_rel_error", {L}),
                         doubles(g + "/grad_sr_mean_rel_error", {L})});
    }
    if (spec.check_precision) {
      check_weight = doubles("mlp/reference/check_weight_rel_error", {L});
      check_loss = doubles("mlp/reference/check_loss_rel_error", {});
    }
  }

  // Every appendable with the count its rows follow: true = records (one row per recorded
  // step), false = compares (one row per weight comparison).
  template <class F>
  void for_each_dataset(F f) {
    f(step, true);
    f(ref_loss, true);
    f(compare_step, false);
    for (Run& r : runs) {
      for (auto* a : {&r.loss, &r.gap, &r.lost, &r.nmse, &r.clipped, &r.underflow, &r.zero_scales}) f(*a, true);
      for (auto* a : {&r.weight_error, &r.grad_cosine, &r.grad_error, &r.grad_bias}) f(*a, false);
    }
    if (check_weight.valid()) {
      f(check_weight, false);
      f(check_loss, false);
    }
  }
};

MlpTrace::MlpTrace(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MlpTrace::MlpTrace(MlpTrace&&) noexcept = default;
MlpTrace& MlpTrace::operator=(MlpTrace&&) noexcept = default;
MlpTrace::~MlpTrace() = default;

void MlpTrace::create(const MlpRunSpec& spec, const MlpRunControl& ctl, const std::string& file, const std::string& run_id) {
  const auto parent = std::filesystem::path(ctl.path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw std::invalid_argument("output directory '" + parent.string() + "' does not exist");
  h5::File f = h5::File::create(file);
  write_root(f.root(), spec, ctl, run_id);
  Impl t(std::move(f), spec, true);
  t.file.sync();
}

void MlpTrace::rebuild(const MlpRunSpec& spec, const MlpRunControl& ctl, const CheckpointMark& m, const RowJournal& journal) {
  const std::string partial = ctl.path + ".partial";
  {
    const auto parent = std::filesystem::path(ctl.path).parent_path();
    if (!parent.empty() && !std::filesystem::is_directory(parent))
      throw std::invalid_argument("output directory '" + parent.string() + "' does not exist");
    h5::File f = h5::File::create(partial);
    write_root(f.root(), spec, ctl, m.run_id);
    Impl t(std::move(f), spec, true);
    using Put = std::function<void(const std::vector<double>*, const std::vector<std::int64_t>*)>;
    std::map<std::string, Put> by_path;
    t.for_each_dataset([&](auto& ds, bool) {
      by_path[ds.path()] = [&ds](const std::vector<double>* d, const std::vector<std::int64_t>* i) {
        using T = typename std::remove_reference_t<decltype(ds)>::value_type;
        if constexpr (std::is_same_v<T, double>) {
          if (!d) throw ResumeRefused("its journal holds integers for " + ds.path());
          ds.append(*d);
        } else {
          if (!i) throw ResumeRefused("its journal holds floats for " + ds.path());
          ds.append(*i);
        }
      };
    });
    journal.replay(m.journal_length, [&](const std::string& name, const std::vector<double>* d, const std::vector<std::int64_t>* i) {
      const auto it = by_path.find(name);
      if (it == by_path.end()) throw ResumeRefused("its journal names a dataset the trace does not have: " + name);
      it->second(d, i);
    });
    t.file.root().set_attr("rebuilt_at_step", m.step);
    t.file.sync();
  }
  std::filesystem::rename(partial, ctl.path);
  sync_directory_of(ctl.path);
}

bool MlpTrace::is_complete(const std::string& path) {
  try {
    return h5::File::open_read(path).root().get_attr_string("status") == "complete";
  } catch (const h5::Error&) {  // unreadable: the caller's checks say why
    return false;
  }
}

MlpTrace MlpTrace::open(const MlpRunSpec& spec, const MlpRunControl& ctl) {
  h5::File f = h5::File::open_rw(ctl.path);
  h5::Group root = f.root();
  if (root.get_attr_string("schema") != "fp4drift.run" || root.get_attr_string("workload") != "mlp")
    throw std::invalid_argument("--resume: " + ctl.path + " is not an fp4drift mlp run trace");
  if (root.get_attr_string("config") != ctl.config_text)
    throw std::invalid_argument("--resume: the config differs from the one " + ctl.path +
                                " was started with (resuming would not continue the same run)");
  if (root.get_attr_string("status") == "complete") throw std::invalid_argument("--resume: " + ctl.path + " is complete");
  if (!root.has_attr("run_id"))
    throw std::invalid_argument("--resume: " + ctl.path + " has no run id (it was written by an fp4drift whose "
                                "checkpoints could not be verified): start it again");
  return MlpTrace(std::make_unique<Impl>(std::move(f), spec, false));
}

std::string MlpTrace::run_id() const { return impl_->file.root().get_attr_string("run_id"); }

void MlpTrace::verify_and_truncate(const CheckpointMark& m) {
  try {
    impl_->for_each_dataset([&](auto& ds, bool by_records) {
      using T = typename std::remove_reference_t<decltype(ds)>::value_type;
      const std::uint64_t want = by_records ? m.records : m.compares;
      if (want == 0) return;
      const std::uint64_t have = ds.rows();
      if (have < want)
        throw ResumeRefused(ds.path() + " has " + std::to_string(have) + " rows, its checkpoint counts " + std::to_string(want));
      const auto it = m.digests.find(ds.path());
      if (it == m.digests.end()) throw ResumeRefused("the checkpoint has no digest of " + ds.path());
      std::vector<T> rows = ds.template read<T>();
      rows.resize(want * ds.row_elements());
      Fnv1a64 d;
      d.add(rows);
      if (d.value() != it->second)
        throw ResumeRefused("the rows of " + ds.path() + " are not those its checkpoint recorded");
    });
  } catch (const ResumeRefused&) {
    throw;
  } catch (const std::exception& e) {  // a chunk that fails its Fletcher32 checksum or to inflate
    throw ResumeRefused("the trace cannot be read back (" + std::string(e.what()) + ")");
  }
  for (const auto& [name, d] : m.digests) impl_->staged.digests().emplace(name, Fnv1a64(d));
  impl_->for_each_dataset([&](auto& ds, bool by_records) { ds.truncate(by_records ? m.records : m.compares); });
  impl_->records = impl_->step.rows();
  impl_->compares = impl_->compare_step.rows();
  impl_->compared_steps =
      impl_->compares ? impl_->compare_step.read<std::int64_t>() : std::vector<std::int64_t>{};
}

std::uint64_t MlpTrace::records() const { return impl_->records; }
std::uint64_t MlpTrace::compares() const { return impl_->compares; }

void MlpTrace::set_status(const std::string& status) { impl_->file.root().set_attr("status", status); }
void MlpTrace::set_resumed_at(std::int64_t step) { impl_->file.root().set_attr("resumed_at_step", step); }
void MlpTrace::set_concurrent_runs(bool concurrent) {
  impl_->file.root().set_attr("concurrent_runs", std::int64_t{concurrent ? 1 : 0});
}
void MlpTrace::set_gemm_path(std::size_t run, const std::string& path) {
  impl_->file.root().open_group(run_group(impl_->recipes.at(run))).set_attr("gemm_path", path);
}

void MlpTrace::stage(const MlpRecordRow& row) {
  Impl& t = *impl_;
  t.staged.add(t.step, std::vector<std::int64_t>{row.step});
  t.staged.add(t.ref_loss, std::vector<double>{row.reference_loss});
  for (std::size_t r = 0; r < row.runs.size(); ++r) {
    const MlpRecordRow::Run& x = row.runs[r];
    Impl::Run& d = t.runs[r];
    t.staged.add(d.loss, std::vector<double>{x.loss});
    t.staged.add(d.gap, std::vector<double>{x.rel_loss_gap});
    t.staged.add(d.lost, x.lost_update_fraction);
    std::vector<double> nmse, clip, under, zero;
    for (const OperandRecord& o : x.operands) {
      nmse.push_back(o.nmse), clip.push_back(o.clipped_fraction), under.push_back(o.underflow_fraction);
      zero.push_back(o.zero_scale_fraction);
    }
    t.staged.add(d.nmse, nmse), t.staged.add(d.clipped, clip), t.staged.add(d.underflow, under);
    t.staged.add(d.zero_scales, zero);
  }
  ++t.records;
}

void MlpTrace::stage(const MlpCompareRow& row) {
  Impl& t = *impl_;
  t.staged.add(t.compare_step, std::vector<std::int64_t>{row.step + 1});
  t.compared_steps.push_back(row.step + 1);
  for (std::size_t r = 0; r < row.runs.size(); ++r) {
    const MlpCompareRow::Run& x = row.runs[r];
    t.staged.add(t.runs[r].weight_error, x.weight_rel_error);
    t.staged.add(t.runs[r].grad_cosine, x.grad_cosine);
    t.staged.add(t.runs[r].grad_error, x.grad_rel_error);
    t.staged.add(t.runs[r].grad_bias, x.grad_sr_mean_rel_error);
  }
  if (row.check_weight_rel_error) {
    t.staged.add(t.check_weight, *row.check_weight_rel_error);
    t.staged.add(t.check_loss, std::vector<double>{row.check_loss_rel_error});
  }
  ++t.compares;
}

void MlpTrace::commit(RowJournal& journal) { impl_->staged.commit(journal); }

std::map<std::string, std::uint64_t> MlpTrace::digests() const {
  std::map<std::string, std::uint64_t> out;
  for (const auto& [name, d] : impl_->staged.digests()) out[name] = d.value();
  return out;
}

void MlpTrace::sync() { impl_->file.sync(); }
void MlpTrace::flush() { impl_->file.flush(); }
void MlpTrace::close() { impl_->file.close(); }

MlpRunSummary MlpTrace::write_final_attributes() {
  Impl& t = *impl_;
  h5::Group root = t.file.root();
  MlpRunSummary s;
  // Divergence: the first recorded step whose loss is not finite (-1: none).
  const std::vector<std::int64_t> steps = t.step.read<std::int64_t>();
  const auto first_nonfinite = [&](const std::vector<double>& loss) {
    for (std::size_t i = 0; i < loss.size(); ++i)
      if (!std::isfinite(loss[i])) return steps[i];
    return std::int64_t{-1};
  };
  const std::size_t L = t.runs.empty() ? 0 : t.runs.front().weight_error.row_elements();
  for (std::size_t r = 0; r < t.runs.size(); ++r) {
    const std::vector<double> e = t.runs[r].weight_error.read<double>();
    // Growth exponent of the accumulated weight error, last layer, over the whole run.
    std::vector<double> last(t.compared_steps.size());
    for (std::size_t i = 0; i < t.compared_steps.size(); ++i) last[i] = e[i * L + (L - 1)];
    MlpRunSummary::Run x;
    x.recipe = t.recipes[r];
    const std::vector<double> loss = t.runs[r].loss.read<double>(), gap = t.runs[r].gap.read<double>();
    x.final_loss = loss.back();
    x.final_rel_loss_gap = gap.back();
    x.final_weight_rel_error = e.empty() ? std::nan("") : e.back();  // no compares without a reference
    x.growth_exponent = growth_exponent(t.compared_steps, last);
    x.first_nonfinite_step = first_nonfinite(loss);
    h5::Group g = root.open_group(run_group(t.recipes[r]));
    g.set_attr(mlp_trace::kGrowthExponentAttr, x.growth_exponent);
    g.set_attr(mlp_trace::kFirstNonfiniteStepAttr, x.first_nonfinite_step);
    s.runs.push_back(std::move(x));
  }
  const std::vector<double> ref_loss = t.ref_loss.read<double>();
  s.reference_final_loss = ref_loss.back();
  s.reference_first_nonfinite_step = t.reference_enabled ? first_nonfinite(ref_loss) : std::int64_t{-1};
  root.open_group("mlp/reference").set_attr(mlp_trace::kFirstNonfiniteStepAttr, s.reference_first_nonfinite_step);
  return s;
}

template <class Ref>
MlpRunSummary MlpTrace::finish(const MlpState<Ref>& ref, const std::vector<MlpState<float>>& runs) {
  const MlpRunSummary s = write_final_attributes();
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
