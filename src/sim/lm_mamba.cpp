// The Mamba-2 mixer of the `lm` model (sim/lm_mamba.hpp).
#include "sim/lm_mamba.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "model/mlp_math.hpp"
#include "model/sum_order.hpp"
#include "sim/mixer_operands.hpp"
#include "sim/mlp_precision.hpp"
#include "util/parallel_worth.hpp"

namespace fp4d {

namespace {

template <class T>
void check_bf16(bool bf16) {
  mixer::check_bf16<T>(bf16, "scan operands");
}
using mixer::operand;

// softplus (kMambaSoftplusLinear): log1p(exp(v)) below the threshold, with model/mlp_math.hpp's
// exp and log1p (the GPU mixer's bits for float).
template <class T>
T softplus(const T& v) {
  if (v > T(kMambaSoftplusLinear)) return v;
  return mlp_math::log1p_of(mlp_math::exp_of(v));
}

using mlp_math::silu;
template <class T>
T silu_derivative(const T& v) {
  return mlp_math::silu_derivative(v, mlp_math::sigmoid(v));
}

std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

}  // namespace

void check_mamba_shape(const MambaShape& s) {
  const auto need = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("lm: mamba." + what);
  };
  need(s.batch >= 1 && s.seq >= 1, "shape needs batch and seq_len >= 1");
  need(s.heads >= 1, "heads must be >= 1");
  need(s.head_dim >= 1, "head_dim must be >= 1");
  need(s.state >= 1, "state must be >= 1");
  need(s.groups >= 1 && s.heads % s.groups == 0,
       "groups = " + std::to_string(s.groups) + " must be >= 1 and divide the heads (" + std::to_string(s.heads) + ")");
  need(s.conv_width >= 1, "conv_width must be >= 1");
  need(s.chunk >= 1 && s.seq % s.chunk == 0,
       "chunk = " + std::to_string(s.chunk) + " must be >= 1 and divide seq_len = " + std::to_string(s.seq));
}

template <class T>
void ssd_scan_chunked(const MambaShape& s, const T* x, const T* dt, const T* A, const T* B, const T* C, const T* D,
                      T* y) {
  check_mamba_shape(s);
  const std::int64_t S = s.seq, H = s.heads, P = s.head_dim, N = s.state, DI = s.d_inner(), GN = s.groups * N;
  const std::int64_t L = s.chunk, per_group = H / s.groups;
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(s.rows() * DI * N))
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / per_group;
      // wl[u]: exp(cum_last - cum_u) dt_u, the weight of position u in the chunk's state update.
      std::vector<T> state(at(P * N), T(0)), cum(at(L)), hx(at(P)), wl(at(L));
      const auto row = [&](std::int64_t t) { return b * S + t; };
      const auto xv = [&](std::int64_t t, std::int64_t p) { return x[row(t) * DI + h * P + p]; };
      const auto Bv = [&](std::int64_t t, std::int64_t n) { return B[row(t) * GN + g * N + n]; };
      const auto Cv = [&](std::int64_t t, std::int64_t n) { return C[row(t) * GN + g * N + n]; };
      const auto dtv = [&](std::int64_t t) { return dt[row(t) * H + h]; };
      for (std::int64_t t0 = 0; t0 < S; t0 += L) {
        const std::int64_t t1 = t0 + L;
        T acc = T(0);
        for (std::int64_t t = t0; t < t1; ++t) {
          acc = acc + dtv(t) * A[h];
          cum[at(t - t0)] = acc;
        }
        for (std::int64_t t = t0; t < t1; ++t) {
          std::fill(hx.begin(), hx.end(), T(0));
          for (std::int64_t u = t0; u <= t; ++u) {
            T cb = T(0);
            for (std::int64_t n = 0; n < N; ++n) cb = cb + Cv(t, n) * Bv(u, n);
            const T w = (cb * mlp_math::exp_of(T(cum[at(t - t0)] - cum[at(u - t0)]))) * dtv(u);
            for (std::int64_t p = 0; p < P; ++p) hx[at(p)] = hx[at(p)] + w * xv(u, p);
          }
          const T et = mlp_math::exp_of(cum[at(t - t0)]);
          for (std::int64_t p = 0; p < P; ++p) {
            T hc = T(0);
            for (std::int64_t n = 0; n < N; ++n) hc = hc + state[at(p * N + n)] * Cv(t, n);
            y[row(t) * DI + h * P + p] = (hx[at(p)] + et * hc) + D[h] * xv(t, p);
          }
        }
        const T last = cum[at(L - 1)];
        const T el = mlp_math::exp_of(last);
        for (std::int64_t u = t0; u < t1; ++u) wl[at(u - t0)] = mlp_math::exp_of(T(last - cum[at(u - t0)])) * dtv(u);
        for (std::int64_t p = 0; p < P; ++p)
          for (std::int64_t n = 0; n < N; ++n) {
            T a = el * state[at(p * N + n)];
            for (std::int64_t u = t0; u < t1; ++u) a = a + (wl[at(u - t0)] * xv(u, p)) * Bv(u, n);
            state[at(p * N + n)] = a;
          }
      }
    }
}

