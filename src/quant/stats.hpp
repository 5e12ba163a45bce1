// Error statistics of a quantization (definitions in quantized.hpp and docs/numerics.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "quant/quantized.hpp"

namespace fp4d {

// target(i): the exact value of element i (input orientation, row-major), in double.
// Sums run over fixed chunks of 4096 elements combined in order: the result is the same for
// any number of threads.
QuantStats compute_stats(const std::function<double(std::int64_t)>& target, const QuantizedTensor& q);

// Per-channel, per-row and per-block statistics of q against `input` (the tensor q was
// quantized from; docs/numerics.md section 7): in the original basis, and with an RHT also in
// the transformed one, whose target is the transform of the input in double as for
// QuantStats. Needs q.dequantized (and q.spec, the scale grid's shape). Every sum runs in a
// fixed order (a column's over its rows ascending, a row's over its columns, a block's over
// its elements row by row), so the result does not depend on the number of threads.
// `worst` bounds the number of worst blocks reported.
ChannelStats compute_channel_stats(const Matrix& input, const QuantizedTensor& q, int worst = 8);

// The inverse of the RHT applied along `axis` (runs of spec.size elements), in double: y H^T
// with H = diag(s) H_d / sqrt(d), i.e. (y H_d / sqrt(d)) * s elementwise. `y` is row-major,
// rows x cols; throws std::invalid_argument when d does not divide the axis.
std::vector<double> inverse_rht_double(const std::vector<double>& y, std::int64_t rows, std::int64_t cols,
                                       const RhtSpec& spec, int axis);

// A channel mask (one byte per input column, non-zero = outlier) split into its two groups.
// std::invalid_argument when the mask's length is not the number of channels.
ChannelSplit split_channels(const ChannelStats& c, const std::vector<std::uint8_t>& mask);

// A mask from a list of channel indices ("3,17,40-47": indices and inclusive ranges) over
// `channels` columns. std::invalid_argument, naming the offending item, for an empty list, a
// malformed item, an index outside [0, channels) or one given twice.
std::vector<std::uint8_t> parse_channel_list(const std::string& list, std::int64_t channels);

}  // namespace fp4d
