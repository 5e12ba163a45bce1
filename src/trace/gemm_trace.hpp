// The trace of `fp4drift gemm` (schema fp4drift.gemm, docs/trace-format.md): the role, sizes
// and operand sources on the root, the float reference's report, one /recipes/R group per
// recipe (its error statistics and computed product) and, with --save-tensors, the operands,
// the exact products and the quantized operands (in trace/quantize_trace.hpp's recipe layout).
// The only code that knows that layout. Written whole: OUT.partial, renamed by complete().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/gemm_experiment.hpp"
#include "trace/output_file.hpp"

namespace fp4d {

struct GemmTraceHeader {
  std::string role;  // fprop | dgrad | wgrad
  std::int64_t m = 0, n = 0, k = 0;
  std::string backend;
  std::string first_source, second_source;  // FILE.h5:/dataset or generator:...
};

class GemmTrace {
 public:
  // An empty path: no trace (enabled() is false and the calls below do nothing).
  // save_tensors: add() also stores the operands, the exact products and the quantized operands.
  GemmTrace(const std::string& path, const std::string& command_line, const GemmOperands& ops,
            const GemmTraceHeader& header, bool save_tensors);
  bool enabled() const { return file_.enabled(); }
  // The unquantized product in a floating-point precision (--reference-precision): its largest
  // relative difference to the exact product, and its certification (digits over `elements`).
  void set_float_reference(const std::string& precision, double max_rel_vs_exact, double certified_digits,
                           std::int64_t certified_elements);
  // /recipes/<r.recipe>, with `description`; the recipes' order is the order of these calls.
  // The first call with save_tensors also writes the operands and their exact product.
  void add(const GemmResult& r, const std::string& description);
  // Status complete, OUT.partial renamed to OUT (nothing without a path).
  void complete() { file_.complete(order_); }

 private:
  void write_operands(const GemmResult& r);
  OutputFile file_;
  const GemmOperands& ops_;  // the caller's, alive as long as this trace
  bool save_tensors_ = false, operands_written_ = false;
  std::vector<std::string> order_;
};

}  // namespace fp4d