template <class T>
void ssd_scan_sequential(const MambaShape& s, const T* x, const T* dt, const T* A, const T* B, const T* C,
                         const T* D, T* y) {
  check_mamba_shape(s);
  const std::int64_t S = s.seq, H = s.heads, P = s.head_dim, N = s.state, DI = s.d_inner(), GN = s.groups * N;
  const std::int64_t per_group = H / s.groups;
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(s.rows() * DI * N))
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / per_group;
      std::vector<T> st(at(P * N), T(0));
      for (std::int64_t t = 0; t < S; ++t) {
        const std::int64_t i = b * S + t;
        const T d = dt[i * H + h];
        const T a = mlp_math::exp_of(T(d * A[h]));
        for (std::int64_t p = 0; p < P; ++p) {
          const T dx = d * x[i * DI + h * P + p];
          T acc = T(0);
          for (std::int64_t n = 0; n < N; ++n) {
            T& e = st[at(p * N + n)];
            e = a * e + dx * B[i * GN + g * N + n];
            acc = acc + e * C[i * GN + g * N + n];
          }
          y[i * DI + h * P + p] = acc + D[h] * x[i * DI + h * P + p];
        }
      }
    }
}

namespace {

// The scan's operands of a forward (or backward): x, B, C from the post-SiLU conv channels,
// rounded to BF16 when bf16; dt as computed; A = -exp(a_log).
template <class T>
struct ScanOperands {
  std::vector<T> x, B, C, A;
};
template <class T>
ScanOperands<T> scan_operands(const MambaShape& s, const MambaParams<T>& p, const std::vector<T>& xbc, bool bf16) {
  const std::int64_t R = s.rows(), DI = s.d_inner(), GN = s.groups * s.state, CD = s.conv_dim();
  ScanOperands<T> o;
  o.x.resize(at(R * DI));
  o.B.resize(at(R * GN));
  o.C.resize(at(R * GN));
  for (std::int64_t i = 0; i < R; ++i) {
    const T* r = xbc.data() + i * CD;
    for (std::int64_t j = 0; j < DI; ++j) o.x[at(i * DI + j)] = operand(r[j], bf16);
    for (std::int64_t j = 0; j < GN; ++j) {
      o.B[at(i * GN + j)] = operand(r[DI + j], bf16);
      o.C[at(i * GN + j)] = operand(r[DI + GN + j], bf16);
    }
  }
  o.A.resize(at(s.heads));
  for (std::int64_t h = 0; h < s.heads; ++h) o.A[at(h)] = -mlp_math::exp_of(p.a_log[h]);
  return o;
}

// The scan's backward (header): dx [rows x DI], dB, dC [rows x GN], ddt [rows x H], dA, dD [H]
// from dy [rows x DI]. dA, dD and the decay term of ddt are summed in model/sum_order.hpp's
// orders (the GPU's kernels' split of them).
template <class T>
void scan_backward(const MambaShape& s, const ScanOperands<T>& o, const std::vector<T>& dt, const T* D,
                   const std::vector<T>& dy, std::vector<T>& dx, std::vector<T>& dB, std::vector<T>& dC,
                   std::vector<T>& ddt, std::vector<T>& dA, std::vector<T>& dD) {
  const std::int64_t S = s.seq, H = s.heads, P = s.head_dim, N = s.state, DI = s.d_inner(), G = s.groups;
  const std::int64_t GN = G * N, R = s.rows(), per_group = H / G, nb = s.batch;
  dx.assign(at(R * DI), T(0));
  ddt.assign(at(R * H), T(0));
  // Per (sequence, head): its dB and dC rows (S x N), its dA and dD terms per position.
  std::vector<T> dB_part(at(nb * H * S * N)), dC_part(at(nb * H * S * N)), dA_term(at(R * H)), dD_term(at(R * H));
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(R * DI * N))
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / per_group, task = b * H + h;
      const auto row = [&](std::int64_t t) { return b * S + t; };
      const auto xv = [&](std::int64_t t, std::int64_t p) { return o.x[at(row(t) * DI + h * P + p)]; };
      const auto Bv = [&](std::int64_t t, std::int64_t n) { return o.B[at(row(t) * GN + g * N + n)]; };
      const auto Cv = [&](std::int64_t t, std::int64_t n) { return o.C[at(row(t) * GN + g * N + n)]; };
      const auto dtv = [&](std::int64_t t) { return dt[at(row(t) * H + h)]; };
      const T Ah = o.A[at(h)];
      // States h_t by the plain recurrence.
      std::vector<T> hs(at(S * P * N));
      std::vector<T> prev(at(P * N), T(0));
      for (std::int64_t t = 0; t < S; ++t) {
        const T a = mlp_math::exp_of(T(dtv(t) * Ah));
        for (std::int64_t p = 0; p < P; ++p) {
          const T dxp = dtv(t) * xv(t, p);
          for (std::int64_t n = 0; n < N; ++n) {
            const std::size_t k = at(p * N + n);
            prev[k] = a * prev[k] + dxp * Bv(t, n);
            hs[at(t * P * N) + k] = prev[k];
          }
        }
      }
      std::vector<T> Gm(at(P * N)), carry(at(P * N), T(0)), GB(at(P));
      for (std::int64_t t = S; t-- > 0;) {
        const T d = dtv(t);
        const T a = mlp_math::exp_of(T(d * Ah));
        const T* dyt = dy.data() + row(t) * DI + h * P;
        for (std::int64_t p = 0; p < P; ++p)
          for (std::int64_t n = 0; n < N; ++n) Gm[at(p * N + n)] = dyt[p] * Cv(t, n) + carry[at(p * N + n)];
        const T* ht = hs.data() + t * P * N;
        T* dCt = dC_part.data() + (task * S + t) * N;
        T* dBt = dB_part.data() + (task * S + t) * N;
        for (std::int64_t n = 0; n < N; ++n) {
          T c = T(0), bsum = T(0);
          for (std::int64_t p = 0; p < P; ++p) {
            c = c + ht[p * N + n] * dyt[p];
            bsum = bsum + Gm[at(p * N + n)] * xv(t, p);
          }
          dCt[n] = c;
          dBt[n] = d * bsum;
        }
        T ddt_t = T(0);
        for (std::int64_t p = 0; p < P; ++p) {
          T gb = T(0);
          for (std::int64_t n = 0; n < N; ++n) gb = gb + Gm[at(p * N + n)] * Bv(t, n);
          GB[at(p)] = gb;
          dx[at(row(t) * DI + h * P + p)] = D[h] * dyt[p] + d * gb;
          ddt_t = ddt_t + xv(t, p) * gb;
        }
        dD_term[at(row(t) * H + h)] = ascending_sum<T>(P, [&](std::int64_t p) -> T { return dyt[p] * xv(t, p); });
        // <G_t, h_(t-1)>: per state column over p, then the columns (0 at a sequence's start).
        T da = T(0);
        if (t > 0) {
          const T* hp = hs.data() + (t - 1) * P * N;
          da = ascending_sum<T>(N, [&](std::int64_t n) -> T {
            return ascending_sum<T>(P, [&](std::int64_t p) -> T { return Gm[at(p * N + n)] * hp[p * N + n]; });
          });
        }
        const T daa = da * a;
        ddt[at(row(t) * H + h)] = ddt_t + daa * Ah;
        dA_term[at(row(t) * H + h)] = daa * d;
        for (std::int64_t k = 0; k < P * N; ++k) carry[at(k)] = a * Gm[at(k)];
      }
    }
  // Reductions in a fixed order: the heads of a group ascending, the sequences ascending.
  dB.assign(at(R * GN), T(0));
  dC.assign(at(R * GN), T(0));
  for (std::int64_t b = 0; b < nb; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / per_group, task = b * H + h;
      for (std::int64_t t = 0; t < S; ++t)
        for (std::int64_t n = 0; n < N; ++n) {
          const std::size_t dst = at((b * S + t) * GN + g * N + n), src = at((task * S + t) * N + n);
          dB[dst] = dB[dst] + dB_part[src];
          dC[dst] = dC[dst] + dC_part[src];
        }
    }
  // dA and dD: per sequence its positions in descending order (the adjoint's reverse time),
  // then the sequences ascending.
  dA.resize(at(H));
  dD.resize(at(H));
  for (std::int64_t h = 0; h < H; ++h) {
    const auto over_sequences = [&](const std::vector<T>& term) -> T {
      return ascending_sum<T>(nb, [&](std::int64_t b) -> T {
        return descending_sum<T>(S, [&](std::int64_t t) -> T { return term[at((b * S + t) * H + h)]; });
      });
    };
    dA[at(h)] = over_sequences(dA_term);
    dD[at(h)] = over_sequences(dD_term);
  }
}

}  // namespace

