// What goes into the sweep's index OUTDIR/sweep.h5 (schema fp4drift.sweep, docs/trace-format.md):
// an external link to every run's trace, the summary tables of final metrics, the sweep file
// and the provenance, taken from the sweep's state. The layout is trace/sweep_index.hpp's.
// Rewritten whole (temp name + rename) at a cadence and at the end, so a reader never sees
// half an index.
#pragma once

#include <string>
#include <vector>

#include "sweep/expand.hpp"
#include "sweep/state.hpp"

namespace fp4d::sweep {

struct IndexInfo {
  std::string status;        // running | complete | interrupted
  std::string mode;          // local | mpi
  int ranks = 1;
  std::string command_line;
};

void write_index(const std::string& outdir, const Sweep& s, const std::vector<RunRecord>& records,
                 const std::vector<RunMetrics>& metrics, const IndexInfo& info);

}  // namespace fp4d::sweep
