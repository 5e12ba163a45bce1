// The emulated GEMM's BF16 operand of one whole 1x16 block, as the quantizers write it (.cu
// files only): element i is nvfp4_unscaled_bf16(code i, S_b) (E2M1 value x block scale, exact,
// no global scale), computed four at a time by nvfp4_unscaled_bf16x4's byte tables and stored
// as two 16-byte words.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "quant/nvfp4_math.hpp"

namespace fp4d::cuda {

namespace {

// A scale's byte tables as one 16-byte word: an entry of a kernel's table over the scale codes,
// read with one shared-memory load where computing them takes a decode and ~20 instructions.
__device__ __forceinline__ uint4 unscaled_bf16_tables_word(float scale_value) {
  const UnscaledBf16Tables t = nvfp4_unscaled_bf16_tables(scale_value);
  return make_uint4(t.hi[0], t.hi[1], t.lo[0], t.lo[1]);
}

// codes: element i in nibble i % 8 of codes.x (i < 8) or codes.y; o[0] elements 0..7, o[1] 8..15;
// tables: unscaled_bf16_tables_word of the block's scale.
__device__ __forceinline__ void unscaled_bf16_block(uint2 codes, uint4 tables, uint4 (&o)[2]) {
  const UnscaledBf16Tables t{{tables.x, tables.y}, {tables.z, tables.w}};
  const Bf16x4 a = nvfp4_unscaled_bf16x4(t, codes.x), b = nvfp4_unscaled_bf16x4(t, codes.x >> 16);
  const Bf16x4 c = nvfp4_unscaled_bf16x4(t, codes.y), d = nvfp4_unscaled_bf16x4(t, codes.y >> 16);
  o[0] = make_uint4(a.lo, a.hi, b.lo, b.hi);
  o[1] = make_uint4(c.lo, c.hi, d.lo, d.hi);
}

// The same, stored; out 16-byte aligned.
__device__ __forceinline__ void store_unscaled_bf16_block(uint2 codes, float scale_value, std::uint16_t* out) {
  uint4 o[2];
  unscaled_bf16_block(codes, unscaled_bf16_tables_word(scale_value), o);
  reinterpret_cast<uint4*>(out)[0] = o[0];
  reinterpret_cast<uint4*>(out)[1] = o[1];
}

}  // namespace

}  // namespace fp4d::cuda