template <class T>
void mamba_mixer_forward(const MambaShape& s, const MambaParams<T>& p, const T* zxbcdt, T eps, bool bf16,
                         MambaCache<T>& c, T* out) {
  check_mamba_shape(s);
  check_bf16<T>(bf16);
  const std::int64_t S = s.seq, R = s.rows(), DI = s.d_inner(), CD = s.conv_dim(), W = s.in_width(), K = s.conv_width;
  const std::int64_t H = s.heads, G = s.groups, gw = DI / G;
  c.pre.resize(at(R * CD));
  c.xbc.resize(at(R * CD));
#pragma omp parallel for schedule(static) if (parallel_worth(R * CD * K))
  for (std::int64_t i = 0; i < R; ++i) {
    const std::int64_t t = i % S;
    for (std::int64_t ch = 0; ch < CD; ++ch) {
      T acc = p.conv_b[ch];
      for (std::int64_t k = 0; k < K; ++k) {
        const std::int64_t pos = t - K + 1 + k;
        if (pos < 0) continue;
        acc = acc + p.conv_w[ch * K + k] * zxbcdt[(i - t + pos) * W + DI + ch];
      }
      c.pre[at(i * CD + ch)] = acc;
      c.xbc[at(i * CD + ch)] = silu(acc);
    }
  }
  c.dt.resize(at(R * H));
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t h = 0; h < H; ++h)
      c.dt[at(i * H + h)] = softplus(T(zxbcdt[i * W + DI + CD + h] + p.dt_bias[h]));
  const ScanOperands<T> o = scan_operands(s, p, c.xbc, bf16);
  c.y.resize(at(R * DI));
  ssd_scan_chunked(s, o.x.data(), c.dt.data(), o.A.data(), o.B.data(), o.C.data(), p.d_skip, c.y.data());
  c.n.resize(at(R * DI));
  c.rinv.resize(at(R * G));
  const T len = static_cast<T>(gw);
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t g = 0; g < G; ++g) {
      T ss = T(0);
      for (std::int64_t j = g * gw; j < (g + 1) * gw; ++j) {
        const T gv = c.y[at(i * DI + j)] * silu(zxbcdt[i * W + j]);
        c.n[at(i * DI + j)] = gv;
        ss = ss + gv * gv;
      }
      const T r = T(1) / mlp_math::sqrt_of(T(ss / len + eps));
      c.rinv[at(i * G + g)] = r;
      for (std::int64_t j = g * gw; j < (g + 1) * gw; ++j) {
        T& nv = c.n[at(i * DI + j)];
        nv = nv * r;
        out[i * DI + j] = nv * p.norm_g[j];
      }
    }
}

