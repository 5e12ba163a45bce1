// RoPE and causal attention of the `lm` model (sim/lm_attention.hpp).
#include "sim/lm_attention.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "model/mlp_math.hpp"
#include "sim/mixer_operands.hpp"
#include "sim/mlp_precision.hpp"
#include "util/parallel_worth.hpp"

namespace fp4d {

namespace {

template <class T>
void check_bf16(bool bf16) {
  mixer::check_bf16<T>(bf16, "attention operands");
}
using mixer::operand;

// The operands of an attention product: x, or x rounded to BF16 (RNE).
template <class T>
std::vector<T> operands(const T* x, std::int64_t n, bool bf16) {
  std::vector<T> r(x, x + n);
  for (T& e : r) e = operand(e, bf16);
  return r;
}

// 1 / sqrt(head_dim): double's, rounded, for float and double; computed in a wider T (a double
// value would cap a wide reference's accuracy at double's).
template <class T>
T attention_scale(std::int64_t head_dim) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  else return T(1) / mlp_math::sqrt_of(T(head_dim));
}

// Row t of the causal softmax of one (sequence, head): p[u] for u <= t from the operands q_t
// (hd values) and k (rows of stride ks): S_tu = (q_t . k_u) scale (dot in ascending j), then
// max, exp(S - max), their sum in ascending u, division. The forward and the backward both
// call this, so the backward's P has the forward's bits.
template <class T>
void softmax_row(const T* qt, const T* k, std::int64_t ks, std::int64_t t, std::int64_t hd, T scale, T* p) {
  for (std::int64_t u = 0; u <= t; ++u) {
    const T* ku = k + u * ks;
    T acc = T(0);
    for (std::int64_t j = 0; j < hd; ++j) acc = acc + qt[j] * ku[j];
    p[u] = acc * scale;
  }
  T mx = p[0];
  for (std::int64_t u = 1; u <= t; ++u) mx = p[u] > mx ? p[u] : mx;
  T sum = T(0);
  for (std::int64_t u = 0; u <= t; ++u) {
    p[u] = mlp_math::exp_of(T(p[u] - mx));
    sum = sum + p[u];
  }
  for (std::int64_t u = 0; u <= t; ++u) p[u] = p[u] / sum;
}


}  // namespace

template <class T>
RopeTable<T> rope_table(std::int64_t seq, std::int64_t head_dim, double base) {
  if (seq < 1 || head_dim < 2 || head_dim % 2 != 0)
    throw std::invalid_argument("lm: RoPE needs seq >= 1 and an even head dimension");
  RopeTable<T> r;
  r.seq = seq;
  r.head_dim = head_dim;
  const std::int64_t half = head_dim / 2;
  r.cos.resize(static_cast<std::size_t>(seq * half));
  r.sin.resize(r.cos.size());
  for (std::int64_t i = 0; i < half; ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      const double theta = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      for (std::int64_t t = 0; t < seq; ++t) {
        const double a = static_cast<double>(t) * theta;
        r.cos[static_cast<std::size_t>(t * half + i)] = static_cast<T>(std::cos(a));
        r.sin[static_cast<std::size_t>(t * half + i)] = static_cast<T>(std::sin(a));
      }
    } else {
      using std::cos, std::pow, std::sin;  // Boost's by ADL
      const T theta = pow(T(base), T(T(-2 * i) / T(head_dim)));
      for (std::int64_t t = 0; t < seq; ++t) {
        const T a = T(t) * theta;
        r.cos[static_cast<std::size_t>(t * half + i)] = cos(a);
        r.sin[static_cast<std::size_t>(t * half + i)] = sin(a);
      }
    }
  }
  return r;
}

template <class T>
void rope_rotate(const RopeTable<T>& table, T* x, std::int64_t rows, std::int64_t heads, bool inverse) {
  const std::int64_t hd = table.head_dim, half = hd / 2;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = r % table.seq;
    const T* c = table.cos.data() + t * half;
    const T* s = table.sin.data() + t * half;
    for (std::int64_t h = 0; h < heads; ++h) {
      T* xh = x + (r * heads + h) * hd;
      for (std::int64_t i = 0; i < half; ++i) {
        const T x0 = xh[2 * i], x1 = xh[2 * i + 1];
        if (!inverse) {
          xh[2 * i] = x0 * c[i] - x1 * s[i];
          xh[2 * i + 1] = x0 * s[i] + x1 * c[i];
        } else {
          xh[2 * i] = x0 * c[i] + x1 * s[i];
          xh[2 * i + 1] = x1 * c[i] - x0 * s[i];
        }
      }
    }
  }
}

