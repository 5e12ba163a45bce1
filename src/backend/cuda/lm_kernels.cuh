// The device side of the resident lm step (lm.cu, .cu files only): the transformer's
// element-wise and row-wise ops in model/lm_spec.hpp's expressions and order (--fmad=false), the
// attention products as one batched, strided SIMT GEMM whose every output element sums in
// ascending order, the loss, clipping and AdamW. Everything a kernel reads that changes from
// step to step comes from device memory (LmStepParams, the tokens), so one captured CUDA graph
// replays every step. Internal linkage: the kernels belong to the one translation unit that
// launches them.
//
// Everything here is bit-identical to sim/lm.cpp's float run from equal inputs: the embedding,
// RMSNorm's rows (their sums run along the row in ascending order), RoPE, the attention
// products (ascending sums, BF16 operands where the precision policy says), the GQA head sums,
// the embedding's scatter-add (positions in ascending order per token), the softmax, SiLU and
// the cross-entropy gradient (format/portable_math.hpp's exp on both sides), the loss (a term
// per position, model/tree_sum.hpp's order), the norm gains' gradients (model/sum_order.hpp's
// row chunks: a thread per chunk of kRowChunk rows and column, then a thread per column over
// its chunks), the clipping norm (sum_order.hpp: a thread per chunk of kNormChunk elements of a
// parameter, the chunk sums added by tree_sum_kernel), clipping's scaling and AdamW. Maxima
// take std::max's rule (a < b ? b : a) where a NaN could otherwise be dropped differently.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/launch_util.cuh"
#include "format/bf16.hpp"
#include "model/mlp_math.hpp"
#include "model/sum_order.hpp"

