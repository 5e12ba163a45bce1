// The device side of the resident mlp step (mlp.cu, .cu files only): model/mlp_math.hpp's
// element-wise expressions (as dual_amax.cuh producers), the loss with its fixed reduction
// tree, and the optimizers (the GEMM operands' casts and quantizations are recipe_linear.cu's).
// Everything a kernel reads that changes from step to step comes from device memory
// (StepParams), so one captured CUDA graph replays every step. Internal linkage: the kernels belong to the one
// translation unit that launches them.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/dual_amax.cuh"
#include "backend/cuda/launch_util.cuh"
#include "model/mlp_math.hpp"
#include "quant/nvfp4_math.hpp"

namespace fp4d::cuda {

namespace {

// ---- element-wise kernels: model/mlp_math.hpp's expressions in float32 (--fmad=false) ----
constexpr float kInvSqrt2 = 0.70710678118654752440084436210485f;
constexpr float kInvSqrt2Pi = 0.39894228040143267793994605993438f;

__device__ __forceinline__ float act_f(int gelu, float z) {
  return gelu ? mlp_math::gelu(z, float{kInvSqrt2}) : mlp_math::relu(z);
}
__device__ __forceinline__ float act_df(int gelu, float z) {
  return gelu ? mlp_math::gelu_derivative(z, float{kInvSqrt2}, float{kInvSqrt2Pi}) : mlp_math::relu_derivative(z);
}

// The activation and its gradient as producers of dual_amax.cuh (launch_dual_amax where the
// next layer quantizes the tensor as NVFP4, its amaxes computed on the way; else
// launch_produce): element pairs (r, c), (r, c + 1) of a row-major tensor with `cols` columns,
// stored and returned.
struct ActForwardPair {
  const float* z;
  float* h;
  std::int64_t cols;
  int gelu;
  using In = float2;  // z
  __device__ __forceinline__ In load(std::int64_t r, std::int64_t c) const {
    return *reinterpret_cast<const float2*>(z + r * cols + c);
  }
  __device__ __forceinline__ void make(const In& zz, std::int64_t r, std::int64_t c, float* a, float* b) const {
    *a = act_f(gelu, zz.x), *b = act_f(gelu, zz.y);
    *reinterpret_cast<float2*>(h + r * cols + c) = make_float2(*a, *b);
  }
};
struct ActBackwardPair {
  const float* dh;
  const float* z;
  float* dz;
  std::int64_t cols;
  int gelu;
  struct In {
    float2 d, z;
  };
  __device__ __forceinline__ In load(std::int64_t r, std::int64_t c) const {
    const std::int64_t i = r * cols + c;
    return {*reinterpret_cast<const float2*>(dh + i), *reinterpret_cast<const float2*>(z + i)};
  }
  __device__ __forceinline__ void make(const In& in, std::int64_t r, std::int64_t c, float* a, float* b) const {
    *a = in.d.x * act_df(gelu, in.z.x), *b = in.d.y * act_df(gelu, in.z.y);
    *reinterpret_cast<float2*>(dz + r * cols + c) = make_float2(*a, *b);
  }
};

// The loss terms, one per row (sample), as sim/mlp.cpp computes them; tree_sum_kernel adds
// them in model/tree_sum.hpp's order.
// Regression: term_i = sum_j (double(Y) - double(T))^2 in ascending j; dZ = (Y - T) / (M out) in
// float32. Each row's sum is a chain in j, one thread's, so there are only M chains, and for one
// warp to also do the per-element work (two float -> double conversions, a quarter-rate pipe, and
// dZ's IEEE division) would bound the kernel by that warp's issue rate; and with so few threads
// the bytes in flight must come from asynchronous copies. So a block of kMseRows rows specialises
// its warps:
//  - the kMseProducerWarps producer warps stream tiles of kMseRows x kMseCols of Y and T into a
//    ring of kMseStages shared-memory stages by cp.async, kMseStages - 1 tiles ahead (28 KB a
//    block, two blocks a multiprocessor for M = 4096: the DRAM sees enough requests), holding no
//    registers while in flight; then, a lane per column, they store dZ (128 bytes a row) and the
//    products d * d (rounded to double) into the double-buffered tile `sq`;
//  - warp 0, a lane per row, adds its row's products of the previous tile in ascending j: the
//    roundings of one thread doing it all, its chain overlapping the next tile's products.
// One __syncthreads per tile orders it: after the barrier of tile k, tile k has landed
// (cp.async.wait_group, then the barrier), the stage of tile k - 1 is free for tile
// k + kMseStages - 1, and sq[k % 2] is written (its tile k - 2 was summed before the barrier)
// while warp 0 reads sq[(k - 1) % 2]. Rows of 16-byte-aligned Y and T with out % 4 == 0 come in
// as 16-byte copies, any other shape as 4-byte ones into the same layout; nothing out of range
// is copied, added or stored. sq is swizzled: row i's 16-byte chunk j (columns 2j, 2j + 1) lies
// at chunk j ^ (i % 8), so warp 0's 16-byte reads (a lane per row, rows 256 bytes apart) hit all
// 32 banks in each quarter warp, and a producer's row of 32 doubles still fills whole wavefronts.
// Where dZ is quantized as NVFP4 next (MseAmax::keys given; M a multiple of 16, so a block's 16
// rows are the quantizer's 16-row column blocks), the kernel is also that quantization's amax
// pass (dual_amax.cuh's keys, the same bits): the producers keep max |dZ|, store each tile's dZ
// in a shared tile too, and in the next tile's interval warp 1 takes that tile's columns, a lane
// each, through the quantizer's rht16 for max |RHT_16(dZ)|; one atomicMax per key and block.
struct MseAmax {
  std::uint32_t* keys = nullptr;  // zeroed before the launch; nullptr: no amax pass
  bool rht = false;
  RhtArgs rs{};
};
constexpr int kMseRows = 16;  // rows per block (the sums' lanes of warp 0)
constexpr int kMseCols = 32;  // columns per tile (a producer lane each)
constexpr int kMseStages = 8;
constexpr int kMseProducerWarps = 8;
constexpr int kMseThreads = 32 * (1 + kMseProducerWarps);
static_assert((kMseStages & (kMseStages - 1)) == 0 && kMseStages >= 2, "mse_kernel: a power-of-2 ring");
static_assert(kMseRows % kMseProducerWarps == 0 && kMseRows % 8 == 0 && kMseRows <= 32, "mse_kernel: row split");
unsigned mse_blocks(std::int64_t M) {
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>((M + kMseRows - 1) / kMseRows, 65535)));
}
__global__ void __launch_bounds__(kMseThreads) mse_kernel(const float* __restrict__ y, const float* __restrict__ t,
                                                           float* __restrict__ dz, std::int64_t M, std::int64_t out,
                                                           float denom, double* __restrict__ terms, MseAmax amax) {
  constexpr int RB = kMseRows, C = kMseCols, PW = kMseProducerWarps, S = kMseStages;
  constexpr int PR = RB / PW;  // rows per producer lane
  static_assert(RB == 16, "mse_kernel: the amax pass's column blocks are the block's 16 rows");
  __shared__ __align__(16) float ys[S][RB][C], ts[S][RB][C];  // [stage][row][column]
  __shared__ __align__(16) double sq[2][RB][C];               // [tile % 2][row][swizzled column]
  __shared__ float dzs[2][RB][C + 1];  // [tile % 2][row][column] (amax pass only; padded: no bank conflicts)
  const bool keys = amax.keys != nullptr;
  float ar = 0.0f, ac = 0.0f;  // max |dZ| (producers), max |RHT_16(dZ)| along columns (warp 1)
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int p = tid - 32;  // producer thread index (warps 1 ..)
  const bool vec =
      out % 4 == 0 && ((reinterpret_cast<std::uintptr_t>(y) | reinterpret_cast<std::uintptr_t>(t)) & 15) == 0;
  const std::int64_t tiles = (out + C - 1) / C;
  for (std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * RB; r0 < M;
       r0 += static_cast<std::int64_t>(gridDim.x) * RB) {
    const int rows = M - r0 < RB ? static_cast<int>(M - r0) : RB;
    // The producers copy tile k into stage k % S (nothing past the last tile): 16-byte chunk p % 8
    // of rows p / 8 + 32 PW / 8 n, or column p % 32 of rows p / 32 + PW n. Every thread commits
    // a group per call, empty or not, so that the wait below counts tiles.
    const auto issue = [&](std::int64_t k) {
      if (warp > 0 && k < tiles) {
        const int s = static_cast<int>(k & (S - 1));
        const std::int64_t c0 = k * C;
        if (vec) {
#pragma unroll
          for (int r = p / (C / 4); r < RB; r += 32 * PW / (C / 4)) {
            const int c = p % (C / 4) * 4;
            if (r < rows && c0 + c < out) {
              const std::int64_t off = (r0 + r) * out + c0 + c;
              copy_to_shared_async<16>(&ys[s][r][c], y + off);
              copy_to_shared_async<16>(&ts[s][r][c], t + off);
            }
          }
        } else {
#pragma unroll
          for (int r = p / C; r < RB; r += 32 * PW / C) {
            const int c = p % C;
            if (r < rows && c0 + c < out) {
              const std::int64_t off = (r0 + r) * out + c0 + c;
              copy_to_shared_async<4>(&ys[s][r][c], y + off);
              copy_to_shared_async<4>(&ts[s][r][c], t + off);
            }
          }
        }
      }
      copy_to_shared_commit();
    };
    for (int k = 0; k < S - 1; ++k) issue(k);
    double acc = 0.0;  // warp 0: row r0 + lane's sum
    for (std::int64_t k = 0; k <= tiles; ++k) {
      copy_to_shared_wait_prior<S - 2>();  // tile k (groups are committed in tile order)
      __syncthreads();
      issue(k + S - 1);
      if (warp > 0) {
        if (k < tiles) {  // tile k, a lane per column, rows warp - 1 + PW i
          const int s = static_cast<int>(k & (S - 1));
          const std::int64_t c = k * C + lane;
          float* const dzp = dz + (r0 + warp - 1) * out + c;
          // The products first, then the divisions, whose slow-path branches would otherwise
          // serialise the rows' independent chains. Whole (a compile-time flag): every row and
          // column of the tile is in range, so the range tests drop out of that instantiation.
          const auto products_and_gradients = [&](auto whole) {
            constexpr bool kWhole = decltype(whole)::value;
            float diff[PR];
#pragma unroll
            for (int i = 0; i < PR; ++i) {
              const int r = warp - 1 + PW * i;
              diff[i] = 0.0f;
              if (kWhole || (r < rows && c < out)) {
                const float yv = ys[s][r][lane], tv = ts[s][r][lane];
                diff[i] = yv - tv;
                const double d = __dsub_rn(static_cast<double>(yv), static_cast<double>(tv));
                sq[k & 1][r][lane ^ ((r & 7) << 1)] = __dmul_rn(d, d);
              }
            }
#pragma unroll
            for (int i = 0; i < PR; ++i) {
              const float g = diff[i] / denom;
              if (kWhole || (warp - 1 + PW * i < rows && c < out)) {
                dzp[i * PW * out] = g;
                if (keys) ar = fmaxf(ar, fabsf(g));
              }
              if (keys) dzs[k & 1][warp - 1 + PW * i][lane] = g;  // +0 out of range: never a key
            }
          };
          if (rows == RB && (k + 1) * C <= out) products_and_gradients(std::true_type{});
          else products_and_gradients(std::false_type{});
        }
        // Tile k - 1's columns (stored before this interval's barrier) through the RHT.
        if (keys && warp == 1 && k > 0 && (k - 1) * C + lane < out) {
          float v[RB];
#pragma unroll
          for (int i = 0; i < RB; ++i) v[i] = dzs[(k - 1) & 1][i][lane];
          if (amax.rht) rht16(v, amax.rs);
#pragma unroll
          for (int i = 0; i < RB; ++i) ac = fmaxf(ac, fabsf(v[i]));
        }
      } else if (k > 0 && lane < rows) {  // tile k - 1's products of row r0 + lane, columns in order
        const std::int64_t left = out - (k - 1) * C;
        const int nc = left < C ? static_cast<int>(left) : C;
        const double2* row = reinterpret_cast<const double2*>(sq[(k - 1) & 1][lane]);
#pragma unroll
        for (int j = 0; j < C / 2; ++j) {
          const double2 q = row[j ^ (lane & 7)];
          if (2 * j < nc) acc = __dadd_rn(acc, q.x);
          if (2 * j + 1 < nc) acc = __dadd_rn(acc, q.y);
        }
      }
    }
    if (warp == 0 && lane < rows) terms[r0 + lane] = acc;
  }
  if (!keys) return;
  if (!amax.rht) ac = ar;
  const std::uint32_t mine[2] = {__float_as_uint(ar), __float_as_uint(ac)};
  block_max_to_keys<kMseThreads>(mine, amax.keys);
}

