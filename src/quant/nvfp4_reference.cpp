// The NVFP4 quantization written as nvfp4-spec.md section 2 reads, one element at a time
// through the FP4D_HD functions of nvfp4_math.hpp and e2m1_round: the oracle that the
// optimised CPU path (nvfp4.cpp) and the CUDA kernels must equal bit for bit. Kept apart from
// the optimised path so that neither can borrow a shortcut from the other.
#include <algorithm>

#include "quant/nvfp4.hpp"

namespace fp4d {

void nvfp4_quantize_reference(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out) {
  const std::int64_t B = kNvfp4Block;
  const std::int64_t br = spec.is_2d() ? B : 1;
  out.rows = x.rows;
  out.cols = x.cols;
  out.padded_cols = (x.cols + B - 1) / B * B;
  out.scale_rows = (x.rows + br - 1) / br;
  out.scale_cols = out.padded_cols / B;
  out.codes.assign(static_cast<std::size_t>(x.rows * out.padded_cols / 2), 0);
  out.scale_codes.assign(static_cast<std::size_t>(out.scale_rows * out.scale_cols), 0);
  out.scale_values.assign(out.scale_codes.size(), 0.0f);
  out.dequantized = Matrix(x.rows, x.cols);
  float amax = 0.0f;
  for (float v : x.data) amax = max_ignore_nan(amax, abs_f32(v));
  out.global = nvfp4_global_scale(amax);
  const bool legacy = spec.nv_scale_rule == NvScaleRule::TeLegacy;
  std::int64_t clipped = 0;
  for (std::int64_t tr = 0; tr < out.scale_rows; ++tr)
    for (std::int64_t tc = 0; tc < out.scale_cols; ++tc) {
      const std::int64_t r0 = tr * br, r1 = std::min(x.rows, r0 + br), c0 = tc * B, c1 = std::min(x.cols, c0 + B);
      float a = 0.0f;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) a = max_ignore_nan(a, abs_f32(x(r, c)));
      const std::uint8_t s = nvfp4_block_scale_code(a, out.global.encode, legacy);
      const float e_b = nvfp4_block_encode_scale(s, out.global.decode);
      out.scale_codes[static_cast<std::size_t>(tr * out.scale_cols + tc)] = s;
      out.scale_values[static_cast<std::size_t>(tr * out.scale_cols + tc)] = e4m3_decode(s);
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) {
          bool clip;
          const float y = clamp_e2m1_range(x(r, c) * e_b, &clip);
          clipped += clip && (s & 0x7fu) != 0;  // zero-scale blocks flush: underflow, not clipping
          const auto index = static_cast<std::uint64_t>(r * out.padded_cols + c);
          const std::uint8_t q = e2m1_round(y, spec.rounding, index);
          std::uint8_t& byte = out.codes[static_cast<std::size_t>(index / 2)];
          byte = static_cast<std::uint8_t>((index & 1) ? (byte & 0x0f) | (q << 4) : (byte & 0xf0) | q);
          out.dequantized(r, c) = nvfp4_dequantize(q, s, out.global.decode);
        }
    }
  out.clipped = clipped;
}

}  // namespace fp4d
