// The `lm` model: a decoder-only transformer language model trained on token sequences, in
// two precisions that see the same tokens from the same initialisation:
//   - the low-precision run (T = float): FP32 master weights, AdamW moments and element-wise
//     maths; every linear layer's three GEMMs go through a GemmFn that the caller supplies
//     (the training recipe: NVFP4 etc., model/recipe_gemm.hpp);
//   - the reference run (T = double): everything in double, plain exact-order GEMMs
//     (quant/dense_gemm.hpp), no rounding to a narrower format anywhere.
// One templated implementation (sim/lm.hpp) serves both, so the runs differ only in T, in the
// GEMM and in the precision policy below.
//
// Conventions (rows are token positions, as in quant/training_recipe.hpp; M = batch * seq_len,
// row i = b seq_len + t for sequence b, position t):
//   tokens   batch x (seq_len + 1) int32 ids in [0, vocab); inputs x = tokens[:, :-1],
//            targets y = tokens[:, 1:].
//   blocks   pattern, one letter per block (block index = position in the string):
//            A = attention, F = SwiGLU FFN, M = Mamba-2 mixer; any other letter is refused
//            (std::invalid_argument naming `pattern` and the letter), and so is a pattern
//            without a sequence mixer (A or M): its tokens could not see each other.
//   embed    H_0[i] = E[x_i], E [vocab x d] (the stored row: FP32 master values in the
//            low-precision run, no rounding).
//   norm     rmsnorm_g(h)_ij = n_ij g_j, n_ij = h_ij rinv_i, rinv_i = 1 / sqrt(sum_j h_ij^2 / d
//            + norm_eps) (sum in ascending j, in T). A learned gain g [d] per norm, init 1, as
//            transformers have: W diag(g) could absorb it in exact arithmetic, but it acts
//            before the GEMM's quantization (it shapes the quantized activations, their
//            outlier channels included) and AdamW moves it with its own moments and no decay.
//   block    pre-norm residual: H_{b+1} = H_b + block_b(rmsnorm_{g_b}(H_b)).
//   A        a = rmsnorm(H). fused_qkv: [Q K V] = a W_qkv^T, W_qkv = [W_q; W_k; W_v]
//            [(heads + 2 kv_heads) hd x d]; else three linears W_q [heads hd x d],
//            W_k, W_v [kv_heads hd x d]. hd = head_dim = d / heads. Head h owns columns
//            h hd .. (h+1) hd - 1 of Q (of K, V for kv head h).
//            RoPE on Q and K, rotating pairs (2i, 2i+1) of each head (the interleaved
//            convention of the original RoFormer / Meta LLaMA code, not GPT-NeoX's halves):
//              x'_2i = x_2i c - x_2i+1 s,  x'_2i+1 = x_2i s + x_2i+1 c,
//              c, s = cos, sin(t theta_i), theta_i = rope_base^(-2i / hd), t = position in
//            the sequence; angles, cos and sin in double, rounded to T.
//            GQA: query head h reads kv head h / (heads / kv_heads) (consecutive query heads
//            share one kv head; kv_heads = heads is plain multi-head attention).
//            S_tu = (q_t . k_u) scale for u <= t, scale = 1 / sqrt(hd) (double, rounded to T);
//            P_t = softmax over u <= t (max subtracted, exp, sum ascending u, divide; P_tu = 0
//            for u > t); O_t = sum_{u <= t} P_tu v_u (ascending u). O [M x heads hd] is the
//            heads' outputs side by side; Z = O W_o^T, W_o [d x heads hd].
//   F        a = rmsnorm(H); [G U] = a W_gu^T, W_gu = [W_gate; W_up] [2 ffn x d] (gate rows
//            0 .. ffn-1, up rows ffn .. 2 ffn - 1, as mlp's swiglu); F = silu(G) * U,
//            silu(g) = g / (1 + exp(-g)); Z = F W_down^T, W_down [d x ffn].
//   M        a = rmsnorm(H); [z x B C dt_raw] = a W_in^T, W_in [(2 DI + 2 G N + Hm) x d];
//            the mixer of sim/lm_mamba.hpp (causal depthwise conv of width K on x, B, C with
//            SiLU; dt = softplus(dt_raw + dt_bias), A = -exp(a_log); the selective scan in
//            chunks of `chunk` positions; + D x; gate y silu(z); RMSNorm per group of DI / G
//            columns with its own gain) gives Y [M x DI]; Z = Y W_out^T, W_out [d x DI].
//            DI = expand d (d_inner), Hm = DI / head_dim (the mixer's heads), N = state,
//            G = groups (heads of a group share B and C).
//   head     logits = rmsnorm_{g_f}(H_L) W_head^T, W_head [vocab x d] = E when
//            tied_embeddings, else its own matrix.
//   loss     mean over the M positions of logsumexp(logits_i) - logits_i,y_i (next-token
//            cross-entropy); dlogits = (softmax(logits_i) - onehot(y_i)) / M in T. The reported
//            loss is accumulated in the wider of T and double from the T logits (an observation,
//            as mlp's: it adds no rounding of its own to the comparison).
// Linear layers (the GemmCall's `layer`): numbered in this fixed order, per block in pattern
//   order: A: qkv (or q, k, v), o; F: gateup, down; M: mamba_in, mamba_out; then the head last
//   (also when tied: its weight is E). lm_linears() lists them.
// GEMMs of linear layer l with weight W_l [rows x cols] (out x in), input A [M x cols], as
//   mlp_spec.hpp's GemmFn: Fprop first = A [M x cols], second = W -> M x rows; Dgrad first =
//   dZ [M x rows], second = W -> M x cols; Wgrad first = A [M x cols], second = dZ [M x rows]
//   -> cols x rows = dW^T.
// Backward: by hand for every op, the transposes of the forward in T:
//   RoPE dx_2i = dx'_2i c + dx'_2i+1 s, dx_2i+1 = -dx'_2i s + dx'_2i+1 c;
//   attention dP_tu = dO_t . v_u, D_t = sum_{u<=t} P_tu dP_tu, dS_tu = P_tu (dP_tu - D_t) scale,
//   dq_t = sum_{u<=t} dS_tu k_u (ascending u), dk_u = sum_{t>=u} dS_tu q_t, dv_u = sum_{t>=u}
//   P_tu dO_t (ascending t; under GQA each query head's sum is complete before the heads of a
//   group are added in ascending head order); RMSNorm dg_j = sum_i da_ij n_ij (over the rows in
//   model/sum_order.hpp's chunks of 64, the GPU step's order),
//   dn = da g, dh_ij = rinv_i (dn_ij - n_ij sum_k(dn_ik n_ik) / d); SwiGLU dG = dF U silu'(G),
//   dU = dF silu(G), silu'(g) = s (1 + g (1 - s)); separate q, k, v: da = dq W_q, then + dk W_k,
//   then + dv W_v; the embedding dE[x_i] += dH_0[i] for ascending i, added (tied) to the
//   head's dW_head = dlogits^T a after it.
// Precision policy of the low-precision run (LmPrecision; bf16_mixers is on when a GemmFn
//   is given): the linear layers go through the GemmFn; the attention products QK^T and PV and
//   their backward products (dO V^T, P^T dO, dS K, dS^T Q) take BF16-rounded operands (RNE,
//   format/bf16.hpp: Q and K after RoPE, V, P, dO, dS) and accumulate in FP32 in ascending
//   order, as a fused attention kernel does; the Mamba scan's operands x, B, C and its incoming
//   gradient are rounded to BF16 the same way (sim/lm_mamba.hpp), its states, decays and sums
//   FP32; the conv, RoPE, softmax, RMSNorm and its gain, SwiGLU,
//   the residual adds, the cross-entropy and its gradient, the optimizer are FP32. The
//   softmax backward uses the unrounded P. Without bf16_mixers (and always in the
//   reference) those products take T operands.
// Optimizer: AdamW as mlp's (model/mlp_math.hpp adamw_update: bias-corrected moments,
//   decoupled decay lr wd w), weight decay on the linear layers' matrices (the untied head
//   included) only: not on the norm gains, not on the Mamba mixers' own parameters (conv,
//   dt_bias, a_log, D, the gated norm's gain: Mamba-2 exempts the SSM's) and not on the
//   embedding (tied or not), whose rows only move when their tokens occur. Before it, global gradient-norm clipping: norm =
//   sqrt(sum of g^2 over every parameter in lm_params order), summed in the wider of T and
//   double in model/sum_order.hpp's order (each parameter's elements in chunks of 256, the
//   chunk sums by model/tree_sum.hpp's tree_sum: the GPU step's order); g = g * min(1,
//   max_grad_norm / norm) in T (max_grad_norm = 0: off). Learning rate: model/lr_schedule.hpp's scheduled_lr (double, the same in every T).
// Initialisation (`init`): every matrix drawn as float32 values from Philox
//   (sim/generators.hpp's normal), a pure function of (seed, parameter index, element index),
//   so that every T starts from the same values; gains 1.
//   gpt2:   N(0, 0.02^2), W_o and W_down with std 0.02 / sqrt(2 n_blocks) (residual outputs).
//   scaled: N(0, 1 / cols) (fan-in; cols = d for E and the head).
//   Mamba mixers (either init): W_in and W_out as the other linears (W_out a residual
//   output); conv weights N(0, 1 / (3 K)) (the variance of PyTorch's default
//   U(-1/sqrt(K), 1/sqrt(K)) for a depthwise conv), conv bias 0, D 1, the gated norm's gain 1,
//   a_log and dt_bias deterministic (sim/lm_mamba.hpp: A from -1 to -16, dt from 0.001 to 0.1
//   across the heads).
// Tiling: a GemmFn of NVFP4 needs M and every linear dimension to be multiples of 16 (for M
//   blocks: DI and the in-projection's 2 DI + 2 G N + Hm rows, so Hm % 16 == 0 where G N is);
//   the recipe checks that on the call, lm_tiling_problem() says it beforehand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/lr_schedule.hpp"
#include "model/mlp_spec.hpp"  // GemmCall, GemmFn: the GEMM seam all workloads share