// Classification: term_i = the loss in double against the teacher's argmax class,
// dZ = (softmax(Y) - onehot) / M in float32 (max, exp, sum, divide in ascending order). One
// thread per row: the classes are few.
__global__ void softmax_ce_kernel(const float* __restrict__ y, const float* __restrict__ t, float* __restrict__ dz,
                                  std::int64_t M, std::int64_t out, double* __restrict__ terms) {
  FP4D_GRID_STRIDE(i, M) {
    const float* yi = y + i * out;
    const float* ti = t + i * out;
    std::int64_t label = 0;
    for (std::int64_t j = 1; j < out; ++j)
      if (ti[j] > ti[label]) label = j;
    double mx = yi[0];
    for (std::int64_t j = 1; j < out; ++j) mx = fmax(mx, static_cast<double>(yi[j]));
    double se = 0.0;
    for (std::int64_t j = 0; j < out; ++j) se += mlp_math::exp_of(double(static_cast<double>(yi[j]) - mx));
    terms[i] = (mx + mlp_math::log_of(se)) - static_cast<double>(yi[label]);
    float m = yi[0];
    for (std::int64_t j = 1; j < out; ++j) m = fmaxf(m, yi[j]);
    float sum = 0.0f;
    for (std::int64_t j = 0; j < out; ++j) sum = sum + mlp_math::exp_of(float(yi[j] - m));
    for (std::int64_t j = 0; j < out; ++j) {
      const float p = mlp_math::exp_of(float(yi[j] - m)) / sum;
      dz[i * out + j] = (p - (j == label ? 1.0f : 0.0f)) / static_cast<float>(M);
    }
  }
}

