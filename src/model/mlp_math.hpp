// The MLP's element-wise maths, written once for the CPU run (sim/mlp.cpp, any scalar T) and
// the GPU-resident step (backend/cuda/mlp.cu, T = float): the activations, their derivatives
// and the two optimizer updates (model/mlp_spec.hpp states the formulas). Both sides evaluate
// these expressions in this order, and -ffp-contract=off / --fmad=false keep either compiler
// from fusing them, so from the same float32 inputs they give the same bits: exp, log, log1p
// and erf of float and double are format/portable_math.hpp's (the same bits on host and
// device, where glibc's and CUDA's libm differ in the last place) and AdamW's square root is
// correctly rounded on both. A wider T (Boost.Multiprecision) takes its own functions by ADL.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "format/hd.hpp"
#include "format/portable_math.hpp"

namespace fp4d::mlp_math {

// erf, exp, log and log1p: portable_math's for float (and double, except erf, which only the
// float GELU needs to share), found by ADL for a wider T. sqrt: std:: on the host, CUDA's on
// the device (both correctly rounded).
template <class T>
FP4D_HD T erf_of(const T& x) {
  if constexpr (std::is_same_v<T, float>) {
    return pmath::erff(x);
  } else {
    using std::erf;
    return erf(x);
  }
}
template <class T>
FP4D_HD T exp_of(const T& x) {
  if constexpr (std::is_same_v<T, float>) {
    return pmath::expf(x);
  } else if constexpr (std::is_same_v<T, double>) {
    return pmath::exp(x);
  } else {
    using std::exp;
    return exp(x);
  }
}
template <class T>
FP4D_HD T log_of(const T& x) {
  if constexpr (std::is_same_v<T, float>) {
    return pmath::logf(x);
  } else if constexpr (std::is_same_v<T, double>) {
    return pmath::log(x);
  } else {
    using std::log;
    return log(x);
  }
}
// log(1 + x); a wider T has no log1p of its own and takes log(1 + x), exact enough there.
template <class T>
FP4D_HD T log1p_of(const T& x) {
  if constexpr (std::is_same_v<T, float>) {
    return pmath::log1pf(x);
  } else if constexpr (std::is_same_v<T, double>) {
    return pmath::log1p(x);
  } else {
    return log_of(T(T(1) + x));
  }
}
template <class T>
FP4D_HD T sqrt_of(const T& x) {
  using std::sqrt;
  return sqrt(x);
}

template <class T>
FP4D_HD T relu(const T& z) {
  return z > T(0) ? z : T(0);
}
template <class T>
FP4D_HD T relu_derivative(const T& z) {
  return z > T(0) ? T(1) : T(0);
}

// GELU in its erf form, z Phi(z) with Phi(z) = (1 + erf(z / sqrt 2)) / 2. inv_sqrt2 and
// inv_sqrt2pi are 1/sqrt(2) and 1/sqrt(2 pi) rounded to T (the caller's: a wider T computes
// them in T rather than taking a double literal).
template <class T>
FP4D_HD T gelu(const T& z, const T& inv_sqrt2) {
  return (T(0.5) * z) * (T(1) + erf_of(T(z * inv_sqrt2)));
}
// Phi(z) + z phi(z).
template <class T>
FP4D_HD T gelu_derivative(const T& z, const T& inv_sqrt2, const T& inv_sqrt2pi) {
  return T(0.5) * (T(1) + erf_of(T(z * inv_sqrt2))) + z * (inv_sqrt2pi * exp_of(T(T(-0.5) * (z * z))));
}

// s(g) = 1 / (1 + exp(-g)); exp(-g) -> inf for a very negative g gives s = 0 (no NaN).
template <class T>
FP4D_HD T sigmoid(const T& g) {
  return T(1) / (T(1) + exp_of(T(-g)));
}
// silu(g) = g s(g) (SwiGLU's gate, the Mamba mixer's activations).
template <class T>
FP4D_HD T silu(const T& g) {
  return g * sigmoid(g);
}
// silu'(g) = s (1 + g (1 - s)), given s = sigmoid(g) (a backward pass that also needs s passes it).
template <class T>
FP4D_HD T silu_derivative(const T& g, const T& s) {
  return s * (T(1) + g * (T(1) - s));
}

// Whether an update was lost: non-zero, yet the weight did not change (w - u == w).
template <class T>
FP4D_HD bool update_lost(const T& update, const T& w_old, const T& w_new) {
  return update != T(0) && w_new == w_old;
}

// SGD with momentum on one weight: v = mu v + g', g' = g + wd w when `decay`, else g;
// w = w - lr v. Returns whether the update was lost.
template <class T>
FP4D_HD bool sgd_update(T& w, T& v, const T& g, const T& mu, const T& lr, const T& wd, bool decay) {
  const T gi = decay ? T(g + wd * w) : g;
  v = mu * v + gi;
  const T upd = lr * v;
  const T wn = w - upd;
  const bool lost = update_lost(upd, w, wn);
  w = wn;
  return lost;
}

// AdamW's coefficients for one step, rounded to T: b_i = beta_i, c_i = 1 - beta_i and the bias
// corrections bc_i = 1 - beta_i^t (t = step + 1), computed in the wider of T and double.
template <class T>
struct AdamCoefficients {
  T lr, b1, c1, b2, c2, bc1, bc2, eps, wd;
};
template <class T>
AdamCoefficients<T> adam_coefficients(double lr, double beta1, double beta2, double eps, double weight_decay,
                                      std::int64_t step) {
  using W = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  using std::pow;
  const W t = static_cast<W>(step + 1);
  return {static_cast<T>(lr),
          static_cast<T>(beta1),
          static_cast<T>(W(1) - W(beta1)),
          static_cast<T>(beta2),
          static_cast<T>(W(1) - W(beta2)),
          static_cast<T>(W(1) - pow(W(beta1), t)),
          static_cast<T>(W(1) - pow(W(beta2), t)),
          static_cast<T>(eps),
          static_cast<T>(weight_decay)};
}

// AdamW on one weight: m = b1 m + c1 g; v = b2 v + c2 g^2; w = w - (lr (m / bc1) /
// (sqrt(v / bc2) + eps) + lr (wd w)) (decoupled decay). Returns whether the update was lost.
template <class T>
FP4D_HD bool adamw_update(T& w, T& m, T& v, const T& g, const AdamCoefficients<T>& a) {
  m = a.b1 * m + a.c1 * g;
  v = a.b2 * v + a.c2 * (g * g);
  const T mhat = m / a.bc1, vhat = v / a.bc2;
  const T upd = a.lr * (mhat / (sqrt_of(vhat) + a.eps)) + a.lr * (a.wd * w);
  const T wn = w - upd;
  const bool lost = update_lost(upd, w, wn);
  w = wn;
  return lost;
}

}  // namespace fp4d::mlp_math
