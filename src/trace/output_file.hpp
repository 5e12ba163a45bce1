// The output file of a run: created as NAME.partial with the provenance attributes and
// status "running", renamed to NAME only by complete(). A run that stops early (error,
// kill) leaves no file under the final name; the destructor removes the .partial.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trace/h5.hpp"

namespace fp4d {

// Root attributes every fp4drift output carries (docs/trace-format.md, "Common root
// attributes"): schema name and version, fp4drift version and git commit, command line, host,
// backend ("cpu"; a writer that knows better overwrites it), creation time.
void write_provenance(h5::Group root, const std::string& schema, int schema_version, const std::string& command_line);

class OutputFile {
 public:
  // An empty path means no output: enabled() is false and nothing is written. Throws
  // std::invalid_argument when the directory does not exist, or when the path exists and is
  // not a regular file (a directory, FIFO or device would be replaced or fail at the end).
  OutputFile(const std::string& path, const std::string& schema, int schema_version, const std::string& command_line);
  bool enabled() const { return file_.has_value(); }
  h5::Group root() const { return file_->root(); }
  // Records the run order of the /recipes subgroups, sets status "complete", closes the
  // file and gives it its final name.
  void complete(const std::vector<std::string>& recipe_order);
  // The same without a /recipes group (runs, sweeps).
  void complete();

 private:
  std::optional<h5::AtomicOutput> out_;
  std::optional<h5::File> file_;
};

}  // namespace fp4d
