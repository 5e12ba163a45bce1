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
// The amax kernel walks the same tiles (phase A only, grid-stride, one resident wave of blocks)
// and reduces |x| and |RHT(x)| as unsigned keys (NaN -> 0; exact in any order), one atomicMax
// per key per block.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/bench_data.cuh"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/nvfp4_dual.hpp"
#include "format/bf16.hpp"
#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "quant/rht.hpp"

namespace fp4d::cuda {

namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps, kTileRows = 16, kTileCols = 64;  // 2 columns per lane
// The quantize kernel at 3 blocks (24 warps) per SM: 80 registers, no spills (H200, 8192^2 BF16:
// RNE 0.246 -> 0.224 ms, RHT+SR 0.577 -> 0.542 ms against the unbounded 86 registers / 2 blocks;
// 4 blocks spills and was slower for RNE).
constexpr int kQuantizeMinBlocks = 3;


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

// e2m1_sr(y, w, r.sr_bits, r.rng, index) without the clamp (e2m1_sr saturates every |y| >= 6,
// Inf included, to 7 with y's sign, as the clamp to +-6 followed by e2m1_sr does; NaN -> 7 both
// ways) and, except on an exact-SR tie, without float conversions: the lower neighbour code c
// and floor(f * 2^32) (f the fraction toward the upper neighbour, sr_fraction_floor32's value)
// come from the bits of |y|:
//  |y| >= 1   (grid = one mantissa bit):  c = (bits >> 22) - 252, f * 2^32 = bits << 10 (the
//             low 22 mantissa bits; exact, so f * 2^32 has no remainder and a tie rounds down);
//  |y| < 1    (spacing 0.5): c = (|y| >= 0.5), f * 2^32 = (|y| * 2^33) mod 2^32 = the 24-bit
//             significand m shifted by E - 117 (E the biased exponent; left shifts wrap the
//             code's bit away, right shifts truncate: that is the floor).
// Where exact SR's first word ties (w == floor(f * 2^32)) e2m1_sr itself decides (probability
// 2^-32). Checked equal to e2m1_sr for all 2^32 y, with random w, tie w and tie w +- 1, exact and
// k-bit SR, by dual_sr_fast_exhaustive_check (tests/gpu/test_gpu_nvfp4_dual.cpp).
__device__ __noinline__ std::uint32_t e2m1_sr_tie(float y, std::uint32_t w, RoundingSpec r, std::uint64_t index) {
  return e2m1_sr(y, w, r.sr_bits, r.rng, index);
}
__device__ __forceinline__ std::uint32_t e2m1_sr_fast(float y, std::uint32_t w, const RoundingSpec& r, int drop,
                                                      std::uint64_t index) {
  const std::uint32_t u = float_bits(y), ab = u & 0x7fffffffu, e = ab >> 23;
  const std::uint32_t m = (ab & 0x7fffffu) | (e != 0u ? 0x800000u : 0u);
  const std::uint32_t low = e >= 117u ? m << (e - 117u) : m >> min(117u - e, 31u);
  const bool ge1 = ab >= 0x3f800000u;
  const std::uint32_t f32 = ge1 ? ab << 10 : low;
  const std::uint32_t c = ge1 ? (ab >> 22) - 252u : static_cast<std::uint32_t>(ab >= 0x3f000000u);
  if (r.sr_bits == kSrExact && w == f32) return e2m1_sr_tie(y, w, r, index);
  const std::uint32_t up = static_cast<std::uint32_t>((w >> drop) < (f32 >> drop));
  const std::uint32_t mag = ab >= 0x40c00000u ? 7u : c + up;  // |y| >= 6, Inf or NaN: 7
  const std::uint32_t sign = ab > 0x7f800000u ? 0u : (u >> 28) & 8u;
  return mag | sign;
}

// One 1x16 block, as the CPU reference: block amax (NaN ignored: fmaxf returns the non-NaN
// operand, the values are >= +0, so this is max_ignore_nan), E4M3 scale, codes. No clamp before
// the conversions: e2m1_rne / e2m1_rz saturate exactly as the clamp does (all 2^32 inputs,
// long.formats), e2m1_sr_fast as said above. index0 (the first element's index in the stored
// orientation) is a multiple of 16, so the block's SR words are the four Philox blocks
// index0/4 .. index0/4 + 3: drawn once per 4 elements.
__device__ __forceinline__ std::uint8_t quantize_block(const float* v, GlobalScale g, bool legacy, const RoundingSpec& r,
                                                       std::uint64_t index0, std::uint8_t* codes8) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const std::uint8_t s = nvfp4_block_scale_code(amax, g.encode, legacy);
  const float e_b = nvfp4_block_encode_scale(s, g.decode);
  std::uint32_t w[2] = {0, 0};
  if (r.mode == Rounding::Stochastic) {
    const int drop = r.sr_bits == kSrExact ? 0 : 32 - r.sr_bits;
#pragma unroll
    for (int q4 = 0; q4 < 4; ++q4) {
      const Philox4x32 words = philox_block(r.rng, (index0 >> 2) + static_cast<std::uint64_t>(q4));
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int i = 4 * q4 + k;
        const std::uint32_t q = e2m1_sr_fast(v[i] * e_b, words.v[k], r, drop, index0 + static_cast<std::uint64_t>(i));
        w[i >> 3] |= q << (4 * (i & 7));
      }
    }
  } else if (r.mode == Rounding::TowardZero) {
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i >> 3] |= static_cast<std::uint32_t>(e2m1_rz(v[i] * e_b)) << (4 * (i & 7));
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i >> 3] |= static_cast<std::uint32_t>(e2m1_rne(v[i] * e_b)) << (4 * (i & 7));
  }
  *reinterpret_cast<uint2*>(codes8) = make_uint2(w[0], w[1]);
  return s;
}

