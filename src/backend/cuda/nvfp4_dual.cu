// Rowwise + columnwise (+ RHT) NVFP4 quantization in one pass (see nvfp4_dual.hpp).
//
// Work unit: one warp per 16-row x 64-column tile.
//  phase A  lane = two adjacent columns: 16 loads of a pair down the columns (row r0 + i at all
//           lanes is one 128-byte (BF16) or 256-byte (float) segment); the values go to shared
//           memory; the lane applies the RHT to each column (signs, fast Walsh-Hadamard
//           butterflies, x 1/4, optional BF16 - rht.hpp's order) and quantizes each as one
//           columnwise 1x16 block (8 code bytes in the transposed output, one scale byte).
//  phase B  64 rowwise 1x16 blocks per tile, two per lane, read from shared memory and
//           quantized with the rowwise global scale.
// Every rounding decision is the shared FP4D_HD code of the CPU backend (--fmad=false), with the
// element's index in its stored orientation as the Philox counter, so the bits agree.
// The amax kernel walks the same tiles (phase A only) and reduces |x| and |RHT(x)| as unsigned
// keys (NaN -> 0; exact in any order).
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/bench_data.cuh"
#include "backend/cuda/nvfp4_dual.hpp"
#include "format/bf16.hpp"
#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "quant/rht.hpp"

namespace fp4d::cuda {

namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps, kTileRows = 16, kTileCols = 64;  // 2 columns per lane

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

// Two adjacent elements (c even, cols even: 4- / 8-byte aligned) in one load.
__device__ __forceinline__ void load_pair(const float* p, float* a, float* b) {
  const float2 v = __ldg(reinterpret_cast<const float2*>(p));
  *a = v.x, *b = v.y;
}
__device__ __forceinline__ void load_pair(const std::uint16_t* p, float* a, float* b) {
  const std::uint32_t v = __ldg(reinterpret_cast<const unsigned int*>(p));
  *a = bits_float(v << 16), *b = bits_float(v & 0xffff0000u);  // BF16 -> float32, exact
}

__device__ __forceinline__ std::uint32_t amax_key(float x) {
  const std::uint32_t a = float_bits(x) & 0x7fffffffu;
  return a <= 0x7f800000u ? a : 0u;
}

struct Tile {
  std::int64_t r0, c0;
  int lane, warp;
};
__device__ __forceinline__ bool tile_of_warp(std::int64_t rows, std::int64_t cols, Tile* t) {
  t->lane = static_cast<int>(threadIdx.x & 31u);
  t->warp = static_cast<int>(threadIdx.x >> 5);
  const std::int64_t tiles_per_row = (cols + kTileCols - 1) / kTileCols;
  const std::int64_t tile = static_cast<std::int64_t>(blockIdx.x) * kWarps + t->warp;
  if (tile >= (rows / kTileRows) * tiles_per_row) return false;
  t->r0 = (tile / tiles_per_row) * kTileRows;
  t->c0 = (tile % tiles_per_row) * kTileCols;
  return true;
}

// rht.hpp's float32 order: x * s_i, butterflies, x (1/4), optional BF16.
__device__ __forceinline__ void rht16(float* v, const DualSpec& s) {
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = v[i] * (((s.rht_sign_mask >> i) & 1u) ? -1.0f : 1.0f);
  fwht_inplace(v, 16);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const float t = v[i] * 0.25f;  // rht_scale_f32(16), exact
    v[i] = s.rht_bf16_output ? bf16_round(t) : t;
  }
}

