// The CPU implementation of the `mlp` model (model/mlp_spec.hpp): its data, its
// initialisation and its training step, templated on the scalar T so that the low-precision
// run (T = float, every GEMM through a GemmFn) and the reference run (T = double or wider,
// plain GEMMs in T) are one code.
#pragma once

#include <cstdint>
#include <vector>

#include "model/mlp_spec.hpp"

namespace fp4d {

Batch make_batch(const MlpSpec& s, std::int64_t step);

template <class T>
MlpState<T> init_state(const MlpSpec& s);   // the float32 initial weights (as T), zero state

// One training step on make_batch(s, state.step): forward, backward, optimizer update,
// state.step + 1. gemm: the low-precision product (T = float only); nullptr = the plain GEMM
// in T (every element c = 0, then c = c + a_p b_p for p = 0, 1, ..., k-1 in that order,
// accumulated in T - fused for double on FMA hardware; the kernel's register tiles and
// k-blocks never reorder a sum, so the result is independent of threads) - the reference for
// T = double and the wider T of sim/mlp_precision.hpp, where a GemmFn is refused
// (std::invalid_argument). The loss is accumulated in the wider of T and double.
template <class T>
StepStats train_step(const MlpSpec& s, MlpState<T>& state, const GemmFn& gemm);

// Loss and the gradients at the given weights on batch `step`, without updating (T = double:
// the exact-gradient probe at the low-precision run's weights, and the gradient check).
template <class T>
double loss_and_gradients(const MlpSpec& s, const std::vector<std::vector<T>>& w, std::int64_t step, const GemmFn& gemm,
                          std::vector<std::vector<T>>* grads);

}  // namespace fp4d
