// exp, log, log1p and erf that give the same bits on the host and on the GPU.
//
// glibc's and CUDA's libm are each accurate to an ulp or two but not equal, so a CPU run and a
// GPU run that call them drift apart at the first GELU, softmax or softplus even when every
// GEMM and quantizer agrees bit for bit. These are written with IEEE-754 double additions,
// multiplications and divisions only (correctly rounded on both sides; the host compiles with
// -ffp-contract=off and nvcc with --fmad=false, so neither fuses them), integer conversions and
// bit manipulation: the same source gives the same bits everywhere. The float versions
// evaluate in double and round once, so they are correctly rounded except where the double
// result lies within its own error of a float rounding boundary.
//
// Formulas (textbook; no code taken from a library):
//   exp:   x = k ln2 + r with k = round(x / ln2) and ln2 split in two (Cody and Waite, the high
//          part with trailing zeros so k ln2_hi is exact), |r| <= ln2 / 2; exp(r) by its Taylor
//          series to degree 13 (remainder below 2^-57) in Horner form; times 2^k.
//   log:   x = 2^e (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)); s = f / (2 + f) and
//          log(1 + f) = 2 atanh(s) = f - (f^2/2 - s (f^2/2 + R)), R = sum_{n>=1} 2 s^(2n) / (2n + 1)
//          (the identity 2s = f - s f keeps the leading terms exact-ish); plus e ln2.
//   log1p: u = 1 + x; log(u) x / (u - 1), which cancels the rounding of 1 + x to first order
//          (Goldberg, "What every computer scientist should know about floating-point
//          arithmetic", 1991, theorem 4).
//   erf:   erf(x) = (2 / sqrt(pi)) exp(-x^2) sum_{n>=0} 2^n x^(2n+1) / (1 3 5 ... (2n+1))
//          (Abramowitz and Stegun 7.1.6): positive terms, no cancellation; x^2 is exact in
//          double for a float x. Used for |x| < 4, beyond which erf rounds to +-1 in float.
#pragma once

#include <cstdint>

#include "format/hd.hpp"

