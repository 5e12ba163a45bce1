// How much memory a command may use, and the refusal when it needs more: a size that fits
// the limits but not the machine should fail in a second with the figures, not after
// minutes of swapping or in the kernel's OOM killer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fp4d {

// Bytes this process can expect to allocate, or nullopt where that is unknown (the check is
// then skipped). FP4DRIFT_MEMORY_AVAILABLE (bytes), when set, is used as is (a share of a
// machine other jobs use; tests). Otherwise MemAvailable of /proc/meminfo, lowered to the
// headroom of the cgroup (v2 memory.max - memory.current) when a container limits it.
std::optional<std::uint64_t> available_memory();

// "480 GB", "21.3 GB", "512 MB": decimal units, three significant digits at most.
std::string format_bytes(double bytes);

// Empty when `needed` bytes fit in available_memory() (or that is unknown), otherwise
// "needs about 480 GB of memory, 21.3 GB available" for the caller to complete into its error.
std::string memory_shortfall(std::uint64_t needed);

}  // namespace fp4d