// What changes from step to step, read by the kernels from device memory (copied up before
// each step) rather than passed as launch arguments, so that one captured CUDA graph replays
// every step: the SR seed (nvfp4_dual's device_seed) and the optimizer's coefficients.
using AdamArgs = mlp_math::AdamCoefficients<float>;
struct StepParams {
  std::uint64_t seed = 0;
  float lr = 0;
  AdamArgs adam{};
};

// The optimizers: model/mlp_math.hpp, element by element, as sim/mlp.cpp's train_step<float>.
// Every layer in one launch (blockIdx.y = the layer; a small model's step is bound by its
// launches): each layer's elements grid-stride over blockIdx.x, its lost updates counted into
// lost[blockIdx.y] (integer sums, so the order does not matter): summed over the block first,
// then one atomicAdd per block (an atomic per thread would put millions of same-address
// atomics on the L2 when most updates are lost, bounding a wide model's optimizer step). Where the
// layer's NVFP4 weight quantization reads its amax from the owner (RecipeLinear's
// adopt_weight_amax), the kernel also leaves max |W| of the new weights in its keys, zeroed
// before the launch: the max of the elements' amax keys (|w| bits, NaN ignored, as the amax
// pass's), exact in any order, so the next step's quantization needs no pass over W.
struct OptimizerLayer {
  float* w = nullptr;
  float* m1 = nullptr;
  float* m2 = nullptr;  // AdamW only
  const float* g = nullptr;
  std::int64_t n = 0;
  std::uint32_t* amax_keys = nullptr;  // amax_count keys, each to become max |W| (nullptr: none)
  int amax_count = 0;
};
constexpr int kOptimizerLayersPerLaunch = 16;
struct OptimizerLayers {
  OptimizerLayer layer[kOptimizerLayersPerLaunch];
};

