#include "format/float_format.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace fp4d {

double FloatFormat::largest() const {
  if (max_finite > 0.0) return max_finite;
  return std::ldexp(2.0 - std::ldexp(1.0, 1 - precision), emax);
}
double FloatFormat::smallest_normal() const { return std::ldexp(1.0, emin); }
double FloatFormat::smallest_subnormal() const {
  return subnormals ? std::ldexp(1.0, emin - (precision - 1)) : smallest_normal();
}

namespace {
// Spacing of the grid at |x| (x != 0): 2^(max(e, emin) - p + 1).
double quantum(const FloatFormat& f, double abs_x) {
  int e = std::ilogb(abs_x);
  if (e < f.emin) e = f.emin;
  return std::ldexp(1.0, e - (f.precision - 1));
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
  if (std::isinf(x)) return (overflow == Overflow::Saturate) ? std::copysign(largest(), x) : overflow_value(*this, x);
  const double a = std::fabs(x);
  if (a == 0.0) return x;
  if (!subnormals && a < smallest_normal()) {
    // Flush: nearest of {0, smallest normal}, ties to 0 (its significand is even).
    return std::copysign(a > smallest_normal() / 2 ? smallest_normal() : 0.0, x);
  }
  const double q = quantum(*this, a);
  const double r = std::nearbyint(a / q) * q;  // a/q is exact (power-of-two scaling); nearbyint is RNE
  // Overflow threshold: IEEE rounds with unbounded exponent first, then overflows.
  if (r > largest() && overflow == Overflow::Saturate) return std::copysign(largest(), x);
  return finish(*this, x, r, true);
}

double FloatFormat::round_toward_zero(double x) const {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return std::copysign(largest(), x);
  const double a = std::fabs(x);
  if (a == 0.0) return x;
  if (!subnormals && a < smallest_normal()) return std::copysign(0.0, x);
  const double q = quantum(*this, a);
  return finish(*this, x, std::trunc(a / q) * q, false);
}

void FloatFormat::neighbours(double a, double* lo, double* hi) const {
  if (a == 0.0) {
    *lo = *hi = 0.0;
    return;
  }
  if (!subnormals && a < smallest_normal()) {
    *lo = 0.0;
    *hi = smallest_normal();
    return;
  }
  const double q = quantum(*this, a);
  *lo = std::floor(a / q) * q;
  *hi = (*lo == a) ? a : *lo + q;
}

std::vector<double> FloatFormat::nonnegative_values() const {
  std::vector<double> v{0.0};
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
  static const FloatFormat f = make("ue8m0", 1, -127, 127, false, false, true, false, Overflow::Saturate);
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
