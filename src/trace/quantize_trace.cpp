#include "trace/quantize_trace.hpp"

#include <cmath>
#include <cstdint>

#include "quant/spec.hpp"
#include "trace/dims.hpp"

namespace fp4d {

namespace {

std::vector<double> ratios(const std::vector<double>& err2, const std::vector<double>& ref2) {
  std::vector<double> v(err2.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = ref2[i] > 0 ? err2[i] / ref2[i] : (err2[i] > 0 ? INFINITY : NAN);
  return v;
}

// The per-channel, per-row and per-block statistics under the recipe's stats group, each
// dataset labelled by coordinates kept in that group (channel, row; block_row, block_col of
// the scale grid), so that one recipe's group is readable on its own (xarray.open_dataset
// with group=".../stats").
void write_channel_stats(h5::Group st, const QuantizedTensor& q) {
  const ChannelStats& c = q.channels;
  const h5::Dataset channel = dims::index(st, "channel", c.channel_err2.size(), "input column (feature)");
  const h5::Dataset row = dims::index(st, "row", c.row_err2.size(), "input row (token)");
  const auto vector = [&](const std::string& name, const std::vector<double>& v, const h5::Dataset& axis) {
    st.write(name, v);
    dims::name_axes(st.open_dataset(name), {axis}, "1");
  };
  st.set_attr("nmse_original_basis", c.nmse_original_basis);
  vector("channel_nmse", ratios(c.channel_err2, c.channel_ref2), channel);
  vector("row_nmse", ratios(c.row_err2, c.row_ref2), row);
  if (!c.channel_err2_transformed.empty()) {
    vector("channel_nmse_transformed", ratios(c.channel_err2_transformed, c.channel_ref2_transformed), channel);
    vector("row_nmse_transformed", ratios(c.row_err2_transformed, c.row_ref2_transformed), row);
  }
  if (!c.block_nmse.empty()) {
    const h5::Dataset br = dims::index(st, "block_row", static_cast<std::uint64_t>(q.scale_rows),
                                       "row of the scale grid (stored orientation)");
    const h5::Dataset bc = dims::index(st, "block_col", static_cast<std::uint64_t>(q.scale_cols),
                                       "column of the scale grid (stored orientation)");
    st.write("block_nmse", c.block_nmse,
             h5::Dims{static_cast<std::uint64_t>(q.scale_rows), static_cast<std::uint64_t>(q.scale_cols)});
    dims::name_axes(st.open_dataset("block_nmse"), {br, bc}, "1");
    st.set_attr("blocks_with_energy", c.blocks_with_energy);
    st.set_attr("block_nmse_p50", c.block_nmse_p50);
    st.set_attr("block_nmse_p90", c.block_nmse_p90);
    st.set_attr("block_nmse_p99", c.block_nmse_p99);
    st.set_attr("block_nmse_max", c.block_nmse_max);
    st.set_attr("worst_blocks", c.worst_blocks);
    st.set_attr("worst_block_error_share", c.worst_block_error_share);
  }
  if (!c.outlier_mask.empty()) {
    st.write("outlier_mask", c.outlier_mask);
    dims::name_axes(st.open_dataset("outlier_mask"), {channel}, "");
    st.set_attr("outlier_mask_source", c.outlier_mask_source);
    st.set_attr("outlier_channels", c.split.outlier_channels);
    st.set_attr("normal_channels", c.split.normal_channels);
    st.set_attr("outlier_nmse", c.split.outlier_nmse);
    st.set_attr("normal_nmse", c.split.normal_nmse);
    st.set_attr("outlier_energy_fraction", c.split.outlier_energy_fraction);
  }
}

}  // namespace

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
  if (q.channels.computed()) write_channel_stats(st, q);
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
