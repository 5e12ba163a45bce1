#include "trace/output_file.hpp"

#include <omp.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "util/version.hpp"

namespace fp4d {

void write_provenance(h5::Group root, const std::string& schema, int schema_version, const std::string& command_line) {
  root.set_attr("schema", schema);
  root.set_attr("schema_version", static_cast<std::int64_t>(schema_version));
  root.set_attr("fp4drift_version", version_string());
  root.set_attr("git_commit", git_commit());
  root.set_attr("command_line", command_line);
  root.set_attr("host", host_name());
  root.set_attr("backend", std::string("cpu"));
  root.set_attr("created", utc_now_iso8601());
  // How the host computation was threaded: results do not depend on it (every parallel loop
  // splits work whose sums do not cross tasks), its speed does.
  root.set_attr("omp_threads", static_cast<std::int64_t>(omp_get_max_threads()));
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  root.set_attr("omp_wait_policy", std::string(wait && *wait ? wait : "default"));
}

OutputFile::OutputFile(const std::string& path, const std::string& schema, int schema_version,
                       const std::string& command_line) {
  if (path.empty()) return;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw std::invalid_argument("output directory '" + parent.string() + "' does not exist");
  // OUT.partial is renamed over OUT at the end. A rename replaces a FIFO or a device node (run
  // as root, --out /dev/null replaced /dev/null with the trace) and fails on a directory only
  // once all the work is done: refuse both here, before any work.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(st)) throw std::invalid_argument("output '" + path + "' is a directory");
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw std::invalid_argument("output '" + path + "' is not a regular file (the output is written as '" + path +
                                ".partial' and renamed over it)");
  out_.emplace(path);
  file_.emplace(h5::File::create(out_->temp_path()));
  h5::Group r = file_->root();
  write_provenance(r, schema, schema_version, command_line);
  r.set_attr("status", std::string("running"));
}

void OutputFile::complete(const std::vector<std::string>& recipe_order) {
  if (!enabled()) return;
  std::string order;
  for (const std::string& n : recipe_order) order += (order.empty() ? "" : ",") + n;
  file_->root().require_group("recipes").set_attr("order", order);
  complete();
}

void OutputFile::complete() {
  if (!enabled()) return;
  file_->root().set_attr("status", std::string("complete"));
  file_->close();
  out_->commit();
}

}  // namespace fp4d
