#include "trace/sweep_index.hpp"

#include <hdf5.h>

#include <cerrno>
#include <type_traits>

#include "trace/dims.hpp"
#include "trace/h5.hpp"
#include "trace/output_file.hpp"

namespace fp4d {

namespace {

// A 1-D dataset of variable-length UTF-8 strings (h5py reads it as bytes objects; .asstr()
// gives str). The h5 wrapper has numeric datasets only, hence the C API here.
void write_strings(h5::Group g, const std::string& name, const std::vector<std::string>& values) {
  std::vector<const char*> ptrs;
  for (const std::string& v : values) ptrs.push_back(v.c_str());
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  const hsize_t dims[1] = {values.size()};
  const hid_t space = H5Screate_simple(1, dims, nullptr);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hid_t ds = H5Dcreate2(static_cast<hid_t>(g.id()), name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  herr_t st = ds < 0 ? -1 : 0;
  if (ds >= 0 && !values.empty()) st = H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data());
  if (ds >= 0) H5Dclose(ds);
  H5Pclose(lcpl);
  H5Sclose(space);
  H5Tclose(type);
  if (st < 0) {
    const std::string what = "cannot write the string dataset '" + name + "' in '" + g.file_path() + "'";
    if (errno == ENOSPC) throw h5::DiskFull(what + ": no space left on device");
    throw h5::Error(what);
  }
}

void external_link(h5::Group g, const std::string& name, const std::string& file) {
  if (H5Lcreate_external(file.c_str(), "/", static_cast<hid_t>(g.id()), name.c_str(), H5P_DEFAULT, H5P_DEFAULT) < 0)
    throw h5::Error("cannot create the external link '" + name + "' -> " + file + " in '" + g.file_path() + "'");
}

// One column of a table of rows.
template <class Row, class F>
auto column(const std::vector<Row>& rows, F field) {
  std::vector<std::remove_cvref_t<decltype(field(rows.front()))>> out;
  out.reserve(rows.size());
  for (const Row& r : rows) out.push_back(field(r));
  return out;
}

void write_root(h5::Group root, const SweepIndex& x) {
  write_provenance(root, "fp4drift.sweep", 1, x.command_line);
  root.set_attr("status", x.status);
  root.set_attr("backend", x.backend);
  root.set_attr("mode", x.mode);
  root.set_attr("ranks", x.ranks);
  root.set_attr("workers", x.workers);
  root.set_attr("sweep", x.sweep_text);
  root.set_attr("sweep_source", x.sweep_source);
  root.set_attr("base_config", x.base_text);
  root.set_attr("base_source", x.base_source);
  std::string axes;
  for (const std::string& a : x.axes) axes += (axes.empty() ? "" : ",") + a;
  root.set_attr("axes", axes);
  root.set_attr("runs_total", static_cast<std::int64_t>(x.runs.size()));
  root.set_attr("runs_complete", x.runs_complete);
  root.set_attr("runs_failed", x.runs_failed);
  root.set_attr("runs_interrupted", x.runs_interrupted);
  root.set_attr("runs_pending", x.runs_pending);
}

void write_summary(h5::Group sum, const SweepIndex& x) {
  const std::vector<SweepIndexRun>& r = x.runs;
  std::vector<std::int64_t> index(r.size());
  for (std::size_t i = 0; i < r.size(); ++i) index[i] = static_cast<std::int64_t>(i);
  sum.write("index", index);
  write_strings(sum, "id", column(r, [](const SweepIndexRun& v) { return v.id; }));
  write_strings(sum, "label", column(r, [](const SweepIndexRun& v) { return v.label; }));
  write_strings(sum, "overrides", column(r, [](const SweepIndexRun& v) { return v.overrides; }));
  write_strings(sum, "workload", column(r, [](const SweepIndexRun& v) { return v.workload; }));
  write_strings(sum, "status", column(r, [](const SweepIndexRun& v) { return v.status; }));
  write_strings(sum, "error", column(r, [](const SweepIndexRun& v) { return v.error; }));
  sum.write("exit_code", column(r, [](const SweepIndexRun& v) { return v.exit_code; }));
  sum.write("attempts", column(r, [](const SweepIndexRun& v) { return v.attempts; }));
  sum.write("rank", column(r, [](const SweepIndexRun& v) { return v.rank; }));
  write_strings(sum, "cuda_visible_devices", column(r, [](const SweepIndexRun& v) { return v.cuda_visible_devices; }));
  sum.write("wall_s", column(r, [](const SweepIndexRun& v) { return v.wall_s; }));
  sum.write("reference_final_loss", column(r, [](const SweepIndexRun& v) { return v.reference_final_loss; }));
  sum.write("final_rms_error", column(r, [](const SweepIndexRun& v) { return v.final_rms_error; }));
  sum.write("final_mean_error", column(r, [](const SweepIndexRun& v) { return v.final_mean_error; }));
  sum.write("final_exact", column(r, [](const SweepIndexRun& v) { return v.final_exact; }));
  for (std::size_t a = 0; a < x.axes.size(); ++a)
    write_strings(sum, "param/" + x.axes[a], column(r, [a](const SweepIndexRun& v) { return v.params.at(a); }));
  // One dimension, the runs, named by their index (dims.hpp).
  h5::Dataset dim = sum.open_dataset("index");
  dims::coordinate(dim, "run, in the sweep's expansion order");
  for (const char* name : {"id", "label", "overrides", "workload", "status", "error", "exit_code", "attempts", "rank",
                           "cuda_visible_devices", "reference_final_loss", "final_rms_error", "final_mean_error", "final_exact"})
    dims::name_axes(sum.open_dataset(name), {dim}, "");
  dims::name_axes(sum.open_dataset("wall_s"), {dim}, "s");
  for (const std::string& a : x.axes) dims::name_axes(sum.open_dataset("param/" + a), {dim}, "");
}

void write_summary_recipes(h5::Group rec, const std::vector<SweepIndexRecipe>& m) {
  rec.write("run", column(m, [](const SweepIndexRecipe& v) { return v.run; }));
  write_strings(rec, "id", column(m, [](const SweepIndexRecipe& v) { return v.id; }));
  write_strings(rec, "recipe", column(m, [](const SweepIndexRecipe& v) { return v.recipe; }));
  rec.write("final_loss", column(m, [](const SweepIndexRecipe& v) { return v.final_loss; }));
  rec.write("final_rel_loss_gap", column(m, [](const SweepIndexRecipe& v) { return v.final_rel_loss_gap; }));
  rec.write("final_weight_rel_error", column(m, [](const SweepIndexRecipe& v) { return v.final_weight_rel_error; }));
  rec.write("growth_exponent", column(m, [](const SweepIndexRecipe& v) { return v.growth_exponent; }));
  rec.write("first_nonfinite_step", column(m, [](const SweepIndexRecipe& v) { return v.first_nonfinite_step; }));
  rec.write("tail_loss", column(m, [](const SweepIndexRecipe& v) { return v.tail_loss; }));
  rec.write("tail_rel_loss_gap", column(m, [](const SweepIndexRecipe& v) { return v.tail_rel_loss_gap; }));
  rec.write("rel_loss_gap_window_mean", column(m, [](const SweepIndexRecipe& v) { return v.rel_loss_gap_window_mean; }));
  rec.write("gap_window_first_step", column(m, [](const SweepIndexRecipe& v) { return v.gap_window_first_step; }));
  rec.write("gap_window_last_step", column(m, [](const SweepIndexRecipe& v) { return v.gap_window_last_step; }));
  rec.write("quantized_weight_rel_error",
            column(m, [](const SweepIndexRecipe& v) { return v.quantized_weight_rel_error; }));
  rec.write("quantized_growth_exponent", column(m, [](const SweepIndexRecipe& v) { return v.quantized_growth_exponent; }));
  rec.write("quantized_growth_ci_low", column(m, [](const SweepIndexRecipe& v) { return v.quantized_growth_ci_low; }));
  rec.write("quantized_growth_ci_high", column(m, [](const SweepIndexRecipe& v) { return v.quantized_growth_ci_high; }));
  rec.write("quantized_growth_first_step",
            column(m, [](const SweepIndexRecipe& v) { return v.quantized_growth_first_step; }));
  rec.write("quantized_growth_last_step",
            column(m, [](const SweepIndexRecipe& v) { return v.quantized_growth_last_step; }));
  // One dimension, the (run, recipe) rows, named by a row index (dims.hpp).
  const h5::Dataset dim = dims::index(rec, "row", m.size(), "(complete run, recipe) row");
  for (const char* name : {"run", "id", "recipe", "final_loss", "tail_loss", "first_nonfinite_step",
                           "gap_window_first_step", "gap_window_last_step", "quantized_growth_first_step",
                           "quantized_growth_last_step"})
    dims::name_axes(rec.open_dataset(name), {dim}, "");
  for (const char* name : {"final_rel_loss_gap", "final_weight_rel_error", "growth_exponent", "tail_rel_loss_gap",
                           "rel_loss_gap_window_mean", "quantized_weight_rel_error", "quantized_growth_exponent",
                           "quantized_growth_ci_low", "quantized_growth_ci_high"})
    dims::name_axes(rec.open_dataset(name), {dim}, "1");
}

}  // namespace

void write_sweep_index(const std::string& path, const SweepIndex& index) {
  h5::AtomicOutput out(path);
  h5::File f = h5::File::create(out.temp_path());
  h5::Group root = f.root();
  write_root(root, index);
  h5::Group runs = root.create_group("runs");
  for (const SweepIndexRun& r : index.runs)
    if (!r.trace_link.empty()) external_link(runs, r.id, r.trace_link);
  write_summary(root.create_group("summary"), index);
  write_summary_recipes(root.create_group("summary_recipes"), index.recipes);
  out.commit(f);
}

}  // namespace fp4d
