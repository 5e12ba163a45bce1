// The trace of a `sum` or `dot` run (schema fp4drift.run, docs/trace-format.md): the
// provenance and the config on the root, the resolved options and the recorded points under
// /sum_dot. The only code that knows that layout; readers take the names they look up from
// the constants below. Written whole: OUT.partial, renamed by complete(); a trace left
// incomplete is removed with the object.
#pragma once

#include <string>

#include "sim/sum_dot_run.hpp"
#include "trace/output_file.hpp"

namespace fp4d {

// Names in the layout that other code reads (the sweep's index takes the last point of each).
namespace sum_dot_trace {
inline constexpr const char* kGroup = "sum_dot";
inline constexpr const char* kExact = "exact";            // float64 [P], in kGroup
inline constexpr const char* kMeanError = "mean_error";  // float64 [P], in kGroup
inline constexpr const char* kRmsError = "rms_error";    // float64 [P], in kGroup
}  // namespace sum_dot_trace

class SumDotTrace {
 public:
  // An empty path: no trace (enabled() is false and the calls below do nothing). Otherwise the
  // provenance, `workload` (sum, dot), `config` and `config_source` are written.
  SumDotTrace(const std::string& path, const std::string& command_line, const SumDotRun& run,
              const std::string& config_text, const std::string& config_source);
  bool enabled() const { return file_.enabled(); }
  // /sum_dot: attributes (the resolved options) and datasets n [P], exact [P], computed [P x R],
  // error [P x R], mean_error [P], rms_error [P], sr_variance [P], sr_half_step_sq [P],
  // first_stagnation [R] (P points, R runs).
  void write(const SumDotRun& run, const SumDotResult& r);
  // Status complete, OUT.partial renamed to OUT (nothing without a path).
  void complete() { file_.complete(); }

 private:
  OutputFile file_;
};

}  // namespace fp4d
