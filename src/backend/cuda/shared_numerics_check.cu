// Device-side instantiation of the shared (FP4D_HD) numerics: element conversions, the
// NVFP4/MXFP4 scale arithmetic and Philox. The kernels quantize 1x16 NVFP4 blocks exactly
// as the CPU reference does (one thread per block) and convert values to every 8-bit
// format; tests/gpu compares them with the CPU bit for bit. The CUDA backend's real kernels
// build on the same calls.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "backend/cuda/shared_numerics_check.hpp"
#include "format/bf16.hpp"
#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "quant/mxfp4_math.hpp"
#include "quant/nvfp4_math.hpp"

#include "backend/cuda/cuda_util.cuh"

namespace fp4d::cuda {

namespace {


__global__ void nvfp4_blocks_kernel(const float* x, int blocks, GlobalScale g, RoundingSpec r, unsigned char* codes,
                                    unsigned char* scales) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  float a = 0.0f;
  for (int i = 0; i < 16; ++i) a = max_ignore_nan(a, abs_f32(x[16 * b + i]));
  const unsigned char s = nvfp4_block_scale_code(a, g.encode, false);
  const float e_b = nvfp4_block_encode_scale(s, g.decode);
  for (int i = 0; i < 16; i += 2) {
    bool c0, c1;
    const unsigned long long idx = 16ull * b + i;
    const unsigned char q0 = e2m1_round(clamp_e2m1_range(x[idx] * e_b, &c0), r, idx);
    const unsigned char q1 = e2m1_round(clamp_e2m1_range(x[idx + 1] * e_b, &c1), r, idx + 1);
    codes[idx / 2] = static_cast<unsigned char>(q0 | (q1 << 4));
  }
  scales[b] = s;
}

__global__ void formats_kernel(const float* x, int n, unsigned char* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[4 * i + 0] = e4m3_rne_satfinite(x[i]);
  out[4 * i + 1] = e5m2_rne_satfinite(x[i]);
  out[4 * i + 2] = ue8m0_from_exponent(mxfp4_scale_exponent(abs_f32(x[i]), MxScaleRule::Ceil));
  out[4 * i + 3] = static_cast<unsigned char>(bf16_rne_bits(x[i]) >> 8);
}


}  // namespace

void nvfp4_blocks_on_device(const float* x, int blocks, GlobalScale g, RoundingSpec r, unsigned char* codes,
                            unsigned char* scales) {
  const std::size_t n = 16u * static_cast<std::size_t>(blocks);
  DeviceBuffer<float> dx(n);
  DeviceBuffer<unsigned char> dc(n / 2), ds(static_cast<std::size_t>(blocks));
  check(cudaMemcpy(dx.p, x, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy x");
  nvfp4_blocks_kernel<<<(blocks + 127) / 128, 128>>>(dx.p, blocks, g, r, dc.p, ds.p);
  check(cudaGetLastError(), "nvfp4_blocks_kernel launch");
  check(cudaDeviceSynchronize(), "nvfp4_blocks_kernel");
  check(cudaMemcpy(codes, dc.p, n / 2, cudaMemcpyDeviceToHost), "cudaMemcpy codes");
  check(cudaMemcpy(scales, ds.p, static_cast<std::size_t>(blocks), cudaMemcpyDeviceToHost), "cudaMemcpy scales");
}

void formats_on_device(const float* x, int n, unsigned char* out4) {
  DeviceBuffer<float> dx(static_cast<std::size_t>(n));
  DeviceBuffer<unsigned char> d(4u * static_cast<std::size_t>(n));
  check(cudaMemcpy(dx.p, x, static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy x");
  formats_kernel<<<(n + 255) / 256, 256>>>(dx.p, n, d.p);
  check(cudaGetLastError(), "formats_kernel launch");
  check(cudaDeviceSynchronize(), "formats_kernel");
  check(cudaMemcpy(out4, d.p, 4u * static_cast<std::size_t>(n), cudaMemcpyDeviceToHost), "cudaMemcpy out");
}

}  // namespace fp4d::cuda
