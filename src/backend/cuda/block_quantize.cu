// MXFP4, FP8-scaled and BF16-cast quantization kernels (see block_quantize.hpp). Two passes:
//  tile_amax_kernel   one thread per element; lanes of a warp that fall into the same tile
//                     (__match_any_sync on the tile index) reduce their |x| keys (NaN -> 0,
//                     an unsigned max: exact in any order) and one of them does the atomicMax.
//  *_encode_kernel    one thread per element (FP8, BF16) or element pair (MXFP4, one code
//                     byte): the tile's scale from its amax, then the CPU backend's expressions
//                     in the same order. The thread at a tile's origin writes its scale.
// These kernels favour being obviously the CPU's arithmetic over speed (no targets were set
// for MXFP4/FP8 on the GPU); the NVFP4 kernels are the tuned ones.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/block_quantize.hpp"
#include "backend/cuda/cuda_util.cuh"
#include "quant/cast.hpp"
#include "format/bf16.hpp"
#include "format/fp16.hpp"
#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "quant/mxfp4_math.hpp"
#include "quant/nvfp4_math.hpp"
#include "quant/tiles.hpp"

namespace fp4d::cuda {

namespace {

constexpr int kThreads = 256;



// The block grid is quant/tiles.hpp's TileGrid (the CPU quantizers' own), with the matrix
// shape beside it for the kernels (br = rows, bc = cols for one scale per tensor).
struct Grid : TileGrid {
  std::int64_t rows, cols;
  Grid(std::int64_t r, std::int64_t c, std::int64_t block_rows, std::int64_t block_cols)
      : TileGrid(r, c, block_rows, block_cols), rows(r), cols(c) {}
};

__device__ __forceinline__ std::int64_t tile_of(const Grid& g, std::int64_t r, std::int64_t c) {
  return (r / g.br) * g.tile_cols + c / g.bc;
}
__device__ __forceinline__ bool tile_origin(const Grid& g, std::int64_t r, std::int64_t c) {
  return r % g.br == 0 && c % g.bc == 0;
}

__global__ void __launch_bounds__(kThreads) tile_amax_kernel(const float* __restrict__ x, Grid g, std::uint32_t* keys) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool in = i < g.rows * g.cols;
  const std::int64_t r = in ? i / g.cols : 0, c = in ? i % g.cols : 0;
  const unsigned long long tile = in ? static_cast<unsigned long long>(tile_of(g, r, c)) : ~0ull;
  const std::uint32_t key = in ? amax_key(x[i]) : 0u;  // NaN ignored, as tile_amax's "t > a"
  const unsigned same = __match_any_sync(0xffffffffu, tile);
  const std::uint32_t m = __reduce_max_sync(same, key);
  if (in && (threadIdx.x & 31u) == static_cast<unsigned>(__ffs(same) - 1) && m != 0) atomicMax(keys + tile, m);
}

__device__ __forceinline__ void count_clipped(bool clipped, unsigned long long* total) {
  const unsigned n = __popc(__ballot_sync(0xffffffffu, clipped));
  if ((threadIdx.x & 31u) == 0 && n) atomicAdd(total, static_cast<unsigned long long>(n));
}

struct Fp8Format {
  bool e5m2;
  __device__ float max() const { return e5m2 ? kE5M2Max : kE4M3Max; }
  __device__ std::uint8_t encode(float y) const { return e5m2 ? e5m2_rne_satfinite(y) : e4m3_rne_satfinite(y); }
  __device__ float decode(std::uint8_t q) const { return e5m2 ? e5m2_decode(q) : e4m3_decode(q); }
};

// fp8_quantize_cpu's expressions, per element.
__global__ void __launch_bounds__(kThreads)
    fp8_encode_kernel(const float* __restrict__ x, Grid g, Fp8Format f, const std::uint32_t* keys, std::uint8_t* codes,
                      float* scale_values, float* dequantized, unsigned long long* clipped) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool in = i < g.rows * g.cols;
  bool clip = false;
  if (in) {
    const std::int64_t r = i / g.cols, c = i % g.cols, t = tile_of(g, r, c);
    const float a = bits_float(keys[t]);
    float enc = 1.0f;
    if (a != 0.0f) {
      enc = f.max() / a;
      if (enc > kFltMax) enc = kFltMax;
      if (enc == 0.0f) enc = 1.0f;
    }
    const float dec = 1.0f / enc;
    if (tile_origin(g, r, c)) scale_values[t] = dec;
    const float y = x[i] * enc;
    clip = abs_f32(y) > f.max() && is_finite_f32(y);
    const std::uint8_t q = f.encode(y);
    codes[r * g.padded_cols + c] = q;
    if (dequantized) {
      const float v = f.decode(q);
      dequantized[i] = is_nan_f32(v) ? v : v * dec;  // as fp8_quantize_cpu: no arithmetic on NaN
    }
  }
  count_clipped(clip, clipped);
}

