// Finding the CUDA devices: whether this process can use one, and which ones a sweep may
// spread its runs over. Plain C++ header.
#pragma once

#include <string>
#include <vector>

#include "trace/device_identity.hpp"

namespace fp4d::cuda {

// Whether a CUDA device can be used (the runtime initialises and counts one); why not, otherwise.
bool device_available(std::string* why);

// The devices child processes may be pinned to with CUDA_VISIBLE_DEVICES: the entries of
// CUDA_VISIBLE_DEVICES when it is set (so a sweep never escapes the devices it was given),
// else one per /dev/nvidiaN (sweep/device_assignment.hpp's visible_devices, which says what
// it refuses). Does not call the CUDA runtime. (`fp4drift sweep --backend cuda` does, once:
// its up-front device_available check counts the devices, which creates no context on any of
// them, so the sweep's own process holds no device memory beside its runs.)
std::vector<std::string> visible_devices();

// The current device: its name, UUID as nvidia-smi prints it (MIG- when this process's
// CUDA_VISIBLE_DEVICES names it by a MIG identifier, GPU- otherwise), ordinal, PCI bus id, and
// the CUDA_VISIBLE_DEVICES this process saw. std::runtime_error when the runtime cannot say.
DeviceIdentity device_identity();

// The current device's architecture as nvcc names it ("sm_90", "sm_100", ...), with its name
// in parentheses; throws std::runtime_error when the runtime cannot say.
std::string device_architecture();

}  // namespace fp4d::cuda
