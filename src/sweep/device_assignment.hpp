// Which GPU each run of a `--backend cuda` sweep gets (docs/sweeps.md, "GPUs"). Pure functions
// of their arguments - the environment's value, a directory, the slot numbers - so that the
// assignment is tested with fake device lists on a machine without a GPU.
//
// A sweep pins every child to one device by setting its CUDA_VISIBLE_DEVICES to one entry of
// the list it was given. The list is the inherited CUDA_VISIBLE_DEVICES when that is set (a
// scheduler's allocation is never escaped), else one index per /dev/nvidiaN. Node-local slot
// n = local_rank x slots_per_rank + slot takes entry n mod G: consecutive slots take
// consecutive devices, so with at most G concurrent runs on a node each has its own GPU, and
// beyond that they share round robin (sharing_warning says how).
//
// Compiled into fp4d_core rather than fp4d_sweep: the CUDA backend's device list
// (backend/cuda/device.cu, below the sweep in the link order) is these functions too.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fp4d::sweep {

// The entries of a CUDA_VISIBLE_DEVICES value, in order: device indices (decimal digits,
// leading zeros dropped) and GPU-/MIG- UUIDs (full or abbreviated, kept verbatim), each trimmed
// of the spaces and tabs around it; a trailing comma is harmless. CUDA reads such a list up to
// its first invalid entry and shows no device at all when an entry repeats, so a value it
// would read otherwise than written - an empty entry before the last, an entry that is neither
// an index nor a UUID ("-1", "1gpu"), a repeated one, indices mixed with UUIDs - is refused
// (std::invalid_argument, one line naming the entry), as is an empty value (no device): a
// sweep that silently used fewer GPUs than listed, or none, would be worse than one that does
// not start.
std::vector<std::string> parse_cuda_visible_devices(std::string_view value);

// One index per device node named nvidiaN (N decimal) in `dev_dir` - not nvidiactl,
// nvidia-uvm, nvidia-caps, ... - as "0" .. "n-1": CUDA numbers the devices it can open 0..n-1
// whatever their nodes' minor numbers (nvidia0, nvidia1, nvidia3 are devices 0, 1, 2). Empty
// when the directory cannot be read.
std::vector<std::string> enumerate_nvidia_devices(const std::string& dev_dir);

// The devices a sweep hands out: parse_cuda_visible_devices(cuda_visible_devices) when it is
// set (not null), else enumerate_nvidia_devices(dev_dir). Does not initialise CUDA.
std::vector<std::string> visible_devices(const char* cuda_visible_devices, const std::string& dev_dir = "/dev");

// The CUDA_VISIBLE_DEVICES value of slot `slot` (0 .. slots_per_rank - 1) of node-local rank
// `local_rank`: devices[(local_rank x slots_per_rank + slot) mod G]; "" (leave the variable
// alone) when there are no devices. std::invalid_argument for a slot or rank out of range.
std::string device_for_slot(const std::vector<std::string>& devices, int local_rank, int slots_per_rank, int slot);

// How many of `concurrent` runs on one node (its slots 0 .. concurrent - 1) each of `devices`
// devices carries under device_for_slot: concurrent / G, one more on the first concurrent mod G.
std::vector<int> runs_per_device(std::size_t devices, int concurrent);

// One warning line (no newline) when `concurrent` runs on one node share `devices` - more runs
// than GPUs - saying how many runs each GPU carries; "" when each run has a GPU of its own or
// there are no devices. `where` follows "runs" (" on node X" under MPI; "" locally).
std::string sharing_warning(const std::vector<std::string>& devices, int concurrent, const std::string& where = "");

// The prefix nvidia-smi gives the UUID of the device with CUDA ordinal `ordinal` in a process
// that saw `cuda_visible_devices` (null: unset): "MIG-" when the list names that device by a
// MIG identifier, else "GPU-". The CUDA runtime gives the UUID's bytes without saying which it
// is; CUDA numbers the listed devices in list order, so the device's entry says (a list that
// parse_cuda_visible_devices refuses says nothing: "GPU-").
std::string device_uuid_prefix(const char* cuda_visible_devices, long long ordinal);

}  // namespace fp4d::sweep
