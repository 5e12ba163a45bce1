#include "util/memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace fp4d {

namespace {

std::optional<std::uint64_t> parse_u64(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  try {
    return static_cast<std::uint64_t>(std::stoull(s));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<std::uint64_t> read_u64_file(const char* path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s)) return std::nullopt;
  return parse_u64(s);  // "max" (no limit) is not a number: nullopt
}

std::optional<std::uint64_t> meminfo_available() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream in(line.substr(13));
    std::uint64_t kb = 0;
    if (in >> kb) return kb * 1024;  // the file's unit is KiB whatever it says ("kB")
  }
  return std::nullopt;  // kernels before 3.14, or no /proc
}

}  // namespace

std::optional<std::uint64_t> available_memory() {
  if (const char* env = std::getenv("FP4DRIFT_MEMORY_AVAILABLE"); env && *env) {
    if (auto v = parse_u64(env)) return v;
  }
  std::optional<std::uint64_t> avail = meminfo_available();
  // In a container MemAvailable is the host's; the cgroup's limit is what the OOM killer
  // enforces. Under cgroup v2 with a namespace, /sys/fs/cgroup is this process's own group.
  const auto limit = read_u64_file("/sys/fs/cgroup/memory.max");
  const auto used = read_u64_file("/sys/fs/cgroup/memory.current");
  if (limit && used) {
    const std::uint64_t headroom = *limit > *used ? *limit - *used : 0;
    avail = avail ? std::min(*avail, headroom) : headroom;
  }
  return avail;
}

std::string format_bytes(double bytes) {
  static const char* units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (bytes >= 1000.0 && u < 6) bytes /= 1000.0, ++u;
  char b[32];
  if (u == 0 || bytes >= 100.0) std::snprintf(b, sizeof b, "%.0f %s", bytes, units[u]);
  else if (bytes >= 10.0) std::snprintf(b, sizeof b, "%.1f %s", bytes, units[u]);
  else std::snprintf(b, sizeof b, "%.2f %s", bytes, units[u]);
  return b;
}

std::string memory_shortfall(std::uint64_t needed) {
  const std::optional<std::uint64_t> avail = available_memory();
  if (!avail || needed <= *avail) return {};
  return "needs about " + format_bytes(static_cast<double>(needed)) + " of memory, " +
         format_bytes(static_cast<double>(*avail)) + " available";
}

}  // namespace fp4d