template <class T>
void mamba_mixer_backward(const MambaShape& s, const MambaParams<T>& p, const T* zxbcdt, const MambaCache<T>& c,
                          const T* dout, T eps, bool bf16, T* dzxbcdt, MambaGrads<T>& gr) {
  (void)eps;  // the forward's rinv carries it
  check_mamba_shape(s);
  check_bf16<T>(bf16);
  const std::int64_t S = s.seq, R = s.rows(), DI = s.d_inner(), CD = s.conv_dim(), W = s.in_width(), K = s.conv_width;
  const std::int64_t H = s.heads, G = s.groups, gw = DI / G, GN = G * s.state;
  // Norm and gate; the gain's gradient in model/sum_order.hpp's row chunks.
  gr.norm_g.resize(at(DI));
  for (std::int64_t j = 0; j < DI; ++j)
    gr.norm_g[at(j)] = chunked_sum<T>(R, kRowChunk, [&](std::int64_t i) -> T {
      const std::size_t k = at(i * DI + j);
      return dout[k] * c.n[k];
    });
  std::vector<T> dy(at(R * DI));
  const T len = static_cast<T>(gw);
  std::vector<T> dn(at(gw));
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t g = 0; g < G; ++g) {
      T dot = T(0);
      for (std::int64_t j = g * gw; j < (g + 1) * gw; ++j) {
        const std::size_t k = at(i * DI + j);
        dn[at(j - g * gw)] = dout[k] * p.norm_g[j];
        dot = dot + dn[at(j - g * gw)] * c.n[k];
      }
      const T mean = dot / len;
      const T r = c.rinv[at(i * G + g)];
      for (std::int64_t j = g * gw; j < (g + 1) * gw; ++j) {
        const std::size_t k = at(i * DI + j);
        const T dg = r * (dn[at(j - g * gw)] - c.n[k] * mean);
        const T z = zxbcdt[i * W + j];
        dy[k] = dg * silu(z);
        dzxbcdt[i * W + j] = (dg * c.y[k]) * silu_derivative(z);
      }
    }
  // Scan.
  const ScanOperands<T> o = scan_operands(s, p, c.xbc, bf16);
  if (bf16)
    for (T& v : dy) v = operand(v, bf16);
  std::vector<T> dx, dB, dC, ddt, dA, dD;
  scan_backward(s, o, c.dt, p.d_skip, dy, dx, dB, dC, ddt, dA, dD);
  gr.d_skip = dD;
  gr.a_log.resize(at(H));
  for (std::int64_t h = 0; h < H; ++h) gr.a_log[at(h)] = dA[at(h)] * o.A[at(h)];  // dA/da_log = A
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t h = 0; h < H; ++h) {
      const T v = zxbcdt[i * W + DI + CD + h] + p.dt_bias[h];
      const T draw = v > T(kMambaSoftplusLinear) ? ddt[at(i * H + h)] : ddt[at(i * H + h)] * mlp_math::sigmoid(v);
      dzxbcdt[i * W + DI + CD + h] = draw;
    }
  // dt_bias: per sequence its positions ascending, then the sequences ascending.
  gr.dt_bias.resize(at(H));
  for (std::int64_t h = 0; h < H; ++h)
    gr.dt_bias[at(h)] = ascending_sum<T>(R / S, [&](std::int64_t b) -> T {
      return ascending_sum<T>(S, [&](std::int64_t t) -> T { return dzxbcdt[((b * S + t) * W) + DI + CD + h]; });
    });
  // SiLU after the convolution, then the convolution.
  std::vector<T> dpre(at(R * CD));
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t ch = 0; ch < CD; ++ch) {
      const T dpost = ch < DI ? dx[at(i * DI + ch)] : ch < DI + GN ? dB[at(i * GN + ch - DI)] : dC[at(i * GN + ch - DI - GN)];
      dpre[at(i * CD + ch)] = dpost * silu_derivative(c.pre[at(i * CD + ch)]);
    }
  // The weights' and the bias's gradients in model/sum_order.hpp's row chunks (a tap before the
  // sequence's start adds +0).
  gr.conv_b.resize(at(CD));
  gr.conv_w.resize(at(CD * K));
