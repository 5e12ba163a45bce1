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

#include "backend/cuda/launch_util.cuh"
#include "model/mlp_math.hpp"

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
// float32. Each row's sum is a chain in j, so the rows are the parallelism: a warp (the block)
// per 32 rows, a lane per row. The rows come in as 32 x 32 tiles, a lane per column (coalesced
// loads and dZ stores), and through shared memory each lane adds its own row's terms; the next
// tile's loads are issued before the current tile's sums, which they overlap. (A thread
// walking its own row touched a different cache line in every lane of every access, and the
// few blocks of a long row ran on a handful of multiprocessors: milliseconds for 4096 x 4096.)
constexpr int kMseTile = 32;
unsigned mse_blocks(std::int64_t M) {
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>((M + kMseTile - 1) / kMseTile, 65535)));
}
__global__ void __launch_bounds__(kMseTile) mse_kernel(const float* __restrict__ y, const float* __restrict__ t,
                                                        float* __restrict__ dz, std::int64_t M, std::int64_t out,
                                                        float denom, double* __restrict__ terms) {
  __shared__ float ys[kMseTile][kMseTile + 1], ts[kMseTile][kMseTile + 1];  // [row][column], padded: no bank conflicts
  const int lane = static_cast<int>(threadIdx.x);
  for (std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * kMseTile; r0 < M;
       r0 += static_cast<std::int64_t>(gridDim.x) * kMseTile) {
    float yv[kMseTile], tv[kMseTile];  // column c0 + lane of rows r0 .. r0 + 31
    const auto load = [&](std::int64_t c0) {
      const std::int64_t c = c0 + lane;
#pragma unroll
      for (int i = 0; i < kMseTile; ++i) {
        const bool in = r0 + i < M && c < out;
        yv[i] = in ? y[(r0 + i) * out + c] : 0.0f;
        tv[i] = in ? t[(r0 + i) * out + c] : 0.0f;
      }
    };
    const std::int64_t row = r0 + lane;
    double acc = 0.0;
    load(0);
    for (std::int64_t c0 = 0; c0 < out; c0 += kMseTile) {
      const std::int64_t c = c0 + lane;
      __syncwarp();  // every lane is done reading the previous tile
#pragma unroll
      for (int i = 0; i < kMseTile; ++i) {
        ys[i][lane] = yv[i];
        ts[i][lane] = tv[i];
        if (r0 + i < M && c < out) dz[(r0 + i) * out + c] = (yv[i] - tv[i]) / denom;
      }
      if (c0 + kMseTile < out) load(c0 + kMseTile);
      __syncwarp();  // the tile is in shared memory
      const int nc = out - c0 < kMseTile ? static_cast<int>(out - c0) : kMseTile;
      if (row < M)
        for (int j = 0; j < nc; ++j) {
          const double d = static_cast<double>(ys[lane][j]) - static_cast<double>(ts[lane][j]);
          acc += d * d;
        }
    }
    if (row < M) terms[row] = acc;
  }
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
// then one atomicAdd per block (an atomic per thread put millions of same-address atomics on
// the L2 when most updates were lost, which bound a wide model's optimizer step).
struct OptimizerLayer {
  float* w = nullptr;
  float* m1 = nullptr;
  float* m2 = nullptr;  // AdamW only
  const float* g = nullptr;
  std::int64_t n = 0;
};
constexpr int kOptimizerLayersPerLaunch = 16;
struct OptimizerLayers {
  OptimizerLayer layer[kOptimizerLayersPerLaunch];
};

// *total += the sum of every thread's count in the block (blockDim.x = kThreads): warp sums,
// then the block's, then one atomicAdd. Every thread of the block must call it, once per kernel
// (its shared array is not re-synchronised for a second call); the kernels that call it are
// launched with kThreads threads (__launch_bounds__ says so).
__device__ __forceinline__ void add_block_count(unsigned long long count, unsigned long long* total) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "add_block_count: whole warps, at most 32 warps");
  __shared__ unsigned long long part[kThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off /= 2) count += __shfl_xor_sync(0xffffffffu, count, off);
  if ((threadIdx.x & 31u) == 0) part[threadIdx.x / 32] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long sum = 0;
    for (int k = 0; k < kThreads / 32; ++k) sum += part[k];
    if (sum) atomicAdd(total, sum);
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
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < y.n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    count += mlp_math::sgd_update(w[i], m1[i], g[i], mu, lr, wd, decay != 0) ? 1 : 0;
  }
  add_block_count(count, lost + blockIdx.y);
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
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < y.n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    count += mlp_math::adamw_update(w[i], m1[i], m2[i], g[i], a) ? 1 : 0;
  }
  add_block_count(count, lost + blockIdx.y);
}

}  // namespace

}  // namespace fp4d::cuda
