#include "backend/cuda/device.hpp"

#include <cuda_runtime.h>

#include <array>
#include <cstdlib>
#include <stdexcept>

#include "sweep/device_assignment.hpp"

namespace fp4d::cuda {

bool device_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    return false;
  }
  return true;
}

std::string device_architecture() {
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess)
    throw std::runtime_error("cudaGetDeviceProperties failed");
  return "sm_" + std::to_string(p.major) + std::to_string(p.minor) + " (" + p.name + ")";
}

std::vector<std::string> visible_devices() {
  return sweep::visible_devices(std::getenv("CUDA_VISIBLE_DEVICES"), "/dev");
}

DeviceIdentity device_identity() {
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess)
    throw std::runtime_error("cudaGetDeviceProperties failed");
  char bus[64] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess) throw std::runtime_error("cudaDeviceGetPCIBusId failed");
  DeviceIdentity d;
  d.device = p.name;
  d.ordinal = dev;
  d.pci_bus_id = bus;
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  if (cvd) d.cuda_visible_devices = cvd;
  std::array<unsigned char, 16> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(p.uuid.bytes[i]);
  d.uuid = format_device_uuid(bytes, sweep::device_uuid_prefix(cvd, dev));
  return d;
}

}  // namespace fp4d::cuda