namespace fp4d::cuda {

namespace {

// What changes from step to step (copied up before each step, read by the kernels).
using LmAdam = mlp_math::AdamCoefficients<float>;
struct LmStepParams {
  std::uint64_t seed = 0;  // the recipe's SR seed of the step (the dual quantizers read it)
  LmAdam decay{}, no_decay{};
};

// The clipping state of a step: the squared norm's chunk sums, their tree sum, then these.
struct ClipState {
  double norm = 0;
  float factor = 1;
  int apply = 0;  // max_grad_norm > 0 and norm > max_grad_norm
};

// ---- embedding ----
// h[i] = E[x_i], x_i = tokens[b (S + 1) + t] for row i = b S + t.
__global__ void embed_kernel(const std::int32_t* __restrict__ tokens, const float* __restrict__ E, float* __restrict__ h,
                             std::int64_t M, std::int64_t S, std::int64_t d) {
  FP4D_GRID_STRIDE(e, M * d) {
    const std::int64_t i = e / d, j = e % d;
    h[e] = E[static_cast<std::int64_t>(tokens[(i / S) * (S + 1) + i % S]) * d + j];
  }
}

// dE[v] += dH[i] for the positions i of token v in ascending order (order: the positions sorted
// stably by token, start: each token's first entry in order, V + 1 entries).
__global__ void embed_backward_kernel(const float* __restrict__ dh, const std::int32_t* __restrict__ order,
                                      const std::int32_t* __restrict__ start, float* __restrict__ dE, std::int64_t V,
                                      std::int64_t d) {
  FP4D_GRID_STRIDE(e, V * d) {
    const std::int64_t v = e / d, j = e % d;
    float acc = dE[e];
    for (std::int32_t k = start[v]; k < start[v + 1]; ++k) acc = acc + dh[static_cast<std::int64_t>(order[k]) * d + j];
    dE[e] = acc;
  }
}

// ---- row-wise serial sums ----
// A row op whose sum must run in ascending order (the CPU's loop): one warp per row, the terms
// (each one rounded product, as the CPU forms it) written by all lanes into the warp's slice of
// shared memory, then summed by lane 0 in ascending order and broadcast. The serial part reads
// shared memory rather than global memory, and the warps of an SM overlap their serial sums.
constexpr int kRowWarps = 4;  // warps (rows in flight) per block; dynamic smem kRowWarps * n floats

__device__ __forceinline__ float lane0_serial_sum(const float* e, std::int64_t n) {
  float sum = 0.0f;
  if (threadIdx.x % 32 == 0)
    for (std::int64_t u = 0; u < n; ++u) sum = sum + e[u];
  return __shfl_sync(0xffffffffu, sum, 0);
}

// ---- RMSNorm with gain ----
// ss = sum h^2 ascending, r = 1 / sqrt(ss / d + eps), n = h r, a = n g.
__global__ void rmsnorm_forward_kernel(const float* __restrict__ h, const float* __restrict__ g, float* __restrict__ n,
                                       float* __restrict__ rinv, float* __restrict__ a, std::int64_t M, std::int64_t d,
                                       float eps) {
  extern __shared__ float lm_row_terms[];
  float* e = lm_row_terms + (threadIdx.x / 32) * d;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const float dt = static_cast<float>(d);
  FP4D_WARP_STRIDE(i, M) {
    const float* hi = h + i * d;
    for (std::int64_t j = lane; j < d; j += 32) e[j] = hi[j] * hi[j];
    __syncwarp();
    const float ss = lane0_serial_sum(e, d);
    const float r = 1.0f / mlp_math::sqrt_of(float(ss / dt + eps));
    if (lane == 0) rinv[i] = r;
    for (std::int64_t j = lane; j < d; j += 32) {
      const float nij = hi[j] * r;
      n[i * d + j] = nij;
      a[i * d + j] = nij * g[j];
    }
    __syncwarp();
  }
}

// dh += rinv (dn - n mean), dn = da g, mean = sum_j(dn n) / d (ascending j).
__global__ void rmsnorm_backward_rows_kernel(const float* __restrict__ da, const float* __restrict__ n,
                                             const float* __restrict__ rinv, const float* __restrict__ g,
                                             float* __restrict__ dh, std::int64_t M, std::int64_t d) {
  extern __shared__ float lm_row_terms[];
  float* e = lm_row_terms + (threadIdx.x / 32) * d;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const float dt = static_cast<float>(d);
  FP4D_WARP_STRIDE(i, M) {
    const float* dai = da + i * d;
    const float* ni = n + i * d;
    for (std::int64_t j = lane; j < d; j += 32) e[j] = (dai[j] * g[j]) * ni[j];
    __syncwarp();
    const float mean = lane0_serial_sum(e, d) / dt;
    const float r = rinv[i];
    float* dhi = dh + i * d;
    for (std::int64_t j = lane; j < d; j += 32) dhi[j] = dhi[j] + r * ((dai[j] * g[j]) - ni[j] * mean);
    __syncwarp();
  }
}

// The gain's gradient dg_j = sum_i da_ij n_ij in model/sum_order.hpp's chunked_sum over the
// rows: partial[c][j] = chunk c's chunk_sum, then each column's chunks by ascending_sum.
__global__ void gain_partial_kernel(const float* __restrict__ da, const float* __restrict__ n, float* __restrict__ partial,
                                    std::int64_t M, std::int64_t d) {
  FP4D_GRID_STRIDE(e, chunk_count(M, kRowChunk) * d) {
    const std::int64_t c = e / d, j = e % d;
    partial[e] = chunk_sum<float>(c, kRowChunk, M, [&](std::int64_t i) -> float { return da[i * d + j] * n[i * d + j]; });
  }
}
__global__ void gain_sum_kernel(const float* __restrict__ partial, float* __restrict__ dg, std::int64_t chunks,
                                std::int64_t d) {
  FP4D_GRID_STRIDE(j, d) dg[j] = ascending_sum<float>(chunks, [&](std::int64_t c) -> float { return partial[c * d + j]; });
}
// Both passes on stream s: dg [d] from da and n [M x d], partial holding chunk_count(M, kRowChunk) x d.
inline void launch_gain_gradient(const float* da, const float* n, float* partial, float* dg, std::int64_t M,
                                 std::int64_t d, cudaStream_t s) {
  const std::int64_t chunks = chunk_count(M, kRowChunk);
  gain_partial_kernel<<<blocks_for(chunks * d), kThreads, 0, s>>>(da, n, partial, M, d);
  check(cudaGetLastError(), "gain_partial_kernel launch");
  gain_sum_kernel<<<blocks_for(d), kThreads, 0, s>>>(partial, dg, chunks, d);
  check(cudaGetLastError(), "gain_sum_kernel launch");
}

// ---- RoPE ----
// Rotates (or, inverse, rotates back) the pairs (2i, 2i+1) of every head of x (rows x heads hd,
// row stride ld), position t = row % S; cs: cos and sin tables [S x hd/2] each.
__global__ void rope_kernel(float* __restrict__ x, std::int64_t ld, std::int64_t rows, std::int64_t heads,
                            std::int64_t hd, std::int64_t S, const float* __restrict__ cs, const float* __restrict__ sn,
                            int inverse) {
  const std::int64_t half = hd / 2;
  FP4D_GRID_STRIDE(e, rows * heads * half) {
    const std::int64_t r = e / (heads * half), h = (e / half) % heads, i = e % half;
    const std::int64_t t = r % S;
    const float c = cs[t * half + i], s = sn[t * half + i];
    float* p = x + r * ld + h * hd + 2 * i;
    const float x0 = p[0], x1 = p[1];
    if (!inverse) {
      p[0] = x0 * c - x1 * s;
      p[1] = x0 * s + x1 * c;
    } else {
      p[0] = x0 * c + x1 * s;
      p[1] = x1 * c - x0 * s;
    }
  }
}

// ---- attention products: C(i, j) = sum_k A(i, k) B(j, k), k ascending, batched over
// z = b heads + h. Operand element (i, k) of batch (b, h) lies at p + b sb + (h / hdiv) sh + i si +
// k sk (hdiv: the GQA group for K and V, 1 otherwise); bf16: rounded to BF16 (RNE) as loaded.
struct SeqOperand {
  const float* p = nullptr;
  std::int64_t sb = 0, sh = 0, si = 0, sk = 0;
  int hdiv = 1;
  int bf16 = 0;
};
struct SeqOut {
  float* p = nullptr;
  std::int64_t sb = 0, sh = 0, si = 0, sj = 0;
};
// Causality: the summed terms a k-range leaves out are exact zeros (the probabilities and dS
// above the diagonal are stored as 0), and adding +-0 to a sum that starts at +0 changes no
// bit, so skipping them or not gives the CPU's ascending sum over u <= t (or t >= u) exactly.
enum class SeqMask : int {
  None = 0,
  Causal = 1,  // C(i, j) needed for j <= i only (tiles wholly above the diagonal skipped)
  KUpToI = 2,  // terms with k > i are zeros: stop after the tile's last row
  KFromI = 3   // terms with k < i are zeros: start at the tile's first row
};
struct SeqGemm {
  SeqOperand a, b;
  SeqOut c;
  int heads = 1;
  std::int64_t I = 0, J = 0, K = 0;
  float scale = 1.0f;
  int use_scale = 0;  // C = (sum) scale, one rounding after the sum (the CPU's acc * scale)
  SeqMask mask = SeqMask::None;
};

constexpr int kSeqBM = 128, kSeqBN = 64, kSeqBK = 16;

// One thread's share of an operand tile: rows r0 .. r0 + ROWS - 1, k0 .. k0 + kSeqBK - 1 (zeros
// outside the operand), fetched from global memory into registers, later stored to
// tile[k][row]: the next tile's loads are in flight while the current one is multiplied.
template <int ROWS>
struct SeqTile {
  static constexpr int kPer = ROWS * kSeqBK / 256;
  float v[kPer];
  // Element q of this thread: row rr, column kk of the tile (k or rows contiguous in memory).
  __device__ __forceinline__ static void at(const SeqOperand& o, int q, int& rr, int& kk) {
    const int e = static_cast<int>(threadIdx.x) + q * 256;
    if (o.sk == 1) rr = e / kSeqBK, kk = e % kSeqBK;
    else rr = e % ROWS, kk = e / ROWS;
  }
  __device__ __forceinline__ void fetch(const SeqOperand& o, const float* base, std::int64_t r0, std::int64_t R,
                                        std::int64_t k0, std::int64_t k_end) {
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      int rr, kk;
      at(o, q, rr, kk);
      const std::int64_t r = r0 + rr, k = k0 + kk;
      float x = 0.0f;
      if (r < R && k < k_end) {
        x = __ldg(base + (r * o.si + k * o.sk));
        if (o.bf16) x = bf16_round(x);
      }
      v[q] = x;
    }
  }
  __device__ __forceinline__ void store(const SeqOperand& o, float (*tile)[ROWS + 4]) const {
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      int rr, kk;
      at(o, q, rr, kk);
      tile[kk][rr] = v[q];
    }
  }
};

