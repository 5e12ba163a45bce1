#include "format/fp8.hpp"

#include "quant/fp8_scaled.hpp"
#include "quant/tiles.hpp"

namespace fp4d {

namespace {
struct Fp8Ops {
  float max;
  std::uint8_t (*encode)(float);
  float (*decode)(std::uint8_t);
};
Fp8Ops fp8_ops(ElementFormat f) {
  if (f == ElementFormat::E5M2) return {kE5M2Max, e5m2_rne_satfinite, e5m2_decode};
  return {kE4M3Max, e4m3_rne_satfinite, e4m3_decode};
}
}  // namespace

void fp8_quantize_cpu(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  const Fp8Ops ops = fp8_ops(spec.element);
  const TileGrid g(x.rows, x.cols, spec.block_rows, spec.block_cols);
  out.rows = x.rows;
  out.cols = x.cols;
  out.padded_cols = g.padded_cols;
  out.scale_rows = g.tile_rows;
  out.scale_cols = g.tile_cols;
  out.codes.assign(static_cast<std::size_t>(x.rows * g.padded_cols), 0);
  out.scale_codes.clear();
  out.scale_values.assign(static_cast<std::size_t>(g.tile_rows * g.tile_cols), 0.0f);
  out.dequantized = dequantize ? Matrix(x.rows, x.cols) : Matrix();
  out.global = GlobalScale{};
  std::int64_t clipped = 0;
  for_each_tile(x, g, [&](std::int64_t tr, std::int64_t tc, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                          std::int64_t c1) {
    const float a = tile_amax(x, r0, r1, c0, c1, abs_f32);
    float enc = 1.0f;
    if (a != 0.0f) {
      enc = ops.max / a;
      if (enc > kFltMax) enc = kFltMax;
      if (enc == 0.0f) enc = 1.0f;
    }
    const float dec = 1.0f / enc;
    out.scale_values[tr * g.tile_cols + tc] = dec;
    std::int64_t local_clipped = 0;
    for (std::int64_t r = r0; r < r1; ++r)
      for (std::int64_t c = c0; c < c1; ++c) {
        const float y = x(r, c) * enc;
        local_clipped += abs_f32(y) > ops.max && is_finite_f32(y);
        const std::uint8_t q = ops.encode(y);
        out.codes[static_cast<std::size_t>(r * g.padded_cols + c)] = q;
        // The NaN code dequantizes to the decoder's NaN itself: arithmetic on a NaN gives
        // different payloads on x86 and on the GPU, and the backends agree bit for bit.
        if (dequantize) {
          const float v = ops.decode(q);
          out.dequantized(r, c) = is_nan_f32(v) ? v : v * dec;
        }
      }
#pragma omp atomic
    clipped += local_clipped;
  });
  out.clipped = clipped;
}

}  // namespace fp4d
