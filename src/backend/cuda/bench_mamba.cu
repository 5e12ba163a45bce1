// bench lm-cuda's scan line (bench.hpp): the resident Mamba-2 mixer's scan kernels alone, on
// random operands of the benchmark hybrid's shape, each timed from a cold L2 (bench_timer.cuh),
// against the time a device-to-device copy needs for the bytes the scan must move at the least.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/bench.hpp"
#include "backend/cuda/bench_device.hpp"
#include "backend/cuda/bench_timer.cuh"
#include "backend/cuda/lm_mamba_mixer.cuh"

namespace fp4d::cuda {

MambaScanBench mamba_scan_bench(const LmSpec& spec, int repeat) {
  require_bench_device();
  MambaMixerCuda mixer(spec, true);
  const MambaDims& m = mixer.dims();
  MambaCacheCuda c;
  mixer.allocate(c);
  // Operands of a trained model's magnitudes: x, B, C and the gradient near 1, dt from softplus
  // of dt_bias near its initial range, A from -1 to -16.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto fill = [&](const MambaBuf& b, float scale, float offset) {
    std::vector<float> h(b->n);
    for (float& v : h) v = offset + scale * normal(rng);
    b->upload(h.data());
  };
  fill(c.zx, 1.0f, 0.0f);
  fill(c.xbc, 1.0f, 0.0f);
  fill(c.pre, 1.0f, 0.0f);
  fill(c.y, 1.0f, 0.0f);
  fill(c.n, 1.0f, 0.0f);
  fill(c.rinv, 0.1f, 1.0f);
  std::vector<float> dt(static_cast<std::size_t>(m.R * m.H)), a_log(static_cast<std::size_t>(m.H), 1.0f);
  for (float& v : dt) v = 0.01f + 0.002f * std::abs(normal(rng));
  DeviceBuffer<float> ddt(dt, "cudaMalloc (bench dt)");
  check(cudaMemcpy(c.dt->p, ddt.p, dt.size() * sizeof(float), cudaMemcpyDeviceToDevice), "cudaMemcpy (bench dt)");
  for (std::int64_t h = 0; h < m.H; ++h) a_log[static_cast<std::size_t>(h)] = std::log(1.0f + 15.0f * h / std::max<std::int64_t>(m.H - 1, 1));
  DeviceBuffer<float> da_log(a_log, "cudaMalloc (bench a_log)");
  const std::vector<float> ones(static_cast<std::size_t>(std::max(m.H, m.DI)), 1.0f);
  DeviceBuffer<float> d_skip(std::vector<float>(ones.begin(), ones.begin() + m.H), "cudaMalloc (bench D)");
  DeviceBuffer<float> gain(std::vector<float>(ones.begin(), ones.begin() + m.DI), "cudaMalloc (bench gain)");
  std::vector<float> bias(static_cast<std::size_t>(m.H), -4.6f);  // softplus^-1(0.01)
  DeviceBuffer<float> dt_bias(bias, "cudaMalloc (bench dt_bias)");
  DeviceBuffer<float> dout(static_cast<std::size_t>(m.R * m.DI), "cudaMalloc (bench dout)");
  DeviceBuffer<float> dzx(static_cast<std::size_t>(m.R * m.W), "cudaMalloc (bench dzx)");
  std::vector<float> g(static_cast<std::size_t>(m.R * m.DI));
  for (float& v : g) v = normal(rng);
  dout.upload(g.data());
  check(cudaDeviceSynchronize(), "bench setup");

  BenchTimer timer;
  MambaScanBench r;
  const std::int64_t batch = spec.batch;
  r.forward_s = timer.best_seconds(repeat, "mamba scan forward (bench)", [&] {
    mamba_scan_forward_kernel<<<static_cast<unsigned>(batch * m.H), 256, static_cast<std::size_t>(scan_smem_bytes(m))>>>(
        m, c.xbc->p, c.dt->p, da_log.p, d_skip.p, c.y->p);
    check(cudaGetLastError(), "mamba_scan_forward_kernel launch");
  });
  // The backward's scan part: the whole mixer backward minus its gate and convolution kernels
  // is not separable by launch, so the mixer's backward is timed whole.
  MambaGradsCuda gr;
  DeviceBuffer<float> grads(static_cast<std::size_t>(m.CD * (m.K + 1) + 3 * m.H + m.DI), "cudaMalloc (bench grads)");
  gr.conv_w = grads.p, gr.conv_b = gr.conv_w + m.CD * m.K, gr.dt_bias = gr.conv_b + m.CD, gr.a_log = gr.dt_bias + m.H;
  gr.d_skip = gr.a_log + m.H, gr.norm = gr.d_skip + m.H;
  DeviceBuffer<float> conv(static_cast<std::size_t>(m.CD * (m.K + 1)), "cudaMalloc (bench conv)");
  const MambaParamsCuda p{conv.p, conv.p + m.CD * m.K, dt_bias.p, da_log.p, d_skip.p, gain.p};
  check(cudaMemset(conv.p, 0, conv.n * sizeof(float)), "cudaMemset (bench conv)");
  r.mixer_forward_s = timer.best_seconds(repeat, "mamba mixer forward (bench)", [&] { mixer.forward(nullptr, p, c); });
  r.backward_s = timer.best_seconds(repeat, "mamba mixer backward (bench)", [&] {
    mixer.backward(nullptr, p, c, dout.p, dzx.p, gr);
  });
  {
    std::vector<MambaMixerCuda::Mark> marks;
    cudaEvent_t start = nullptr;
    check(cudaEventCreate(&start), "cudaEventCreate (bench)");
    check(cudaEventRecord(start, nullptr), "cudaEventRecord (bench)");
    mixer.set_marks(&marks);
    mixer.backward(nullptr, p, c, dout.p, dzx.p, gr);
    mixer.set_marks(nullptr);
    check(cudaDeviceSynchronize(), "mamba mixer backward (bench, kernel by kernel)");
    cudaEvent_t prev = start;
    for (const auto& mk : marks) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, prev, mk.event), "cudaEventElapsedTime (bench)");
      r.backward_kernels.emplace_back(mk.what, 1e-3 * ms);
      prev = mk.event;
    }
    for (const auto& mk : marks) cudaEventDestroy(mk.event);
    cudaEventDestroy(start);
  }
  // Least traffic: the forward scan reads x, B, C and dt once and writes y; the mixer's
  // backward reads what the forward left (zx, pre, xbc, dt, y, n) and dout and writes dzx.
  const double f = sizeof(float), R = static_cast<double>(m.R);
  r.forward_bytes = f * R * (static_cast<double>(m.CD + m.H + m.DI));
  r.backward_bytes = f * R * static_cast<double>(2 * m.W + 2 * m.CD + m.H + 3 * m.DI);
  r.checkpoint_bytes = 2 * f * static_cast<double>(checkpoint_elements(m, batch));  // checkpoints: written, read
  DeviceBuffer<char> src(static_cast<std::size_t>(r.backward_bytes / 2), "cudaMalloc (bench copy)"),
      dst(src.n, "cudaMalloc (bench copy)");
  const double copy_s = timer.best_seconds(repeat, "copy (bench)", [&] {
    check(cudaMemcpyAsync(dst.p, src.p, src.n, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync (bench)");
  });
  r.copy_gbps = 2.0 * static_cast<double>(src.n) / copy_s * 1e-9;
  return r;
}

}  // namespace fp4d::cuda
