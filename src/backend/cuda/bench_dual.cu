// bench quantize-dual-cuda (bench.hpp): rowwise + columnwise NVFP4 in one pass
// (nvfp4_dual.hpp), both passes together and each alone.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "backend/cuda/bench.hpp"
#include "backend/cuda/bench_data.cuh"
#include "backend/cuda/bench_device.hpp"
#include "backend/cuda/bench_timer.cuh"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/nvfp4_dual.hpp"
#include "quant/rht.hpp"

namespace fp4d::cuda {

namespace {

// Reads in[0 .. nin) once and writes out[0 .. nout): thread i loads vector i and stores it to
// out[i], out[i + nin], ... (the k-th copy xor k, so that no store is of a constant), each
// plane of stores coalesced.
__global__ void stream_mix_kernel(const uint4* __restrict__ in, std::int64_t nin, uint4* __restrict__ out,
                                  std::int64_t nout) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= nin) return;
  const uint4 v = __ldg(in + i);
  std::uint32_t k = 0;
  for (std::int64_t j = i; j < nout; j += nin, ++k) out[j] = make_uint4(v.x ^ k, v.y, v.z, v.w);
}

// What both dual benchmarks refuse, before any allocation.
void check_bench_args(std::int64_t rows, std::int64_t cols, int repeat) {
  require_bench_device();
  nvfp4_quantize_dual_check_shape(rows, cols);
  if (repeat < 1) throw std::invalid_argument("--repeat must be >= 1");
}

// The bytes a dual pass over n elements moves: the input once; both directions' codes (n / 2
// bytes each) and scales (n / 16 each); with both BF16 decodes, 2 x 2 bytes per element more.
struct PassBytes {
  double input, write, decode_write;
};
PassBytes pass_bytes(std::int64_t n, bool bf16_input) {
  const double write = static_cast<double>(n) * 2.0 * (0.5 + 1.0 / 16.0);
  return {static_cast<double>(n) * (bf16_input ? 2 : 4), write, write + static_cast<double>(n) * 4.0};
}

}  // namespace

DualStreamBench dual_stream_bench(std::int64_t rows, std::int64_t cols, bool bf16_input, int repeat) {
  check_bench_args(rows, cols, repeat);
  const PassBytes b = pass_bytes(rows * cols, bf16_input);  // rows x cols: a multiple of 256, so each count one of 16
  DualStreamBench r;
  r.input_bytes = b.input, r.pass_write_bytes = b.write, r.decode_write_bytes = b.decode_write;
  const auto nin = static_cast<std::int64_t>(r.input_bytes) / 16;
  DeviceBuffer<uint4> in(static_cast<std::size_t>(nin));
  DeviceBuffer<uint4> out(static_cast<std::size_t>(r.decode_write_bytes) / 16);
  check(cudaMemset(in.p, 0x3c, static_cast<std::size_t>(r.input_bytes)), "cudaMemset (stream bench input)");
  BenchTimer timer;
  const auto stream = [&](double write_bytes) {
    const auto nout = static_cast<std::int64_t>(write_bytes) / 16;
    return timer.best_seconds(repeat, "stream benchmark", [&] {
      stream_mix_kernel<<<static_cast<unsigned>((nin + 255) / 256), 256>>>(in.p, nin, out.p, nout);
    });
  };
  r.memcpy_s = timer.best_seconds(repeat, "cudaMemcpyAsync(D2D) (bench)", [&] {
    check(cudaMemcpyAsync(out.p, in.p, static_cast<std::size_t>(r.input_bytes), cudaMemcpyDeviceToDevice, nullptr),
          "cudaMemcpyAsync(D2D)");
  });
  r.stream_copy_s = stream(r.input_bytes);
  r.stream_pass_s = stream(r.pass_write_bytes);
  r.stream_decode_s = stream(r.decode_write_bytes);
  check(cudaGetLastError(), "stream_mix_kernel");
  return r;
}

DualBench nvfp4_quantize_dual_bench(std::int64_t rows, std::int64_t cols, bool bf16_input, bool rht, bool sr, int sr_bits,
                                    int repeat) {
  check_bench_args(rows, cols, repeat);
  const std::int64_t n = rows * cols;
  DeviceBuffer<float> xf(bf16_input ? 0 : static_cast<std::size_t>(n));
  DeviceBuffer<std::uint16_t> xb(bf16_input ? static_cast<std::size_t>(n) : 0);
  DeviceBuffer<std::uint8_t> rc(static_cast<std::size_t>(n / 2)), rs(static_cast<std::size_t>(n / 16)),
      cc(static_cast<std::size_t>(n / 2)), cs(static_cast<std::size_t>(n / 16));
  DeviceBuffer<GlobalScale> g(2);
  DeviceBuffer<std::uint32_t> keys(2);
  DeviceBuffer<std::uint16_t> rb(static_cast<std::size_t>(n)), cb(static_cast<std::size_t>(n));
  if (bf16_input) bench_data::fill(xb.p, n, 3u);
  else bench_data::fill(xf.p, n, 3u);
  check(cudaGetLastError(), "bench data kernel");
  DualSpec spec;
  spec.col_rht = rht;
  spec.rht_sign_mask = kTeRhtSignMask;
  if (sr) {
    spec.row_rounding.mode = spec.col_rounding.mode = Rounding::Stochastic;
    spec.row_rounding.sr_bits = spec.col_rounding.sr_bits = sr_bits;
    spec.row_rounding.rng = RngStream{1, 1};
    spec.col_rounding.rng = RngStream{1, 2};
  }
  const DualOutputs out{rc.p, rs.p, cc.p, cs.p, g.p};
  BenchTimer timer;
  const auto run = [&](auto&& f) {  // f(x) with the input of the benchmark's type
    return bf16_input ? timer.best_seconds(repeat, "dual benchmark", [&] { f(static_cast<const std::uint16_t*>(xb.p)); })
                      : timer.best_seconds(repeat, "dual benchmark", [&] { f(static_cast<const float*>(xf.p)); });
  };
  DualBench r;
  r.seconds = run([&](const auto* x) { nvfp4_quantize_dual_device(x, rows, cols, spec, out, keys.p); });
  r.amax_seconds = run([&](const auto* x) { nvfp4_quantize_dual_amax_pass(x, rows, cols, spec, keys.p); });
  // The quantize pass alone, from a cold L2 (keys from the amax pass just timed).
  r.quantize_seconds = run([&](const auto* x) { nvfp4_quantize_dual_quantize_pass(x, rows, cols, spec, out, keys.p); });
  const PassBytes b = pass_bytes(n, bf16_input);
  r.counted_bytes = b.input + b.write;
  const DualOutputs with_decode{rc.p, rs.p, cc.p, cs.p, g.p, rb.p, cb.p};
  r.decode_seconds =
      run([&](const auto* x) { nvfp4_quantize_dual_quantize_pass(x, rows, cols, spec, with_decode, keys.p); });
  r.decode_counted_bytes = b.input + b.decode_write;
  return r;
}

}  // namespace fp4d::cuda
