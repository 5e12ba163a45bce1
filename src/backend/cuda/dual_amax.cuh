// The amax pass of the rowwise + columnwise NVFP4 quantization (nvfp4_dual.hpp) over a tensor
// as a producer makes it (.cu files only). The keys are max |x| and max |RHT_16(x)| along the
// columns: the two global scales' amaxes, which every block scale needs before any element can
// be rounded, so the quantizer's own pass reads the whole tensor once more. The kernel that
// writes the tensor (an activation, its gradient: element-wise work) can instead be this pass:
// it walks the tensor in the quantizer's 16 x 64 tiles, so each lane holds the 16 values of a
// column block the RHT needs, and the tensor is read once less. The keys are the same bits
// whatever the producer: maxima are exact in any order, and the RHT is the quantizer's rht16.
// A producer makes elements (r, c) and (r, c + 1) (c even) in two steps: p.load(r, c) reads
// its inputs (a small struct, Produce::In), p.make(in, r, c, &a, &b) computes the pair, stores
// it where the tensor lives and returns the values in a and b. The split is what lets a lane
// issue the loads of all 16 rows of its column block before its first store: the compiler may
// not move a load above a store that might alias it, so one call per row would wait a memory
// latency per row (a latency-bound small tensor's pass took several times its launch cost).
// Where the tensor is not quantized as NVFP4, launch_produce runs the same producer without
// the amax pass, so each element's expression is written once.
// Internal linkage: each translation unit gets its own copy.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/nvfp4_dual.hpp"
#include "format/bf16.hpp"
#include "format/hd.hpp"

namespace fp4d::cuda {

namespace {

namespace dual_tile {
constexpr int kWarps = 8, kThreads = 32 * kWarps, kRows = 16, kCols = 64;  // 2 columns per lane
}  // namespace dual_tile

// Two adjacent elements (c even, cols even: 4- / 8-byte aligned) in one load.
__device__ __forceinline__ void load_pair(const float* p, float* a, float* b) {
  const float2 v = __ldg(reinterpret_cast<const float2*>(p));
  *a = v.x, *b = v.y;
}
__device__ __forceinline__ void load_pair(const std::uint16_t* p, float* a, float* b) {
  const std::uint32_t v = __ldg(reinterpret_cast<const unsigned int*>(p));
  *a = bits_float(v << 16), *b = bits_float(v & 0xffff0000u);  // BF16 -> float32, exact
}

// The quantizer's own producer: the tensor as it is (float32 or BF16 bits, row-major).
template <class T>
struct LoadPair {
  const T* x;
  std::int64_t cols;
  using In = float2;
  __device__ __forceinline__ In load(std::int64_t r, std::int64_t c) const {
    In v;
    load_pair(x + r * cols + c, &v.x, &v.y);
    return v;
  }
  __device__ __forceinline__ void make(const In& in, std::int64_t, std::int64_t, float* a, float* b) const {
    *a = in.x, *b = in.y;
  }
};

// The RHT's sign vector as +-1.0f kernel arguments (operands of the first butterflies straight
// from the constant bank) and its BF16 option.
struct RhtArgs {
  float sign[16];
  bool bf16_output;
};
RhtArgs rht_args(const DualSpec& s) {
  RhtArgs a{};
  for (int i = 0; i < 16; ++i) a.sign[i] = ((s.rht_sign_mask >> i) & 1u) ? -1.0f : 1.0f;
  a.bf16_output = s.rht_bf16_output;
  return a;
}

// One stage of fwht_inplace (rht.hpp) at stride H.
template <int H>
__device__ __forceinline__ void butterflies(float* v) {
#pragma unroll
  for (int i = 0; i < 16; i += 2 * H)
#pragma unroll
    for (int j = i; j < i + H; ++j) {
      const float a = v[j], b = v[j + H];
      v[j] = a + b;
      v[j + H] = a - b;
    }
}

// rht.hpp's float32 order: x * s_i, butterflies, x (1/4), optional BF16. The sign products are
// exact, so the first butterflies fold them in: fma(a, s_a, b * s_b) is the rounded
// a * s_a + b * s_b, the same value as (a * s_a) + (b * s_b) (and fma(a, s_a, -(b * s_b)) the
// difference), one instruction fewer per pair.
__device__ __forceinline__ void rht16(float* v, const RhtArgs& s) {
#pragma unroll
  for (int j = 0; j < 16; j += 2) {
    const float a = v[j], t = v[j + 1] * s.sign[j + 1];
    v[j] = __fmaf_rn(a, s.sign[j], t);
    v[j + 1] = __fmaf_rn(a, s.sign[j], -t);
  }
  butterflies<2>(v);
  butterflies<4>(v);
  butterflies<8>(v);
  // rht_scale_f32(16) = 1/4, exact. The BF16 choice is tested once: as a select per element it
  // compiled to a compare and a branch per element.
  if (s.bf16_output) {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = bf16_round(v[i] * 0.25f);
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] *= 0.25f;
  }
}

// Grid-stride over the tiles, |x| and |RHT(x)| reduced in the warp, then in the block, then one
// atomicMax per key per block (one per warp and tile made the same-address atomics the
// bottleneck of this pass). fmaxf ignores NaN (its other operand is returned) and the values
// are >= +0, so the maxima are the reference's max_ignore_nan; their bits are the keys.
template <class Produce>
__global__ void __launch_bounds__(dual_tile::kThreads) dual_amax_kernel(Produce produce, std::int64_t rows, std::int64_t cols,
                                                                        bool rht, RhtArgs rs, std::uint32_t* keys) {
  constexpr int kWarps = dual_tile::kWarps, kRows = dual_tile::kRows, kCols = dual_tile::kCols;
  const int lane = static_cast<int>(threadIdx.x & 31u), warp = static_cast<int>(threadIdx.x >> 5);
  const std::int64_t tiles_per_row = (cols + kCols - 1) / kCols, tiles = (rows / kRows) * tiles_per_row;
  float ar = 0.0f, ac = 0.0f;
  for (std::int64_t tile = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp; tile < tiles;
       tile += static_cast<std::int64_t>(gridDim.x) * kWarps) {
    const std::int64_t r0 = (tile / tiles_per_row) * kRows, c = (tile % tiles_per_row) * kCols + 2 * lane;
    if (c >= cols) continue;
    typename Produce::In in[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) in[i] = produce.load(r0 + i, c);
    float v[2][16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      produce.make(in[i], r0 + i, c, &v[0][i], &v[1][i]);
      ar = fmaxf(ar, fmaxf(fabsf(v[0][i]), fabsf(v[1][i])));
    }
    if (rht) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        rht16(v[j], rs);
#pragma unroll
        for (int i = 0; i < 16; ++i) ac = fmaxf(ac, fabsf(v[j][i]));
      }
    }
  }
  if (!rht) ac = ar;
  const std::uint32_t mine[2] = {float_bits(ar), float_bits(ac)};
  block_max_to_keys<dual_tile::kThreads>(mine, keys);
}

