// The CPU implementation of the `lm` model (model/lm_spec.hpp): its initialisation, loss,
// gradients and training step, templated on the scalar T so that the low-precision run
// (T = float, every linear layer's GEMMs through a GemmFn) and the reference run (T = double,
// or the wider mlp_binary128 / mlp_mp256 of sim/mlp_precision.hpp; plain GEMMs) are one code.
// Parallel to sim/mlp.hpp. The wide instantiations are lm.cpp's; they are not declared extern
// here so that this header stays free of Boost.
//
// GEMMs: gemm = nullptr runs every linear layer's product as sim/plain_gemm.hpp's plain GEMM
// in T (each element c = 0, then c = c + a_p b_p in ascending p: quant/dense_gemm for float and
// double, fused for double on FMA hardware; two roundings in a wider T; independent of the
// thread count); a GemmFn is accepted for T = float only (std::invalid_argument otherwise).
// A wider T computes everything in T that float and double take from double: the loss and the
// clipping norm's sums, the clip factor, AdamW's bias corrections, RoPE's cos and sin and the
// attention scale; the problem's own values (float32 initial weights, the double
// hyper-parameters and learning rates) are the same in every T. Calls of one step, in order: Fprop of every linear in
// linear order; then for every linear from the last to the first its Wgrad, then its Dgrad
// (separate q, k, v: the three pairs in the order q, k, v). Every linear has its Dgrad: every
// input depends on the embedding.
//
// Tokens: `batch` rows of seq_len + 1 int32 ids in [0, vocab) (std::invalid_argument
// otherwise); inputs tokens[:, :-1], targets tokens[:, 1:].
#pragma once

#include <cstdint>
#include <vector>

#include "model/lm_spec.hpp"
#include "model/lm_trainer.hpp"  // LmState, LmStepStats

namespace fp4d {

// The float32 initial parameters (as T; gains 1) and zero moments.
template <class T>
LmState<T> init_lm_state(const LmSpec& s);

// Mean next-token loss at `params` on `tokens` (batch sequences), and, when grads is given,
// its gradients (resized to the parameters' shapes). step: the GemmCalls' step (SR streams).
template <class T>
double lm_loss_and_gradients(const LmSpec& s, const std::vector<std::vector<T>>& params, const std::int32_t* tokens,
                             std::int64_t batch, const GemmFn& gemm, std::vector<std::vector<T>>* grads,
                             std::int64_t step, const LmPrecision& precision);
template <class T>
double lm_loss_and_gradients(const LmSpec& s, const std::vector<std::vector<T>>& params, const std::int32_t* tokens,
                             std::int64_t batch, const GemmFn& gemm, std::vector<std::vector<T>>* grads,
                             std::int64_t step) {
  return lm_loss_and_gradients<T>(s, params, tokens, batch, gemm, grads, step, lm_default_precision(gemm));
}

// The logits [batch seq_len x vocab] of the forward pass (row b seq_len + t predicts
// tokens[b, t + 1]).
template <class T>
std::vector<T> lm_logits(const LmSpec& s, const std::vector<std::vector<T>>& params, const std::int32_t* tokens,
                         std::int64_t batch, const GemmFn& gemm, std::int64_t step, const LmPrecision& precision);

// One training step on `tokens` (s.batch sequences): forward, backward, clipping, AdamW at
// scheduled_lr(state.step), state.step + 1.
template <class T>
LmStepStats lm_train_step(const LmSpec& s, LmState<T>& state, const std::int32_t* tokens, const GemmFn& gemm,
                          const LmPrecision& precision);
template <class T>
LmStepStats lm_train_step(const LmSpec& s, LmState<T>& state, const std::int32_t* tokens, const GemmFn& gemm) {
  return lm_train_step<T>(s, state, tokens, gemm, lm_default_precision(gemm));
}

#define FP4D_LM_EXTERN(T)                                                                                          \
  extern template LmState<T> init_lm_state<T>(const LmSpec&);                                                     \
  extern template double lm_loss_and_gradients<T>(const LmSpec&, const std::vector<std::vector<T>>&,              \
                                                  const std::int32_t*, std::int64_t, const GemmFn&,               \
                                                  std::vector<std::vector<T>>*, std::int64_t, const LmPrecision&); \
  extern template std::vector<T> lm_logits<T>(const LmSpec&, const std::vector<std::vector<T>>&,                  \
                                              const std::int32_t*, std::int64_t, const GemmFn&, std::int64_t,     \
                                              const LmPrecision&);                                                \
  extern template LmStepStats lm_train_step<T>(const LmSpec&, LmState<T>&, const std::int32_t*, const GemmFn&,    \
                                               const LmPrecision&);
FP4D_LM_EXTERN(float)
FP4D_LM_EXTERN(double)
#undef FP4D_LM_EXTERN

}  // namespace fp4d
