// The NVFP4 block scale on the device in fewer instructions than the shared reference code
// (quant/nvfp4_math.hpp), for the CUDA quantizers' fast paths (.cu files only):
//  - the E4M3 code of the block decode scale by the hardware conversion
//    (cvt.rn.satfinite.e4m3x2.f32, sm_89+): one instruction for e4m3_rne_satfinite's ~20
//    integer ones. Equal to it on every non-NaN float32 (all 2^32 inputs, gpu.nvfp4_dual's
//    exhaustive check); callers pass no NaN (block amaxes are NaN-free by construction);
//  - the block encode scale e_b = nvfp4_block_encode_scale(S_b, s_dec) looked up in a table of
//    all 128 codes that a CTA fills once (one IEEE division per code and CTA instead of one
//    per block; fill_encode_table, or the dual kernel's own setup, which fills two).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "quant/nvfp4_math.hpp"

namespace fp4d::cuda {

__device__ __forceinline__ std::uint8_t e4m3_satfinite_hw(float x) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// nvfp4_block_scale_code(block_amax, s_enc, legacy) for a non-NaN block amax.
__device__ __forceinline__ std::uint8_t block_scale_code_hw(float block_amax, float s_enc, bool legacy) {
  if (legacy) return e4m3_satfinite_hw((block_amax / 6.0f) * s_enc);
  return e4m3_satfinite_hw(block_amax * (s_enc * (1.0f / 6.0f)));
}

// table[t] = nvfp4_block_encode_scale(t, g.decode) for the CTA's threads t < 128 (code 127 is
// E4M3's NaN, never a block scale); the caller synchronises. t & 127 lets the compiler drop the
// fill's branch for a negative code.
__device__ __forceinline__ void fill_encode_table(float* table, const GlobalScale& g) {
  const unsigned t = threadIdx.x, code = t & 127u;
  if (t < 128u) table[code] = nvfp4_block_encode_scale(static_cast<std::uint8_t>(code), g.decode);
}

}  // namespace fp4d::cuda
