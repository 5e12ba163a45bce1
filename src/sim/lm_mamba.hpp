// The `lm` model's Mamba-2 mixer (block `M`, model/lm_spec.hpp): everything between its in- and
// out-projections - the short causal depthwise convolution, the selective state-space scan
// with a scalar decay per head (Dao and Gu 2024, "Transformers are SSMs"), the skip term, the
// gate and the gated RMSNorm - forward and backward by hand, in T (float, double, or a wider
// reference scalar of sim/mlp_precision.hpp, instantiated in lm_mamba.cpp).
//
// Layout: rows are token positions (row i = b seq + t). The in-projection's output row is
// [z | x | B | C | dt_raw] with widths DI, DI, G N, G N, H (DI = heads head_dim, G = groups,
// N = state); x, B and C (the conv channels, conv_dim = DI + 2 G N, contiguous) are what the
// convolution reads. Head h owns columns h P .. (h+1) P - 1 of x and y (P = head_dim) and reads
// group g = h / (H / G) of B and C (columns g N .. (g+1) N - 1).
//
// Forward, per row i = (b, t) and channel c (every sum in the order written):
//   conv   pre_ic = conv_b_c, then pre_ic = pre_ic + conv_w_ck xbc_(b, t-K+1+k), c for k = 0 .. K-1
//          (terms at positions before the sequence's start omitted); post = silu(pre) =
//          pre sigmoid(pre).
//   dt     dt_ih = softplus(dt_raw_ih + dt_bias_h), softplus(v) = v for v > 20, else
//          log1p(exp(v)) (PyTorch's threshold); A_h = -exp(a_log_h).
//   scan   h_t = exp(dt_t A) h_(t-1) + dt_t x_t B_t^T (P x N per sequence and head, h_(-1) = 0),
//          y_t = h_t C_t + D_h x_t. Computed in chunks of `chunk` positions (the SSD form),
//          per chunk [t0, t1):
//            cum_t = sum_(tau = t0 .. t) dt_tau A (ascending);
//            y_tp = sum_(u = t0 .. t) (CB_tu exp(cum_t - cum_u) dt_u) x_up       (ascending u)
//                   + exp(cum_t) sum_n H_pn C_tn                                 (ascending n)
//                   + D x_tp,   CB_tu = sum_n C_tn B_un (ascending n), added in that order;
//            then H_pn = exp(cum_(t1-1)) H_pn + sum_u (exp(cum_(t1-1) - cum_u) dt_u x_up) B_un.
//          chunk = 1 is the plain recurrence; chunk = seq is the quadratic (attention-like) form.
//   gate   g_ij = y_ij silu(z_ij).
//   norm   per row and group of DI / G columns: out = n norm_g, n = g rinv,
//          rinv = 1 / sqrt(mean(g^2) + eps) (sum ascending) - Mamba-2's RMSNormGated with the
//          norm after the gate.
// Backward: the transposes of those steps in T; the scan's by the adjoint of the recurrence
// (reverse time, states recomputed by the plain recurrence: the gradient of the exact function,
// which every chunking computes): G_t = dy_t C_t^T + exp(dt_(t+1) A) G_(t+1);
// dC_t = h_t^T dy_t, dx_t = D dy_t + dt_t G_t B_t, dB_t = dt_t G_t^T x_t,
// d dt_t = x_t . (G_t B_t) + <G_t, h_(t-1)> exp(dt_t A) A, dA = sum_t <G_t, h_(t-1)> exp(dt_t A) dt_t,
// dD = sum_t dy_t . x_t. Sums over the heads of a group (dB, dC) are completed per (sequence,
// head) and then added in ascending head order; the long sums take model/sum_order.hpp's
// orders, the GPU's kernels' (lm_mamba_kernels.cuh): <G_t, h_(t-1)> per state column over p,
// then the columns; dA and dD per position (dD's over p), per sequence over the positions in
// reverse time, then the sequences ascending; dt_bias per sequence over the positions, then
// the sequences; the gated norm's gain and the conv's weights and bias over the rows in chunks
// of 64. So results do not depend on the thread count, and the float mixer is the GPU's bit for
// bit.
//
// bf16 (T = float only): the scan's operands x, B, C (after the convolution and SiLU) and its
// incoming gradient dy are rounded to BF16 (RNE), as a fused scan kernel reads them in the
// model's dtype; dt, the decays, the states, the sums and everything outside the scan are FP32.
// The gradients reach the unrounded values unchanged (a dtype cast's gradient).
#pragma once

