// MXFP4 scale arithmetic (nvfp4-spec.md section 5), shared by the CPU and CUDA backends.
// Block of 32 along the block axis, UE8M0 scale X = 2^e, elements E2M1(x / X).
#pragma once

#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "format/hd.hpp"
#include "quant/spec.hpp"

namespace fp4d {

constexpr int kMxfp4Block = 32;

// floor(log2 |a|) for a finite a > 0, subnormals included (exact, from the bits).
FP4D_HD int floor_log2_f32(float a) {
  const std::uint32_t u = float_bits(a) & 0x7fffffffu;
  const int e = static_cast<int>(u >> 23);
  if (e != 0) return e - 127;
  int lead = 22;  // subnormal: position of the leading mantissa bit
  while (lead > 0 && !((u >> lead) & 1u)) --lead;
  return lead - 149;
}
FP4D_HD bool is_pow2_f32(float a) {
  const std::uint32_t u = float_bits(a) & 0x7fffffffu;
  if ((u >> 23) != 0) return (u & 0x7fffffu) == 0;
  return u != 0 && (u & (u - 1u)) == 0;
}

// The UE8M0 exponent e of the block scale for block amax a (finite, >= 0).
FP4D_HD int mxfp4_scale_exponent(float a, MxScaleRule rule) {
  if (a == 0.0f) return kUe8m0MinExp;  // all-zero block: any scale; the smallest is canonical
  if (!is_finite_f32(a)) return kUe8m0MaxExp;
  const int k = floor_log2_f32(a);  // a in [2^k, 2^(k+1))
  int e;
  switch (rule) {
    case MxScaleRule::Floor:  // OCP: floor(log2 a) - emax(E2M1) = k - 2
      e = k - 2;
      break;
    case MxScaleRule::Ceil: {
      // smallest e with 6 * 2^e >= a. 6 * 2^(k-2) = 1.5 * 2^k: compare the significand of a
      // (its bits after the leading one, left-aligned to 23 bits) with 1.5 = 0x400000.
      const std::uint32_t u = float_bits(a) & 0x7fffffu;
      const std::uint32_t frac = (float_bits(a) >> 23) != 0 ? u : ((u << (-126 - k)) & 0x7fffffu);
      e = (frac <= 0x400000u) ? k - 2 : k - 1;
      break;
    }
    case MxScaleRule::Rceil:
    default: {
      const float q = a * (1.0f / 6.0f);  // one float32 rounding, then round the exponent up
      if (q == 0.0f) return kUe8m0MinExp;
      const int kq = floor_log2_f32(q);
      e = is_pow2_f32(q) ? kq : kq + 1;
      break;
    }
  }
  return e < kUe8m0MinExp ? kUe8m0MinExp : (e > kUe8m0MaxExp ? kUe8m0MaxExp : e);
}

}  // namespace fp4d
