// The `mlp` workload of issue 5: a multilayer perceptron trained on synthetic data from a
// teacher network, in two precisions that see the same data from the same initialisation:
//   - the low-precision run: float32 master weights, optimizer state and element-wise math;
//     every GEMM goes through a GemmFn that the caller supplies (the recipe's quantization +
//     the emulated or GPU product, sim/recipe_gemm.hpp);
//   - the reference run: double everything, exact-order plain GEMMs.
// One templated implementation (Mlp<T>) serves both, so the two runs differ only in T and in
// the GEMM.
//
// Conventions (rows are samples, as in sim/gemm_experiment.hpp):
//   layer l (0-based, L layers): W_l is widths[l+1] x widths[l] (out x in), no bias;
//   forward  Z_l = H_l W_l^T        (GemmRole::Fprop: first = H_l [M x in], second = W_l)
//            H_{l+1} = act(Z_l) for l < L-1, the output Y = Z_{L-1} (linear last layer)
//   loss     0.5 * mean over the batch and outputs of (Y - T)^2   (regression, MSE), or the
//            softmax cross-entropy against the teacher's argmax class (classification)
//   backward dZ_{L-1} = (Y - T) / (M * out)
//            dW_l = dZ_l^T H_l      (GemmRole::Wgrad: first = H_l [M x in], second = dZ_l [M x out];
//                                    the GemmFn returns in x out = dW_l^T, see GemmFn)
//            dH_l = dZ_l W_l        (GemmRole::Dgrad: first = dZ_l [M x out], second = W_l)
//            dZ_{l-1} = dH_l * act'(Z_{l-1})
//   SGD with momentum: v = mu v + g (+ wd W); W = W - lr v. AdamW: the usual bias-corrected
//   moments, decoupled weight decay. All in T, element by element, in a fixed order.
// Data: batch b (the step number) of inputs X_b ~ N(0, 1) [M x widths[0]], with optional
// outlier input channels (a fixed fraction of channels scaled by a factor, as LLM activations
// have) and Student-t tails; targets T_b = teacher(X_b), a fixed random MLP of the same
// input/output widths (teacher_width hidden units, relu) evaluated in double. Everything is a
// pure function of (seed, b): no data state, so a run resumes bit-exactly from any step.
// Initialisation: W_l ~ N(0, 1 / widths[l]) in float32 (both runs start from those values).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "quant/matrix.hpp"
#include "sim/gemm_experiment.hpp"

namespace fp4d {

enum class Activation { Relu, Gelu };
Activation parse_activation(const std::string& s);  // "relu" | "gelu"; std::invalid_argument otherwise
std::string to_string(Activation a);

enum class Optimizer { Sgd, AdamW };

struct MlpSpec {
  std::vector<std::int64_t> widths{64, 256, 256, 16};  // input, hidden..., output
  Activation activation = Activation::Relu;
  // regression: loss 0.5 mean (Y - T)^2 against the teacher's outputs; classification: softmax
  // cross-entropy against the class the teacher's logits rank first (argmax, lowest index on
  // ties), loss = mean_i (logsumexp(Y_i) - Y_i,label), dZ = (softmax(Y) - onehot) / M.
  std::string task = "regression";
  std::int64_t batch = 64;
  // Data
  std::uint64_t seed = 1;                  // data, teacher, initialisation
  std::int64_t teacher_width = 128;
  double outlier_fraction = 0.0;           // fraction of input channels (at least one if > 0)
  double outlier_scale = 1.0;
  double student_t_nu = 0.0;               // 0: normal inputs; > 0: Student-t with nu d.o.f.
  // Optimizer
  Optimizer optimizer = Optimizer::Sgd;
  double lr = 0.05;
  double momentum = 0.9;                   // SGD
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
  double weight_decay = 0.0;
  // Schedule: lr(step) = lr * factor(step)
  std::string schedule = "constant";       // constant | warmup-cosine | warmup-stable-decay
  std::int64_t warmup_steps = 0, total_steps = 1000;
  double decay_fraction = 0.2;             // warmup-stable-decay: last fraction of total_steps decays linearly to 0
};
// Throws std::invalid_argument naming the field for inconsistent or out-of-range values.
void validate(const MlpSpec& s);
// The learning rate of step `step` (0-based). Warmup: lr (step + 1) / warmup_steps for
// step < warmup_steps. warmup-cosine: then lr 0.5 (1 + cos(pi (step - warmup) / (total - warmup))).
// warmup-stable-decay: lr min(warmup factor, (total - step) / (decay_fraction total)). Both
// are 0 from total_steps on; constant ignores warmup and total.
double lr_at(const MlpSpec& s, std::int64_t step);

// The product of one GEMM of the low-precision run: role, layer and step identify it (the
// recipe chooses formats and SR streams from them); first/second are the role's logical
// operands as in sim/gemm_experiment.hpp. Returns fprop: M x out, dgrad: M x in, wgrad:
// in x out (= dW^T).
struct GemmCall {
  GemmRole role = GemmRole::Fprop;
  int layer = 0;
  std::int64_t step = 0;
};
using GemmFn = std::function<Matrix(const GemmCall&, const Matrix& first, const Matrix& second)>;

// One batch of training data (float32 values; the reference converts them exactly).
struct Batch {
  Matrix x, t;  // M x widths.front(), M x widths.back()
};
Batch make_batch(const MlpSpec& s, std::int64_t step);

// Per-step observations of one run.
struct StepStats {
  double loss = 0;                       // before the update
  std::vector<double> lost_update_fraction;  // per layer: elements with a non-zero update whose weight did not change
};

// State of one run: weights, optimizer state, step. Plain values (no hidden state): a copy is a checkpoint.
template <class T>
struct MlpState {
  std::int64_t step = 0;
  std::vector<std::vector<T>> w;   // per layer, row-major out x in
  std::vector<std::vector<T>> m1;  // SGD: velocity; AdamW: first moment
  std::vector<std::vector<T>> m2;  // AdamW: second moment (empty for SGD)
};

template <class T>
MlpState<T> init_state(const MlpSpec& s);   // the float32 initial weights (as T), zero state

// One training step on make_batch(s, state.step): forward, backward, optimizer update,
// state.step + 1. gemm: the low-precision product (T = float only); nullptr = the plain GEMM
// in T (loops in a fixed order, ascending k, accumulation in T) - the reference for
// T = double, where a GemmFn is refused (std::invalid_argument).
template <class T>
StepStats train_step(const MlpSpec& s, MlpState<T>& state, const GemmFn& gemm);

// Loss and the gradients at the given weights on batch `step`, without updating (T = double:
// the exact-gradient probe at the low-precision run's weights, and the gradient check).
template <class T>
double loss_and_gradients(const MlpSpec& s, const std::vector<std::vector<T>>& w, std::int64_t step, const GemmFn& gemm,
                          std::vector<std::vector<T>>* grads);

}  // namespace fp4d
