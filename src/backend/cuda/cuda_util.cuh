// Host-side helpers shared by the CUDA backend's translation units (.cu files only): every
// CUDA call checked with the call named, RAII device buffers and event pairs.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace fp4d::cuda {

// Throws std::runtime_error "CUDA error in WHAT: reason".
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

// n elements of T on the device, zero-filled; 16 bytes of slack past the end so that vector
// loads of a partial last group stay inside the allocation. Not copyable.
template <class T>
class DeviceBuffer {
 public:
  T* p = nullptr;
  std::size_t n = 0;
  explicit DeviceBuffer(std::size_t count, const char* what = "cudaMalloc") : n(count) {
    const std::size_t bytes = std::max<std::size_t>(n, 1) * sizeof(T) + 16;
    check(cudaMalloc(&p, bytes), what);
    check(cudaMemset(p, 0, bytes), what);
  }
  DeviceBuffer(const std::vector<T>& host, const char* what) : DeviceBuffer(host.size(), what) { upload(host.data()); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const T* h) {
    if (n) check(cudaMemcpy(p, h, n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy (host to device)");
  }
  void download(T* h) const {
    if (n) check(cudaMemcpy(h, p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy (device to host)");
  }
};

// An owned DeviceBuffer, as the resident steps hold theirs (members made in their
// constructors); buf(n) allocates max(n, 0) elements, naming `what` in an error.
template <class T>
using Buf = std::unique_ptr<DeviceBuffer<T>>;
template <class T>
Buf<T> buf(std::int64_t n, const char* what) {
  return std::make_unique<DeviceBuffer<T>>(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)), what);
}

// Two events for timing on the default stream; ms() waits for the second.
struct EventPair {
  cudaEvent_t a = nullptr, b = nullptr;
  EventPair() {
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
  }
  ~EventPair() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  float ms() const {
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime");
    return t;
  }
};

}  // namespace fp4d::cuda
