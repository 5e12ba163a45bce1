#include "quant/cast.hpp"

#include <cmath>

#include "format/bf16.hpp"
#include "format/float_format.hpp"

namespace fp4d {

std::uint16_t fp16_bits_from_float(float x) {
  const double v = format_fp16().round_nearest_even(static_cast<double>(x));
  const std::uint16_t sign = std::signbit(v) ? 0x8000u : 0u;
  const double a = std::fabs(v);
  if (std::isnan(v)) return static_cast<std::uint16_t>(sign | 0x7e00u);
  if (std::isinf(v)) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a < std::ldexp(1.0, -14))  // subnormal or zero: integer multiple of 2^-24
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(a * std::ldexp(1.0, 24)));
  const int e = std::ilogb(a);
  const auto m = static_cast<std::uint16_t>((a / std::ldexp(1.0, e) - 1.0) * 1024.0);
  return static_cast<std::uint16_t>(sign | ((e + 15) << 10) | m);
}

float fp16_bits_to_float(std::uint16_t b) {
  const double sign = (b & 0x8000u) ? -1.0 : 1.0;
  const int e = (b >> 10) & 0x1f, m = b & 0x3ff;
  if (e == 0x1f) return m ? std::nanf("") : static_cast<float>(sign * HUGE_VAL);
  if (e == 0) return static_cast<float>(sign * std::ldexp(m, -24));
  return static_cast<float>(sign * std::ldexp(1024 + m, e - 25));
}

void prepare_cast_output(const Matrix& x, QuantizedTensor& out) {
  out.rows = x.rows;
  out.cols = x.cols;
  out.padded_cols = x.cols;
  out.scale_rows = out.scale_cols = 0;
  out.codes.clear();
  out.scale_codes.clear();
  out.scale_values.clear();
  out.codes16.assign(static_cast<std::size_t>(x.size()), 0);
  out.dequantized = Matrix(x.rows, x.cols);
  out.global = GlobalScale{};
}

void cast_quantize_cpu(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out) {
  prepare_cast_output(x, out);
  const bool bf16 = spec.element == ElementFormat::BF16;
  std::int64_t clipped = 0;
#pragma omp parallel for schedule(static) reduction(+ : clipped)
  for (std::int64_t i = 0; i < x.size(); ++i) {
    const float v = x.data[static_cast<std::size_t>(i)];
    const std::uint16_t b = bf16 ? bf16_rne_bits(v) : fp16_bits_from_float(v);
    out.codes16[static_cast<std::size_t>(i)] = b;
    const float d = bf16 ? bf16_to_float(b) : fp16_bits_to_float(b);
    out.dequantized.data[static_cast<std::size_t>(i)] = d;
    clipped += std::isfinite(v) && std::isinf(d);  // overflow to infinity
  }
  out.clipped = clipped;
}

}  // namespace fp4d
