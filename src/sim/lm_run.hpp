// The `lm` workload of `fp4drift run`: low-precision training runs of the decoder-only
// language model (model/lm_spec.hpp: attention, SwiGLU and Mamba-2 blocks), one per recipe, beside a high-precision reference (double,
// binary128 or mp256) that sees the same tokens from the same initialisation, with the trace
// written as it goes (docs/trace-format.md, "run", workload lm).
//
//   workload = "lm"
//   [lm]            the model (LmSpec's fields: vocab, d_model, heads, kv_heads, ffn, seq_len,
//                   batch, pattern, fused_qkv, tied_embeddings, rope_base, norm_eps, init, seed)
//                   and steps = 300
//   [lm.mamba]      the Mamba-2 mixers of M blocks (LmMamba's fields: state, head_dim, expand,
//                   groups, conv_width, chunk)
//   [lm.optimizer]  AdamW and schedule (LmOptimizer's fields; total_steps is `steps`)
//   [data]          source = "synthetic" (sim/token_source.hpp: order, zipf_alpha,
//                   zipf_support, copy_prob, copy_length, seed; vocab is lm.vocab) or a token
//                   file "tokens.h5:/train" (trace/token_file.hpp; seed picks the windows);
//                   zipf_support defaults to min(64, vocab - 1)
//   [recipes]       names = ["nvfp4", "bf16"]; high_precision_layers = [0, 7] (blocks kept in
//                   edge_recipe, default bf16; the LM head always is, as the paper keeps it);
//                   switch_to_bf16_at = 0.9 (fraction of the steps after which every run
//                   trains in bf16: the paper's remedy for the late loss gap; 0 = never);
//                   accumulator = "fp32-sequential" (or "sm90", "exact": quant/gemm_emulated.hpp)
//   [reference]     enabled, compare_every, probe_draws (as the mlp's); precision = "double" |
//                   "binary128" | "mp256" (the mlp's scalars, sim/mlp_precision.hpp: the same
//                   model code in that type; comparisons round its parameters to double, the
//                   local-error probe's exact gradient stays double). The mlp's check_precision
//                   is not offered: the lm's trace has no columns for it
//   [trace]         every, flush_every
//
// The loop: at every step the reference (its own thread) and each run (in turn) step on the
// same batch; a record keeps the losses, gradient norms and, at the trace's cadence, the
// quantization statistics of every GEMM operand; at compare steps every parameter's relative
// error against the reference and the local-error probe; at flush steps the rows, then the
// checkpoint. Resume, interruption and failure behave as the mlp's (sim/mlp_run.hpp): the
// same files (trace/run_files.hpp), bit-exact continuation (batches and SR draws are functions
// of (seed, step); the checkpoint holds every parameter and moment, a wide reference's exactly
// as its double limbs).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/lm_spec.hpp"
#include "model/lm_trainer.hpp"
#include "sim/mlp_precision.hpp"
#include "sim/run_control.hpp"
#include "sim/token_source.hpp"
#include "trace/token_file.hpp"
#include "trace/device_identity.hpp"
#include "trace/run_metrics.hpp"
#include "util/config.hpp"

namespace fp4d {

struct LmRunSpec {
  LmSpec model;
  std::int64_t steps = 300;
  // Data: the synthetic source (token_file empty) or windows of a token file.
  TokenSourceSpec synthetic;
  std::string token_file;      // "file.h5:/dataset"; empty: synthetic
  std::shared_ptr<const TokenData> tokens;  // its ids, read and checked by parse_lm_run
  std::uint64_t data_seed = 1;  // windows of the token file
  std::vector<std::string> recipes{"nvfp4", "bf16"};
  std::vector<int> high_precision_blocks;
  std::string edge_recipe = "bf16";
  Accumulator accumulator = Accumulator::Fp32Sequential;  // the CPU emulation's ([recipes] accumulator)
  double switch_to_bf16_at = 0;  // in [0, 1); 0 = never
  bool reference_enabled = true;
  MlpPrecision reference_precision = MlpPrecision::Double;
  std::int64_t compare_every = 10;
  std::int64_t probe_draws = 4;
  std::int64_t trace_every = 1, flush_every = 100;
};

// Reads [lm], [lm.mamba], [lm.optimizer], [data], [recipes], [reference], [trace] (every key checked, the
// model validated, every GEMM tiled for the recipes, a token file opened and checked against
// the vocab); steps > 0 overrides lm.steps. ConfigError naming the key otherwise.
LmRunSpec parse_lm_run(Config& cfg, std::int64_t steps = 0);

// The linear layers a recipe keeps in high precision: those of the listed blocks and the head.
std::vector<int> lm_run_high_precision_linears(const LmRunSpec& spec);
// The first step that trains in bf16 (steps when never).
std::int64_t lm_switch_step(const LmRunSpec& spec);

struct LmRunControl : RunControl {
  LmTrainerFactory trainer;  // the backend's (empty: the CPU trainer)
};

enum class LmRunOutcome { Complete, Interrupted };

struct LmRunSummary {
  double reference_final_loss = 0;  // NaN without a reference
  double reference_tail_loss = 0;   // mean over the last tenth of the records
  double loss_floor = 0;            // NaN for a token file
  double unigram_loss = 0;          // entropy of the data's unigram distribution (nats)
  std::int64_t reference_first_nonfinite_step = -1;
  struct Run {
    std::string recipe;
    double final_loss = 0, tail_loss = 0, tail_rel_loss_gap = 0;
    double final_weight_rel_error = 0;  // every parameter together, last compare; NaN without compares
    double growth_exponent = 0;  // weight_error_growth_exponent: every parameter, every compare
    std::int64_t first_nonfinite_step = -1;
    // The headline (numerics.md, "Run summary metrics"): the relative loss gap's mean over the
    // trailing window (tail_rel_loss_gap above is the ratio of tail means, kept for older
    // readers); the weight error of the parameters of the linears this recipe quantizes, together,
    // and of the rest (embedding, gains, mixer parameters, the edge linears); the growth exponent
    // of the quantized parameters' error over the last window and its local exponents.
    run_metrics::GapWindow loss_gap;
    std::vector<int> quantized_params;  // lm_params indices
    double quantized_weight_rel_error = 0, other_weight_rel_error = 0;  // NaN without compares
    run_metrics::SlopeWindow quantized_growth;
    std::vector<run_metrics::SlopeWindow> quantized_local_exponents;
  };
  std::vector<Run> runs;
};

LmRunOutcome run_lm(const LmRunSpec& spec, const LmRunControl& ctl, LmRunSummary* summary = nullptr);

}  // namespace fp4d