// 256 threads (two blocks per SM), a kSeqBM x kSeqBN tile of C, 8 x 4 outputs per thread;
// every output's sum runs over k in ascending order, one product and one addition at a time
// (--fmad=false).
__global__ void __launch_bounds__(256, 2) seq_gemm_kernel(SeqGemm g) {
  const int z = static_cast<int>(blockIdx.z);
  const int bb = z / g.heads, hh = z % g.heads;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * kSeqBM, j0 = static_cast<std::int64_t>(blockIdx.x) * kSeqBN;
  if (g.mask == SeqMask::Causal && j0 > i0 + kSeqBM - 1) return;
  const float* A = g.a.p + bb * g.a.sb + (hh / g.a.hdiv) * g.a.sh;
  const float* B = g.b.p + bb * g.b.sb + (hh / g.b.hdiv) * g.b.sh;
  std::int64_t k_begin = 0, k_end = g.K;
  if (g.mask == SeqMask::KUpToI) k_end = i0 + kSeqBM < g.K ? i0 + kSeqBM : g.K;
  if (g.mask == SeqMask::KFromI) k_begin = i0 < g.K ? i0 : g.K;
  __shared__ __align__(16) float As[kSeqBK][kSeqBM + 4];
  __shared__ __align__(16) float Bs[kSeqBK][kSeqBN + 4];
  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  float acc[8][4];
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[r][c] = 0.0f;
  SeqTile<kSeqBM> ta;
  SeqTile<kSeqBN> tb;
  if (k_begin < k_end) {
    ta.fetch(g.a, A, i0, g.I, k_begin, k_end);
    tb.fetch(g.b, B, j0, g.J, k_begin, k_end);
  }
  for (std::int64_t k0 = k_begin; k0 < k_end; k0 += kSeqBK) {
    ta.store(g.a, As);
    tb.store(g.b, Bs);
    __syncthreads();
    if (k0 + kSeqBK < k_end) {
      ta.fetch(g.a, A, i0, g.I, k0 + kSeqBK, k_end);
      tb.fetch(g.b, B, j0, g.J, k0 + kSeqBK, k_end);
    }
#pragma unroll
    for (int kk = 0; kk < kSeqBK; ++kk) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[kk][ty * 8]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[kk][ty * 8 + 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[kk][tx * 4]);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[4] = {b0.x, b0.y, b0.z, b0.w};
#pragma unroll
      for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = acc[r][c] + av[r] * bv[c];
    }
    __syncthreads();
  }
  float* C = g.c.p + bb * g.c.sb + hh * g.c.sh;
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const std::int64_t i = i0 + ty * 8 + r, j = j0 + tx * 4 + c;
      if (i < g.I && j < g.J) C[i * g.c.si + j * g.c.sj] = g.use_scale ? acc[r][c] * g.scale : acc[r][c];
    }
}

