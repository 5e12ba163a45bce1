// bench quantize-cuda (bench.hpp): the NVFP4 1x16 quantizer's device-pointer API (nvfp4.hpp),
// exactly as fused pipelines call it, against a device-to-device copy of the input and, for
// the amax pass (which reads and writes nothing else), against CUB's max reduction over the
// same bytes: the device library's tuned read-only pass, what a pass that only reads the input
// reaches where the copy's rate (reads and writes) may not be a fair yardstick.
#include <cub/device/device_reduce.cuh>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "backend/cuda/bench.hpp"
#include "backend/cuda/bench_data.cuh"
#include "backend/cuda/bench_device.hpp"
#include "backend/cuda/bench_timer.cuh"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/nvfp4.hpp"

namespace fp4d::cuda {

namespace {

constexpr std::int64_t kBlock = 16;

template <class In>
Nvfp4BenchResult quantize_bench(std::int64_t rows, std::int64_t cols, int repeat) {
  if (rows <= 0 || cols <= 0 || repeat <= 0) throw std::invalid_argument("nvfp4_quantize_cuda_bench: bad arguments");
  const std::int64_t n = rows * cols, pcols = (cols + kBlock - 1) / kBlock * kBlock;
  const auto un = static_cast<std::size_t>(n), upadded = static_cast<std::size_t>(rows * pcols);
  DeviceBuffer<In> dx(un, "cudaMalloc(bench x)"), dcopy(un, "cudaMalloc(bench copy)");
  DeviceBuffer<std::uint8_t> dcodes(upadded / 2, "cudaMalloc(bench codes)");
  DeviceBuffer<std::uint8_t> dscales(upadded / kBlock, "cudaMalloc(bench scales)");
  DeviceBuffer<std::uint16_t> dbf16(un, "cudaMalloc(bench bf16 unscaled)");
  DeviceBuffer<std::uint32_t> dkey(1, "cudaMalloc(bench amax key)");
  bench_data::fill(dx.p, n, 1u);
  check(cudaGetLastError(), "bench data kernel launch");
  check(cudaDeviceSynchronize(), "bench data kernel");

  // RNE, TE scale rule, global scale from the amax key on the device; bf16 (optional): the
  // BF16 q * S_b output.
  const RoundingSpec rne{};
  const auto quantize = [&](std::uint16_t* bf16) {
    nvfp4_quantize_1x16_device_from_amax(dx.p, rows, cols, dkey.p, rne, false, dcodes.p, dscales.p, nullptr, bf16);
  };
  BenchTimer timer;
  const auto time_best = [&timer, repeat](const char* what, auto&& body) { return timer.best_seconds(repeat, what, body); };
  Nvfp4BenchResult res;
  res.l2_bytes = static_cast<double>(timer.l2_bytes());
  res.rows = rows;
  res.cols = cols;
  res.input_bytes_per_element = sizeof(In);
  res.amax_and_quantize_s = time_best("amax + quantize (bench)", [&] {
    nvfp4_amax_device(dx.p, n, dkey.p);
    quantize(nullptr);
  });
  res.quantize_only_s = time_best("quantize (bench)", [&] { quantize(nullptr); });
  res.amax_only_s = time_best("amax (bench)", [&] { nvfp4_amax_device(dx.p, n, dkey.p); });
  const std::size_t bytes = un * sizeof(In);
  res.copy_s = time_best("cudaMemcpyAsync(D2D) (bench)", [&] {
    check(cudaMemcpyAsync(dcopy.p, dx.p, bytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync(D2D)");
  });
  // The read-only reference: cub::DeviceReduce::Max over the input's bytes as 32-bit words (its own
  // temporary storage allocated once, outside the timing; its result to a word of its own: the
  // max of raw words is no amax key, and the quantize variant below reads dkey).
  const auto words = reinterpret_cast<const std::uint32_t*>(dx.p);
  const auto nwords = static_cast<std::int64_t>(bytes / sizeof(std::uint32_t));
  DeviceBuffer<std::uint32_t> dmax(1, "cudaMalloc(bench cub max)");
  std::size_t temp_bytes = 0;
  check(cub::DeviceReduce::Max(nullptr, temp_bytes, words, dmax.p, nwords), "cub::DeviceReduce::Max (size)");
  DeviceBuffer<std::uint8_t> dtemp(temp_bytes, "cudaMalloc(bench cub temp)");
  res.cub_read_bytes = static_cast<double>(nwords) * sizeof(std::uint32_t);
  res.cub_read_s = time_best("cub::DeviceReduce::Max (bench)", [&] {
    check(cub::DeviceReduce::Max(dtemp.p, temp_bytes, words, dmax.p, nwords), "cub::DeviceReduce::Max");
  });
  // Quantize-only variants: the BF16 q * S output (the emulated GEMM's operand), 2 bytes an element more.
  const double bf16_bytes = 2.0 * res.elements();
  res.variants.push_back({"1x16 owner kernel + BF16 q*S", time_best("quantize + bf16 (bench)", [&] { quantize(dbf16.p); }),
                          res.counted_bytes() + bf16_bytes});
  if constexpr (std::is_same_v<In, float>) {
    // The 16x16 weight quantizer (2D scaling, RNE), as a resident step calls it: codes, a
    // scale per 16 x 16 tile and the BF16 decodes.
    const std::int64_t tiles = (rows + kBlock - 1) / kBlock * (pcols / kBlock);
    DeviceBuffer<std::uint8_t> dscales2d(static_cast<std::size_t>(tiles), "cudaMalloc(bench 16x16 scales)");
    const auto quantize_2d = [&](std::uint16_t* bf16) {
      nvfp4_quantize_16x16_device_from_amax(dx.p, rows, cols, dkey.p, rne, false, dcodes.p, dscales2d.p, nullptr, bf16);
    };
    const double bytes_2d = res.input_bytes() + res.elements() * 0.5 + static_cast<double>(tiles);
    res.variants.push_back({"16x16 weight quantizer", time_best("16x16 (bench)", [&] { quantize_2d(nullptr); }), bytes_2d});
    res.variants.push_back({"16x16 weight quantizer + BF16 q*S",
                            time_best("16x16 + bf16 (bench)", [&] { quantize_2d(dbf16.p); }), bytes_2d + bf16_bytes});
  }
  return res;
}

}  // namespace

Nvfp4BenchResult nvfp4_quantize_cuda_bench(std::int64_t rows, std::int64_t cols, int repeat, InputDtype dtype) {
  require_bench_device();
  return dtype == InputDtype::Bf16 ? quantize_bench<std::uint16_t>(rows, cols, repeat)
                                   : quantize_bench<float>(rows, cols, repeat);
}

}  // namespace fp4d::cuda
