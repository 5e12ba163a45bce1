// Build provenance recorded in every output file.
#pragma once

#include <string>

namespace fp4d {

std::string version_string();  // e.g. "0.1.0"
std::string git_commit();       // short hash at configure time, or "unknown"
std::string utc_now_iso8601();
std::string host_name();

}  // namespace fp4d