#pragma omp parallel for schedule(static) if (parallel_worth(R * CD * K))
  for (std::int64_t ch = 0; ch < CD; ++ch) {
    gr.conv_b[at(ch)] = chunked_sum<T>(R, kRowChunk, [&](std::int64_t i) -> T { return dpre[at(i * CD + ch)]; });
    for (std::int64_t k = 0; k < K; ++k)
      gr.conv_w[at(ch * K + k)] = chunked_sum<T>(R, kRowChunk, [&](std::int64_t i) -> T {
        const std::int64_t t = i % S, pos = t - K + 1 + k;
        if (pos < 0) return T(0);
        return dpre[at(i * CD + ch)] * zxbcdt[(i - t + pos) * W + DI + ch];
      });
    // The input at position q feeds the outputs q + K - 1 - k (k ascending).
    for (std::int64_t i = 0; i < R; ++i) {
      const std::int64_t t = i % S;
      T acc = T(0);
      for (std::int64_t k = 0; k < K; ++k) {
        const std::int64_t tout = t + K - 1 - k;
        if (tout >= S) continue;
        acc = acc + dpre[at((i - t + tout) * CD + ch)] * p.conv_w[ch * K + k];
      }
      dzxbcdt[i * W + DI + ch] = acc;
    }
  }
}