// mxfp4_quantize_cpu's expressions, per pair of elements (one code byte).
__global__ void __launch_bounds__(kThreads)
    mxfp4_encode_kernel(const float* __restrict__ x, Grid g, MxScaleRule rule, RoundingSpec rs, const std::uint32_t* keys,
                        std::uint8_t* codes, std::uint8_t* scale_codes, float* scale_values, float* dequantized,
                        unsigned long long* clipped) {
  const std::int64_t pairs_per_row = g.padded_cols / 2;
  const std::int64_t p = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool in = p < g.rows * pairs_per_row;
  unsigned clip = 0;
  if (in) {
    const std::int64_t r = p / pairs_per_row, c0 = 2 * (p % pairs_per_row);
    std::uint8_t q[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      const std::int64_t c = c0 + k;
      if (c >= g.cols) break;  // padding code 0
      const std::int64_t t = tile_of(g, r, c);
      const int e = mxfp4_scale_exponent(bits_float(keys[t]), rule);
      const float scale = exp2i_f32(e), inv = exp2i_f32(-e);
      if (tile_origin(g, r, c)) {
        scale_codes[t] = ue8m0_from_exponent(e);
        scale_values[t] = scale;
      }
      const float y = x[r * g.cols + c] * inv;
      clip += abs_f32(y) > kE2M1Max && is_finite_f32(y);
      q[k] = e2m1_round(y, rs, static_cast<std::uint64_t>(r * g.padded_cols + c));
      if (dequantized) dequantized[r * g.cols + c] = e2m1_decode(q[k]) * scale;
    }
    codes[p] = static_cast<std::uint8_t>(q[0] | (q[1] << 4));
  }
  const unsigned n = __reduce_add_sync(0xffffffffu, clip);
  if ((threadIdx.x & 31u) == 0 && n) atomicAdd(clipped, static_cast<unsigned long long>(n));
}

// cast_quantize_cpu, per element: BF16 (format/bf16.hpp) or FP16 (format/fp16.hpp), the
// conversions the CPU backend uses.
template <bool kBf16>
__global__ void __launch_bounds__(kThreads)
    cast_kernel(const float* __restrict__ x, std::int64_t n, std::uint16_t* codes16, float* dequantized,
                unsigned long long* clipped) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  bool clip = false;
  if (i < n) {
    const float v = x[i];
    const std::uint16_t b = kBf16 ? bf16_rne_bits(v) : fp16_rne_bits(v);
    codes16[i] = b;
    const float d = kBf16 ? bf16_to_float(b) : fp16_to_float(b);
    dequantized[i] = d;
    clip = is_finite_f32(v) && !is_finite_f32(d) && !is_nan_f32(d);  // overflow to infinity
  }
  count_clipped(clip, clipped);
}

unsigned blocks_for(std::int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("cuda quantize: " + what);
}

// Uploads x, runs the tile amax into a zeroed key per tile.
struct Staged {
  DeviceBuffer<float> x;
  DeviceBuffer<std::uint32_t> keys;
  DeviceBuffer<unsigned long long> clipped;
  Staged(const Matrix& m, const Grid& g)
      : x(static_cast<std::size_t>(m.size()), "cudaMalloc (x)"),
        keys(static_cast<std::size_t>(g.tile_rows * g.tile_cols), "cudaMalloc (tile keys)"),
        clipped(1, "cudaMalloc (clipped)") {
    x.upload(m.data.data());
    if (m.size() > 0) tile_amax_kernel<<<blocks_for(m.size()), kThreads>>>(x.p, g, keys.p);
    check(cudaGetLastError(), "tile_amax_kernel launch");
  }
  std::int64_t clipped_count() const {
    unsigned long long c = 0;
    clipped.download(&c);
    return static_cast<std::int64_t>(c);
  }
};

void fill_shape(QuantizedTensor& out, const Grid& g) {
  out.rows = g.rows;
  out.cols = g.cols;
  out.padded_cols = g.padded_cols;
  out.scale_rows = g.tile_rows;
  out.scale_cols = g.tile_cols;
  out.global = GlobalScale{};
}

}  // namespace