// The amax kernel's grid: enough resident blocks to fill the device, no more (each block ends
// with one atomicMax per key).
template <class Produce>
unsigned amax_blocks(std::int64_t rows, std::int64_t cols) {
  const std::int64_t tiles = (rows / dual_tile::kRows) * ((cols + dual_tile::kCols - 1) / dual_tile::kCols);
  const std::int64_t need = (tiles + dual_tile::kWarps - 1) / dual_tile::kWarps;
  thread_local int cached_device = -1, cached_resident = 0;  // per thread: runs quantize concurrently
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev != cached_device) {
    int sms = 0, per_sm = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, dual_amax_kernel<Produce>, dual_tile::kThreads, 0),
          "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    cached_resident = std::max(1, sms * std::max(1, per_sm));
    cached_device = dev;
  }
  return static_cast<unsigned>(std::min<std::int64_t>(need, cached_resident));
}

// The amax pass over what `produce` makes (rows x cols, multiples of 16): zeroes keys[0..1],
// then leaves max |x| and, with spec.col_rht, max |RHT_16(x)| along the columns there (else
// max |x| twice). Asynchronous on st.
template <class Produce>
void launch_dual_amax(const Produce& produce, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                      std::uint32_t* keys, cudaStream_t st) {
  // Whole 16 x 16 blocks only: the walk would leave a partial row block unmade.
  if (rows <= 0 || cols <= 0 || rows % 16 != 0 || cols % 16 != 0)
    throw std::invalid_argument("dual NVFP4 amax pass: rows and cols must be positive multiples of 16 (got " +
                                std::to_string(rows) + " x " + std::to_string(cols) + ")");
  check(cudaMemsetAsync(keys, 0, 2 * sizeof(std::uint32_t), st), "cudaMemsetAsync (amax keys)");
  dual_amax_kernel<Produce><<<amax_blocks<Produce>(rows, cols), dual_tile::kThreads, 0, st>>>(
      produce, rows, cols, spec.col_rht, rht_args(spec), keys);
  check(cudaGetLastError(), "dual_amax_kernel launch");
}

// Every element pair of a rows x cols tensor (cols even) through `produce`, nothing else: a
// grid-stride loop over the pairs.
template <class Produce>
__global__ void __launch_bounds__(dual_tile::kThreads) produce_kernel(Produce produce, std::int64_t rows, std::int64_t cols) {
  const std::int64_t half = cols / 2;
  for (std::int64_t q = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; q < rows * half;
       q += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = q / half, c = 2 * (q % half);
    float a, b;
    produce.make(produce.load(r, c), r, c, &a, &b);
  }
}
template <class Produce>
void launch_produce(const Produce& produce, std::int64_t rows, std::int64_t cols, cudaStream_t st) {
  if (rows <= 0 || cols <= 0 || cols % 2 != 0)
    throw std::invalid_argument("element pairs: rows and an even number of columns (got " + std::to_string(rows) +
                                " x " + std::to_string(cols) + ")");
  const std::int64_t pairs = rows * (cols / 2);
  const auto blocks = static_cast<unsigned>(
      std::min<std::int64_t>((pairs + dual_tile::kThreads - 1) / dual_tile::kThreads, 65535));
  produce_kernel<Produce><<<blocks, dual_tile::kThreads, 0, st>>>(produce, rows, cols);
  check(cudaGetLastError(), "produce_kernel launch");
}

// The tensor `produce` makes, with the amax pass of its NVFP4 quantization (spec) into
// amax_keys where they are given, else alone; true where the keys were made.
template <class Produce>
bool produce_tensor(const Produce& produce, std::int64_t rows, std::int64_t cols, std::uint32_t* amax_keys,
                    const DualSpec& spec, cudaStream_t st) {
  if (!amax_keys) {
    launch_produce(produce, rows, cols, st);
    return false;
  }
  launch_dual_amax(produce, rows, cols, spec, amax_keys, st);
  return true;
}

}  // namespace

}  // namespace fp4d::cuda
