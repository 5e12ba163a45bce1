#include "backend/cuda/device.hpp"

#include <cuda_runtime.h>

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

}  // namespace fp4d::cuda