std::vector<float> mamba_initial_a_log(std::int64_t heads) {
  std::vector<float> v(at(heads));
  for (std::int64_t h = 0; h < heads; ++h) {
    const double a = heads > 1 ? 1.0 + 15.0 * static_cast<double>(h) / static_cast<double>(heads - 1) : 1.0;
    v[at(h)] = static_cast<float>(std::log(a));
  }
  return v;
}

std::vector<float> mamba_initial_dt_bias(std::int64_t heads) {
  std::vector<float> v(at(heads));
  const double lo = std::log(0.001), hi = std::log(0.1);
  for (std::int64_t h = 0; h < heads; ++h) {
    const double f = heads > 1 ? static_cast<double>(h) / static_cast<double>(heads - 1) : 0.5;
    const double dt = std::exp(lo + (hi - lo) * f);
    v[at(h)] = static_cast<float>(dt + std::log(-std::expm1(-dt)));  // softplus^-1(dt)
  }
  return v;
}

#define FP4D_MAMBA_INSTANTIATE(T)                                                                                \
  template void ssd_scan_chunked<T>(const MambaShape&, const T*, const T*, const T*, const T*, const T*,        \
                                    const T*, T*);                                                              \
  template void ssd_scan_sequential<T>(const MambaShape&, const T*, const T*, const T*, const T*, const T*,     \
                                       const T*, T*);                                                           \
  template void mamba_mixer_forward<T>(const MambaShape&, const MambaParams<T>&, const T*, T, bool,             \
                                       MambaCache<T>&, T*);                                                     \
  template void mamba_mixer_backward<T>(const MambaShape&, const MambaParams<T>&, const T*, const MambaCache<T>&, \
                                        const T*, T, bool, T*, MambaGrads<T>&);
FP4D_MAMBA_INSTANTIATE(float)
FP4D_MAMBA_INSTANTIATE(double)
FP4D_MAMBA_INSTANTIATE(mlp_binary128)
FP4D_MAMBA_INSTANTIATE(mlp_mp256)
#undef FP4D_MAMBA_INSTANTIATE

}  // namespace fp4d
