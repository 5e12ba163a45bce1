// A generic binary floating-point format in the style of CPFloat: precision p (significand
// bits, the implicit bit included), exponent range [emin, emax], subnormals on or off,
// Inf/NaN behaviour and what happens on overflow. Rounding here works in double, which is
// exact for every format with p <= 53 and a range inside double's: it is the slow, obviously
// correct definition that the bit-level fast paths (e2m1.hpp, fp8.hpp, bf16.hpp) are tested
// against, and the way to study formats fp4drift has no fast path for.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fp4d {

enum class Overflow { Saturate, ToInfinity, ToNaN };

struct FloatFormat {
  std::string name;
  int precision = 24;        // significand bits including the implicit one
  int emin = -126;           // exponent of the smallest normal number
  int emax = 127;            // exponent of the largest finite binade
  bool subnormals = true;
  bool has_inf = true;
  bool has_nan = true;
  bool is_signed = true;
  bool has_zero = true;      // false for UE8M0: values below the smallest one round to it
  Overflow overflow = Overflow::ToInfinity;
  double max_finite = 0.0;   // 0: (2 - 2^(1-p)) * 2^emax; set when the top codes are NaN (E4M3)

  double largest() const;
  double smallest_normal() const;
  double smallest_subnormal() const;
  // Round x to this format. mode: NearestEven or TowardZero (see rounding.hpp).
  // Infinite inputs give Inf where the format has it and does not saturate, else the largest
  // finite value (Saturate) or NaN (ToNaN), in both modes: an infinite input is exact, the
  // IEEE 754 overflow rules (RZ never overflows to Inf) are about finite inputs. Without a
  // zero (UE8M0) values below the smallest one, 0 included, round to the smallest.
  double round_nearest_even(double x) const;
  double round_toward_zero(double x) const;
  // The two neighbours lo <= |x| <= hi in the format's magnitude grid (finite |x| <= largest;
  // without zero, |x| below the smallest value gives lo = hi = smallest).
  void neighbours(double abs_x, double* lo, double* hi) const;
  // Every non-negative finite value of the format, ascending (for small formats: tests,
  // exhaustive sweeps, tables). Starts with 0 unless the format has no zero (UE8M0).
  std::vector<double> nonnegative_values() const;
};

// The named formats of nvfp4-spec.md section 1. Conversions into them saturate (as CUDA's
// __NV_SATFINITE) except where noted: BF16/FP16/FP32 follow IEEE overflow to infinity.
const FloatFormat& format_e2m1();
const FloatFormat& format_e4m3();
const FloatFormat& format_e5m2();
const FloatFormat& format_ue8m0();
const FloatFormat& format_bf16();
const FloatFormat& format_fp16();
const FloatFormat& format_fp32();
// Lookup by name ("e2m1", "e4m3", "e5m2", "ue8m0", "bf16", "fp16", "fp32");
// throws std::invalid_argument naming the known formats.
const FloatFormat& format_by_name(std::string_view name);

}  // namespace fp4d
