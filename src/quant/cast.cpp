#include "quant/cast.hpp"

#include <cmath>

#include "format/bf16.hpp"
#include "format/fp16.hpp"
#include "util/parallel_worth.hpp"

namespace fp4d {

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
#pragma omp parallel for schedule(static) reduction(+ : clipped) if (parallel_worth(x.size()))
  for (std::int64_t i = 0; i < x.size(); ++i) {
    const float v = x.data[static_cast<std::size_t>(i)];
    const std::uint16_t b = bf16 ? bf16_rne_bits(v) : fp16_rne_bits(v);
    out.codes16[static_cast<std::size_t>(i)] = b;
    const float d = bf16 ? bf16_to_float(b) : fp16_to_float(b);
    out.dequantized.data[static_cast<std::size_t>(i)] = d;
    clipped += std::isfinite(v) && std::isinf(d);  // overflow to infinity
  }
  out.clipped = clipped;
}

}  // namespace fp4d