// Grid-stride over the tiles, |x| and |RHT(x)| reduced in the warp, then in the block, then one
// atomicMax per key per block (one per warp and tile made the same-address atomics the
// bottleneck of this pass).
template <class T>
__global__ void __launch_bounds__(kThreads) dual_amax_kernel(const T* __restrict__ x, std::int64_t rows, std::int64_t cols,
                                                             DualSpec spec, std::uint32_t* keys) {
  __shared__ std::uint32_t part[2][kWarps];
  const int lane = static_cast<int>(threadIdx.x & 31u), warp = static_cast<int>(threadIdx.x >> 5);
  const std::int64_t tiles_per_row = (cols + kTileCols - 1) / kTileCols, tiles = (rows / kTileRows) * tiles_per_row;
  std::uint32_t kr = 0, kc = 0;
  for (std::int64_t tile = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp; tile < tiles;
       tile += static_cast<std::int64_t>(gridDim.x) * kWarps) {
    const std::int64_t r0 = (tile / tiles_per_row) * kTileRows, c = (tile % tiles_per_row) * kTileCols + 2 * lane;
    if (c >= cols) continue;
    float v[2][16];
    std::uint32_t k = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      load_pair(x + (r0 + i) * cols + c, &v[0][i], &v[1][i]);
      k = max(k, max(amax_key(v[0][i]), amax_key(v[1][i])));
    }
    kr = max(kr, k);
    if (spec.col_rht) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        rht16(v[j], spec);
#pragma unroll
        for (int i = 0; i < 16; ++i) kc = max(kc, amax_key(v[j][i]));
      }
    }
  }
  if (!spec.col_rht) kc = kr;
  kr = __reduce_max_sync(0xffffffffu, kr);
  kc = __reduce_max_sync(0xffffffffu, kc);
  if (lane == 0) part[0][warp] = kr, part[1][warp] = kc;
  __syncthreads();
  if (threadIdx.x < 2) {
    std::uint32_t m = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = max(m, part[threadIdx.x][w]);
    if (m) atomicMax(keys + threadIdx.x, m);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads, kQuantizeMinBlocks) dual_quantize_kernel(const T* __restrict__ x, std::int64_t rows,
                                                                            std::int64_t cols, DualSpec spec,
                                                                            const std::uint32_t* keys, DualOutputs out) {
  __shared__ float tile[kWarps][kTileRows][kTileCols + 1];
  if (spec.device_seed) spec.row_rounding.rng.seed = spec.col_rounding.rng.seed = *spec.device_seed;
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

// The amax kernel's grid: enough resident blocks to fill the device, no more (each block ends
// with one atomicMax per key).
template <class T>
unsigned amax_blocks(std::int64_t rows, std::int64_t cols) {
  const std::int64_t tiles = (rows / kTileRows) * ((cols + kTileCols - 1) / kTileCols);
  const std::int64_t need = (tiles + kWarps - 1) / kWarps;
  thread_local int cached_device = -1, cached_resident = 0;  // per thread: runs quantize concurrently
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev != cached_device) {
    int sms = 0, per_sm = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dual_amax_kernel<T>, kThreads, 0),
          "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    cached_resident = std::max(1, sms * std::max(1, per_sm));
    cached_device = dev;
  }
  return static_cast<unsigned>(std::min<std::int64_t>(need, cached_resident));
}

