// The device side of the resident lm step's Mamba-2 mixers (lm_mamba_mixer.cuh launches them):
// sim/lm_mamba.hpp's expressions in its order (--fmad=false), so that equal inputs give the
// CPU's float bits wherever a sum can keep the CPU's serial order at the GPU's pace.
//
// Everything is bit-identical to sim/lm_mamba.cpp's float mixer from equal inputs (exp and log1p
// are format/portable_math.hpp's on both sides): the convolution and SiLU, softplus, the chunked
// scan's forward (one block per sequence and head walks the chunks in order; every sum of the
// SSD form runs in the CPU's order), the gate and gated RMSNorm, the states of the backward's
// plain recurrence, the adjoint G_t, dC, dB, dx, the per-position dt gradient, the sums over a
// group's heads and the convolution's input gradient. The sums over many terms, which one
// thread summing serially would leave the GPU idle for, take model/sum_order.hpp's orders,
// which the CPU mixer follows: the decay term <G_t, h_(t-1)> (per state column over p in the
// adjoint, then the columns in mamba_dt_backward_kernel), dD and dA (per position, then per
// sequence over the positions, then the sequences), dt_bias (per sequence, then the
// sequences), the convolution's weight and bias gradients and the gated norm's gain gradient
// (row chunks of kRowChunk, then the chunks, as lm_kernels.cuh's gain sums).
//
// Shared-memory layouts are chosen so that a warp's 32 lanes read 32 consecutive words or one
// broadcast word in every inner loop (the state as [n][p], B transposed, G's rows padded).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/launch_util.cuh"  // FP4D_GRID_STRIDE, FP4D_WARP_STRIDE
#include "backend/cuda/lm_kernels.cuh"   // lane0_serial_sum, kRowWarps
#include "format/bf16.hpp"
#include "model/mlp_math.hpp"
#include "model/sum_order.hpp"
#include "sim/lm_mamba.hpp"  // kMambaSoftplusLinear

