// The result of one quantization: codes, scales, global scale, dequantized values and the
// error statistics. The layout is what the HDF5 output and the CUDA backend use
// (docs/trace-format.md, "quantize").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/matrix.hpp"
#include "quant/nvfp4_math.hpp"
#include "quant/spec.hpp"

namespace fp4d {

// Error statistics against the exact target (the input, or its RHT computed in double).
// Sums are taken in double over fixed chunks in a fixed order, so they do not depend on the
// number of threads.
struct QuantStats {
  std::int64_t elements = 0;        // finite elements compared
  std::int64_t nonfinite = 0;       // Inf/NaN elements in the target (excluded from the sums)
  double nmse = 0;                  // sum (x_hat - x)^2 / sum x^2 (0 when x == 0 everywhere)
  double bias = 0;                  // mean signed error: sum (x_hat - x) / n
  double relative_bias = 0;         // sum (x_hat - x) / sum |x|
  double max_abs_error = 0;         // max |x_hat - x|
  double clipped_fraction = 0;      // finite elements with |x * e_b| above the element maximum, in
                                    // blocks whose scale is not 0, / n (the biasing clip of the spec)
  double underflow_fraction = 0;    // elements with x != 0 and x_hat == 0 / (elements with x != 0)
  std::int64_t blocks = 0;
  std::int64_t zero_scale_blocks = 0;       // block scale 0 (nvfp4), a zero block can have it too
  std::int64_t subnormal_scale_blocks = 0;  // block scale an E4M3 subnormal (nvfp4)
};

// The pooled error of two groups of channels: sum err2 / sum ref2 over the channels of each
// group (not the mean of their NMSEs, so that a group's figure weighs its channels by energy,
// as the global NMSE does). NaN for an empty group or one with ref2 = 0.
struct ChannelSplit {
  std::int64_t outlier_channels = 0, normal_channels = 0;
  double outlier_nmse = 0, normal_nmse = 0;
  double outlier_energy_fraction = 0;  // sum ref2 of the outlier channels / sum ref2
};

// Where the error sits (docs/numerics.md section 7, "Per-channel and per-block"): computed on
// request by compute_channel_stats (stats.hpp), not by every quantization, since the training
// runs quantize at every step and read only QuantStats. Empty vectors: not computed.
// Channels are the input's columns (features; the `outliers` generator scales whole columns),
// rows its rows (tokens), both in the original basis: with an RHT the dequantized values are
// transformed back (H^T, in double) before they are compared with the input. Blocks are the
// quantizer's own blocks, in the basis and orientation it quantized in (the scale grid).
struct ChannelStats {
  // Sums over finite targets, in double: err2 = sum (x_hat - x)^2, ref2 = sum x^2.
  std::vector<double> channel_err2, channel_ref2;  // per input column
  std::vector<double> row_err2, row_ref2;          // per input row
  double nmse_original_basis = 0;  // sum err2 / sum ref2 in the original basis (= QuantStats::nmse
                                   // without an RHT; with one equal up to rounding: H is orthonormal)
  // With an RHT only: the same sums in the transformed basis (against the transform of the input).
  std::vector<double> channel_err2_transformed, channel_ref2_transformed, row_err2_transformed, row_ref2_transformed;
  // Per block of the scale grid (stored orientation, scale_rows x scale_cols, row-major):
  // sum err2 / sum ref2 against the quantizer's target; NaN for a block with ref2 = 0.
  std::vector<double> block_nmse;
  // Over the blocks with ref2 > 0: nearest-rank quantiles of block_nmse (sorted[floor(q (n - 1))]).
  std::int64_t blocks_with_energy = 0;
  double block_nmse_p50 = 0, block_nmse_p90 = 0, block_nmse_p99 = 0, block_nmse_max = 0;
  // The blocks carrying most squared error (descending; ties by index), as flat indices into
  // the scale grid, and each one's share of the total squared error.
  std::vector<std::int64_t> worst_blocks;
  std::vector<double> worst_block_error_share;
  // An outlier mask over the channels (the generator's, or the user's; empty: none), where it
  // came from, and the error split by it (original basis).
  std::vector<std::uint8_t> outlier_mask;
  std::string outlier_mask_source;
  ChannelSplit split;
  bool computed() const { return !channel_err2.empty(); }
};

struct QuantizedTensor {
  QuantSpec spec;
  std::int64_t input_rows = 0, input_cols = 0;  // the input's orientation
  // Stored orientation: the input, or its transpose when spec.stored_transposed().
  std::int64_t rows = 0, cols = 0;
  std::int64_t padded_cols = 0;                 // cols rounded up to the block length
  std::int64_t scale_rows = 0, scale_cols = 0;  // shape of the scale grid
  // FP4: rows x padded_cols/2 bytes, element 2i in the low nibble. FP8: rows x padded_cols.
  // Casts: rows x cols uint16 bit patterns (BF16/FP16) in codes16.
  std::vector<std::uint8_t> codes;
  std::vector<std::uint16_t> codes16;
  std::vector<std::uint8_t> scale_codes;   // E4M3 (nvfp4) or UE8M0 (mxfp4) codes
  std::vector<float> scale_values;         // decode scale of every block as float32 (all schemes)
  GlobalScale global{};                    // nvfp4 tensor scale (1 elsewhere)
  std::int64_t clipped = 0;                // see QuantStats::clipped_fraction
  Matrix transformed;                      // RHT output that was quantized (input orientation), if any
  Matrix dequantized;                      // input orientation
  QuantStats stats;
  ChannelStats channels;  // compute_channel_stats; empty unless asked for

  std::uint8_t code_at(std::int64_t r, std::int64_t c) const;  // stored orientation, unpacked
};

}  // namespace fp4d
