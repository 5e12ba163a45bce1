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
// them in model/tree_sum.hpp's order. One thread per row.
// Regression: term_i = sum_j (double(Y) - double(T))^2 in ascending j; dZ = (Y - T) / (M out) in
// float32.
__global__ void mse_kernel(const float* __restrict__ y, const float* __restrict__ t, float* __restrict__ dz,
                           std::int64_t M, std::int64_t out, float denom, double* __restrict__ terms) {
  FP4D_GRID_STRIDE(i, M) {
    double acc = 0.0;
    for (std::int64_t j = 0; j < out; ++j) {
      const std::int64_t e = i * out + j;
      const double d = static_cast<double>(y[e]) - static_cast<double>(t[e]);
      acc += d * d;
      dz[e] = (y[e] - t[e]) / denom;
    }
    terms[i] = acc;
  }
}

// Classification: term_i = the loss in double against the teacher's argmax class,
// dZ = (softmax(Y) - onehot) / M in float32 (max, exp, sum, divide in ascending order).
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
// lost[blockIdx.y] (integer sums, so the order of the atomics does not matter).
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

__global__ void sgd_kernel(OptimizerLayers ls, const StepParams* __restrict__ p, float mu, float wd, int decay,
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
  if (count) atomicAdd(lost + blockIdx.y, count);
}

__global__ void adamw_kernel(OptimizerLayers ls, const StepParams* __restrict__ p, unsigned long long* __restrict__ lost) {
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
  if (count) atomicAdd(lost + blockIdx.y, count);
}

}  // namespace

}  // namespace fp4d::cuda