// ---- softmax and its backward, one warp per row (z, t) of the S x S probability matrices ----
// In place: S_tu (u <= t) -> P_tu = exp(S_tu - max) / sum (the sum in ascending u); P_tu = 0
// above the diagonal.
__global__ void softmax_rows_kernel(float* __restrict__ P, std::int64_t rows, std::int64_t S) {
  extern __shared__ float lm_row_terms[];
  float* e = lm_row_terms + (threadIdx.x / 32) * S;
  const int lane = static_cast<int>(threadIdx.x % 32);
  FP4D_WARP_STRIDE(warp, rows) {
    const std::int64_t t = warp % S;
    float* p = P + warp * S;
    float mx = p[0];
    for (std::int64_t u = lane; u <= t; u += 32) {
      const float v = p[u];
      e[u] = v;
      mx = v > mx ? v : mx;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, mx, o);
      mx = other > mx ? other : mx;
    }
    for (std::int64_t u = lane; u <= t; u += 32) e[u] = mlp_math::exp_of(float(e[u] - mx));
    __syncwarp();
    const float sum = lane0_serial_sum(e, t + 1);
    for (std::int64_t u = lane; u < S; u += 32) p[u] = u <= t ? e[u] / sum : 0.0f;
    __syncwarp();
  }
}

// In place: dP_tu -> dS_tu = (P_tu (dP_tu - D_t)) scale, D_t = sum_{u<=t} P_tu dP_tu (ascending
// u), rounded to BF16 under bf16; 0 above the diagonal.
__global__ void softmax_backward_rows_kernel(const float* __restrict__ P, float* __restrict__ dP, std::int64_t rows,
                                             std::int64_t S, float scale, int bf16) {
  extern __shared__ float lm_row_terms[];
  float* e = lm_row_terms + (threadIdx.x / 32) * S;
  const int lane = static_cast<int>(threadIdx.x % 32);
  FP4D_WARP_STRIDE(warp, rows) {
    const std::int64_t t = warp % S;
    const float* p = P + warp * S;
    float* dp = dP + warp * S;
    for (std::int64_t u = lane; u <= t; u += 32) e[u] = p[u] * dp[u];
    __syncwarp();
    const float D = lane0_serial_sum(e, t + 1);
    for (std::int64_t u = lane; u < S; u += 32) {
      float v = 0.0f;
      if (u <= t) {
        v = (p[u] * (dp[u] - D)) * scale;
        if (bf16) v = bf16_round(v);
      }
      dp[u] = v;
    }
    __syncwarp();
  }
}

