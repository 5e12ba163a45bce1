// NVFP4 scale arithmetic, step by step as in nvfp4-spec.md section 2, written once for the
// CPU and CUDA backends (FP4D_HD). Every expression is a single float32 operation in the
// order the spec gives; both compilers must be kept from contracting them into FMAs
// (-ffp-contract=off, --fmad=false), which the build does.
#pragma once

#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "format/hd.hpp"

namespace fp4d {

struct GlobalScale {
  float encode = 1.0f;  // s_enc
  float decode = 1.0f;  // s_dec = 1 / s_enc, stored as float32
};

constexpr float kNvfp4EncodeNumerator = 6.0f * 448.0f;  // 2688, exact

// Step 2: s_enc = min(6*448 / A, FLT_MAX); s_enc = 1 when A == 0 or s_enc == 0 (A = Inf).
FP4D_HD GlobalScale nvfp4_global_scale(float amax) {
  GlobalScale g;
  if (amax == 0.0f) return g;
  float enc = kNvfp4EncodeNumerator / amax;
  if (enc > kFltMax) enc = kFltMax;
  if (enc == 0.0f) enc = 1.0f;
  g.encode = enc;
  g.decode = 1.0f / enc;
  return g;
}

// Step 3: the block decode scale as an E4M3 code.
//   te:        S_b = e4m3(a_b * (s_enc * (1/6)))   - the factor is one float product
//   te-legacy: S_b = e4m3((a_b / 6) * s_enc)       - two roundings
FP4D_HD std::uint8_t nvfp4_block_scale_code(float block_amax, float s_enc, bool legacy) {
  if (legacy) return e4m3_rne_satfinite((block_amax / 6.0f) * s_enc);
  const float factor = s_enc * (1.0f / 6.0f);
  return e4m3_rne_satfinite(block_amax * factor);
}

// Step 4: e_b = min(1 / (float(S_b) * s_dec), FLT_MAX). A zero scale gives FLT_MAX (as TE's
// kernels do); the block then dequantizes to zero whatever its codes.
FP4D_HD float nvfp4_block_encode_scale(std::uint8_t scale_code, float s_dec) {
  const float e = 1.0f / (e4m3_decode(scale_code) * s_dec);
  return e > kFltMax ? kFltMax : e;
}

// Step 5's clamp to [-6, 6]; NaN passes through (and becomes E2M1 code 0x7, as CUDA's
// conversion maps it). Reports whether a finite v has |v| > 6: the "clipped" event of the
// statistics (an infinite input saturates too, but is counted as non-finite, not clipped).
FP4D_HD float clamp_e2m1_range(float v, bool* clipped) {
  *clipped = abs_f32(v) > kE2M1Max && abs_f32(v) <= kFltMax;
  return v > kE2M1Max ? kE2M1Max : (v < -kE2M1Max ? -kE2M1Max : v);
}

// Step 6: x_hat = (E2M1value(q) * float(S_b)) * s_dec.
FP4D_HD float nvfp4_dequantize(std::uint8_t code, std::uint8_t scale_code, float s_dec) {
  return (e2m1_decode(code) * e4m3_decode(scale_code)) * s_dec;
}

// The operand of an emulated NVFP4 GEMM: the BF16 bits of E2M1value(q) * S_b, without the
// global decode scale. Exact in float32 and in BF16 (at most 6 significant bits, magnitudes
// 2^-10 .. 2688), so dropping the float's low half loses nothing.
FP4D_HD std::uint16_t nvfp4_unscaled_bf16(std::uint8_t code, float scale_value) {
  return static_cast<std::uint16_t>(float_bits(e2m1_decode(code) * scale_value) >> 16);
}

}  // namespace fp4d