template <class T>
void launch(const T* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec, const DualOutputs& out,
            std::uint32_t* d_keys, void* stream) {
  check_shape(rows, cols);
  const auto st = static_cast<cudaStream_t>(stream);
  const std::int64_t tiles = (rows / kTileRows) * ((cols + kTileCols - 1) / kTileCols);
  const auto blocks = static_cast<unsigned>((tiles + kWarps - 1) / kWarps);
  check(cudaMemsetAsync(d_keys, 0, 2 * sizeof(std::uint32_t), st), "cudaMemsetAsync (amax keys)");
  dual_amax_kernel<T><<<amax_blocks<T>(rows, cols), kThreads, 0, st>>>(d_x, rows, cols, spec, d_keys);
  check(cudaGetLastError(), "dual_amax_kernel launch");
  dual_quantize_kernel<T><<<blocks, kThreads, 0, st>>>(d_x, rows, cols, spec, d_keys, out);
  check(cudaGetLastError(), "dual_quantize_kernel launch");
}


std::uint32_t sign_mask(const RhtSpec& r) {
  const std::vector<float> s = rht_signs(r);
  std::uint32_t m = 0;
  for (int i = 0; i < 16; ++i) m |= (s[static_cast<std::size_t>(i)] < 0 ? 1u : 0u) << i;
  return m;
}

// Every float32 y (as bits) against e2m1_sr: random w, the tie w = floor(f * 2^32) and its
// neighbours, 0 and ~0. Counts mismatches; *first_bad gets the smallest mismatching bits.
__global__ void sr_fast_check_kernel(int sr_bits, unsigned long long* bad, std::uint32_t* first_bad) {
  RoundingSpec r;
  r.mode = Rounding::Stochastic;
  r.sr_bits = sr_bits;
  r.rng = RngStream{0x0123456789abcdefull, 77};
  const int drop = sr_bits == kSrExact ? 0 : 32 - sr_bits;
  unsigned long long n_bad = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t b = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < (1ull << 32); b += stride) {
    const float y = bits_float(static_cast<std::uint32_t>(b));
    float f = 0.0f, rem;
    const float a = abs_f32(y);
    if (a < kE2M1Max) (void)e2m1_floor_and_fraction(a, &f);
    const std::uint32_t tie = sr_fraction_floor32(f, &rem);
    std::uint32_t h = static_cast<std::uint32_t>(b) * 0x9E3779B1u;
    h ^= h >> 15, h *= 0x85EBCA77u, h ^= h >> 13;
    const std::uint32_t ws[6] = {h, tie, tie - 1u, tie + 1u, 0u, 0xffffffffu};
#pragma unroll
    for (int k = 0; k < 6; ++k) {
      const std::uint64_t index = b * 7u + static_cast<std::uint64_t>(k);
      if (e2m1_sr_fast(y, ws[k], r, drop, index) != e2m1_sr(y, ws[k], sr_bits, r.rng, index)) {
        ++n_bad;
        atomicMin(first_bad, static_cast<std::uint32_t>(b));
      }
    }
  }
  if (n_bad) atomicAdd(bad, n_bad);
}

}  // namespace

// Test hook (tests/gpu/test_gpu_nvfp4_dual.cpp declares it): mismatches of the device-local fast
// SR conversion against e2m1_sr over all 2^32 float32 inputs for `sr_bits`.
std::uint64_t dual_sr_fast_exhaustive_check(int sr_bits, std::uint32_t* first_bad) {
  DeviceBuffer<unsigned long long> bad(1);
  DeviceBuffer<std::uint32_t> first(1);
  check(cudaMemset(bad.p, 0, sizeof(unsigned long long)), "cudaMemset");
  check(cudaMemset(first.p, 0xff, sizeof(std::uint32_t)), "cudaMemset");
  sr_fast_check_kernel<<<4096, 256>>>(sr_bits, bad.p, first.p);
  check(cudaGetLastError(), "sr_fast_check_kernel launch");
  check(cudaDeviceSynchronize(), "sr_fast_check_kernel");
  unsigned long long n = 0;
  check(cudaMemcpy(&n, bad.p, sizeof n, cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(first_bad, first.p, sizeof(std::uint32_t), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return n;
}

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
  r.amax_seconds = time_best([&] {
    if (bf16_input)
      dual_amax_kernel<std::uint16_t><<<amax_blocks<std::uint16_t>(rows, cols), kThreads>>>(xb.p, rows, cols, spec, keys.p);
    else dual_amax_kernel<float><<<amax_blocks<float>(rows, cols), kThreads>>>(xf.p, rows, cols, spec, keys.p);
  });
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  check(cudaGetLastError(), "dual benchmark");
  r.counted_bytes = static_cast<double>(n) * ((bf16_input ? 2.0 : 4.0) + 2.0 * (0.5 + 1.0 / 16.0));
  return r;
}

}  // namespace fp4d::cuda
