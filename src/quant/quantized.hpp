// The result of one quantization: codes, scales, global scale, dequantized values and the
// error statistics. The layout is what the HDF5 output and the CUDA backend use
// (docs/trace-format.md, "quantize").
#pragma once

#include <cstdint>
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

  std::uint8_t code_at(std::int64_t r, std::int64_t c) const;  // stored orientation, unpacked
};

}  // namespace fp4d
