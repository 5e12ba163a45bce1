#include "trace/gemm_trace.hpp"

#include "trace/dims.hpp"
#include "trace/quantize_trace.hpp"

namespace fp4d {

namespace {

h5::Dims matrix_dims(std::int64_t rows, std::int64_t cols) {
  return h5::Dims{static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols)};
}

void write_stats(h5::Group g, const std::string& prefix, const ErrorStats& s) {
  g.set_attr(prefix + "_rel_frobenius", s.rel_frobenius);
  g.set_attr(prefix + "_max_abs", s.max_abs);
  g.set_attr(prefix + "_bias", s.bias);
}

void write_bits(h5::Group g, const std::string& prefix, const AccumulationBits& b) {
  g.set_attr(prefix + "_min", b.min);
  g.set_attr(prefix + "_p01", b.p01);
  g.set_attr(prefix + "_median", b.median);
  g.set_attr(prefix + "_exact_fraction", b.exact_fraction);
}

// Per output row and column relative errors of the three terms, labelled by coordinates kept
// in the recipe's group (term, out_row, out_col), and the outlier-channel split.
void write_channel_errors(h5::Group g, const GemmResult& r) {
  const GemmChannelErrors& c = r.channels;
  constexpr int T = GemmChannelErrors::kTerms;
  const h5::Dataset term = dims::index(g, "term", T, "error term: 0 total, 1 quantization, 2 accumulation");
  const h5::Dataset rows = dims::index(g, "out_row", static_cast<std::uint64_t>(r.rows), "row of C");
  const h5::Dataset cols = dims::index(g, "out_col", static_cast<std::uint64_t>(r.cols), "column of C");
  const auto table = [&](const std::string& name, const std::vector<double>* v, const h5::Dataset& axis) {
    std::vector<double> flat;
    for (int t = 0; t < T; ++t) flat.insert(flat.end(), v[t].begin(), v[t].end());
    g.write(name, flat, h5::Dims{static_cast<std::uint64_t>(T), static_cast<std::uint64_t>(v[0].size())});
    dims::name_axes(g.open_dataset(name), {term, axis}, "1");
  };
  table("row_rel_frobenius", c.row_rel, rows);
  table("col_rel_frobenius", c.col_rel, cols);
  g.set_attr("outlier_axis", c.outlier_axis);
  g.set_attr("outlier_channels", c.outlier_channels);
  g.set_attr("quantization_from_outlier_channels_rel_frobenius", c.quantization_from_outlier_rel);
  g.set_attr("quantization_from_normal_channels_rel_frobenius", c.quantization_from_normal_rel);
  const char* names[T] = {"total", "quantization", "accumulation"};
  for (int t = 0; t < T; ++t) {
    g.set_attr(std::string(names[t]) + "_outlier_rows_rel_frobenius", c.outlier_rows_rel[t]);
    g.set_attr(std::string(names[t]) + "_normal_rows_rel_frobenius", c.normal_rows_rel[t]);
  }
}

}  // namespace

GemmTrace::GemmTrace(const std::string& path, const std::string& command_line, const GemmOperands& ops,
                     const GemmTraceHeader& header, bool save_tensors)
    : file_(path, "fp4drift.gemm", 1, command_line), ops_(ops), save_tensors_(save_tensors) {
  if (!enabled()) return;
  h5::Group root = file_.root();
  root.set_attr("role", header.role);
  root.set_attr("m", header.m);
  root.set_attr("n", header.n);
  root.set_attr("k", header.k);
  root.set_attr("backend", header.backend);
  root.set_attr("reference", std::string("exact: fixed-point accumulation of the exact block products, rounded once"));
  root.set_attr("source_" + ops.first_name, header.first_source);
  root.set_attr("source_" + ops.second_name, header.second_source);
  if (!ops.first_channel_mask.empty()) {
    const std::string name = "outlier_mask_" + ops.first_name;
    const h5::Dataset ch =
        dims::index(root, "channel_" + ops.first_name, ops.first_channel_mask.size(), "column (feature) of " + ops.first_name);
    root.write(name, ops.first_channel_mask);
    dims::name_axes(root.open_dataset(name), {ch}, "");
  }
}

void GemmTrace::set_float_reference(const std::string& precision, double max_rel_vs_exact, double certified_digits,
                                    std::int64_t certified_elements) {
  if (!enabled()) return;
  h5::Group root = file_.root();
  root.set_attr("float_reference_precision", precision);
  root.set_attr("float_reference_max_rel_vs_exact", max_rel_vs_exact);
  root.set_attr("float_reference_certified_digits", certified_digits);
  root.set_attr("float_reference_certified_elements", certified_elements);
}

void GemmTrace::write_operands(const GemmResult& r) {
  h5::Group root = file_.root();
  root.write("operand_" + ops_.first_name, ops_.first.data, matrix_dims(ops_.first.rows, ops_.first.cols));
  root.write("operand_" + ops_.second_name, ops_.second.data, matrix_dims(ops_.second.rows, ops_.second.cols));
  root.write("exact", r.exact, matrix_dims(r.rows, r.cols));
  operands_written_ = true;
}

void GemmTrace::add(const GemmResult& r, const std::string& description) {
  order_.push_back(r.recipe);
  if (!enabled()) return;
  if (save_tensors_ && !operands_written_) write_operands(r);
  h5::Group g = file_.root().require_group("recipes").create_group(r.recipe);
  g.set_attr("description", description);
  g.set_attr("sr_draws", static_cast<std::int64_t>(r.draws));
  g.set_attr("split_exact", r.split_exact);
  write_stats(g, "total", r.total);
  write_stats(g, "quantization", r.quantization);
  write_stats(g, "accumulation", r.accumulation);
  write_stats(g, "accumulation_fp32_sequential", r.accumulation_fp32_sequential);
  write_stats(g, "accumulation_beyond_fp32_sequential", r.accumulation_beyond_fp32_sequential);
  write_stats(g, "accumulation_dequant_fp32", r.accumulation_dequant_fp32);
  write_bits(g, "accumulation_bits", r.accumulation_bits);
  write_bits(g, "accumulation_dequant_fp32_bits", r.accumulation_bits_dequant_fp32);
  g.set_attr("product_path", r.product_path);
  g.set_attr("accumulator", r.accumulator);
  g.set_attr("model_mismatches", r.model_mismatches);
  g.set_attr("sr_rel_bias", r.sr_rel_bias);
  g.set_attr("sr_rel_std", r.sr_rel_std);
  g.set_attr("sr_mean_rel_noise", r.sr_mean_rel_noise);
  g.set_attr("sr_own_rel_bias", r.sr_own_rel_bias);
  g.set_attr("sr_deterministic_rel_bias", r.sr_deterministic_rel_bias);
  const h5::Dims cd = matrix_dims(r.rows, r.cols);
  g.write("computed", r.computed, cd);
  write_channel_errors(g, r);
  if (save_tensors_) {
    g.write("exact_quantized", r.exact_quantized, cd);
    write_quantized(g.create_group("A"), r.qa, matrix_dims(r.qa.input_rows, r.qa.input_cols));
    write_quantized(g.create_group("B"), r.qb, matrix_dims(r.qb.input_rows, r.qb.input_cols));
  }
}

}  // namespace fp4d
