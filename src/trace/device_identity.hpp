// Which device a run stepped on, as its trace records it (docs/trace-format.md, "Device
// attributes"): filled by the backend (Backend::device_identity, backend/backend.hpp) and
// written by the mlp and lm traces. Here, below the backends, because sim/'s run controls
// carry it and trace/ writes it. C++17 (nvcc compiles the CUDA sources that reach it through
// backend.hpp as C++17), hence h5::Group declared, not included.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace fp4d {

namespace h5 {
class Group;
}

struct DeviceIdentity {
  std::string device = "cpu";  // "cpu", or the CUDA device's name ("NVIDIA H200")
  // The rest is the CUDA device's (empty / -1 / unset for the CPU):
  std::string uuid;          // as nvidia-smi prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (MIG- on a MIG instance)
  std::int64_t ordinal = -1;  // its CUDA ordinal in the process (0 when CUDA_VISIBLE_DEVICES names one device)
  std::string pci_bus_id;    // cudaDeviceGetPCIBusId's domain:bus:device.function, e.g. 0000:19:00.0
  std::optional<std::string> cuda_visible_devices;  // the process's, verbatim; unset: every device was visible
  bool is_cpu() const { return uuid.empty() && ordinal < 0; }
};

// NVIDIA's text form of a 16-byte device UUID (cudaDeviceProp::uuid, nvmlDeviceGetUUID): the
// prefix, then the bytes in order as lowercase hex in groups of 4-2-2-2-6 bytes.
std::string format_device_uuid(const std::array<unsigned char, 16>& bytes, const std::string& prefix = "GPU-");

// The root attributes of a run trace for the device `d` of this attempt: `device`, and for a
// CUDA device `device_uuid`, `device_ordinal`, `device_pci_bus_id` and `cuda_visible_devices`
// (the last only when the variable was set); attributes of a previous attempt that do not
// apply are removed. `devices_used` keeps, across attempts (resumes), every device that stepped
// the run: comma-separated UUIDs ("cpu" for the CPU), in order of first use.
void write_device_attributes(h5::Group root, const DeviceIdentity& d);

}  // namespace fp4d
