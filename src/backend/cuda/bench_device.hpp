// The CUDA benchmarks' first step (bench.hpp): a usable device, or the error the bench
// commands report. Plain C++ header, for the bench_*.cu / .cpp files.
#pragma once

#include <stdexcept>
#include <string>

#include "backend/cuda/device.hpp"

namespace fp4d::cuda {

inline void require_bench_device() {
  std::string why;
  if (!device_available(&why)) throw std::runtime_error("no usable CUDA device: " + why);
}

}  // namespace fp4d::cuda
