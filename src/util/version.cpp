#include "util/version.hpp"

#include <unistd.h>

#include <ctime>

namespace fp4d {

std::string version_string() { return FP4DRIFT_VERSION; }
std::string git_commit() { return FP4DRIFT_GIT_COMMIT; }
std::string utc_now_iso8601() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace fp4d
