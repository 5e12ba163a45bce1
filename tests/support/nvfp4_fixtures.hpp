// Shared fixtures of the NVFP4 backend tests (CPU optimised path and CUDA kernels, both
// against nvfp4_quantize_reference): a generator that reaches every block-scale regime and
// the special values, and the bit-for-bit comparison of two quantization results.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "format/philox.hpp"
#include "quant/quantized.hpp"
#include "support/catch.hpp"
#include "support/float_bits.hpp"

namespace fp4d_test {

using fp4d::Matrix;
using fp4d::QuantizedTensor;

// Log-uniform magnitudes over 2^-40 .. 2^8 with random signs, zeros and -0; with specials
// also NaN, +-Inf; the first 16 columns of row 0 tiny (E4M3-subnormal and zero block scales),
// an all -0 block and (with specials) an all-NaN block.
inline Matrix random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed, bool specials) {
  Matrix m(rows, cols);
  for (std::int64_t i = 0; i < m.size(); ++i) {
    const fp4d::Philox4x32 b = fp4d::philox_block(fp4d::RngStream{seed, 99}, static_cast<std::uint64_t>(i));
    // Log-uniform magnitudes over 2^-40 .. 2^8 with random signs: every block scale regime,
    // including E4M3-subnormal and zero block scales, appears.
    const double mag = std::ldexp(1.0 + b.v[0] * 0x1p-32, static_cast<int>(b.v[1] % 48) - 40);
    float v = static_cast<float>((b.v[2] & 1) ? -mag : mag);
    if ((b.v[3] % 7) == 0) v = 0.0f;
    if ((b.v[3] % 11) == 3) v = -0.0f;
    if (specials && (b.v[3] % 997) == 1) v = NAN;
    if (specials && (b.v[3] % 991) == 2) v = -INFINITY;
    if (specials && (b.v[3] % 983) == 5) v = INFINITY;
    m.data[static_cast<std::size_t>(i)] = v;
  }
  // A few blocks of tiny values relative to the tensor's amax: subnormal and zero scales.
  for (std::int64_t c = 0; c < std::min<std::int64_t>(cols, 16); ++c) m(0, c) = static_cast<float>(std::ldexp(1.3, -20 - c));
  if (rows > 1 && cols >= 32) {
    for (std::int64_t c = 16; c < 32; ++c) m(rows - 1, c) = -0.0f;
    if (specials)
      for (std::int64_t c = 16; c < 32; ++c) m(rows / 2, c) = NAN;
  }
  return m;
}

inline void require_identical(const QuantizedTensor& a, const QuantizedTensor& b, bool dequantized = true) {
  REQUIRE(a.rows == b.rows);
  REQUIRE(a.cols == b.cols);
  REQUIRE(a.padded_cols == b.padded_cols);
  REQUIRE(a.scale_rows == b.scale_rows);
  REQUIRE(a.scale_cols == b.scale_cols);
  REQUIRE(a.codes.size() == b.codes.size());
  std::size_t code_mismatches = 0;
  for (std::size_t i = 0; i < a.codes.size(); ++i) code_mismatches += a.codes[i] != b.codes[i];
  REQUIRE(code_mismatches == 0);
  REQUIRE(a.scale_codes == b.scale_codes);
  REQUIRE(a.scale_values.size() == b.scale_values.size());
  for (std::size_t i = 0; i < a.scale_values.size(); ++i) REQUIRE(same_bits(a.scale_values[i], b.scale_values[i]));
  REQUIRE(same_bits(a.global.encode, b.global.encode));
  REQUIRE(same_bits(a.global.decode, b.global.decode));
  REQUIRE(a.clipped == b.clipped);
  if (!dequantized) return;
  REQUIRE(a.dequantized.rows == b.dequantized.rows);
  REQUIRE(a.dequantized.cols == b.dequantized.cols);
  REQUIRE(a.dequantized.data.size() == b.dequantized.data.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < a.dequantized.data.size(); ++i)
    mismatches += !same_bits(a.dequantized.data[i], b.dequantized.data[i]) &&
                  !(std::isnan(a.dequantized.data[i]) && std::isnan(b.dequantized.data[i]));
  REQUIRE(mismatches == 0);
}
}  // namespace fp4d_test
