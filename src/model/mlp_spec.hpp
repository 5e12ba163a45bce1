// The `mlp` model: a multilayer perceptron trained on synthetic data from a
// teacher network, in two precisions that see the same data from the same initialisation:
//   - the low-precision run: float32 master weights, optimizer state and element-wise math;
//     every GEMM goes through a GemmFn that the caller supplies (the recipe's quantization +
//     the emulated or GPU product, model/recipe_gemm.hpp);
//   - the reference run: everything in the reference scalar T (double by default; the wider
//     T of sim/mlp_precision.hpp on request), exact-order plain GEMMs.
// One templated implementation (Mlp<T>) serves all, so the runs differ only in T and in the
// GEMM.
//
// Conventions (rows are samples, as in quant/training_recipe.hpp):
//   layer l (0-based, L layers): W_l is rows_l x widths[l] (out x in), no bias, where
//   rows_l = widths[l+1], except for a hidden layer (l < L-1) under swiglu: rows_l =
//   2 widths[l+1], W_l = [W_gate; W_up] (gate rows 0 .. out-1, up rows out .. 2 out-1).
//   input    A_l = rmsnorm(H_l) when norm = rmsnorm and l >= 1 (every GEMM whose input is a
//            hidden representation, the output layer's included; the data X = H_0 is never
//            normalised: its outlier channels are part of the experiment), else A_l = H_l.
//            rmsnorm(x)_ij = x_ij * rinv_i, rinv_i = 1 / sqrt(sum_j x_ij^2 / n + norm_eps)
//            (sum in ascending j, in T). No learned gain: followed by a linear layer without
//            bias, a gain g is the same as W diag(g), so it would only reparametrise W.
//   forward  Z_l = A_l W_l^T        (GemmRole::Fprop: first = A_l [M x in], second = W_l)
//            F_l = act(Z_l) for relu/gelu; swiglu: G = Z_l[:, :out], U = Z_l[:, out:],
//                  F_l = silu(G) * U, silu(g) = g / (1 + exp(-g)) (element-wise in T)
//            H_{l+1} = H_l + F_l if residual_at(l) (see below), else F_l   (l < L-1)
//            the output Y = Z_{L-1} (linear last layer)
//   residual residual_at(l): residual = true, 1 <= l <= L-2 (a hidden-to-hidden layer) and
//            widths[l] == widths[l+1]. The skip adds the layer's input H_l (before the norm:
//            the pre-norm residual of transformer blocks) to its activation output.
//   loss     0.5 * mean over the batch and outputs of (Y - T)^2   (regression, MSE), or the
//            softmax cross-entropy against the teacher's argmax class (classification)
//   backward dZ_{L-1} = (Y - T) / (M * out)
//            dW_l = dZ_l^T A_l      (GemmRole::Wgrad: first = A_l [M x in], second = dZ_l [M x rows];
//                                    the GemmFn returns in x rows = dW_l^T, see GemmFn)
//            dA_l = dZ_l W_l        (GemmRole::Dgrad: first = dZ_l [M x rows], second = W_l)
//            dH_l = rinv_i (dA_ij - A_ij sum_k(dA_ik A_ik) / n) through the norm, else dA_l;
//                   + dH_{l+1} if residual_at(l)
//            dZ_{l-1} = dH_l * act'(Z_{l-1}); swiglu: dG = dH silu'(G) U, dU = dH silu(G),
//                   silu'(g) = s (1 + g (1 - s)), s = 1 / (1 + exp(-g))
//   SGD with momentum: v = mu v + g (+ wd W); W = W - lr v. AdamW: the usual bias-corrected
//   moments, decoupled weight decay. All in T, element by element, in a fixed order.
//   Hyper-parameters are the config's doubles (exact in every T >= double) and the learning
//   rate of a step is the double lr_at(step) for every T: the schedule is part of the
//   problem, as the float32 data are. Derived constants (AdamW's bias corrections) are
//   computed in the wider of T and double, then rounded to T.
// Data: batch b (the step number) of inputs X_b ~ N(0, 1) [M x widths[0]], with optional
// outlier input channels (a fixed fraction of channels scaled by a factor, as LLM activations
// have) and Student-t tails; targets T_b = teacher(X_b), a fixed random MLP of the same
// input/output widths (teacher_width hidden units, relu) evaluated in double. Everything is a
// pure function of (seed, b): no data state, so a run resumes bit-exactly from any step.
// Initialisation: W_l ~ N(0, 1 / widths[l]) [rows_l x widths[l]] in float32 (every run starts
// from those values; float32 values are exact in every T).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "quant/matrix.hpp"
#include "quant/training_recipe.hpp"

namespace fp4d {

enum class Activation { Relu, Gelu, Swiglu };
Activation parse_activation(const std::string& s);  // "relu" | "gelu" | "swiglu"; std::invalid_argument otherwise
std::string to_string(Activation a);

enum class Norm { None, RmsNorm };
Norm parse_norm(const std::string& s);  // "none" | "rmsnorm"; std::invalid_argument otherwise
std::string to_string(Norm n);

enum class Optimizer { Sgd, AdamW };

struct MlpSpec {
  std::vector<std::int64_t> widths{64, 256, 256, 16};  // input, hidden..., output
  Activation activation = Activation::Relu;
  Norm norm = Norm::None;                  // rmsnorm: before the GEMM of every layer l >= 1
  double norm_eps = 1e-6;                  // added to the mean square (> 0)
  bool residual = false;                   // skips on the equal-width hidden layers (residual_at)
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
// Rows of W_l: widths[l+1], twice that for a hidden layer under swiglu ([gate; up]).
std::int64_t weight_rows(const MlpSpec& s, int layer);
// Whether layer l's input is RMS-normalised (norm = rmsnorm and l >= 1).
bool norm_at(const MlpSpec& s, int layer);
// Whether layer l adds its input to its output (residual, 1 <= l <= L-2, equal widths).
bool residual_at(const MlpSpec& s, int layer);
// The learning rate of step `step` (0-based): model/lr_schedule.hpp's scheduled_lr of the
// spec's schedule fields (warmup, then cosine or stable-then-linear-decay; 0 from total_steps on).
double lr_at(const MlpSpec& s, std::int64_t step);

// The product of one GEMM of the low-precision run: role, layer and step identify it (the
// recipe chooses formats and SR streams from them); first/second are the role's logical
// operands as in quant/training_recipe.hpp. Returns fprop: M x rows, dgrad: M x in, wgrad:
// in x rows (= dW^T), rows = weight_rows(layer).
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

// Per-step observations of one run.
struct StepStats {
  double loss = 0;                       // before the update
  std::vector<double> lost_update_fraction;  // per layer: elements with a non-zero update whose weight did not change
};

// State of one run: weights, optimizer state, step. Plain values (no hidden state): a copy is a checkpoint.
template <class T>
struct MlpState {
  std::int64_t step = 0;
  std::vector<std::vector<T>> w;   // per layer, row-major rows_l x in
  std::vector<std::vector<T>> m1;  // SGD: velocity; AdamW: first moment
  std::vector<std::vector<T>> m2;  // AdamW: second moment (empty for SGD)
};

}  // namespace fp4d