// One 1x16 block, as the CPU reference: block amax (NaN ignored), E4M3 scale, codes. index0
// (the first element's index in the stored orientation) is a multiple of 16, so the block's
// SR words are the four Philox blocks index0/4 .. index0/4 + 3: drawn once per 4 elements
// (philox_word would recompute a block per element) and passed to e2m1_sr as e2m1_round does.
__device__ __forceinline__ std::uint8_t quantize_block(const float* v, GlobalScale g, bool legacy, const RoundingSpec& r,
                                                       std::uint64_t index0, std::uint8_t* codes8) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) amax = max_ignore_nan(amax, abs_f32(v[i]));
  const std::uint8_t s = nvfp4_block_scale_code(amax, g.encode, legacy);
  const float e_b = nvfp4_block_encode_scale(s, g.decode);
  std::uint32_t w[2] = {0, 0};
  if (r.mode == Rounding::Stochastic) {
#pragma unroll
    for (int q4 = 0; q4 < 4; ++q4) {
      const Philox4x32 words = philox_block(r.rng, (index0 >> 2) + static_cast<std::uint64_t>(q4));
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int i = 4 * q4 + k;
        bool clip;
        const std::uint8_t q = e2m1_sr(clamp_e2m1_range(v[i] * e_b, &clip), words.v[k], r.sr_bits, r.rng,
                                       index0 + static_cast<std::uint64_t>(i));
        w[i >> 3] |= static_cast<std::uint32_t>(q) << (4 * (i & 7));
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      bool clip;
      const std::uint8_t q = e2m1_round(clamp_e2m1_range(v[i] * e_b, &clip), r, index0 + static_cast<std::uint64_t>(i));
      w[i >> 3] |= static_cast<std::uint32_t>(q) << (4 * (i & 7));
    }
  }
  *reinterpret_cast<uint2*>(codes8) = make_uint2(w[0], w[1]);
  return s;
}

template <class T>
__global__ void __launch_bounds__(kThreads) dual_amax_kernel(const T* __restrict__ x, std::int64_t rows, std::int64_t cols,
                                                             DualSpec spec, std::uint32_t* keys) {
  Tile t;
  if (!tile_of_warp(rows, cols, &t)) return;  // whole warps leave together
  const std::int64_t c = t.c0 + 2 * t.lane;
  std::uint32_t kr = 0, kc = 0;
  if (c < cols) {
    float v[2][16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      load_pair(x + (t.r0 + i) * cols + c, &v[0][i], &v[1][i]);
      kr = max(kr, max(amax_key(v[0][i]), amax_key(v[1][i])));
    }
    if (spec.col_rht) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        rht16(v[j], spec);
#pragma unroll
        for (int i = 0; i < 16; ++i) kc = max(kc, amax_key(v[j][i]));
      }
    } else {
      kc = kr;
    }
  }
  kr = __reduce_max_sync(0xffffffffu, kr);
  kc = __reduce_max_sync(0xffffffffu, kc);
  if (t.lane == 0) {
    if (kr) atomicMax(keys, kr);
    if (kc) atomicMax(keys + 1, kc);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) dual_quantize_kernel(const T* __restrict__ x, std::int64_t rows, std::int64_t cols,
                                                                 DualSpec spec, const std::uint32_t* keys, DualOutputs out) {
  __shared__ float tile[kWarps][kTileRows][kTileCols + 1];
  const GlobalScale gr = nvfp4_global_scale(bits_float(keys[0])), gc = nvfp4_global_scale(bits_float(keys[1]));
  if (blockIdx.x == 0 && threadIdx.x == 0) out.globals[0] = gr, out.globals[1] = gc;
  Tile t;
  if (!tile_of_warp(rows, cols, &t)) return;
  // Phase A: the lane's two columns.
  const std::int64_t c = t.c0 + 2 * t.lane;
  if (c < cols) {
    float v[2][16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      load_pair(x + (t.r0 + i) * cols + c, &v[0][i], &v[1][i]);
      tile[t.warp][i][2 * t.lane] = v[0][i];
      tile[t.warp][i][2 * t.lane + 1] = v[1][i];
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (spec.col_rht) rht16(v[j], spec);
      const std::int64_t base = (c + j) * rows + t.r0;  // index in the transposed (stored) orientation
      out.col_scales[base / 16] = quantize_block(v[j], gc, spec.legacy, spec.col_rounding,
                                                 static_cast<std::uint64_t>(base), out.col_codes + base / 2);
    }
  }
  __syncwarp();
  // Phase B: two rowwise blocks per lane (16 rows x 4 blocks per tile).
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int b = t.lane + 32 * k, i = b >> 2, blk = b & 3;
    const std::int64_t cb = t.c0 + 16 * blk, r = t.r0 + i;
    if (cb < cols) {
      float v[16];
#pragma unroll
      for (int e = 0; e < 16; ++e) v[e] = tile[t.warp][i][16 * blk + e];
      const std::int64_t base = r * cols + cb;
      out.row_scales[base / 16] = quantize_block(v, gr, spec.legacy, spec.row_rounding, static_cast<std::uint64_t>(base),
                                                 out.row_codes + base / 2);
    }
  }
}

