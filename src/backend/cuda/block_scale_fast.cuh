// The NVFP4 block scale on the device in fewer instructions than the shared reference code
// (quant/nvfp4_math.hpp), for the CUDA quantizers' fast paths (.cu files only):
//  - the E4M3 code of the block decode scale by the hardware conversion
//    (cvt.rn.satfinite.e4m3x2.f32, sm_89+): one instruction for e4m3_rne_satfinite's ~20
//    integer ones. Equal to it on every non-NaN float32 (all 2^32 inputs, gpu.nvfp4_dual's
//    exhaustive check); callers pass no NaN (block amaxes are NaN-free by construction);
//  - the block encode scale e_b = nvfp4_block_encode_scale(S_b, s_dec) looked up in a table of
//    all 128 codes that a CTA fills once (one IEEE division per code and CTA instead of one
//    per block).
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

// tables[t / 128][t % 128] = nvfp4_block_encode_scale(t % 128, g[t / 128].decode) for the
// CTA's threads t < 128 kTables (code 127 is E4M3's NaN, never a block scale): one table per
// global scale (the dual kernel has one per direction); the caller synchronises. With one
// table the index is spelled as a constant 0: the owner kernel's hot loops then compile as
// they did before this helper (PTX compared), and t & 127 lets the compiler drop the fill's
// branch for a negative code.
template <int kTables>
__device__ __forceinline__ void fill_encode_tables(float (*tables)[128], const GlobalScale* g) {
  const unsigned t = threadIdx.x;
  const unsigned k = kTables == 1 ? 0u : t >> 7, code = t & 127u;
  if (t < 128u * kTables) tables[k][code] = nvfp4_block_encode_scale(static_cast<std::uint8_t>(code), g[k].decode);
}

}  // namespace fp4d::cuda
