// The trace of `fp4drift quantize` (schema fp4drift.quantize, docs/trace-format.md): the input
// tensor, one /recipes/P group per preset or custom spec (codes, scales, dequantized values,
// the RHT's output, the spec's attributes and the error statistics) and their run order. The
// only code that knows that layout; `fp4drift gemm --save-tensors` stores its quantized
// operands in the same group layout (write_quantized), so one reader serves both. Written
// whole: OUT.partial, renamed by complete().
#pragma once

#include <string>
#include <vector>

#include "quant/matrix.hpp"
#include "quant/quantized.hpp"
#include "trace/h5.hpp"
#include "trace/output_file.hpp"

namespace fp4d {

// One quantization under group g: attributes describing the spec, codes, scales,
// dequantized (with the input's dims), transformed (RHT), and a "stats" subgroup.
void write_quantized(h5::Group g, const QuantizedTensor& q, const h5::Dims& input_dims);

class QuantizeTrace {
 public:
  // An empty path: no trace (enabled() is false and the calls below do nothing). Otherwise the
  // provenance, `source`, `backend` and /input (with the input's own dims) are written.
  QuantizeTrace(const std::string& path, const std::string& command_line, const std::string& source,
                const std::string& backend, const Matrix& input, const h5::Dims& dims);
  bool enabled() const { return file_.enabled(); }
  // /recipes/<name>; the order attribute is the order of these calls.
  void add(const std::string& name, const QuantizedTensor& q);
  // Status complete, OUT.partial renamed to OUT (nothing without a path).
  void complete() { file_.complete(order_); }

 private:
  OutputFile file_;
  h5::Dims dims_;
  std::vector<std::string> order_;
};

}  // namespace fp4d
