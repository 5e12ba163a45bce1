#include "trace/tensor_io.hpp"

#include <stdexcept>

#include "util/checked_size.hpp"

namespace fp4d {

TensorSource parse_tensor_source(const std::string& s) {
  const auto pos = s.rfind(":/");
  if (pos == std::string::npos || pos == 0 || pos + 2 > s.size())
    throw std::invalid_argument("input '" + s + "' is not of the form FILE.h5:/dataset");
  return TensorSource{s.substr(0, pos), s.substr(pos + 1)};
}

namespace {

h5::Dataset open_input(const h5::File& f, const TensorSource& src) {
  const h5::Group root = f.root();
  if (!root.is_dataset(src.dataset))
    throw std::invalid_argument("dataset '" + src.dataset + "' not found in '" + src.file + "'");
  return root.open_dataset(src.dataset);
}

MatrixShape checked_shape(const h5::Dataset& d, const TensorSource& src) {
  const h5::DatasetInfo info = d.info();
  if (info.type_class != h5::TypeClass::Float)
    throw std::invalid_argument("dataset '" + src.text() + "' is " + info.type_name +
                                ", expected float32 or float64");
  if (info.dims.size() != 1 && info.dims.size() != 2)
    throw std::invalid_argument("dataset '" + src.text() + "' has rank " + std::to_string(info.dims.size()) +
                                ", expected a 1-D or 2-D tensor");
  const std::string what = "dataset '" + src.text() + "'";
  for (const std::uint64_t d : info.dims) {
    if (d == 0) throw std::invalid_argument(what + " is empty");
    // A single dim over the limit would turn negative as int64 below; the product's
    // message is the same either way.
    if (d > static_cast<std::uint64_t>(kMaxTensorElements))
      throw SizeError(what + " declares dims " + std::to_string(info.dims.front()) +
                      (info.dims.size() == 2 ? " x " + std::to_string(info.dims.back()) : std::string()) +
                      ", over the limit of " + kMaxTensorElementsText + " elements per tensor");
  }
  MatrixShape s;
  s.dims = info.dims;
  s.rows = info.dims.size() == 1 ? 1 : static_cast<std::int64_t>(info.dims[0]);
  s.cols = static_cast<std::int64_t>(info.dims.back());
  (void)checked_elements(s.rows, s.cols, what);
  return s;
}

}  // namespace

MatrixShape inspect_matrix(const TensorSource& src) {
  h5::File f = h5::File::open_read(src.file);
  return checked_shape(open_input(f, src), src);
}

Matrix read_matrix(const TensorSource& src, h5::Dims* dims_out) {
  h5::File f = h5::File::open_read(src.file);
  const h5::Dataset d = open_input(f, src);
  const MatrixShape shape = checked_shape(d, src);
  h5::Dims dims;
  Matrix m;
  m.data = d.read<float>(&dims);  // float64 is rounded to float32 (RNE) by HDF5
  m.rows = shape.rows;
  m.cols = shape.cols;
  if (dims_out) *dims_out = dims;
  return m;
}

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

}  // namespace fp4d