void check_shape(std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0 || rows % 16 != 0 || cols % 16 != 0)
    throw std::invalid_argument("dual NVFP4 quantization needs rows and cols that are positive multiples of 16 (got " +
                                std::to_string(rows) + " x " + std::to_string(cols) + ")");
}

template <class T>
void launch(const T* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec, const DualOutputs& out,
            std::uint32_t* d_keys, void* stream) {
  check_shape(rows, cols);
  const auto st = static_cast<cudaStream_t>(stream);
  const std::int64_t tiles = (rows / kTileRows) * ((cols + kTileCols - 1) / kTileCols);
  const auto blocks = static_cast<unsigned>((tiles + kWarps - 1) / kWarps);
  check(cudaMemsetAsync(d_keys, 0, 2 * sizeof(std::uint32_t), st), "cudaMemsetAsync (amax keys)");
  dual_amax_kernel<T><<<blocks, kThreads, 0, st>>>(d_x, rows, cols, spec, d_keys);
  check(cudaGetLastError(), "dual_amax_kernel launch");
  dual_quantize_kernel<T><<<blocks, kThreads, 0, st>>>(d_x, rows, cols, spec, d_keys, out);
  check(cudaGetLastError(), "dual_quantize_kernel launch");
}

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(std::size_t n) { check(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

std::uint32_t sign_mask(const RhtSpec& r) {
  const std::vector<float> s = rht_signs(r);
  std::uint32_t m = 0;
  for (int i = 0; i < 16; ++i) m |= (s[static_cast<std::size_t>(i)] < 0 ? 1u : 0u) << i;
  return m;
}

}  // namespace

DualSpec dual_spec(const QuantSpec& row, const QuantSpec& col) {
  const auto is_1x16 = [](const QuantSpec& s) {
    return s.scheme == Scheme::Nvfp4 && s.block_rows == 1 && s.block_cols == 16;
  };
  if (!is_1x16(row) || row.axis != 1 || row.rht.enabled())
    throw std::invalid_argument("dual NVFP4: the rowwise spec must be NVFP4 1x16 along axis 1 without RHT");
  if (!is_1x16(col) || col.axis != 0 || (col.rht.enabled() && (col.rht.size != 16 || col.rht_axis != 0)))
    throw std::invalid_argument("dual NVFP4: the columnwise spec must be NVFP4 1x16 along axis 0, RHT off or 16 along axis 0");
  if (row.nv_scale_rule != col.nv_scale_rule)
    throw std::invalid_argument("dual NVFP4: both directions must use the same block-scale rule");
  DualSpec d;
  d.row_rounding = row.rounding;
  d.col_rounding = col.rounding;
  d.legacy = row.nv_scale_rule == NvScaleRule::TeLegacy;
  d.col_rht = col.rht.enabled();
  if (d.col_rht) {
    d.rht_sign_mask = sign_mask(col.rht);
    d.rht_bf16_output = col.rht.bf16_output;
  }
  return d;
}

void nvfp4_quantize_dual_device(const float* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                                const DualOutputs& out, std::uint32_t* d_keys, void* stream) {
  launch(d_x, rows, cols, spec, out, d_keys, stream);
}
void nvfp4_quantize_dual_device(const std::uint16_t* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                                const DualOutputs& out, std::uint32_t* d_keys, void* stream) {
  launch(d_x, rows, cols, spec, out, d_keys, stream);
}

DualHostResult nvfp4_quantize_dual_cuda(const Matrix& x, const QuantSpec& row_spec, const QuantSpec& col_spec) {
  const DualSpec spec = dual_spec(row_spec, col_spec);
  check_shape(x.rows, x.cols);
  const auto n = static_cast<std::size_t>(x.size());
  DeviceBuffer<float> dx(n);
  DeviceBuffer<std::uint8_t> rc(n / 2), rs(n / 16), cc(n / 2), cs(n / 16);
  DeviceBuffer<GlobalScale> g(2);
  DeviceBuffer<std::uint32_t> keys(2);
  check(cudaMemcpy(dx.p, x.data.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy (x)");
  nvfp4_quantize_dual_device(dx.p, x.rows, x.cols, spec, DualOutputs{rc.p, rs.p, cc.p, cs.p, g.p}, keys.p);
  check(cudaDeviceSynchronize(), "dual NVFP4 kernels");
  DualHostResult h;
  h.row_codes.resize(n / 2), h.col_codes.resize(n / 2), h.row_scales.resize(n / 16), h.col_scales.resize(n / 16);
  check(cudaMemcpy(h.row_codes.data(), rc.p, n / 2, cudaMemcpyDeviceToHost), "cudaMemcpy (row codes)");
  check(cudaMemcpy(h.col_codes.data(), cc.p, n / 2, cudaMemcpyDeviceToHost), "cudaMemcpy (col codes)");
  check(cudaMemcpy(h.row_scales.data(), rs.p, n / 16, cudaMemcpyDeviceToHost), "cudaMemcpy (row scales)");
  check(cudaMemcpy(h.col_scales.data(), cs.p, n / 16, cudaMemcpyDeviceToHost), "cudaMemcpy (col scales)");
  GlobalScale gs[2];
  check(cudaMemcpy(gs, g.p, sizeof gs, cudaMemcpyDeviceToHost), "cudaMemcpy (globals)");
  h.row_global = gs[0];
  h.col_global = gs[1];
  return h;
}

DualBench nvfp4_quantize_dual_bench(std::int64_t rows, std::int64_t cols, bool bf16_input, bool rht, bool sr, int repeat) {
  check_shape(rows, cols);
  if (repeat < 1) throw std::invalid_argument("--repeat must be >= 1");
  const std::int64_t n = rows * cols;
  DeviceBuffer<float> xf(static_cast<std::size_t>(n));
  DeviceBuffer<std::uint16_t> xb(bf16_input ? static_cast<std::size_t>(n) : 0);
  DeviceBuffer<std::uint8_t> rc(static_cast<std::size_t>(n / 2)), rs(static_cast<std::size_t>(n / 16)),
      cc(static_cast<std::size_t>(n / 2)), cs(static_cast<std::size_t>(n / 16));
  DeviceBuffer<GlobalScale> g(2);
  DeviceBuffer<std::uint32_t> keys(2);
  bench_data::fill_kernel<<<bench_data::blocks_for(n, 256), 256>>>(xf.p, n, 3u);
  if (bf16_input) bench_data::to_bf16_kernel<<<bench_data::blocks_for(n, 256), 256>>>(xf.p, xb.p, n);
  check(cudaGetLastError(), "bench data kernels");
  DualSpec spec;
  spec.col_rht = rht;
  spec.rht_sign_mask = kTeRhtSignMask;
  if (sr) {
    spec.row_rounding.mode = spec.col_rounding.mode = Rounding::Stochastic;
    spec.row_rounding.rng = RngStream{1, 1};
    spec.col_rounding.rng = RngStream{1, 2};
  }
  const DualOutputs out{rc.p, rs.p, cc.p, cs.p, g.p};
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  const auto time_best = [&](auto&& f) {
    f();
    float best = 1e30f;
    for (int i = 0; i < repeat; ++i) {
      check(cudaEventRecord(a), "cudaEventRecord");
      f();
      check(cudaEventRecord(b), "cudaEventRecord");
      check(cudaEventSynchronize(b), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
      best = std::min(best, ms);
    }
    return static_cast<double>(best) * 1e-3;
  };
  DualBench r;
  if (bf16_input) {
    r.seconds = time_best([&] { nvfp4_quantize_dual_device(xb.p, rows, cols, spec, out, keys.p); });
  } else {
    r.seconds = time_best([&] { nvfp4_quantize_dual_device(xf.p, rows, cols, spec, out, keys.p); });
  }
  const std::int64_t tiles = (rows / kTileRows) * ((cols + kTileCols - 1) / kTileCols);
  const auto blocks = static_cast<unsigned>((tiles + kWarps - 1) / kWarps);
  r.amax_seconds = time_best([&] {
    if (bf16_input) dual_amax_kernel<std::uint16_t><<<blocks, kThreads>>>(xb.p, rows, cols, spec, keys.p);
    else dual_amax_kernel<float><<<blocks, kThreads>>>(xf.p, rows, cols, spec, keys.p);
  });
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  check(cudaGetLastError(), "dual benchmark");
  r.counted_bytes = static_cast<double>(n) * ((bf16_input ? 2.0 : 4.0) + 2.0 * (0.5 + 1.0 / 16.0));
  return r;
}

}  // namespace fp4d::cuda
