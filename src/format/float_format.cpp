#include "format/float_format.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace fp4d {

namespace {
// 2^e and floor(log2 a) by bit manipulation, exact; libm (ldexp, ilogb) only outside
// double's normal range. Not a matter of results but of speed: these run per rounded value,
// and host code built with -march=x86-64-v3 (VEX) pays SSE/AVX transition stalls on every
// call into glibc's legacy-SSE ldexp/ilogb, which cost some 30 times the rounding itself.
double pow2(int e) {
  if (e < -1022 || e > 1023) return std::ldexp(1.0, e);
  const std::uint64_t b = static_cast<std::uint64_t>(e + 1023) << 52;
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
}
int floor_log2(double a) {  // a finite, > 0
  std::uint64_t b;
  std::memcpy(&b, &a, sizeof b);
  const int biased = static_cast<int>((b >> 52) & 0x7ffu);
  return biased == 0 ? std::ilogb(a) : biased - 1023;
}
}  // namespace

double FloatFormat::largest() const {
  if (max_finite > 0.0) return max_finite;
  return (2.0 - pow2(1 - precision)) * pow2(emax);
}
double FloatFormat::smallest_normal() const { return pow2(emin); }
double FloatFormat::smallest_subnormal() const {
  return subnormals ? pow2(emin - (precision - 1)) : smallest_normal();
}

