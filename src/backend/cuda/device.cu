#include "backend/cuda/device.hpp"

#include <cuda_runtime.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <stdexcept>
#include <sstream>
#include <system_error>

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
  std::vector<std::string> out;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && *v) {
    std::stringstream ss(v);
    std::string d;
    while (std::getline(ss, d, ','))
      if (!d.empty()) out.push_back(d);
    return out;
  }
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev", ec))
    if (std::regex_match(e.path().filename().string(), std::regex("nvidia[0-9]+"))) ++n;
  for (int i = 0; i < n; ++i) out.push_back(std::to_string(i));
  return out;
}

}  // namespace fp4d::cuda