// GQA: dk (M x kv_heads hd, row stride ld) of kv head g = the per-query-head sums
// part [b][h][t][j] of its group added in ascending head order (the first assigned).
__global__ void head_group_sum_kernel(const float* __restrict__ part, float* __restrict__ out, std::int64_t ld,
                                      std::int64_t B, std::int64_t S, std::int64_t heads, std::int64_t kv_heads,
                                      std::int64_t hd) {
  const std::int64_t group = heads / kv_heads;
  FP4D_GRID_STRIDE(e, B * S * kv_heads * hd) {
    const std::int64_t j = e % hd, g = (e / hd) % kv_heads, t = (e / (hd * kv_heads)) % S, b = e / (hd * kv_heads * S);
    float acc = 0.0f;
    for (std::int64_t h = g * group; h < (g + 1) * group; ++h) {
      const float v = part[((b * heads + h) * S + t) * hd + j];
      acc = h == g * group ? v : acc + v;
    }
    out[(b * S + t) * ld + g * hd + j] = acc;
  }
}

// ---- element-wise ----
__global__ void add_kernel(float* __restrict__ x, const float* __restrict__ y, std::int64_t n) {
  FP4D_GRID_STRIDE(i, n) x[i] = x[i] + y[i];
}

// SwiGLU as producers of dual_amax.cuh (launch_dual_amax where the down projection's X or the
// gate-up projection's dY is quantized as NVFP4, its amaxes computed on the way; else
// launch_produce): element pairs (i, c), (i, c + 1), stored and returned.
// F = silu(G) U = (G s(G)) U, [G U] rows of width 2F.
struct SwigluForwardPair {  // f, M x F
  const float* gu;
  float* f;
  std::int64_t F;
  struct In {
    float2 g, u;
  };
  __device__ __forceinline__ In load(std::int64_t i, std::int64_t c) const {
    return {*reinterpret_cast<const float2*>(gu + i * 2 * F + c), *reinterpret_cast<const float2*>(gu + i * 2 * F + F + c)};
  }
  __device__ __forceinline__ void make(const In& in, std::int64_t i, std::int64_t c, float* a, float* b) const {
    *a = mlp_math::silu(in.g.x) * in.u.x, *b = mlp_math::silu(in.g.y) * in.u.y;
    *reinterpret_cast<float2*>(f + i * F + c) = make_float2(*a, *b);
  }
};
// dG = (dF U) silu'(G), silu' = s (1 + G (1 - s)); dU = dF (G s).
struct SwigluBackwardPair {  // dgu, M x 2F: [dG | dU] per row (c < F: dG, else dU; F even)
  const float* gu;
  const float* df;
  float* dgu;
  std::int64_t F;
  struct In {
    float2 g, d, u;  // u: the dG lanes' only
  };
  __device__ __forceinline__ In load(std::int64_t i, std::int64_t c) const {
    const bool dg = c < F;
    const std::int64_t j = dg ? c : c - F;
    In in;
    in.g = *reinterpret_cast<const float2*>(gu + i * 2 * F + j);
    in.d = *reinterpret_cast<const float2*>(df + i * F + j);
    in.u = dg ? *reinterpret_cast<const float2*>(gu + i * 2 * F + F + j) : make_float2(0.0f, 0.0f);
    return in;
  }
  __device__ __forceinline__ void make(const In& in, std::int64_t i, std::int64_t c, float* a, float* b) const {
    const float2 gg = in.g, dd = in.d;
    const float s0 = mlp_math::sigmoid(gg.x), s1 = mlp_math::sigmoid(gg.y);
    if (c < F) {
      *a = (dd.x * in.u.x) * mlp_math::silu_derivative(gg.x, s0);
      *b = (dd.y * in.u.y) * mlp_math::silu_derivative(gg.y, s1);
    } else {
      *a = dd.x * (gg.x * s0);
      *b = dd.y * (gg.y * s1);
    }
    *reinterpret_cast<float2*>(dgu + i * 2 * F + c) = make_float2(*a, *b);
  }
};