template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, bool bf16, T* o) {
  check_bf16<T>(bf16);
  const std::int64_t S = s.seq, H = s.heads, hd = s.head_dim, group = s.heads / s.kv_heads;
  const std::int64_t qs = H * hd, ks = s.kv_heads * hd, M = s.rows();
  const std::vector<T> qo = operands(q, M * qs, bf16), ko = operands(k, M * ks, bf16), vo = operands(v, M * ks, bf16);
  const T scale = attention_scale<T>(hd);
  const std::int64_t tasks = s.batch * H;
#pragma omp parallel for schedule(static) if (parallel_worth(tasks * S * S * hd))
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::int64_t b = task / H, h = task % H, g = h / group;
    const T* kb = ko.data() + b * S * ks + g * hd;
    const T* vb = vo.data() + b * S * ks + g * hd;
    std::vector<T> p(static_cast<std::size_t>(S));
    for (std::int64_t t = 0; t < S; ++t) {
      softmax_row(qo.data() + (b * S + t) * qs + h * hd, kb, ks, t, hd, scale, p.data());
      T* ot = o + (b * S + t) * qs + h * hd;
      for (std::int64_t j = 0; j < hd; ++j) ot[j] = T(0);
      for (std::int64_t u = 0; u <= t; ++u) {
        const T pu = operand(p[static_cast<std::size_t>(u)], bf16);
        const T* vu = vb + u * ks;
        for (std::int64_t j = 0; j < hd; ++j) ot[j] = ot[j] + pu * vu[j];
      }
    }
  }
}

template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* dout, bool bf16, T* dq,
                        T* dk, T* dv) {
  check_bf16<T>(bf16);
  const std::int64_t S = s.seq, H = s.heads, hd = s.head_dim, group = s.heads / s.kv_heads;
  const std::int64_t qs = H * hd, ks = s.kv_heads * hd, M = s.rows();
  const std::vector<T> qo = operands(q, M * qs, bf16), ko = operands(k, M * ks, bf16), vo = operands(v, M * ks, bf16);
  const std::vector<T> dO = operands(dout, M * qs, bf16);
  const T scale = attention_scale<T>(hd);
  const std::int64_t tasks = s.batch * s.kv_heads;
#pragma omp parallel for schedule(static) if (parallel_worth(tasks * group * S * S * hd))
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::int64_t b = task / s.kv_heads, g = task % s.kv_heads;
    const T* kb = ko.data() + b * S * ks + g * hd;
    const T* vb = vo.data() + b * S * ks + g * hd;
    // ds: the operand dS_tu (scaled, rounded under bf16); pr: the operand P_tu of the P V
    // product; both S x S, zero above the diagonal.
    std::vector<T> p(static_cast<std::size_t>(S)), dp(static_cast<std::size_t>(S));
    std::vector<T> ds(static_cast<std::size_t>(S * S), T(0)), pr(static_cast<std::size_t>(S * S), T(0));
    for (std::int64_t h = g * group; h < (g + 1) * group; ++h) {
      const T* qb = qo.data() + b * S * qs + h * hd;
      const T* db = dO.data() + b * S * qs + h * hd;
      for (std::int64_t t = 0; t < S; ++t) {
        softmax_row(qb + t * qs, kb, ks, t, hd, scale, p.data());
        const T* dot = db + t * qs;
        T D = T(0);
        for (std::int64_t u = 0; u <= t; ++u) {
          const T* vu = vb + u * ks;
          T acc = T(0);
          for (std::int64_t j = 0; j < hd; ++j) acc = acc + dot[j] * vu[j];
          dp[static_cast<std::size_t>(u)] = acc;
          D = D + p[static_cast<std::size_t>(u)] * acc;
        }
        T* dqt = dq + (b * S + t) * qs + h * hd;
        for (std::int64_t j = 0; j < hd; ++j) dqt[j] = T(0);
        for (std::int64_t u = 0; u <= t; ++u) {
          const auto uu = static_cast<std::size_t>(u);
          const T d = operand(T(T(p[uu] * T(dp[uu] - D)) * scale), bf16);
          ds[static_cast<std::size_t>(t * S + u)] = d;
          pr[static_cast<std::size_t>(t * S + u)] = operand(p[uu], bf16);
          const T* ku = kb + u * ks;
          for (std::int64_t j = 0; j < hd; ++j) dqt[j] = dqt[j] + d * ku[j];
        }
      }
      // dk_u, dv_u: this head's sums over t >= u, complete before they join the group's.
      const bool first = h == g * group;
      std::vector<T> dkh(static_cast<std::size_t>(hd)), dvh(static_cast<std::size_t>(hd));
      for (std::int64_t u = 0; u < S; ++u) {
        std::fill(dkh.begin(), dkh.end(), T(0));
        std::fill(dvh.begin(), dvh.end(), T(0));
        for (std::int64_t t = u; t < S; ++t) {
          const T d = ds[static_cast<std::size_t>(t * S + u)], pt = pr[static_cast<std::size_t>(t * S + u)];
          const T* qt = qb + t * qs;
          const T* dot = db + t * qs;
          for (std::int64_t j = 0; j < hd; ++j) {
            dkh[static_cast<std::size_t>(j)] = dkh[static_cast<std::size_t>(j)] + d * qt[j];
            dvh[static_cast<std::size_t>(j)] = dvh[static_cast<std::size_t>(j)] + pt * dot[j];
          }
        }
        T* dku = dk + (b * S + u) * ks + g * hd;
        T* dvu = dv + (b * S + u) * ks + g * hd;
        for (std::int64_t j = 0; j < hd; ++j) {
          dku[j] = first ? dkh[static_cast<std::size_t>(j)] : T(dku[j] + dkh[static_cast<std::size_t>(j)]);
          dvu[j] = first ? dvh[static_cast<std::size_t>(j)] : T(dvu[j] + dvh[static_cast<std::size_t>(j)]);
        }
      }
    }
  }
}

