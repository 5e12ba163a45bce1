#include "quant/mxfp4.hpp"

#include "quant/tiles.hpp"

namespace fp4d {

void mxfp4_quantize_cpu(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  const TileGrid g(x.rows, x.cols, 1, kMxfp4Block);
  out.rows = x.rows;
  out.cols = x.cols;
  out.padded_cols = g.padded_cols;
  out.scale_rows = g.tile_rows;
  out.scale_cols = g.tile_cols;
  out.codes.assign(static_cast<std::size_t>(x.rows * g.padded_cols / 2), 0);
  out.scale_codes.assign(static_cast<std::size_t>(g.tile_rows * g.tile_cols), 0);
  out.scale_values.assign(out.scale_codes.size(), 0.0f);
  out.dequantized = dequantize ? Matrix(x.rows, x.cols) : Matrix();
  out.global = GlobalScale{};
  std::int64_t clipped = 0;
  for_each_tile(x, g, [&](std::int64_t tr, std::int64_t tc, std::int64_t r, std::int64_t, std::int64_t c0,
                          std::int64_t c1) {
    const float a = tile_amax(x, r, r + 1, c0, c1, abs_f32);
    const int e = mxfp4_scale_exponent(a, spec.mx_scale_rule);
    const std::uint8_t s = ue8m0_from_exponent(e);
    const float scale = exp2i_f32(e), inv = exp2i_f32(-e);  // x / X == x * 2^-e exactly
    out.scale_codes[tr * g.tile_cols + tc] = s;
    out.scale_values[tr * g.tile_cols + tc] = scale;
    std::int64_t local_clipped = 0;
    for (std::int64_t c = c0; c < c1; ++c) {
      const float y = x(r, c) * inv;
      local_clipped += abs_f32(y) > kE2M1Max && is_finite_f32(y);
      const std::uint8_t q = e2m1_round(y, spec.rounding, static_cast<std::uint64_t>(r * g.padded_cols + c));
      std::uint8_t& byte = out.codes[static_cast<std::size_t>((r * g.padded_cols + c) / 2)];
      byte = static_cast<std::uint8_t>((c & 1) ? (byte & 0x0f) | (q << 4) : (byte & 0xf0) | q);
      if (dequantize) out.dequantized(r, c) = e2m1_decode(q) * scale;
    }
#pragma omp atomic
    clipped += local_clipped;
  });
  out.clipped = clipped;
}

}  // namespace fp4d