// The block's part of an optimizer step's totals (blockDim.x = kThreads): *lost += the sum of
// every thread's count, and each of y's amax keys = max(key, every thread's amax key): warp
// reductions, then the block's, then one atomic per total. Every thread of the block must call
// it, once per kernel (its shared arrays are not re-synchronised for a second call); the
// kernels that call it are launched with kThreads threads (__launch_bounds__ says so).
__device__ __forceinline__ void finish_optimizer_block(unsigned long long count, std::uint32_t key,
                                                       const OptimizerLayer& y, unsigned long long* lost) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "finish_optimizer_block: whole warps, at most 32 warps");
  __shared__ unsigned long long part[kThreads / 32];
  __shared__ std::uint32_t part_key[kThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off /= 2) count += __shfl_xor_sync(0xffffffffu, count, off);
  key = __reduce_max_sync(0xffffffffu, key);
  if ((threadIdx.x & 31u) == 0) part[threadIdx.x / 32] = count, part_key[threadIdx.x / 32] = key;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long sum = 0;
    std::uint32_t m = 0;
    for (int k = 0; k < kThreads / 32; ++k) sum += part[k], m = max(m, part_key[k]);
    if (sum) atomicAdd(lost, sum);
    if (m)
      for (int k = 0; k < y.amax_count; ++k) atomicMax(y.amax_keys + k, m);
  }
}