namespace fp4d::pmath {

FP4D_HD bool is_nan(double x) { return (double_bits(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }

// 2^k for a normal power (-1022 <= k <= 1023).
FP4D_HD double pow2(int k) { return bits_double(static_cast<std::uint64_t>(k + 1023) << 52); }

constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2 with its low 32 bits zero: k ln2_hi exact for |k| < 2^20
constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi
constexpr double kLog2e = 1.44269504088896338700e+00;

// e^x.
FP4D_HD double exp(double x) {
  if (is_nan(x)) return x;
  if (x > 709.782712893384) return bits_double(0x7ff0000000000000ull);  // past DBL_MAX
  if (x < -745.1332191019412) return 0.0;                                // below half the least subnormal
  const double t = x * kLog2e;
  const int k = static_cast<int>(t >= 0.0 ? t + 0.5 : t - 0.5);  // round half away from zero
  const double kd = static_cast<double>(k);
  const double r = (x - kd * kLn2Hi) - kd * kLn2Lo;
  // 1/n! for n = 13 down to 2.
  double p = 1.6059043836821614599e-10;
  p = p * r + 2.0876756987868098979e-09;
  p = p * r + 2.5052108385441718775e-08;
  p = p * r + 2.7557319223985890653e-07;
  p = p * r + 2.7557319223985890653e-06;
  p = p * r + 2.4801587301587301587e-05;
  p = p * r + 1.9841269841269841270e-04;
  p = p * r + 1.3888888888888888889e-03;
  p = p * r + 8.3333333333333333333e-03;
  p = p * r + 4.1666666666666666667e-02;
  p = p * r + 1.6666666666666666667e-01;
  p = p * r + 0.5;
  const double er = 1.0 + (r + (r * r) * p);  // 1 + r + r^2 (1/2 + r/6 + ...)
  if (k >= -1021 && k <= 1023) return er * pow2(k);
  // Near the ends of the range: scale in two steps, so that only the last multiplication
  // rounds (into the subnormals) or overflows.
  return k > 0 ? (er * pow2(k - 2)) * 4.0 : (er * pow2(k + 60)) * pow2(-60);
}

// log x (x < 0: NaN, x = 0: -inf, +inf: +inf).
FP4D_HD double log(double x) {
  if (is_nan(x)) return x;
  if (x < 0.0) return bits_double(0x7ff8000000000000ull);
  if (x == 0.0) return bits_double(0xfff0000000000000ull);
  if (double_bits(x) == 0x7ff0000000000000ull) return x;
  int e = 0;
  if (x < 2.2250738585072014e-308) {  // subnormal: scale to normal first (exact)
    x = x * 18014398509481984.0;      // 2^54
    e = -54;
  }
  const std::uint64_t b = double_bits(x);
  e += static_cast<int>((b >> 52) & 0x7ff) - 1023;
  double m = bits_double((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull);  // in [1, 2)
  if (m > 1.4142135623730951) {
    m = m * 0.5;
    ++e;
  }
  const double f = m - 1.0;  // exact (Sterbenz)
  const double s = f / (2.0 + f);
  const double z = s * s;
  // R / z = sum_{n>=1} 2 z^(n-1) / (2n + 1), to n = 11 (z <= 0.0295: the rest is below 2^-56 of R).
  double q = 2.0 / 23.0;
  q = q * z + 2.0 / 21.0;
  q = q * z + 2.0 / 19.0;
  q = q * z + 2.0 / 17.0;
  q = q * z + 2.0 / 15.0;
  q = q * z + 2.0 / 13.0;
  q = q * z + 2.0 / 11.0;
  q = q * z + 2.0 / 9.0;
  q = q * z + 2.0 / 7.0;
  q = q * z + 2.0 / 5.0;
  q = q * z + 2.0 / 3.0;
  const double R = z * q;
  const double hfsq = 0.5 * (f * f);
  const double ed = static_cast<double>(e);
  return ed * kLn2Hi + (f - (hfsq - (s * (hfsq + R) + ed * kLn2Lo)));
}

// log(1 + x).
FP4D_HD double log1p(double x) {
  if (is_nan(x)) return x;
  const double u = 1.0 + x;
  if (u == 1.0) return x;  // |x| below half an ulp of 1: log1p(x) = x to double precision
  if (double_bits(u) == 0x7ff0000000000000ull) return u;
  return log(u) * (x / (u - 1.0));
}

// erf x (+-inf: +-1).
FP4D_HD double erf(double x) {
  if (is_nan(x)) return x;
  const double ax = x < 0.0 ? -x : x;
  if (ax >= 6.0) return x < 0.0 ? -1.0 : 1.0;  // 1 - erf(6) < 2^-55
  const double x2 = x * x;
  double term = x, sum = x;
  // term_n = term_{n-1} (2 x^2) (1 / (2n + 1)); stop when a term no longer changes the sum. The
  // reciprocal does not depend on the previous term, so its division overlaps the chain of
  // multiplications instead of lengthening it (three times faster than dividing the term; the
  // extra rounding per term costs a few units of 2^-53 in the result).
  const double two_x2 = 2.0 * x2;
  for (int n = 1; n < 400; ++n) {
    term = term * (two_x2 * (1.0 / static_cast<double>(2 * n + 1)));
    const double next = sum + term;
    if (next == sum) break;
    sum = next;
  }
  return 1.1283791670955125739 * (exp(-x2) * sum);  // 2 / sqrt(pi)
}

FP4D_HD float expf(float x) { return static_cast<float>(exp(static_cast<double>(x))); }
FP4D_HD float logf(float x) { return static_cast<float>(log(static_cast<double>(x))); }
FP4D_HD float log1pf(float x) { return static_cast<float>(log1p(static_cast<double>(x))); }
FP4D_HD float erff(float x) { return static_cast<float>(erf(static_cast<double>(x))); }

}  // namespace fp4d::pmath
