// Device-side instantiation of the shared (FP4D_HD) numerics: element conversions, the
// NVFP4/MXFP4 scale arithmetic and Philox. The kernel quantizes one 1x16 NVFP4 block per
// thread exactly as the CPU backend's quantize_1x16 does; the CUDA backend's real kernels
// build on the same calls.
#include "format/bf16.hpp"
#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "quant/mxfp4_math.hpp"
#include "quant/nvfp4_math.hpp"

namespace fp4d::cuda {

__global__ void nvfp4_block_reference_kernel(const float* x, int blocks, GlobalScale g, RoundingSpec r,
                                             unsigned char* codes, unsigned char* scales) {
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

__global__ void format_instantiation_kernel(const float* x, int n, unsigned char* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[4 * i + 0] = e4m3_rne_satfinite(x[i]);
  out[4 * i + 1] = e5m2_rne_satfinite(x[i]);
  out[4 * i + 2] = ue8m0_from_exponent(mxfp4_scale_exponent(abs_f32(x[i]), MxScaleRule::Ceil));
  out[4 * i + 3] = static_cast<unsigned char>(bf16_rne_bits(x[i]) >> 8);
}

}  // namespace fp4d::cuda
