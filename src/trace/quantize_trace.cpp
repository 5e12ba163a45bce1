#include "trace/quantize_trace.hpp"

#include <cstdint>

#include "quant/spec.hpp"

namespace fp4d {

void write_quantized(h5::Group g, const QuantizedTensor& q, const h5::Dims& input_dims) {
  const QuantSpec& s = q.spec;
  g.set_attr("format", format_string(s));
  g.set_attr("element", to_string(s.element));
  g.set_attr("layout", layout_string(s));
  g.set_attr("axis", static_cast<std::int64_t>(s.axis));
  g.set_attr("rounding", to_string(s.rounding.mode));
  g.set_attr("sr_bits", static_cast<std::int64_t>(s.rounding.sr_bits));
  g.set_attr("seed", static_cast<std::uint64_t>(s.rounding.rng.seed));
  g.set_attr("stream", static_cast<std::uint64_t>(s.rounding.rng.stream));
  g.set_attr("scale_rule", scale_rule_string(s));
  g.set_attr("rht_size", static_cast<std::int64_t>(s.rht.size));
  g.set_attr("rht_signs", to_string(s.rht.signs));
  g.set_attr("rht_axis", static_cast<std::int64_t>(s.rht_axis));
  g.set_attr("rht_bf16", s.rht.bf16_output);
  g.set_attr("transposed", s.stored_transposed());
  g.set_attr("global_encode_scale", q.global.encode);
  g.set_attr("global_decode_scale", q.global.decode);

  const auto R = static_cast<std::uint64_t>(q.rows);
  if (s.scheme == Scheme::Nvfp4 || s.scheme == Scheme::Mxfp4) {
    g.write("codes", q.codes, h5::Dims{R, static_cast<std::uint64_t>(q.padded_cols / 2)});
    g.write("scales", q.scale_codes,
            h5::Dims{static_cast<std::uint64_t>(q.scale_rows), static_cast<std::uint64_t>(q.scale_cols)});
  } else if (s.scheme == Scheme::Fp8) {
    g.write("codes", q.codes, h5::Dims{R, static_cast<std::uint64_t>(q.padded_cols)});
    g.write("scales", q.scale_values,
            h5::Dims{static_cast<std::uint64_t>(q.scale_rows), static_cast<std::uint64_t>(q.scale_cols)});
  } else {
    g.write("codes", q.codes16, h5::Dims{R, static_cast<std::uint64_t>(q.cols)});
  }
  g.write("dequantized", q.dequantized.data, input_dims);
  if (s.rht.enabled()) g.write("transformed", q.transformed.data, input_dims);

  h5::Group st = g.create_group("stats");
  const QuantStats& t = q.stats;
  st.set_attr("elements", static_cast<std::int64_t>(t.elements));
  st.set_attr("nonfinite", static_cast<std::int64_t>(t.nonfinite));
  st.set_attr("nmse", t.nmse);
  st.set_attr("bias", t.bias);
  st.set_attr("relative_bias", t.relative_bias);
  st.set_attr("max_abs_error", t.max_abs_error);
  st.set_attr("clipped_fraction", t.clipped_fraction);
  st.set_attr("underflow_fraction", t.underflow_fraction);
  st.set_attr("blocks", static_cast<std::int64_t>(t.blocks));
  st.set_attr("zero_scale_blocks", static_cast<std::int64_t>(t.zero_scale_blocks));
  st.set_attr("subnormal_scale_blocks", static_cast<std::int64_t>(t.subnormal_scale_blocks));
}

QuantizeTrace::QuantizeTrace(const std::string& path, const std::string& command_line, const std::string& source,
                             const std::string& backend, const Matrix& input, const h5::Dims& dims)
    : file_(path, "fp4drift.quantize", 1, command_line), dims_(dims) {
  if (!enabled()) return;
  h5::Group root = file_.root();
  root.set_attr("source", source);
  root.set_attr("backend", backend);
  root.write("input", input.data, dims);
}

void QuantizeTrace::add(const std::string& name, const QuantizedTensor& q) {
  order_.push_back(name);
  if (enabled()) write_quantized(file_.root().require_group("recipes").create_group(name), q, dims_);
}

}  // namespace fp4d