namespace fp4d {

struct LmOptimizer {
  // AdamW
  double lr = 1e-3;                 // peak learning rate (the schedule's)
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;        // decoupled; matrices of the linear layers only
  double max_grad_norm = 1.0;       // global-norm clipping; 0 = off
  // Schedule (model/lr_schedule.hpp)
  std::string schedule = "constant";  // constant | warmup-cosine | warmup-stable-decay
  std::int64_t warmup_steps = 0, total_steps = 1000;
  double decay_fraction = 0.2;
};

// The Mamba-2 mixers' shape (block M; unused by patterns without M).
struct LmMamba {
  std::int64_t state = 16;      // N: the state size per head and group
  std::int64_t head_dim = 8;    // P: channels per mixer head (heads = expand d_model / head_dim)
  std::int64_t expand = 2;      // d_inner = expand d_model
  std::int64_t groups = 1;      // G: B and C are shared by the heads of a group
  std::int64_t conv_width = 4;  // K
  std::int64_t chunk = 16;      // scan chunk length; divides seq_len
};

struct LmSpec {
  std::int64_t vocab = 256;
  std::int64_t d_model = 64;
  std::int64_t heads = 4;
  std::int64_t kv_heads = 4;        // divides heads; < heads: grouped-query attention
  std::int64_t ffn = 128;           // SwiGLU hidden width
  std::int64_t seq_len = 64;
  std::int64_t batch = 8;           // sequences per step
  std::string pattern = "AFAF";     // one letter per block: A attention, F SwiGLU FFN, M Mamba-2
  bool fused_qkv = true;            // one [W_q; W_k; W_v] linear, or three
  bool tied_embeddings = false;     // head = E
  double rope_base = 10000.0;
  double norm_eps = 1e-6;
  std::string init = "gpt2";        // gpt2 | scaled
  std::uint64_t seed = 1;           // initialisation
  LmMamba mamba;
  LmOptimizer optimizer;
};

// Throws std::invalid_argument "lm: <key> ..." naming the key: vocab < 2, d_model, heads,
// kv_heads, ffn, seq_len, batch < 1, d_model % heads, heads % kv_heads, an odd head dimension
// (RoPE rotates pairs), an empty pattern, an unknown letter or no sequence mixer, with M
// blocks mamba.* out of range (sizes < 1, d_inner % head_dim, heads % groups, seq_len % chunk),
// rope_base <= 1, norm_eps <= 0,
// an unknown init, optimizer.* out of range (lr > 0, beta1/beta2 in [0, 1), eps > 0,
// weight_decay >= 0, max_grad_norm >= 0, the schedule's fields).
void validate(const LmSpec& s);

std::int64_t lm_head_dim(const LmSpec& s);  // d_model / heads

// The Mamba mixers' d_inner = expand d_model and heads = d_inner / head_dim.
std::int64_t lm_mamba_d_inner(const LmSpec& s);
std::int64_t lm_mamba_heads(const LmSpec& s);

enum class LmBlockKind { Attention, Ffn, Mamba };
// The blocks of s.pattern; std::invalid_argument naming `pattern` and the letter otherwise.
std::vector<LmBlockKind> lm_blocks(const LmSpec& s);

enum class LmLinearKind { Qkv, Q, K, V, AttnOut, FfnGateUp, FfnDown, MambaIn, MambaOut, Head };
std::string to_string(LmLinearKind k);  // qkv, q, k, v, o, gateup, down, mamba_in, mamba_out, head

// One linear layer: its block (-1 for the head), kind, weight shape rows x cols (out x in) and
// the parameter (index into lm_params) holding its weight - E's for a tied head.
struct LmLinear {
  int block = -1;
  LmLinearKind kind = LmLinearKind::Head;
  std::int64_t rows = 0, cols = 0;
  int param = 0;
};
// Indexed by the GemmCall layer (the order above).
std::vector<LmLinear> lm_linears(const LmSpec& s);

// The parameters, in the fixed order of state vectors, gradients and the clipping norm:
// the embedding; per block its norm gain, then its linear weights in linear order (an M
// block's own parameters between its two: mamba_in, conv_w [conv_dim x K], conv_b, dt_bias,
// a_log, d_skip [heads], mixer_norm [d_inner], mamba_out); the final norm gain; the head
// (untied only).
enum class LmParamKind { Embedding, NormGain, Linear, Mixer };
// Which of an M block's own parameters (kind Mixer), in their lm_params order.
enum class LmMixerParam { None, ConvW, ConvB, DtBias, ALog, DSkip, Norm };  // Norm last: tables size by it
struct LmParam {
  std::string name;        // embedding, blocks.<b>.norm, blocks.<b>.<linear kind or mixer
                           // parameter>, final_norm, head
  LmParamKind kind = LmParamKind::Linear;
  int block = -1;          // -1: embedding, final norm, head
  int linear = -1;         // the linear layer using it as weight (-1: embedding, gains)
  std::int64_t rows = 0, cols = 0;  // gains: 1 x d
  bool weight_decay = false;        // linear matrices only
  LmMixerParam mixer = LmMixerParam::None;  // kind Mixer: which one
};
std::vector<LmParam> lm_params(const LmSpec& s);

// The linear layers a recipe keeps in high precision (RecipeGemmOptions::high_precision_layers,
// ascending): those of the first `first_blocks` and the last `last_blocks` blocks (the NVFP4
// paper counts its BF16 layers in blocks: the first 2 and the last 8), and always the head
// (the LM head runs in BF16). Counts beyond the number of blocks cover them all; negative
// counts throw std::invalid_argument.
std::vector<int> lm_high_precision_linears(const LmSpec& s, int first_blocks, int last_blocks);

// "" when every GEMM dimension of the model tiles by 16 (d_model, ffn, kv_heads * head_dim,
// vocab, batch * seq_len; with M blocks d_inner and the in-projection's rows), else one line naming each one that does not: what an NVFP4 recipe
// will refuse, for the config layer to report before a run starts. Does not validate.
std::string lm_tiling_problem(const LmSpec& s);

// The schedule fields of the spec's optimizer.
LrSchedule lm_lr_schedule(const LmSpec& s);

// The precision policy of a run (see "Precision policy" above). bf16_mixers - BF16 operands
// for the sequence mixers' own products: attention's and the Mamba scan's - applies to
// T = float only; the reference refuses it.
struct LmPrecision {
  bool bf16_mixers = false;
};
// The default: BF16 mixer operands exactly when the linear layers run through a GemmFn.
inline LmPrecision lm_default_precision(const GemmFn& gemm) { return LmPrecision{static_cast<bool>(gemm)}; }

}  // namespace fp4d