__global__ void __launch_bounds__(kThreads)
    sgd_kernel(OptimizerLayers ls, const StepParams* __restrict__ p, float mu, float wd, int decay,
               unsigned long long* __restrict__ lost) {
  const OptimizerLayer y = ls.layer[blockIdx.y];
  float* __restrict__ w = y.w;
  float* __restrict__ m1 = y.m1;
  const float* __restrict__ g = y.g;
  const float lr = p->lr;
  unsigned long long count = 0;
  std::uint32_t key = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < y.n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float wi = w[i];
    count += mlp_math::sgd_update(wi, m1[i], g[i], mu, lr, wd, decay != 0) ? 1 : 0;
    w[i] = wi;
    key = max(key, amax_key(wi));
  }
  finish_optimizer_block(count, key, y, lost + blockIdx.y);
}

__global__ void __launch_bounds__(kThreads)
    adamw_kernel(OptimizerLayers ls, const StepParams* __restrict__ p, unsigned long long* __restrict__ lost) {
  const OptimizerLayer y = ls.layer[blockIdx.y];
  float* __restrict__ w = y.w;
  float* __restrict__ m1 = y.m1;
  float* __restrict__ m2 = y.m2;
  const float* __restrict__ g = y.g;
  const AdamArgs a = p->adam;
  unsigned long long count = 0;
  std::uint32_t key = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < y.n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float wi = w[i];
    count += mlp_math::adamw_update(wi, m1[i], m2[i], g[i], a) ? 1 : 0;
    w[i] = wi;
    key = max(key, amax_key(wi));
  }
  finish_optimizer_block(count, key, y, lost + blockIdx.y);
}

}  // namespace

}  // namespace fp4d::cuda
