#include "sweep/index.hpp"

#include <hdf5.h>

#include <cerrno>
#include <cmath>
#include <filesystem>

#include "trace/h5.hpp"
#include "trace/output_file.hpp"
#include "trace/tensor_io.hpp"

namespace fp4d::sweep {

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

}  // namespace

void write_index(const std::string& outdir, const Sweep& s, const std::vector<RunRecord>& records,
                 const std::vector<RunMetrics>& metrics, const IndexInfo& info) {
  const std::size_t n = s.runs.size();
  h5::AtomicOutput out((std::filesystem::path(outdir) / "sweep.h5").string());
  h5::File f = h5::File::create(out.temp_path());
  h5::Group root = f.root();
  write_provenance(root, "fp4drift.sweep", 1, info.command_line);
  root.set_attr("status", info.status);
  root.set_attr("backend", s.backend);
  root.set_attr("mode", info.mode);
  root.set_attr("ranks", static_cast<std::int64_t>(info.ranks));
  root.set_attr("workers", s.workers);
  root.set_attr("sweep", s.text);
  root.set_attr("sweep_source", s.source);
  root.set_attr("base_config", s.base_text);
  root.set_attr("base_source", s.base_source);
  std::string axes;
  for (const std::string& a : s.axes) axes += (axes.empty() ? "" : ",") + a;
  root.set_attr("axes", axes);
  std::int64_t counts[4] = {0, 0, 0, 0};  // complete, failed, interrupted, other
  for (const RunRecord& r : records)
    ++counts[r.status == "complete" ? 0 : r.status == "failed" ? 1 : r.status == "interrupted" ? 2 : 3];
  root.set_attr("runs_total", static_cast<std::int64_t>(n));
  root.set_attr("runs_complete", counts[0]);
  root.set_attr("runs_failed", counts[1]);
  root.set_attr("runs_interrupted", counts[2]);
  root.set_attr("runs_pending", counts[3]);

  h5::Group runs = root.create_group("runs");
  for (const SweepRun& r : s.runs) {
    const RunPaths p(outdir, r.id);
    if (std::filesystem::exists(p.trace)) external_link(runs, r.id, "runs/" + r.id + "/trace.h5");
  }

  h5::Group sum = root.create_group("summary");
  std::vector<std::string> id, label, overrides, workload, status, error;
  std::vector<std::int64_t> exit_code, attempts, rank;
  std::vector<double> wall, ref_loss, rms, mean, exact;
  for (std::size_t i = 0; i < n; ++i) {
    const SweepRun& r = s.runs[i];
    id.push_back(r.id);
    label.push_back(r.label);
    std::string ov;
    for (const Override& o : r.overrides) ov += (ov.empty() ? "" : "\n") + o.key + " = " + o.value;
    overrides.push_back(ov);
    workload.push_back(r.workload);
    status.push_back(records[i].status);
    error.push_back(records[i].error);
    exit_code.push_back(records[i].exit_code);
    attempts.push_back(records[i].attempts);
    rank.push_back(records[i].rank);
    wall.push_back(records[i].wall_s < 0 ? NAN : records[i].wall_s);  // -1 in a record: unknown
    ref_loss.push_back(metrics[i].reference_final_loss);
    rms.push_back(metrics[i].final_rms_error);
    mean.push_back(metrics[i].final_mean_error);
    exact.push_back(metrics[i].final_exact);
  }
  std::vector<std::int64_t> index(n);
  for (std::size_t i = 0; i < n; ++i) index[i] = static_cast<std::int64_t>(i);
  sum.write("index", index);
  write_strings(sum, "id", id);
  write_strings(sum, "label", label);
  write_strings(sum, "overrides", overrides);
  write_strings(sum, "workload", workload);
  write_strings(sum, "status", status);
  write_strings(sum, "error", error);
  sum.write("exit_code", exit_code);
  sum.write("attempts", attempts);
  sum.write("rank", rank);
  sum.write("wall_s", wall);
  sum.write("reference_final_loss", ref_loss);
  sum.write("final_rms_error", rms);
  sum.write("final_mean_error", mean);
  sum.write("final_exact", exact);
  for (const std::string& axis : s.axes) {
    std::vector<std::string> vals;
    for (const SweepRun& r : s.runs) {
      std::string v;
      for (const Override& o : r.overrides)
        if (o.key == axis) v = o.value;
      vals.push_back(v);
    }
    write_strings(sum, "param/" + axis, vals);
  }

  h5::Group rec = root.create_group("summary_recipes");
  std::vector<std::int64_t> run_index, nonfinite;
  std::vector<std::string> rec_id, recipe;
  std::vector<double> loss, gap, werr, growth;
  for (std::size_t i = 0; i < n; ++i)
    for (const RecipeMetrics& m : metrics[i].recipes) {
      run_index.push_back(static_cast<std::int64_t>(i));
      rec_id.push_back(s.runs[i].id);
      recipe.push_back(m.recipe);
      loss.push_back(m.final_loss);
      gap.push_back(m.final_rel_loss_gap);
      werr.push_back(m.final_weight_rel_error);
      growth.push_back(m.growth_exponent);
      nonfinite.push_back(m.first_nonfinite_step);
    }
  rec.write("run", run_index);
  write_strings(rec, "id", rec_id);
  write_strings(rec, "recipe", recipe);
  rec.write("final_loss", loss);
  rec.write("final_rel_loss_gap", gap);
  rec.write("final_weight_rel_error", werr);
  rec.write("growth_exponent", growth);
  rec.write("first_nonfinite_step", nonfinite);
  out.commit(f);
}

}  // namespace fp4d::sweep
