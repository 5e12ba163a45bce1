#include "quant/quantize.hpp"

#include <cmath>
#include <stdexcept>

#include "quant/cast.hpp"
#include "quant/fp8_scaled.hpp"
#include "quant/mxfp4.hpp"
#include "quant/nvfp4.hpp"
#include "quant/rht.hpp"
#include "quant/stats.hpp"

namespace fp4d {

bool all_finite(const Matrix& m, std::int64_t* first_bad) {
  for (std::int64_t i = 0; i < m.size(); ++i)
    if (!std::isfinite(m.data[static_cast<std::size_t>(i)])) {
      if (first_bad) *first_bad = i;
      return false;
    }
  return true;
}

namespace {
void nvfp4_cpu_kernel(const Matrix& x, const QuantSpec& s, QuantizedTensor& q, bool d) { nvfp4_quantize_cpu(x, s, q, d); }
void mxfp4_cpu_kernel(const Matrix& x, const QuantSpec& s, QuantizedTensor& q, bool d) { mxfp4_quantize_cpu(x, s, q, d); }
void fp8_cpu_kernel(const Matrix& x, const QuantSpec& s, QuantizedTensor& q, bool d) { fp8_quantize_cpu(x, s, q, d); }
void cast_cpu_kernel(const Matrix& x, const QuantSpec& s, QuantizedTensor& q, bool) { cast_quantize_cpu(x, s, q); }

}  // namespace

QuantizedTensor quantize_cpu(const Matrix& input, const QuantSpec& spec) {
  return quantize_with_kernels(input, spec, QuantizeKernels{nvfp4_cpu_kernel, mxfp4_cpu_kernel, fp8_cpu_kernel, cast_cpu_kernel},
                               "cpu");
}

QuantizedTensor quantize_with_kernels(const Matrix& input, const QuantSpec& spec, const QuantizeKernels& kernels,
                                      const char* backend_name) {
  validate(spec);
  QuantizeKernelFn kernel = nullptr;
  switch (spec.scheme) {
    case Scheme::Nvfp4: kernel = kernels.nvfp4; break;
    case Scheme::Mxfp4: kernel = kernels.mxfp4; break;
    case Scheme::Fp8: kernel = kernels.fp8; break;
    case Scheme::Cast: kernel = kernels.cast; break;
  }
  if (!kernel)
    throw std::invalid_argument(format_string(spec) + " has no " + backend_name + " kernel (" + to_string(spec.scheme) +
                                " does not run on that backend)");
  QuantizedTensor q;
  q.spec = spec;
  q.input_rows = input.rows;
  q.input_cols = input.cols;
  if (spec.rht.enabled()) q.transformed = apply_rht(input, spec.rht, spec.rht_axis);
  const Matrix& source = spec.rht.enabled() ? q.transformed : input;
  const bool transposed = spec.stored_transposed();
  Matrix stored_copy;
  if (transposed) stored_copy = transpose(source);
  const Matrix& stored = transposed ? stored_copy : source;

  kernel(stored, spec, q, true);
  if (transposed) q.dequantized = transpose(q.dequantized);

  if (spec.rht.enabled()) {
    const std::vector<double> exact = apply_rht_double(input, spec.rht, spec.rht_axis);
    q.stats = compute_stats([&](std::int64_t i) { return exact[static_cast<std::size_t>(i)]; }, q);
  } else {
    q.stats = compute_stats([&](std::int64_t i) { return static_cast<double>(input.data[static_cast<std::size_t>(i)]); }, q);
  }
  return q;
}

std::uint8_t QuantizedTensor::code_at(std::int64_t r, std::int64_t c) const {
  if (spec.scheme == Scheme::Nvfp4 || spec.scheme == Scheme::Mxfp4) {
    const std::uint8_t byte = codes[static_cast<std::size_t>((r * padded_cols + c) / 2)];
    return (c & 1) ? static_cast<std::uint8_t>(byte >> 4) : static_cast<std::uint8_t>(byte & 0x0f);
  }
  return codes[static_cast<std::size_t>(r * padded_cols + c)];
}

}  // namespace fp4d