#include <cstdint>
#include <vector>

namespace fp4d {

// softplus(v) = v above this (PyTorch's threshold), log1p(exp(v)) below; its derivative is 1
// above, sigmoid(v) below. Shared by the CPU mixer and the GPU's kernels.
constexpr double kMambaSoftplusLinear = 20.0;

struct MambaShape {
  std::int64_t batch = 1, seq = 1;
  std::int64_t heads = 1, head_dim = 1, state = 1, groups = 1;
  std::int64_t conv_width = 4, chunk = 1;
  std::int64_t rows() const { return batch * seq; }
  std::int64_t d_inner() const { return heads * head_dim; }
  std::int64_t conv_dim() const { return d_inner() + 2 * groups * state; }
  std::int64_t in_width() const { return 2 * d_inner() + 2 * groups * state + heads; }
};

// The mixer's own parameters (pointers into the model's parameter vectors).
template <class T>
struct MambaParams {
  const T* conv_w = nullptr;   // conv_dim x conv_width
  const T* conv_b = nullptr;   // conv_dim
  const T* dt_bias = nullptr;  // heads
  const T* a_log = nullptr;    // heads
  const T* d_skip = nullptr;   // heads
  const T* norm_g = nullptr;   // d_inner
};
// Their gradients (overwritten, sized by the backward).
template <class T>
struct MambaGrads {
  std::vector<T> conv_w, conv_b, dt_bias, a_log, d_skip, norm_g;
};

// What the backward needs from the forward.
template <class T>
struct MambaCache {
  std::vector<T> pre;    // rows x conv_dim: the convolution's output before SiLU
  std::vector<T> xbc;    // rows x conv_dim: after SiLU (the scan's x, B, C, unrounded)
  std::vector<T> dt;     // rows x heads: softplus(dt_raw + dt_bias)
  std::vector<T> y;      // rows x d_inner: the scan's output (D x included)
  std::vector<T> n;      // rows x d_inner: the normalised gated values
  std::vector<T> rinv;   // rows x groups
};

// Throws std::invalid_argument naming the field for a shape the mixer cannot run (sizes < 1,
// heads % groups, seq % chunk).
void check_mamba_shape(const MambaShape& s);

// out [rows x d_inner] from the in-projection's output zxbcdt [rows x in_width].
template <class T>
void mamba_mixer_forward(const MambaShape& s, const MambaParams<T>& p, const T* zxbcdt, T eps, bool bf16,
                         MambaCache<T>& cache, T* out);

// From dout [rows x d_inner]: dzxbcdt [rows x in_width] (overwritten) and the parameters'
// gradients.
template <class T>
void mamba_mixer_backward(const MambaShape& s, const MambaParams<T>& p, const T* zxbcdt, const MambaCache<T>& cache,
                          const T* dout, T eps, bool bf16, T* dzxbcdt, MambaGrads<T>& grads);

// The scan alone (x [rows x d_inner], dt [rows x heads], A and D [heads], B and C
// [rows x groups state]) -> y [rows x d_inner]: chunked as above with s.chunk, or the plain
// recurrence (h_t = a_t h_(t-1) + dt_t x_t B_t^T, y_t = h_t C_t + D x_t, h_t's elements
// updated as (a_t h) + ((dt_t x_tp) B_tn), y_tp = (sum_n h_pn C_tn ascending) + D x_tp).
template <class T>
void ssd_scan_chunked(const MambaShape& s, const T* x, const T* dt, const T* A, const T* B, const T* C, const T* D,
                      T* y);
template <class T>
void ssd_scan_sequential(const MambaShape& s, const T* x, const T* dt, const T* A, const T* B, const T* C,
                         const T* D, T* y);

// The float32 initial values of the mixer's parameters (lm_spec.hpp, "Initialisation"), the
// same in every T: a_log_h = log(1 + 15 h / (H - 1)) (A from -1 to -16, Mamba-2's
// A_init_range), dt_bias_h = softplus^-1(dt_h) with dt_h log-spaced from 0.001 to 0.1, D = 1,
// norm gain 1, conv bias 0; the conv weights are the caller's (Philox normal draws).
std::vector<float> mamba_initial_a_log(std::int64_t heads);
std::vector<float> mamba_initial_dt_bias(std::int64_t heads);

}  // namespace fp4d