namespace {
// Spacing of the grid at |x| (x != 0): 2^(max(e, emin) - p + 1).
double quantum(const FloatFormat& f, double abs_x) {
  int e = floor_log2(abs_x);
  if (e < f.emin) e = f.emin;
  return pow2(e - (f.precision - 1));
}

// An infinite input: exact where the format has Inf (and does not saturate), else the
// overflow rule of the format. The same in every rounding mode.
double infinite_input(const FloatFormat& f, double x) {
  if (f.overflow == Overflow::Saturate) return std::copysign(f.largest(), x);
  if (f.has_inf && f.overflow == Overflow::ToInfinity) return x;
  return std::numeric_limits<double>::quiet_NaN();
}

double overflow_value(const FloatFormat& f, double x) {
  const double s = std::signbit(x) ? -1.0 : 1.0;
  switch (f.overflow) {
    case Overflow::Saturate: return s * f.largest();
    case Overflow::ToInfinity: return s * std::numeric_limits<double>::infinity();
    case Overflow::ToNaN:
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

double finish(const FloatFormat& f, double x, double rounded_abs, bool round_to_nearest) {
  if (!f.is_signed && std::signbit(x) && rounded_abs != 0.0) return std::numeric_limits<double>::quiet_NaN();
  if (rounded_abs > f.largest()) {
    // Directed rounding toward zero never overflows to infinity (IEEE 754 section 7.4).
    if (!round_to_nearest) return std::copysign(f.largest(), x);
    return overflow_value(f, x);
  }
  return std::copysign(rounded_abs, x);
}
}  // namespace

double FloatFormat::round_nearest_even(double x) const {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return infinite_input(*this, x);
  const double a = std::fabs(x);
  if (!has_zero && a < smallest_normal()) return finish(*this, x == 0.0 ? 0.0 : x, smallest_normal(), true);
  if (a == 0.0) return x;
  if (!subnormals && a < smallest_normal()) {
    // Flush: nearest of {0, smallest normal}, ties to 0 (its significand is even).
    return finish(*this, x, a > smallest_normal() / 2 ? smallest_normal() : 0.0, true);
  }
  const double q = quantum(*this, a);
  const double r = std::nearbyint(a / q) * q;  // a/q is exact (power-of-two scaling); nearbyint is RNE
  // Overflow threshold: IEEE rounds with unbounded exponent first, then overflows.
  if (r > largest() && overflow == Overflow::Saturate) return std::copysign(largest(), x);
  return finish(*this, x, r, true);
}

double FloatFormat::round_toward_zero(double x) const {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return infinite_input(*this, x);
  const double a = std::fabs(x);
  if (!has_zero && a < smallest_normal()) return finish(*this, x == 0.0 ? 0.0 : x, smallest_normal(), false);
  if (a == 0.0) return x;
  if (!subnormals && a < smallest_normal()) return std::copysign(0.0, x);
  const double q = quantum(*this, a);
  return finish(*this, x, std::trunc(a / q) * q, false);
}

void FloatFormat::neighbours(double a, double* lo, double* hi) const {
  if (a == 0.0) {
    *lo = *hi = has_zero ? 0.0 : smallest_normal();
    return;
  }
  if (!subnormals && a < smallest_normal()) {
    *lo = has_zero ? 0.0 : smallest_normal();
    *hi = smallest_normal();
    return;
  }
  const double q = quantum(*this, a);
  *lo = std::floor(a / q) * q;
  *hi = (*lo == a) ? a : *lo + q;
}

std::vector<double> FloatFormat::nonnegative_values() const {
  std::vector<double> v;
  if (has_zero) v.push_back(0.0);
  if (subnormals)
    for (int m = 1; m < (1 << (precision - 1)); ++m) v.push_back(std::ldexp(m, emin - (precision - 1)));
  for (int e = emin; e <= emax; ++e)
    for (int m = 0; m < (1 << (precision - 1)); ++m) {
      const double x = std::ldexp(1.0 + std::ldexp(m, 1 - precision), e);
      if (x > largest()) return v;
      v.push_back(x);
    }
  return v;
}

namespace {
FloatFormat make(std::string name, int p, int emin, int emax, bool sub, bool inf, bool nan, bool sign, Overflow o,
                 double maxf = 0.0) {
  FloatFormat f;
  f.name = std::move(name);
  f.precision = p;
  f.emin = emin;
  f.emax = emax;
  f.subnormals = sub;
  f.has_inf = inf;
  f.has_nan = nan;
  f.is_signed = sign;
  f.overflow = o;
  f.max_finite = maxf;
  return f;
}
}  // namespace

const FloatFormat& format_e2m1() {
  static const FloatFormat f = make("e2m1", 2, 0, 2, true, false, false, true, Overflow::Saturate);
  return f;
}
const FloatFormat& format_e4m3() {
  static const FloatFormat f = make("e4m3", 4, -6, 8, true, false, true, true, Overflow::Saturate, 448.0);
  return f;
}
const FloatFormat& format_e5m2() {
  static const FloatFormat f = make("e5m2", 3, -14, 15, true, true, true, true, Overflow::Saturate);
  return f;
}
const FloatFormat& format_ue8m0() {
  // 2^-127 .. 2^127 and no zero: the code is a biased exponent (0xFF is NaN).
  static const FloatFormat f = [] {
    FloatFormat g = make("ue8m0", 1, -127, 127, false, false, true, false, Overflow::Saturate);
    g.has_zero = false;
    return g;
  }();
  return f;
}
const FloatFormat& format_bf16() {
  static const FloatFormat f = make("bf16", 8, -126, 127, true, true, true, true, Overflow::ToInfinity);
  return f;
}
const FloatFormat& format_fp16() {
  static const FloatFormat f = make("fp16", 11, -14, 15, true, true, true, true, Overflow::ToInfinity);
  return f;
}
const FloatFormat& format_fp32() {
  static const FloatFormat f = make("fp32", 24, -126, 127, true, true, true, true, Overflow::ToInfinity);
  return f;
}

const FloatFormat& format_by_name(std::string_view name) {
  for (const FloatFormat* f : {&format_e2m1(), &format_e4m3(), &format_e5m2(), &format_ue8m0(), &format_bf16(),
                               &format_fp16(), &format_fp32()})
    if (f->name == name) return *f;
  throw std::invalid_argument("unknown format '" + std::string(name) +
                              "' (known: e2m1, e4m3, e5m2, ue8m0, bf16, fp16, fp32)");
}

}  // namespace fp4d