void mxfp4_quantize_cuda(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  require(spec.scheme == Scheme::Mxfp4 && spec.block_rows == 1 && spec.block_cols == kMxfp4Block,
          "the MXFP4 kernel takes 1x32 blocks");
  const Grid g(x.rows, x.cols, 1, kMxfp4Block);
  fill_shape(out, g);
  Staged s(x, g);
  const std::int64_t pairs = g.rows * g.padded_cols / 2;
  DeviceBuffer<std::uint8_t> codes(static_cast<std::size_t>(pairs), "cudaMalloc (codes)"),
      scales(static_cast<std::size_t>(g.tile_rows * g.tile_cols), "cudaMalloc (scale codes)");
  DeviceBuffer<float> values(scales.n, "cudaMalloc (scale values)"),
      deq(dequantize ? static_cast<std::size_t>(x.size()) : 0, "cudaMalloc (dequantized)");
  if (pairs > 0)
    mxfp4_encode_kernel<<<blocks_for(pairs), kThreads>>>(s.x.p, g, spec.mx_scale_rule, spec.rounding, s.keys.p, codes.p,
                                                         scales.p, values.p, dequantize ? deq.p : nullptr, s.clipped.p);
  check(cudaGetLastError(), "mxfp4_encode_kernel launch");
  out.codes.resize(static_cast<std::size_t>(pairs));
  if (!out.codes.empty()) codes.download(out.codes.data());
  out.scale_codes.resize(static_cast<std::size_t>(g.tile_rows * g.tile_cols));
  out.scale_values.resize(out.scale_codes.size());
  if (!out.scale_codes.empty()) scales.download(out.scale_codes.data()), values.download(out.scale_values.data());
  out.dequantized = dequantize ? Matrix(x.rows, x.cols) : Matrix();
  if (dequantize && x.size() > 0) deq.download(out.dequantized.data.data());
  out.clipped = s.clipped_count();
}

void fp8_quantize_cuda(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  require(spec.scheme == Scheme::Fp8 && (spec.element == ElementFormat::E4M3 || spec.element == ElementFormat::E5M2),
          "the FP8 kernel takes E4M3 or E5M2 elements");
  const Grid g(x.rows, x.cols, spec.block_rows, spec.block_cols);
  fill_shape(out, g);
  Staged s(x, g);
  const std::size_t ncodes = static_cast<std::size_t>(g.rows * g.padded_cols);
  DeviceBuffer<std::uint8_t> codes(ncodes, "cudaMalloc (codes)");
  DeviceBuffer<float> values(static_cast<std::size_t>(g.tile_rows * g.tile_cols), "cudaMalloc (scale values)"),
      deq(dequantize ? static_cast<std::size_t>(x.size()) : 0, "cudaMalloc (dequantized)");
  if (x.size() > 0)
    fp8_encode_kernel<<<blocks_for(x.size()), kThreads>>>(s.x.p, g, Fp8Format{spec.element == ElementFormat::E5M2}, s.keys.p,
                                                          codes.p, values.p, dequantize ? deq.p : nullptr, s.clipped.p);
  check(cudaGetLastError(), "fp8_encode_kernel launch");
  out.codes.resize(ncodes);
  if (ncodes) codes.download(out.codes.data());
  out.scale_codes.clear();
  out.scale_values.resize(static_cast<std::size_t>(g.tile_rows * g.tile_cols));
  if (!out.scale_values.empty()) values.download(out.scale_values.data());
  out.dequantized = dequantize ? Matrix(x.rows, x.cols) : Matrix();
  if (dequantize && x.size() > 0) deq.download(out.dequantized.data.data());
  out.clipped = s.clipped_count();
}

void cast_quantize_cuda(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  require(spec.scheme == Scheme::Cast && (spec.element == ElementFormat::BF16 || spec.element == ElementFormat::FP16),
          "casts run on the GPU for BF16 and FP16 only");
  const bool bf16 = spec.element == ElementFormat::BF16;
  (void)dequantize;  // the cast always carries its values, as the CPU backend's
  prepare_cast_output(x, out);
  const std::size_t n = static_cast<std::size_t>(x.size());
  DeviceBuffer<float> dx(n, "cudaMalloc (x)"), deq(n, "cudaMalloc (dequantized)");
  DeviceBuffer<std::uint16_t> c16(n, "cudaMalloc (codes16)");
  DeviceBuffer<unsigned long long> clipped(1, "cudaMalloc (clipped)");
  dx.upload(x.data.data());
  if (n && bf16) cast_kernel<true><<<blocks_for(x.size()), kThreads>>>(dx.p, x.size(), c16.p, deq.p, clipped.p);
  if (n && !bf16) cast_kernel<false><<<blocks_for(x.size()), kThreads>>>(dx.p, x.size(), c16.p, deq.p, clipped.p);
  check(cudaGetLastError(), "cast_kernel launch");
  if (n) c16.download(out.codes16.data()), deq.download(out.dequantized.data.data());
  unsigned long long c = 0;
  clipped.download(&c);
  out.clipped = static_cast<std::int64_t>(c);
}

}  // namespace fp4d::cuda
