#include "quant/fp8_scaled.hpp"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "format/fp8.hpp"
#include "quant/nvfp4.hpp"
#include "util/parallel_worth.hpp"

namespace fp4d {

namespace {

// The formats as compile-time constants, so that the element loop is one instantiation per
// format with no per-element dispatch: encode is the branch-free conversion of fp8_scaled.hpp,
// decode the reference one of format/fp8.hpp.
struct E4m3 {
  static constexpr float kMax = kE4M3Max;
  static std::uint8_t encode(float y) { return e4m3_rne_satfinite_fast(y); }
  static float decode(std::uint8_t c) { return e4m3_decode(c); }
};
struct E5m2 {
  static constexpr float kMax = kE5M2Max;
  static std::uint8_t encode(float y) { return e5m2_rne_satfinite_fast(y); }
  static float decode(std::uint8_t c) { return e5m2_decode(c); }
};

// Scale, count clips and encode n consecutive elements with one encode scale. Returns the
// clipped count: |x * enc| > max and finite, compared on the bits (the order of non-negative
// floats is that of their bits; NaN bits lie above Inf's). noinline, so that the __restrict
// qualifiers hold where the loop is vectorised.
template <class F>
__attribute__((noinline)) std::int64_t encode_run(const float* __restrict x, std::int64_t n, float enc,
                                                  std::uint8_t* __restrict q) {
  constexpr std::uint32_t kMaxBits = __builtin_bit_cast(std::uint32_t, F::kMax);
  std::int64_t clipped = 0;
  constexpr std::int64_t kChunk = 1 << 12;  // 32-bit counts in the vector lanes, summed per chunk
  for (std::int64_t k0 = 0; k0 < n; k0 += kChunk) {
    const std::int64_t k1 = std::min(n, k0 + kChunk);
    std::uint32_t c = 0;
    for (std::int64_t k = k0; k < k1; ++k) {
      const float y = x[k] * enc;
      const std::uint32_t a = float_bits(y) & 0x7fffffffu;
      c += static_cast<std::uint32_t>(a > kMaxBits) & static_cast<std::uint32_t>(a < 0x7f800000u);
      q[k] = F::encode(y);
    }
    clipped += c;
  }
  return clipped;
}

// The spec's block encode scale: enc = min(max / amax, FLT_MAX), 1 where amax = 0 or the
// quotient is 0 (amax = Inf).
template <class F>
float encode_scale(float amax) {
  float enc = 1.0f;
  if (amax != 0.0f) {
    enc = F::kMax / amax;
    if (enc > kFltMax) enc = kFltMax;
    if (enc == 0.0f) enc = 1.0f;
  }
  return enc;
}

// The NaN code dequantizes to the decoder's NaN itself: arithmetic on a NaN gives different
// payloads on x86 and on the GPU, and the backends agree bit for bit.
template <class F>
void dequantize_run(const std::uint8_t* q, std::int64_t n, float dec, float* out) {
  for (std::int64_t k = 0; k < n; ++k) {
    const float v = F::decode(q[k]);
    out[k] = is_nan_f32(v) ? v : v * dec;
  }
}

// Running block amax keys (|x| bits, NaN as 0, as amax_key) of n elements into *key.
__attribute__((noinline)) std::uint32_t max_key_run(const float* __restrict x, std::int64_t n, std::uint32_t key) {
  for (std::int64_t k = 0; k < n; ++k) key = std::max(key, amax_key(x[k]));
  return key;
}

// One scale for the whole tensor: the global amax (amax_cpu, parallel and deterministic), then
// the elements in fixed chunks of the flat array (codes are not padded: padded_cols == cols).
template <class F>
std::int64_t quantize_tensor(const Matrix& x, QuantizedTensor& out, bool dequantize) {
  const float enc = encode_scale<F>(amax_cpu(x)), dec = 1.0f / enc;
  if (!out.scale_values.empty()) out.scale_values[0] = dec;  // none for an empty tensor
  const std::int64_t n = x.size();
  constexpr std::int64_t kChunk = 1 << 16;
  const std::int64_t nchunks = (n + kChunk - 1) / kChunk;
  std::int64_t clipped = 0;
#pragma omp parallel for schedule(static) reduction(+ : clipped) if (parallel_worth(n))
  for (std::int64_t c = 0; c < nchunks; ++c) {
    const std::int64_t k0 = c * kChunk, len = std::min(kChunk, n - k0);
    clipped += encode_run<F>(x.data.data() + k0, len, enc, out.codes.data() + k0);
    if (dequantize) dequantize_run<F>(out.codes.data() + k0, len, dec, out.dequantized.data.data() + k0);
  }
  return clipped;
}

// br x bc tiles (1x128 or 128x128): one thread per tile row, which takes the tiles' amaxes
// over its rows, then encodes them while they are still in cache.
template <class F>
std::int64_t quantize_tiles(const Matrix& x, std::int64_t br, std::int64_t bc, QuantizedTensor& out, bool dequantize) {
  const std::int64_t rows = x.rows, cols = x.cols, pcols = out.padded_cols;
  const std::int64_t trows = out.scale_rows, tcols = out.scale_cols;
  std::int64_t clipped = 0;
#pragma omp parallel reduction(+ : clipped) if (parallel_worth(rows * pcols))
  {
    std::vector<std::uint32_t> keys(static_cast<std::size_t>(tcols));
    std::vector<float> enc(static_cast<std::size_t>(tcols)), dec(static_cast<std::size_t>(tcols));
#pragma omp for schedule(static)
    for (std::int64_t tr = 0; tr < trows; ++tr) {
      const std::int64_t r0 = tr * br, r1 = std::min(rows, r0 + br);
      std::fill(keys.begin(), keys.end(), 0u);
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t tc = 0; tc < tcols; ++tc) {
          const std::int64_t c0 = tc * bc, c1 = std::min(cols, c0 + bc);
          keys[tc] = max_key_run(x.data.data() + r * cols + c0, c1 - c0, keys[tc]);
        }
      for (std::int64_t tc = 0; tc < tcols; ++tc) {
        enc[tc] = encode_scale<F>(bits_float(keys[tc]));
        dec[tc] = 1.0f / enc[tc];
        out.scale_values[tr * tcols + tc] = dec[tc];
      }
      for (std::int64_t r = r0; r < r1; ++r) {
        const float* xr = x.data.data() + r * cols;
        std::uint8_t* qr = out.codes.data() + r * pcols;
        for (std::int64_t tc = 0; tc < tcols; ++tc) {
          const std::int64_t c0 = tc * bc, c1 = std::min(cols, c0 + bc);
          clipped += encode_run<F>(xr + c0, c1 - c0, enc[tc], qr + c0);
          if (dequantize) dequantize_run<F>(qr + c0, c1 - c0, dec[tc], out.dequantized.data.data() + r * cols + c0);
        }
        std::fill(qr + cols, qr + pcols, std::uint8_t{0});  // padding of the last block
      }
    }
  }
  return clipped;
}

template <class F>
std::int64_t quantize_format(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  if (spec.per_tensor()) return quantize_tensor<F>(x, out, dequantize);
  return quantize_tiles<F>(x, spec.block_rows, spec.block_cols, out, dequantize);
}

}  // namespace

void fp8_quantize_cpu(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  const bool whole = spec.per_tensor();
  const std::int64_t br = whole ? std::max<std::int64_t>(x.rows, 1) : spec.block_rows;
  const std::int64_t bc = whole ? std::max<std::int64_t>(x.cols, 1) : spec.block_cols;
  out.rows = x.rows;
  out.cols = x.cols;
  out.scale_rows = (x.rows + br - 1) / br;
  out.scale_cols = (x.cols + bc - 1) / bc;
  out.padded_cols = whole ? x.cols : out.scale_cols * bc;
  // resize, not assign: every code (padding included) and scale is written below, and a
  // reused output (the benchmark's steady state) then costs no serial fill pass.
  out.codes.resize(static_cast<std::size_t>(x.rows * out.padded_cols));
  out.scale_codes.clear();
  out.scale_values.resize(static_cast<std::size_t>(out.scale_rows * out.scale_cols));
  out.dequantized = dequantize ? Matrix(x.rows, x.cols) : Matrix();
  out.global = GlobalScale{};
  out.clipped = spec.element == ElementFormat::E5M2 ? quantize_format<E5m2>(x, spec, out, dequantize)
                                                     : quantize_format<E4m3>(x, spec, out, dequantize);
}

}  // namespace fp4d