template <class T>
std::vector<T> attention_probabilities(const AttentionShape& s, const T* q, const T* k, bool bf16, std::int64_t b,
                                       std::int64_t h) {
  check_bf16<T>(bf16);
  const std::int64_t S = s.seq, hd = s.head_dim, qs = s.heads * hd, ks = s.kv_heads * hd;
  const std::int64_t g = h / (s.heads / s.kv_heads);
  const std::vector<T> qo = operands(q + b * S * qs, S * qs, bf16), ko = operands(k + b * S * ks, S * ks, bf16);
  std::vector<T> P(static_cast<std::size_t>(S * S), T(0));
  for (std::int64_t t = 0; t < S; ++t)
    softmax_row(qo.data() + t * qs + h * hd, ko.data() + g * hd, ks, t, hd, attention_scale<T>(hd), P.data() + t * S);
  return P;
}

#define FP4D_LM_ATTENTION_INSTANTIATE(T)                                                                          \
  template RopeTable<T> rope_table<T>(std::int64_t, std::int64_t, double);                                         \
  template void rope_rotate<T>(const RopeTable<T>&, T*, std::int64_t, std::int64_t, bool);                         \
  template void attention_forward<T>(const AttentionShape&, const T*, const T*, const T*, bool, T*);              \
  template void attention_backward<T>(const AttentionShape&, const T*, const T*, const T*, const T*, bool, T*, T*, \
                                      T*);                                                                         \
  template std::vector<T> attention_probabilities<T>(const AttentionShape&, const T*, const T*, bool, std::int64_t, \
                                                     std::int64_t);
FP4D_LM_ATTENTION_INSTANTIATE(float)
FP4D_LM_ATTENTION_INSTANTIATE(double)
FP4D_LM_ATTENTION_INSTANTIATE(mlp_binary128)
FP4D_LM_ATTENTION_INSTANTIATE(mlp_mp256)
#undef FP4D_LM_ATTENTION_INSTANTIATE

}  // namespace fp4d