namespace fp4d::cuda {

namespace {

// The mixer's sizes (sim/lm_mamba.hpp's MambaShape, flattened): rows R = batch S; the
// in-projection's row [z | x | B | C | dt_raw] has width W; conv channels CD = DI + 2 GN.
struct MambaDims {
  std::int64_t R = 0, S = 0, W = 0, DI = 0, CD = 0, GN = 0, H = 0, P = 0, N = 0, G = 0, K = 0, L = 0;
  int bf16 = 0;  // the scan's operands x, B, C and its incoming gradient rounded to BF16
  float eps = 0;
};

__device__ __forceinline__ float scan_operand(float v, int bf16) { return bf16 ? bf16_round(v) : v; }
__device__ __forceinline__ float decay_rate(const float* a_log, std::int64_t h) { return -mlp_math::exp_of(a_log[h]); }
__device__ __forceinline__ float silu_prime(float v) { return mlp_math::silu_derivative(v, mlp_math::sigmoid(v)); }

// ---- forward ----
// pre = conv_b + sum_k conv_w_k in_(t-K+1+k) (k ascending, positions before the sequence's start
// left out), xbc = silu(pre); the input is the x, B, C columns of the in-projection's output.
__global__ void mamba_conv_forward_kernel(MambaDims m, const float* __restrict__ zx, const float* __restrict__ w,
                                          const float* __restrict__ bias, float* __restrict__ pre,
                                          float* __restrict__ xbc) {
  FP4D_GRID_STRIDE(e, m.R * m.CD) {
    const std::int64_t i = e / m.CD, ch = e % m.CD, t = i % m.S;
    float acc = bias[ch];
    for (std::int64_t k = 0; k < m.K; ++k) {
      const std::int64_t pos = t - m.K + 1 + k;
      if (pos < 0) continue;
      acc = acc + w[ch * m.K + k] * zx[(i - t + pos) * m.W + m.DI + ch];
    }
    pre[e] = acc;
    xbc[e] = mlp_math::silu(acc);
  }
}

// dt = softplus(dt_raw + dt_bias).
__global__ void mamba_dt_kernel(MambaDims m, const float* __restrict__ zx, const float* __restrict__ dt_bias,
                                float* __restrict__ dt) {
  FP4D_GRID_STRIDE(e, m.R * m.H) {
    const std::int64_t i = e / m.H, h = e % m.H;
    const float v = zx[i * m.W + m.DI + m.CD + h] + dt_bias[h];
    dt[e] = v > static_cast<float>(kMambaSoftplusLinear) ? v : mlp_math::log1p_of(mlp_math::exp_of(v));
  }
}

// The scan's shared memory, floats: x (L P), B (transposed, N L) and C (L N), the chunk's
// weights (L L), the state ([n][p], N P), dt, cum and the state-update weights (L each).
__host__ __device__ inline std::int64_t mamba_scan_smem_floats(std::int64_t L, std::int64_t P, std::int64_t N) {
  return L * P + 2 * L * N + L * L + P * N + 3 * L;
}

// y = the chunked SSD scan (sim/lm_mamba.hpp) with D x: one block per (sequence, head), its
// chunks in order, each stage's outputs spread over the block's threads.
__global__ void mamba_scan_forward_kernel(MambaDims m, const float* __restrict__ xbc, const float* __restrict__ dt,
                                          const float* __restrict__ a_log, const float* __restrict__ d_skip,
                                          float* __restrict__ y) {
  extern __shared__ float mamba_smem[];
  const std::int64_t L = m.L, P = m.P, N = m.N;
  float* xs = mamba_smem;
  float* Bt = xs + L * P;  // Bt[n L + u] = B_un
  float* Cs = Bt + L * N;
  float* Wt = Cs + L * N;
  float* st = Wt + L * L;
  float* dts = st + P * N;
  float* cum = dts + L;
  float* wl = cum + L;
  const std::int64_t b = blockIdx.x / m.H, h = blockIdx.x % m.H, g = h / (m.H / m.G);
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const float A = decay_rate(a_log, h), D = d_skip[h];
  for (std::int64_t k = tid; k < P * N; k += nt) st[k] = 0.0f;
  for (std::int64_t t0 = 0; t0 < m.S; t0 += L) {
    const std::int64_t row0 = b * m.S + t0;
    for (std::int64_t e = tid; e < L * P; e += nt)
      xs[e] = scan_operand(xbc[(row0 + e / P) * m.CD + h * P + e % P], m.bf16);
    for (std::int64_t e = tid; e < L * N; e += nt) {
      const std::int64_t u = e / N, n = e % N;
      const float* r = xbc + (row0 + u) * m.CD + m.DI + g * N + n;
      Bt[n * L + u] = scan_operand(r[0], m.bf16);
      Cs[e] = scan_operand(r[m.GN], m.bf16);
    }
    for (std::int64_t u = tid; u < L; u += nt) dts[u] = dt[(row0 + u) * m.H + h];
    __syncthreads();
    if (tid == 0) {
      float acc = 0.0f;
      for (std::int64_t u = 0; u < L; ++u) {
        acc = acc + dts[u] * A;
        cum[u] = acc;
      }
    }
    __syncthreads();
    const float last = cum[L - 1];
    for (std::int64_t u = tid; u < L; u += nt) wl[u] = mlp_math::exp_of(float(last - cum[u])) * dts[u];
    for (std::int64_t e = tid; e < L * L; e += nt) {
      const std::int64_t t = e / L, u = e % L;
      if (u > t) continue;
      float cb = 0.0f;
      for (std::int64_t n = 0; n < N; ++n) cb = cb + Cs[t * N + n] * Bt[n * L + u];
      Wt[e] = (cb * mlp_math::exp_of(float(cum[t] - cum[u]))) * dts[u];
    }
    __syncthreads();
    for (std::int64_t e = tid; e < L * P; e += nt) {
      const std::int64_t t = e / P, p = e % P;
      float hx = 0.0f;
      for (std::int64_t u = 0; u <= t; ++u) hx = hx + Wt[t * L + u] * xs[u * P + p];
      const float et = mlp_math::exp_of(cum[t]);
      float hc = 0.0f;
      for (std::int64_t n = 0; n < N; ++n) hc = hc + st[n * P + p] * Cs[t * N + n];
      y[(row0 + t) * m.DI + h * P + p] = (hx + et * hc) + D * xs[t * P + p];
    }
    __syncthreads();
    const float el = mlp_math::exp_of(last);
    for (std::int64_t k = tid; k < P * N; k += nt) {
      const std::int64_t n = k / P, p = k % P;
      float a = el * st[k];
      for (std::int64_t u = 0; u < L; ++u) a = a + (wl[u] * xs[u * P + p]) * Bt[n * L + u];
      st[k] = a;
    }
    __syncthreads();
  }
}

// One warp per (row, group) of DI / G columns: gv = y silu(z), rinv = 1 / sqrt(sum gv^2 / len +
// eps) (ascending), n = gv rinv, out = n gain.
__global__ void mamba_gate_norm_forward_kernel(MambaDims m, const float* __restrict__ zx, const float* __restrict__ y,
                                               const float* __restrict__ gain, float* __restrict__ nrm,
                                               float* __restrict__ rinv, float* __restrict__ out) {
  extern __shared__ float mamba_row_terms[];
  const std::int64_t gw = m.DI / m.G;
  float* e = mamba_row_terms + (threadIdx.x / 32) * gw;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const float len = static_cast<float>(gw);
  FP4D_WARP_STRIDE(w, m.R * m.G) {
    const std::int64_t i = w / m.G, c0 = (w % m.G) * gw;
    for (std::int64_t j = lane; j < gw; j += 32) {
      const float gv = y[i * m.DI + c0 + j] * mlp_math::silu(zx[i * m.W + c0 + j]);
      nrm[i * m.DI + c0 + j] = gv;
      e[j] = gv * gv;
    }
    __syncwarp();
    const float ss = lane0_serial_sum(e, gw);
    const float r = 1.0f / mlp_math::sqrt_of(float(ss / len + m.eps));
    if (lane == 0) rinv[w] = r;
    for (std::int64_t j = lane; j < gw; j += 32) {
      const std::int64_t k = i * m.DI + c0 + j;
      const float nv = nrm[k] * r;
      nrm[k] = nv;
      out[k] = nv * gain[c0 + j];
    }
    __syncwarp();
  }
}

// ---- backward ----
// The gate and the gated norm's transposes, one warp per (row, group): dn = dout gain,
// mean = sum(dn n) / len (ascending), dg = rinv (dn - n mean); dy = dg silu(z) (the scan's
// incoming gradient, rounded to BF16 under bf16), dz = (dg y) silu'(z) into the z columns of dzx.
__global__ void mamba_gate_norm_backward_kernel(MambaDims m, const float* __restrict__ zx, const float* __restrict__ y,
                                                const float* __restrict__ nrm, const float* __restrict__ rinv,
                                                const float* __restrict__ gain, const float* __restrict__ dout,
                                                float* __restrict__ dy, float* __restrict__ dzx) {
  extern __shared__ float mamba_row_terms[];
  const std::int64_t gw = m.DI / m.G;
  float* e = mamba_row_terms + (threadIdx.x / 32) * gw;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const float len = static_cast<float>(gw);
  FP4D_WARP_STRIDE(w, m.R * m.G) {
    const std::int64_t i = w / m.G, c0 = (w % m.G) * gw;
    for (std::int64_t j = lane; j < gw; j += 32) {
      const std::int64_t k = i * m.DI + c0 + j;
      e[j] = (dout[k] * gain[c0 + j]) * nrm[k];
    }
    __syncwarp();
    const float mean = lane0_serial_sum(e, gw) / len;
    const float r = rinv[w];
    for (std::int64_t j = lane; j < gw; j += 32) {
      const std::int64_t k = i * m.DI + c0 + j;
      const float dg = r * ((dout[k] * gain[c0 + j]) - nrm[k] * mean);
      const float z = zx[i * m.W + c0 + j];
      dy[k] = scan_operand(dg * mlp_math::silu(z), m.bf16);
      dzx[i * m.W + c0 + j] = (dg * y[k]) * silu_prime(z);
    }
    __syncwarp();
  }
}

// The backward recomputes the states h_t of the plain recurrence (h_t = exp(dt_t A) h_(t-1) +
// (dt_t x_t) B_t^T, elementwise) segment by segment from checkpoints: storing every position's
// state would move batch H S P N floats through memory twice (4.3 GB a block at the H200
// size), the checkpoints of every kMambaSegment-th position move a quarter of that, and a
// segment's states fit in shared memory.
constexpr std::int64_t kMambaSegment = 4;
__host__ __device__ inline std::int64_t mamba_segments(std::int64_t S) { return (S + kMambaSegment - 1) / kMambaSegment; }

// The checkpoints: the state after the last position of each segment, ckpt [sequence, head]
// [segment][p N + n]. Grid (ceil(P N / threads), batch H); a thread walks one state element
// through the sequence.
__global__ void mamba_scan_checkpoints_kernel(MambaDims m, const float* __restrict__ xbc, const float* __restrict__ dt,
                                         const float* __restrict__ a_log, float* __restrict__ ckpt) {
  const std::int64_t PN = m.P * m.N, task = blockIdx.y, b = task / m.H, h = task % m.H, g = h / (m.H / m.G);
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (k >= PN) return;
  const std::int64_t p = k / m.N, n = k % m.N, nseg = mamba_segments(m.S);
  const float A = decay_rate(a_log, h);
  float e = 0.0f;
  for (std::int64_t t = 0; t < m.S; ++t) {
    const std::int64_t row = b * m.S + t;
    const float d = dt[row * m.H + h];
    const float a = mlp_math::exp_of(float(d * A));
    const float dxp = d * scan_operand(xbc[row * m.CD + h * m.P + p], m.bf16);
    e = a * e + dxp * scan_operand(xbc[row * m.CD + m.DI + g * m.N + n], m.bf16);
    if (t % kMambaSegment == kMambaSegment - 1 || t == m.S - 1) ckpt[(task * nseg + t / kMambaSegment) * PN + k] = e;
  }
}

// The adjoint's shared memory, floats: G (P rows of N + 1), a segment's states h_(t0-1) ..
// h_(t0+Lc-1) ((Lc + 1) P N), its x and dy (Lc P each), B and C (Lc N each), dt and decays.
__host__ __device__ inline std::int64_t mamba_adjoint_smem_floats(std::int64_t P, std::int64_t N) {
  const std::int64_t Lc = kMambaSegment;
  return P * (N + 1) + (Lc + 1) * P * N + Lc * (2 * P + 2 * N + 2);
}

// The adjoint of the recurrence in reverse time, one block per (sequence, head), segments last
// to first: stage the segment's operands and its checkpoint, recompute its states (the same
// expressions as the checkpoints' kernel, so the same bits), then per position t descending:
//   G_t = dy_t C_t^T + exp(dt_(t+1) A) G_(t+1)  (elementwise, every thread);
//   3 N + P serial sums of the block's threads, ascending as the CPU's: dC_part_n = sum_p h_t dy,
//   dB_part_n = dt sum_p G x, da_part_n = sum_p G h_(t-1), and per row GB_p = sum_n G B with
//   dx_p = D dy + dt GB into the x columns of dxbc.
// Per-head parts are [sequence, head][t][n]. G's rows are padded to N + 1 so that a warp reads
// consecutive banks both along a row and down a column.
__global__ void mamba_scan_adjoint_kernel(MambaDims m, const float* __restrict__ xbc, const float* __restrict__ dt,
                                          const float* __restrict__ a_log, const float* __restrict__ d_skip,
                                          const float* __restrict__ dy, const float* __restrict__ ckpt,
                                          float* __restrict__ dxbc, float* __restrict__ dB_part,
                                          float* __restrict__ dC_part, float* __restrict__ da_part,
                                          float* __restrict__ GB) {
  extern __shared__ float mamba_smem[];
  const std::int64_t P = m.P, N = m.N, PN = P * N, GR = N + 1, Lc = kMambaSegment, nseg = mamba_segments(m.S);
  float* Gs = mamba_smem;
  float* hseg = Gs + P * GR;
  float* xseg = hseg + (Lc + 1) * PN;
  float* dyseg = xseg + Lc * P;
  float* Bseg = dyseg + Lc * P;
  float* Cseg = Bseg + Lc * N;
  float* dtseg = Cseg + Lc * N;
  float* aseg = dtseg + Lc;
  const std::int64_t task = blockIdx.x, b = task / m.H, h = task % m.H, g = h / (m.H / m.G);
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const float A = decay_rate(a_log, h), D = d_skip[h];
  const float* ck = ckpt + task * nseg * PN;
  for (std::int64_t k = tid; k < P * GR; k += nt) Gs[k] = 0.0f;
  float a_next = 0.0f;  // exp(dt_(t+1) A); the carry into the last position is 0
  for (std::int64_t seg = nseg; seg-- > 0;) {
    const std::int64_t t0 = seg * Lc, len = m.S - t0 < Lc ? m.S - t0 : Lc, row0 = b * m.S + t0;
    for (std::int64_t k = tid; k < PN; k += nt) hseg[k] = seg > 0 ? ck[(seg - 1) * PN + k] : 0.0f;
    for (std::int64_t e = tid; e < len * P; e += nt) {
      const std::int64_t row = row0 + e / P, p = e % P;
      xseg[e] = scan_operand(xbc[row * m.CD + h * P + p], m.bf16);
      dyseg[e] = dy[row * m.DI + h * P + p];
    }
    for (std::int64_t e = tid; e < len * N; e += nt) {
      const float* r = xbc + (row0 + e / N) * m.CD + m.DI + g * N + e % N;
      Bseg[e] = scan_operand(r[0], m.bf16);
      Cseg[e] = scan_operand(r[m.GN], m.bf16);
    }
    for (std::int64_t u = tid; u < len; u += nt) {
      const float d = dt[(row0 + u) * m.H + h];
      dtseg[u] = d;
      aseg[u] = mlp_math::exp_of(float(d * A));
    }
    __syncthreads();
    for (std::int64_t k = tid; k < PN; k += nt) {
      const std::int64_t p = k / N, n = k % N;
      float e = hseg[k];
      for (std::int64_t u = 0; u < len; ++u) {
        const float dxp = dtseg[u] * xseg[u * P + p];
        e = aseg[u] * e + dxp * Bseg[u * N + n];
        hseg[(u + 1) * PN + k] = e;
      }
    }
    __syncthreads();
    for (std::int64_t u = len; u-- > 0;) {
      const std::int64_t t = t0 + u, row = row0 + u;
      const float d = dtseg[u];
      const float* dys = dyseg + u * P;
      const float* xs = xseg + u * P;
      const float* Bs = Bseg + u * N;
      const float* Cs = Cseg + u * N;
      const float* ht = hseg + (u + 1) * PN;
      const float* hp = hseg + u * PN;
      for (std::int64_t k = tid; k < PN; k += nt) {
        const std::int64_t p = k / N, n = k % N;
        float& gv = Gs[p * GR + n];
        gv = dys[p] * Cs[n] + a_next * gv;
      }
      __syncthreads();
      const std::int64_t q0 = (task * m.S + t) * N;
      for (std::int64_t j = tid; j < 3 * N + P; j += nt) {
        if (j < N) {
          float c = 0.0f;
          for (std::int64_t p = 0; p < P; ++p) c = c + ht[p * N + j] * dys[p];
          dC_part[q0 + j] = c;
        } else if (j < 2 * N) {
          const std::int64_t n = j - N;
          float bsum = 0.0f;
          for (std::int64_t p = 0; p < P; ++p) bsum = bsum + Gs[p * GR + n] * xs[p];
          dB_part[q0 + n] = d * bsum;
        } else if (j < 3 * N) {
          const std::int64_t n = j - 2 * N;
          da_part[q0 + n] =
              t > 0 ? ascending_sum<float>(P, [&](std::int64_t p) -> float { return Gs[p * GR + n] * hp[p * N + n]; })
                    : 0.0f;
        } else {
          const std::int64_t p = j - 3 * N;
          float gb = 0.0f;
          for (std::int64_t n = 0; n < N; ++n) gb = gb + Gs[p * GR + n] * Bs[n];
          GB[row * m.DI + h * P + p] = gb;
          dxbc[row * m.CD + h * P + p] = D * dys[p] + d * gb;
        }
      }
      a_next = aseg[u];
      __syncthreads();
    }
  }
}

// dB and dC of a group: its heads' parts added in ascending head order, into dxbc's B and C
// columns.
__global__ void mamba_group_sum_kernel(MambaDims m, const float* __restrict__ dB_part,
                                       const float* __restrict__ dC_part, float* __restrict__ dxbc) {
  const std::int64_t per_group = m.H / m.G;
  FP4D_GRID_STRIDE(e, m.R * m.GN) {
    const std::int64_t i = e / m.GN, gn = e % m.GN, g = gn / m.N, n = gn % m.N, b = i / m.S, t = i % m.S;
    float sb = 0.0f, sc = 0.0f;
    for (std::int64_t h = g * per_group; h < (g + 1) * per_group; ++h) {
      const std::int64_t q = ((b * m.H + h) * m.S + t) * m.N + n;
      sb = sb + dB_part[q];
      sc = sc + dC_part[q];
    }
    dxbc[i * m.CD + m.DI + gn] = sb;
    dxbc[i * m.CD + m.DI + m.GN + gn] = sc;
  }
}

// Per (row, head): ddt = sum_p x GB (ascending) + (da exp(dt A)) A, da = the state columns'
// parts in ascending order (0 at a sequence's first position); its terms of dA ((da a) dt) and
// dD (sum_p dy x); then softplus's transpose: draw = ddt (v > threshold) or ddt sigmoid(v),
// into the dt_raw column of dzx and `draw`.
__global__ void mamba_dt_backward_kernel(MambaDims m, const float* __restrict__ xbc, const float* __restrict__ zx,
                                         const float* __restrict__ dt, const float* __restrict__ a_log,
                                         const float* __restrict__ dt_bias, const float* __restrict__ dy,
                                         const float* __restrict__ GB, const float* __restrict__ da_part,
                                         float* __restrict__ dzx, float* __restrict__ dA_term,
                                         float* __restrict__ dD_term, float* __restrict__ draw) {
  FP4D_GRID_STRIDE(e, m.R * m.H) {
    const std::int64_t i = e / m.H, h = e % m.H, b = i / m.S, t = i % m.S;
    const float A = decay_rate(a_log, h), d = dt[e];
    const auto x = [&](std::int64_t p) { return scan_operand(xbc[i * m.CD + h * m.P + p], m.bf16); };
    float ddt = 0.0f;
    for (std::int64_t p = 0; p < m.P; ++p) ddt = ddt + x(p) * GB[i * m.DI + h * m.P + p];
    const float dd = ascending_sum<float>(m.P, [&](std::int64_t p) -> float { return dy[i * m.DI + h * m.P + p] * x(p); });
    const float da =
        t > 0 ? ascending_sum<float>(m.N, [&](std::int64_t n) -> float { return da_part[((b * m.H + h) * m.S + t) * m.N + n]; })
              : 0.0f;
    const float daa = da * mlp_math::exp_of(float(d * A));
    const float total = ddt + daa * A;
    dA_term[e] = daa * d;
    dD_term[e] = dd;
    const float v = zx[i * m.W + m.DI + m.CD + h] + dt_bias[h];
    const float r = v > static_cast<float>(kMambaSoftplusLinear) ? total : total * mlp_math::sigmoid(v);
    dzx[i * m.W + m.DI + m.CD + h] = r;
    draw[e] = r;
  }
}

// The per-head parameters' gradients in two passes (model/sum_order.hpp). Per (sequence, head),
// one thread: dt_bias's part over the positions ascending, dA's and dD's descending (the
// adjoint's order); parts [sequence][3][head].
__global__ void mamba_head_parts_kernel(MambaDims m, const float* __restrict__ draw, const float* __restrict__ dA_term,
                                        const float* __restrict__ dD_term, float* __restrict__ part) {
  FP4D_GRID_STRIDE(e, (m.R / m.S) * m.H) {
    const std::int64_t b = e / m.H, h = e % m.H;
    const auto at = [&](std::int64_t t) { return (b * m.S + t) * m.H + h; };
    part[(b * 3 + 0) * m.H + h] = ascending_sum<float>(m.S, [&](std::int64_t t) -> float { return draw[at(t)]; });
    part[(b * 3 + 1) * m.H + h] = descending_sum<float>(m.S, [&](std::int64_t t) -> float { return dA_term[at(t)]; });
    part[(b * 3 + 2) * m.H + h] = descending_sum<float>(m.S, [&](std::int64_t t) -> float { return dD_term[at(t)]; });
  }
}
// Per head: the sequences' parts ascending; a_log's gradient = dA A.
__global__ void mamba_head_grads_kernel(MambaDims m, const float* __restrict__ a_log, const float* __restrict__ part,
                                        float* __restrict__ g_dt_bias, float* __restrict__ g_a_log,
                                        float* __restrict__ g_d_skip) {
  FP4D_GRID_STRIDE(h, m.H) {
    const auto over_sequences = [&](int which) {
      return ascending_sum<float>(m.R / m.S, [&](std::int64_t b) -> float { return part[(b * 3 + which) * m.H + h]; });
    };
    const float db = over_sequences(0), dA = over_sequences(1), dD = over_sequences(2);
    g_dt_bias[h] = db;
    g_a_log[h] = dA * decay_rate(a_log, h);
    g_d_skip[h] = dD;
  }
}

// In place: dxbc (the gradient after SiLU) -> dpre = dxbc silu'(pre).
__global__ void mamba_silu_backward_kernel(MambaDims m, const float* __restrict__ pre, float* __restrict__ dxbc) {
  FP4D_GRID_STRIDE(e, m.R * m.CD) dxbc[e] = dxbc[e] * silu_prime(pre[e]);
}

// The convolution's input gradient: the input at position q feeds the outputs q + K - 1 - k
// (k ascending), into the x, B, C columns of dzx.
__global__ void mamba_conv_backward_kernel(MambaDims m, const float* __restrict__ dpre, const float* __restrict__ w,
                                           float* __restrict__ dzx) {
  FP4D_GRID_STRIDE(e, m.R * m.CD) {
    const std::int64_t i = e / m.CD, ch = e % m.CD, t = i % m.S;
    float acc = 0.0f;
    for (std::int64_t k = 0; k < m.K; ++k) {
      const std::int64_t tout = t + m.K - 1 - k;
      if (tout >= m.S) continue;
      acc = acc + dpre[(i - t + tout) * m.CD + ch] * w[ch * m.K + k];
    }
    dzx[i * m.W + m.DI + ch] = acc;
  }
}

// The convolution's weights and bias (tap K: the bias) in model/sum_order.hpp's row chunks:
// per (chunk of kRowChunk rows, tap, channel) its chunk_sum (a tap before the sequence's start
// adds +0, as on the CPU): part [chunk][tap][channel].
__global__ void mamba_conv_param_parts_kernel(MambaDims m, const float* __restrict__ dpre, const float* __restrict__ zx,
                                              float* __restrict__ part) {
  FP4D_GRID_STRIDE(e, chunk_count(m.R, kRowChunk) * (m.K + 1) * m.CD) {
    const std::int64_t ch = e % m.CD, k = (e / m.CD) % (m.K + 1), c = e / (m.CD * (m.K + 1));
    part[e] = chunk_sum<float>(c, kRowChunk, m.R, [&](std::int64_t i) -> float {
      if (k == m.K) return dpre[i * m.CD + ch];
      const std::int64_t t = i % m.S, pos = t - m.K + 1 + k;
      if (pos < 0) return 0.0f;
      return dpre[i * m.CD + ch] * zx[(i - t + pos) * m.W + m.DI + ch];
    });
  }
}
// The chunks' parts by ascending_sum.
__global__ void mamba_conv_param_grads_kernel(MambaDims m, const float* __restrict__ part, float* __restrict__ g_w,
                                              float* __restrict__ g_b) {
  const std::int64_t chunks = chunk_count(m.R, kRowChunk), per = (m.K + 1) * m.CD;
  FP4D_GRID_STRIDE(e, per) {
    const std::int64_t ch = e % m.CD, k = e / m.CD;
    const float acc = ascending_sum<float>(chunks, [&](std::int64_t c) -> float { return part[c * per + e]; });
    if (k == m.K) g_b[ch] = acc;
    else g_w[ch * m.K + k] = acc;
  }
}

}  // namespace

}  // namespace fp4d::cuda
