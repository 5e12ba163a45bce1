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
FP4D_HD float nvfp4_block_encode_scale_of_value(float scale_value, float s_dec) {
  const float e = 1.0f / (scale_value * s_dec);
  return e > kFltMax ? kFltMax : e;
}
FP4D_HD float nvfp4_block_encode_scale(std::uint8_t scale_code, float s_dec) {
  return nvfp4_block_encode_scale_of_value(e4m3_decode(scale_code), s_dec);
}

// Step 5's clamp to [-6, 6]; NaN passes through (and becomes E2M1 code 0x7, as CUDA's
// conversion maps it). Reports whether a finite v has |v| > 6: the "clipped" event of the
// statistics (an infinite input saturates too, but is counted as non-finite, not clipped).
FP4D_HD float clamp_e2m1_range(float v, bool* clipped) {
  *clipped = abs_f32(v) > kE2M1Max && abs_f32(v) <= kFltMax;
  return v > kE2M1Max ? kE2M1Max : (v < -kE2M1Max ? -kE2M1Max : v);
}

// The bits of |x|, NaNs kept: above 0x7f800000 iff x is a NaN, so a max of them is the max of
// the amax keys below wherever it is not above 0x7f800000 (no element a NaN). The fast paths of
// the block amaxes take it first and fall back to amax_key only for a block with a NaN.
FP4D_HD std::uint32_t abs_bits(float x) { return float_bits(x) & 0x7fffffffu; }

// |x| as an integer key whose unsigned order is the order of |x|, with NaN mapped to 0 (so
// ignored, as fmaxf does): integer max reductions vectorise where float ones with IEEE
// semantics do not, and on the device an unsigned max is exact in any order (warp, block and
// atomicMax reductions). bits_float(key) is the magnitude; every amax pass, CPU and GPU, keys
// its elements by this function.
FP4D_HD std::uint32_t amax_key(float x) {
  const std::uint32_t a = abs_bits(x);
  return a & (0u - static_cast<std::uint32_t>(a <= 0x7f800000u));  // a mask, not a select: vectorises
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

// nvfp4_unscaled_bf16 four elements at a time, for kernels that decode whole blocks: the eight
// magnitudes E2M1value(m) * S_b, m = 0..7, are exact floats whose top halves are their BF16
// bits, so their high and low bytes make two byte tables of eight entries, and one byte
// permute (PRMT on the device) looks up four elements' bytes at once, each magnitude code
// being its byte's selector (the code's sign bit masked off: PRMT would read bit 3 of a
// selector as "replicate the sign"). The signs go into the high bytes by one multiply per two
// elements: (c & 0x88) * (2^4 + 2^8) puts bit 3 at bit 7 and bit 7 at bit 15; the cross terms
// land on bits 11 and 12 only, outside the mask. About four instructions per element on the
// device against about ten element by element; the same bits (tests: every scale code with
// every 16 bits of codes, on the CPU and on the GPU) for the finite non-negative scales
// 0 .. 0x7e, the only ones a block scale can be (e4m3_rne_satfinite of an amax >= 0).
struct UnscaledBf16Tables {
  std::uint32_t hi[2], lo[2];  // byte m % 4 of hi[m / 4] / lo[m / 4]: the BF16 bits of magnitude m, high / low byte
};
FP4D_HD UnscaledBf16Tables nvfp4_unscaled_bf16_tables(float scale_value) {
  const float s = scale_value;
  const std::uint32_t f[8] = {0u,
                              float_bits(0.5f * s),
                              float_bits(s),
                              float_bits(1.5f * s),
                              float_bits(2.0f * s),
                              float_bits(3.0f * s),
                              float_bits(4.0f * s),
                              float_bits(6.0f * s)};
  UnscaledBf16Tables t{};
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int h = 0; h < 2; ++h) {
    const std::uint32_t* q = f + 4 * h;
    // Byte 3 (high) or 2 (low) of q[0], q[1] into bytes 0, 1; of q[2], q[3] likewise; joined.
    t.hi[h] = byte_perm(byte_perm(q[0], q[1], 0x0073u), byte_perm(q[2], q[3], 0x0073u), 0x5410u);
    t.lo[h] = byte_perm(byte_perm(q[0], q[1], 0x0062u), byte_perm(q[2], q[3], 0x0062u), 0x5410u);
  }
  return t;
}
// The BF16 bits of four elements whose codes are the low 16 bits of c (element k in nibble k),
// as two words: elements 0 and 1 in the first, element 0 in its low half.
struct Bf16x4 {
  std::uint32_t lo, hi;  // elements 0, 1 and 2, 3
};
FP4D_HD Bf16x4 nvfp4_unscaled_bf16x4(const UnscaledBf16Tables& t, std::uint32_t c) {
  const std::uint32_t sel = c & 0x7777u;
  const std::uint32_t signs = ((c & 0x88u) * 0x110u & 0x8080u) | ((c & 0x8800u) * 0x11000u & 0x80800000u);
  const std::uint32_t hi = byte_perm(t.hi[0], t.hi[1], sel) | signs, lo = byte_perm(t.lo[0], t.lo[1], sel);
  return Bf16x4{byte_perm(lo, hi, 0x5140u), byte_perm(lo, hi, 0x7362u)};
}

}  // namespace fp4d