// ---- loss ----
// One thread per position: its loss term in double from the float logits (max, sum of exp in
// ascending order, log) into terms[i] (tree_sum_kernel adds them in sim/lm.cpp's order), then
// in place dlogits = (softmax - onehot) / M in float32 as the CPU's row loop.
__global__ void cross_entropy_kernel(float* __restrict__ logits, const std::int32_t* __restrict__ tokens,
                                     std::int64_t M, std::int64_t S, std::int64_t V, double* __restrict__ terms) {
  const float Mt = static_cast<float>(M);
  FP4D_GRID_STRIDE(i, M) {
    float* li = logits + i * V;
    const std::int64_t y = tokens[(i / S) * (S + 1) + i % S + 1];
    double mx = li[0];
    for (std::int64_t j = 1; j < V; ++j) mx = mx < static_cast<double>(li[j]) ? static_cast<double>(li[j]) : mx;
    double se = 0.0;
    for (std::int64_t j = 0; j < V; ++j) se += mlp_math::exp_of(double(static_cast<double>(li[j]) - mx));
    terms[i] = (mx + mlp_math::log_of(se)) - static_cast<double>(li[y]);
    float m = li[0];
    for (std::int64_t j = 1; j < V; ++j) m = m < li[j] ? li[j] : m;
    float sum = 0.0f;
    for (std::int64_t j = 0; j < V; ++j) {
      li[j] = mlp_math::exp_of(float(li[j] - m));
      sum = sum + li[j];
    }
    for (std::int64_t j = 0; j < V; ++j) li[j] = (li[j] / sum - (j == y ? 1.0f : 0.0f)) / Mt;
  }
}

// ---- clipping and AdamW ----
// The clipping norm's chunk sums (model/sum_order.hpp): chunk c of the gradient is
// g[start[c] ..) with count[c] <= kNormChunk elements, one parameter's, chunks in lm_params
// order; sq[c] = its chunk_sum of g^2 in double (each square exact). tree_sum_kernel adds them.
__global__ void norm_chunks_kernel(const float* __restrict__ g, const std::int64_t* __restrict__ start,
                                   const std::int32_t* __restrict__ count, std::int64_t chunks, double* __restrict__ sq) {
  FP4D_GRID_STRIDE(c, chunks) {
    const float* x = g + start[c];
    sq[c] = chunk_sum<double>(0, kNormChunk, count[c], [&](std::int64_t e) -> double {
      const double v = x[e];
      return v * v;
    });
  }
}

// norm = sqrt(sum of squares), factor = float(max_norm / norm) where clipping applies
// (sim/lm.cpp's rule).
__global__ void clip_kernel(const double* __restrict__ sum, double max_norm, ClipState* __restrict__ clip) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    const double norm = sqrt(*sum);
    clip->norm = norm;
    clip->apply = max_norm > 0.0 && norm > max_norm;
    clip->factor = clip->apply ? static_cast<float>(max_norm / norm) : 1.0f;
  }
}

// AdamW on every parameter, its gradient clipped first (g f in float32), lost updates
// counted: one block of kNormChunk threads per chunk of the clipping norm's table (start in
// the flat buffers, count, owning parameter), a thread per element; each chunk's lost updates
// (__syncthreads_count) added to its parameter's counter (integer sums: any order).
static_assert(kNormChunk == kThreads, "lm_adamw_kernel: one thread per element of a chunk");
__global__ void __launch_bounds__(kNormChunk)
    lm_adamw_kernel(float* __restrict__ w, float* __restrict__ m1, float* __restrict__ m2, const float* __restrict__ g,
                    const std::int64_t* __restrict__ start, const std::int32_t* __restrict__ count,
                    const std::int32_t* __restrict__ owner, const std::uint8_t* __restrict__ decay,
                    std::int64_t chunks, const LmStepParams* __restrict__ p, const ClipState* __restrict__ clip,
                    unsigned long long* __restrict__ lost) {
  const int apply = clip->apply;
  const float f = clip->factor;
  for (std::int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const std::int32_t param = owner[c];
    int lost_one = 0;
    if (static_cast<std::int32_t>(threadIdx.x) < count[c]) {
      const std::int64_t i = start[c] + threadIdx.x;
      const LmAdam a = decay[param] ? p->decay : p->no_decay;
      const float gi = apply ? g[i] * f : g[i];
      lost_one = mlp_math::adamw_update(w[i], m1[i], m2[i], gi, a) ? 1 : 0;
    }
    const int n = __syncthreads_count(lost_one);
    if (threadIdx.x == 0 && n) atomicAdd(lost + param, static_cast<unsigned long long>(n));
  }
}

}  // namespace

}  // namespace fp4d::cuda
