#include "sim/lm_run.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <type_traits>

#include "model/recipe_gemm.hpp"
#include "sim/lm.hpp"
#include "sim/lm_trainer.hpp"
#include "sim/local_error.hpp"
#include "sim/omp_threads.hpp"
#include "sim/run_config.hpp"
#include "trace/lm_trace.hpp"
#include "trace/run_files.hpp"
#include "trace/token_file.hpp"
#include "util/checked_size.hpp"

namespace fp4d {

// ---- config ---------------------------------------------------------------------------------

namespace {

// A validation message "lm: FIELD why" as a config error on the key that sets FIELD (with its
// line where the config has it).
[[noreturn]] void rethrow_on_key(Config& cfg, const std::string& msg, const std::string& section,
                                 const std::string& with_steps) {
  if (msg.rfind("lm: ", 0) == 0) {
    const std::size_t sp = msg.find(' ', 4);
    const std::string field = msg.substr(4, sp == std::string::npos ? std::string::npos : sp - 4);
    std::string key = section + "." + field;
    if (field == "optimizer.total_steps") key = "lm.steps";
    if (field == "vocab") key = "lm.vocab";  // the token source's vocab is the model's
    if (sp != std::string::npos) {
      if (cfg.has(key)) cfg.require(false, key, msg.substr(sp + 1) + with_steps);
      throw ConfigError(cfg.source() + ": '" + key + "' (not set: its default) " + msg.substr(sp + 1) + with_steps);
    }
  }
  throw ConfigError(cfg.source() + ": " + msg + with_steps);
}

// The block a recipe's GEMM format quantizes in, along every GEMM dimension (0: none).
std::int64_t recipe_block(const std::string& name) {
  if (name == "fp32") return 0;
  switch (gemm_recipe(name).kind) {
    case GemmRecipe::Kind::Nvfp4: return 16;
    case GemmRecipe::Kind::Mxfp4: return 32;
    default: return 0;
  }
}

void parse_model(Config& cfg, LmRunSpec& r, std::int64_t steps) {
  LmSpec& m = r.model;
  m.vocab = cfg.get_int("lm.vocab", m.vocab);
  m.d_model = cfg.get_int("lm.d_model", m.d_model);
  m.heads = cfg.get_int("lm.heads", m.heads);
  m.kv_heads = cfg.get_int("lm.kv_heads", m.heads);
  m.ffn = cfg.get_int("lm.ffn", m.ffn);
  m.seq_len = cfg.get_int("lm.seq_len", m.seq_len);
  m.batch = cfg.get_int("lm.batch", m.batch);
  m.pattern = cfg.get_string("lm.pattern", m.pattern);
  m.fused_qkv = cfg.get_bool("lm.fused_qkv", m.fused_qkv);
  m.tied_embeddings = cfg.get_bool("lm.tied_embeddings", m.tied_embeddings);
  m.rope_base = cfg.get_double("lm.rope_base", m.rope_base);
  m.norm_eps = cfg.get_double("lm.norm_eps", m.norm_eps);
  m.init = cfg.get_string("lm.init", m.init);
  LmMamba& mb = m.mamba;
  mb.state = cfg.get_int("lm.mamba.state", mb.state);
  mb.head_dim = cfg.get_int("lm.mamba.head_dim", mb.head_dim);
  mb.expand = cfg.get_int("lm.mamba.expand", mb.expand);
  mb.groups = cfg.get_int("lm.mamba.groups", mb.groups);
  mb.conv_width = cfg.get_int("lm.mamba.conv_width", mb.conv_width);
  mb.chunk = cfg.get_int("lm.mamba.chunk", mb.chunk);
  const std::int64_t seed = cfg.get_int("lm.seed", 1);
  cfg.require(seed >= 0, "lm.seed", "must be >= 0");
  m.seed = static_cast<std::uint64_t>(seed);
  LmOptimizer& o = m.optimizer;
  o.lr = cfg.get_double("lm.optimizer.lr", o.lr);
  o.beta1 = cfg.get_double("lm.optimizer.beta1", o.beta1);
  o.beta2 = cfg.get_double("lm.optimizer.beta2", o.beta2);
  o.eps = cfg.get_double("lm.optimizer.eps", o.eps);
  o.weight_decay = cfg.get_double("lm.optimizer.weight_decay", o.weight_decay);
  o.max_grad_norm = cfg.get_double("lm.optimizer.max_grad_norm", o.max_grad_norm);
  o.schedule = cfg.get_string("lm.optimizer.schedule", o.schedule);
  o.warmup_steps = cfg.get_int("lm.optimizer.warmup_steps", o.warmup_steps);
  o.decay_fraction = cfg.get_double("lm.optimizer.decay_fraction", o.decay_fraction);
  r.steps = cfg.get_int("lm.steps", r.steps);
  if (steps > 0) r.steps = steps;
  cfg.require(r.steps >= 1, "lm.steps", "must be >= 1");
  o.total_steps = r.steps;
  const std::string with_steps = steps > 0 ? " (with --steps " + std::to_string(steps) + ")" : "";
  try {
    validate(m);
  } catch (const std::invalid_argument& e) {
    rethrow_on_key(cfg, e.what(), "lm", with_steps);
  }
  // Every tensor the step forms within the per-tensor element limit, checked before a trace
  // exists (an overflow would otherwise fail the run with its trace left "running").
  const auto within = [&](const std::string& key, std::int64_t a, std::int64_t b, const std::string& what) {
    try {
      (void)checked_elements(a, b, what);
    } catch (const SizeError& e) {
      cfg.require(false, key, e.what());
    }
  };
  within("lm.batch", m.batch, m.seq_len + 1, "the batch's tokens");
  const std::int64_t M = m.batch * m.seq_len;
  within("lm.vocab", M, m.vocab, "the logits (batch x seq_len x vocab)");
  within("lm.vocab", m.vocab, m.d_model, "the embedding");
  within("lm.ffn", M, 2 * m.ffn, "the FFN activations");
  within("lm.ffn", 2 * m.ffn, m.d_model, "the FFN weights");
  within("lm.seq_len", m.batch * m.heads, m.seq_len * m.seq_len, "the attention probabilities");
  if (m.pattern.find('M') != std::string::npos) {
    const std::int64_t in_rows = 2 * lm_mamba_d_inner(m) + 2 * mb.groups * mb.state + lm_mamba_heads(m);
    within("lm.mamba.expand", M, in_rows, "the Mamba in-projection's output");
    within("lm.mamba.expand", in_rows, m.d_model, "the Mamba in-projection's weights");
    within("lm.mamba.state", m.seq_len * mb.head_dim, mb.state, "a Mamba head's states over the sequence");
    within("lm.mamba.state", m.batch * lm_mamba_heads(m), m.seq_len * mb.state, "the scan's dB and dC parts");
  }
}

void parse_data(Config& cfg, LmRunSpec& r) {
  const std::string source = cfg.get_string("data.source", "synthetic");
  const std::int64_t seed = cfg.get_int("data.seed", 1);
  cfg.require(seed >= 0, "data.seed", "must be >= 0");
  if (source == "synthetic") {
    TokenSourceSpec& d = r.synthetic;
    d.vocab = r.model.vocab;
    d.order = static_cast<int>(cfg.get_int("data.order", d.order));
    d.zipf_alpha = cfg.get_double("data.zipf_alpha", d.zipf_alpha);
    // The default support fits any vocab (a small test vocab has fewer than 64 Markov ids).
    d.zipf_support = cfg.get_int("data.zipf_support", std::min<std::int64_t>(d.zipf_support, d.vocab - 1));
    d.copy_prob = cfg.get_double("data.copy_prob", d.copy_prob);
    d.copy_length = cfg.get_int("data.copy_length", d.copy_length);
    d.seed = static_cast<std::uint64_t>(seed);
    try {
      d.validate();
    } catch (const std::invalid_argument& e) {
      rethrow_on_key(cfg, e.what(), "data", "");
    }
    return;
  }
  for (const char* k : {"data.order", "data.zipf_alpha", "data.zipf_support", "data.copy_prob", "data.copy_length"})
    cfg.require(!cfg.has(k), k, "applies to data.source = \"synthetic\" only (this run reads " + source + ")");
  r.token_file = source;
  r.data_seed = static_cast<std::uint64_t>(seed);
  try {
    r.tokens = std::make_shared<const TokenData>(read_token_file(parse_token_source(source), r.model.vocab));
    if (static_cast<std::int64_t>(r.tokens->ids.size()) < r.model.seq_len + 1)
      throw std::invalid_argument(r.tokens->source + " holds " + std::to_string(r.tokens->ids.size()) +
                                  " tokens, fewer than lm.seq_len + 1 = " + std::to_string(r.model.seq_len + 1));
  } catch (const std::exception& e) {  // std::invalid_argument, h5::Error: either way the key's fault
    cfg.require(false, "data.source", e.what());
  }
}

void parse_recipes(Config& cfg, LmRunSpec& r) {
  parse_recipe_names(cfg, r.recipes, r.edge_recipe);
  parse_accumulator(cfg, r.recipes, r.edge_recipe, r.accumulator);
  const auto blocks = static_cast<std::int64_t>(r.model.pattern.size());
  for (const std::int64_t b : cfg.get_ints("recipes.high_precision_layers", {})) {
    cfg.require(b >= 0 && b < blocks, "recipes.high_precision_layers",
                "block " + std::to_string(b) + " does not exist (" + std::to_string(blocks) + " blocks, pattern '" +
                    r.model.pattern + "')");
    cfg.require(std::find(r.high_precision_blocks.begin(), r.high_precision_blocks.end(), static_cast<int>(b)) ==
                    r.high_precision_blocks.end(),
                "recipes.high_precision_layers", "block " + std::to_string(b) + " is listed twice");
    r.high_precision_blocks.push_back(static_cast<int>(b));
  }
  std::sort(r.high_precision_blocks.begin(), r.high_precision_blocks.end());
  r.switch_to_bf16_at = cfg.get_double("recipes.switch_to_bf16_at", r.switch_to_bf16_at);
  cfg.require(r.switch_to_bf16_at >= 0 && r.switch_to_bf16_at < 1, "recipes.switch_to_bf16_at",
              "must be in [0, 1) (the fraction of the steps trained in the recipe; 0 = never switch)");
  const int linears = static_cast<int>(lm_linears(r.model).size());
  const std::vector<std::string> tiled = [&] {
    std::vector<std::string> v = r.recipes;
    v.push_back(r.edge_recipe);
    return v;
  }();
  for (const std::string& name : r.recipes) {
    try {
      RecipeGemm check(RecipeGemmOptions{name, r.edge_recipe, lm_run_high_precision_linears(r), 0, {}}, linears);
      (void)check;
    } catch (const std::invalid_argument& e) {
      cfg.require(false, "recipes.names", e.what());
    }
  }
  for (const std::string& name : tiled) {
    const std::int64_t blk = recipe_block(name);
    if (blk == 0) continue;
    std::string problem = lm_tiling_problem(r.model);
    const LmSpec& m = r.model;
    std::map<std::string, std::int64_t> dims{{"d_model", m.d_model}, {"ffn", m.ffn}, {"vocab", m.vocab},
                                             {"batch x seq_len", m.batch * m.seq_len},
                                             {"kv_heads x head_dim", m.kv_heads * lm_head_dim(m)}};
    if (m.pattern.find('M') != std::string::npos) {
      dims["mamba d_inner"] = lm_mamba_d_inner(m);
      dims["mamba in-projection rows"] = 2 * lm_mamba_d_inner(m) + 2 * m.mamba.groups * m.mamba.state + lm_mamba_heads(m);
    }
    if (problem.empty() && blk > 16)
      for (const auto& [what, v] : dims)
        if (v % blk != 0) problem += (problem.empty() ? "" : "; ") + what + " = " + std::to_string(v) + " is not a multiple of " + std::to_string(blk);
    const std::string key = name == r.edge_recipe && std::find(r.recipes.begin(), r.recipes.end(), name) == r.recipes.end()
                                ? "recipes.edge_recipe" : "recipes.names";
    cfg.require(problem.empty(), key, "recipe " + name + " quantizes in blocks of " + std::to_string(blk) +
                                          " along every GEMM dimension, which this model does not tile: " + problem);
  }
}

}  // namespace

std::vector<int> lm_run_high_precision_linears(const LmRunSpec& spec) {
  std::vector<int> out;
  const std::vector<LmLinear> lin = lm_linears(spec.model);
  for (std::size_t l = 0; l < lin.size(); ++l)
    if (lin[l].block < 0 || std::find(spec.high_precision_blocks.begin(), spec.high_precision_blocks.end(), lin[l].block) !=
                                spec.high_precision_blocks.end())
      out.push_back(static_cast<int>(l));
  return out;
}

std::int64_t lm_switch_step(const LmRunSpec& spec) {
  if (spec.switch_to_bf16_at <= 0) return spec.steps;
  return static_cast<std::int64_t>(std::llround(spec.switch_to_bf16_at * static_cast<double>(spec.steps)));
}

LmRunSpec parse_lm_run(Config& cfg, std::int64_t steps) {
  LmRunSpec r;
  parse_model(cfg, r, steps);
  parse_data(cfg, r);
  parse_recipes(cfg, r);
  parse_reference_cadence(cfg, r.reference_enabled, r.compare_every, r.probe_draws);
  try {
    r.reference_precision = parse_mlp_precision(cfg.get_string("reference.precision", "double"));
  } catch (const std::invalid_argument& e) {
    cfg.require(false, "reference.precision", e.what());
  }
  cfg.require(!cfg.has("reference.check_precision"), "reference.check_precision",
              "is the mlp's: the lm workload does not redo its reference's steps in a wider type");
  parse_trace_cadence(cfg, r.trace_every, r.flush_every);
  return r;
}

// ---- the run --------------------------------------------------------------------------------

namespace {

// The batches of a run: a pure function of the step (resumes need no data state).
class LmBatches {
 public:
  explicit LmBatches(const LmRunSpec& spec) : spec_(spec) {
    if (!spec.tokens) source_.emplace(spec.synthetic);
  }
  TokenBatch operator()(std::int64_t step) const {
    const LmSpec& m = spec_.model;
    if (source_) return source_->batch(step, m.batch, m.seq_len);
    return make_file_batch(*spec_.tokens, step, m.batch, m.seq_len, spec_.data_seed);
  }

 private:
  const LmRunSpec& spec_;
  std::optional<TokenSource> source_;
};

// Entropy (nats) of the unigram distribution of the targets of the first min(steps, 64)
// batches: the loss of the best model that ignores context, which a trained model must beat.
double unigram_entropy(const LmRunSpec& spec, const LmBatches& batches) {
  std::vector<double> count(static_cast<std::size_t>(spec.model.vocab), 0.0);
  double n = 0;
  for (std::int64_t s = 0; s < std::min<std::int64_t>(spec.steps, 64); ++s) {
    const TokenBatch b = batches(s);
    for (std::int64_t r = 0; r < b.batch; ++r)
      for (std::int64_t t = 0; t < b.seq_len; ++t) count[static_cast<std::size_t>(b.target(r, t))] += 1, n += 1;
  }
  double h = 0;
  for (const double c : count)
    if (c > 0) h -= c / n * std::log(c / n);
  return h;
}

LmTraceInfo trace_info(const LmRunSpec& spec, const LmBatches& batches) {
  LmTraceInfo info;
  info.data = spec.tokens ? spec.tokens->source : std::string("synthetic");
  info.loss_floor = spec.tokens ? std::nan("") : loss_floor_nats(spec.synthetic, spec.model.seq_len);
  info.unigram_loss = unigram_entropy(spec, batches);
  return info;
}

struct ProbeResult {
  std::vector<double> cosine, rel, bias;
};

// The local error at a run's own parameters after step s: the gradient the recipe computes on
// batch s + 1 (the one the run uses next) against the exact gradient at the same parameters in
// double; with SR, `draws` independent quantizations (SR seeds moved off the training's by the
// draw index) give the bias of their mean. Per parameter, as the mlp's probe is per layer.
ProbeResult local_error(const LmSpec& model, const std::vector<std::vector<float>>& p, const TokenBatch& next,
                        std::int64_t step, const GemmFn& gemm, const LmPrecision& precision, int draws) {
  std::vector<std::vector<double>> pd(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) pd[i].assign(p[i].begin(), p[i].end());
  std::vector<std::vector<double>> g;
  std::vector<std::vector<float>> gq;
  lm_loss_and_gradients<double>(model, pd, next.ids.data(), model.batch, nullptr, &g, step, LmPrecision{});
  lm_loss_and_gradients<float>(model, p, next.ids.data(), model.batch, gemm, &gq, step, precision);
  std::vector<std::vector<double>> sum(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) sum[i].assign(gq[i].begin(), gq[i].end());
  for (int d = 1; d < draws; ++d) {
    std::vector<std::vector<float>> gd;
    lm_loss_and_gradients<float>(model, p, next.ids.data(), model.batch, sr_draw(gemm, d), &gd, step, precision);
    for (std::size_t i = 0; i < p.size(); ++i)
      for (std::size_t j = 0; j < gd[i].size(); ++j) sum[i][j] += gd[i][j];
  }
  ProbeResult r;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const GradientError e = gradient_error(g[i], gq[i], sum[i], draws);
    r.cosine.push_back(e.cosine), r.rel.push_back(e.rel), r.bias.push_back(e.sr_mean_rel);
  }
  return r;
}



// One run of the workload from its checkpoint on, with the reference in Ref.
template <class Ref>
class LmRun {
 public:
  LmRun(const LmRunSpec& spec, const LmRunControl& ctl, const CheckpointMark& mark, LmTrace& trace,
        std::optional<RowJournal>& journal, LmState<Ref>& ref, RunProgress& progress)
      : spec_(spec), ctl_(ctl), mark_(mark), model_(spec.model), R_(spec.recipes.size()),
        L_(static_cast<int>(lm_linears(spec.model).size())), switch_step_(lm_switch_step(spec)), batches_(spec),
        trace_(trace), journal_(journal), ref_(ref), start_(mark.step), progress_(progress) {}

  LmRunOutcome run(std::vector<LmState<float>>& lp, LmRunSummary* summary) {
    if (start_ == spec_.steps) final_states_.emplace(ref_, lp);
    if (ctl_.resume) {
      trace_.set_status("running");
      trace_.set_resumed_at(start_);
    }
    trace_.sync();
    trainers_.resize(R_);
    gemms_.resize(R_);
    for (std::size_t r = 0; r < R_; ++r) make_trainer(r, lp[r], start_);
    lp.clear();
    trace_.start_swmr_write();  // every attribute of the run is set: readers may open it from here
    for (std::int64_t s = start_; s < spec_.steps; ++s) {
      if (ctl_.stop && ctl_.stop->load()) return stop();
      progress_.stepped = true;
      if (s == switch_step_ && s != start_)
        for (std::size_t r = 0; r < R_; ++r)
          if (recipe_at(r, s) != recipe_at(r, s - 1)) make_trainer(r, trainers_[r]->state(), s);
      step(s);
      if (ctl_.progress) ctl_.progress(s + 1, spec_.steps);
    }
    finish(summary);
    return LmRunOutcome::Complete;
  }

 private:
  bool is_compare(std::int64_t s) const { return (s + 1) % spec_.compare_every == 0 || s + 1 == spec_.steps; }
  bool is_flush(std::int64_t s) const { return (s + 1) % spec_.flush_every == 0 || s + 1 == spec_.steps; }
  bool is_record(std::int64_t s) const { return s % spec_.trace_every == 0 || s + 1 == spec_.steps; }

  // The recipe run r trains step s in: its own, or bf16 from the switch on (fp32 stays fp32).
  std::string recipe_at(std::size_t r, std::int64_t s) const {
    const std::string& name = spec_.recipes[r];
    return s >= switch_step_ && name != "fp32" ? std::string("bf16") : name;
  }
  static LmPrecision precision_of(const std::string& recipe) { return LmPrecision{recipe != "fp32"}; }

  void make_trainer(std::size_t r, const LmState<float>& state, std::int64_t s) {
    const std::string recipe = recipe_at(r, s);
    RecipeGemmOptions o{recipe, spec_.edge_recipe, lm_run_high_precision_linears(spec_), model_.seed, {}};
    o.accumulator = spec_.accumulator;
    gemms_[r] = std::make_unique<RecipeGemm>(o, L_);  // the probe's, on the host
    trainers_[r] = ctl_.trainer ? ctl_.trainer(model_, o, precision_of(recipe), state)
                                : make_cpu_lm_trainer(model_, o, precision_of(recipe), state);
    trace_.set_gemm_path(r, trainers_[r]->path());
  }

  void step(std::int64_t s) {
    const TokenBatch batch = batches_(s);
    const bool recorded = is_record(s), compare = spec_.reference_enabled && is_compare(s), flush = is_flush(s);
    // The reference steps in its own thread while the runs step (on the host or a device).
    // The cores are shared between the two: OpenMP teams of both at full width would
    // oversubscribe them, and libgomp's spinning threads then slow both by an order of magnitude.
    LmStepStats ref_stats;
    std::exception_ptr ref_error;
    std::thread reference;
    const int cores = omp_get_max_threads(), ref_threads = std::max(1, cores / 2);
    std::optional<OmpThreads> share;
    if (spec_.reference_enabled) {
      share.emplace(std::max(1, cores - ref_threads));
      reference = std::thread([&, ref_threads] {
        omp_set_num_threads(ref_threads);
        try {
          ref_stats = lm_train_step<Ref>(model_, ref_, batch.ids.data(), nullptr);
        } catch (...) {
          ref_error = std::current_exception();
        }
      });
    }
    std::vector<LmStepStats> st(R_);
    std::vector<std::vector<OperandRecord>> ops(R_);
    try {
      for (std::size_t r = 0; r < R_; ++r) st[r] = trainers_[r]->step(batch.ids.data(), recorded ? &ops[r] : nullptr);
    } catch (...) {
      if (reference.joinable()) reference.join();
      throw;
    }
    if (reference.joinable()) reference.join();
    share.reset();
    if (ref_error) std::rethrow_exception(ref_error);
    const double ref_loss = spec_.reference_enabled ? ref_stats.loss : std::nan("");
    if (recorded) {
      LmRecordRow row;
      row.step = s;
      row.lr = st.empty() ? 0.0 : st[0].lr;
      row.reference_loss = ref_loss;
      row.reference_grad_norm = spec_.reference_enabled ? ref_stats.grad_norm : std::nan("");
      for (std::size_t r = 0; r < R_; ++r)
        row.runs.push_back({st[r].loss, (st[r].loss - ref_loss) / ref_loss, st[r].grad_norm, st[r].clip_factor,
                            std::move(st[r].lost_update_fraction), std::move(ops[r])});
      trace_.stage(row);
    }
    std::vector<LmState<float>> states;
    if (compare || flush)
      for (std::size_t r = 0; r < R_; ++r) states.push_back(trainers_[r]->state());
    if (compare) trace_.stage(compare_row(s, states));
    if (flush) checkpoint(s + 1, states);
  }

  // The reference's parameters as doubles (RNE for a wider Ref: the comparisons' scale is the
  // low-precision runs' error, far above double's resolution); a double reference's own.
  const std::vector<std::vector<double>>& reference_params(std::vector<std::vector<double>>& rounded) const {
    if constexpr (std::is_same_v<Ref, double>) {
      return ref_.p;
    } else {
      rounded.assign(ref_.p.size(), {});
      for (std::size_t i = 0; i < ref_.p.size(); ++i)
        for (const Ref& x : ref_.p[i]) rounded[i].push_back(mlp_to_double(x));
      return rounded;
    }
  }

  LmCompareRow compare_row(std::int64_t s, const std::vector<LmState<float>>& states) {
    LmCompareRow row;
    row.step = s;
    const TokenBatch next = batches_(s + 1);
    std::vector<std::vector<double>> rounded;
    const std::vector<std::vector<double>>& ref_p = reference_params(rounded);
    for (std::size_t r = 0; r < R_; ++r) {
      LmCompareRow::Run x;
      RelError total;
      for (std::size_t i = 0; i < ref_p.size(); ++i) x.weight_rel_error.push_back(total.add(states[r].p[i], ref_p[i]));
      x.weight_rel_error_total = total.value();
      const std::string recipe = recipe_at(r, s + 1);
      const int draws = gemms_[r]->uses_sr() ? static_cast<int>(spec_.probe_draws) : 1;
      ProbeResult p = local_error(model_, states[r].p, next, s + 1, gemms_[r]->fn(), precision_of(recipe), draws);
      x.grad_cosine = std::move(p.cosine), x.grad_rel_error = std::move(p.rel), x.grad_sr_mean_rel_error = std::move(p.bias);
      row.runs.push_back(std::move(x));
    }
    return row;
  }

  // A flush point: the rows first, durable (trace and journal); then the checkpoint that
  // counts them.
  void checkpoint(std::int64_t step, std::vector<LmState<float>>& states) {
    const CheckpointMark m = commit_durably(trace_, *journal_, mark_, step);
    write_checkpoint_file(ctl_.path, m, [&](h5::Group g, Fnv1a64* d) { write_lm_states(g, ref_, states, d); });
    progress_.durable_step = m.step;
    if (m.step == spec_.steps) final_states_.emplace(ref_, std::move(states));
  }

  LmRunOutcome stop() {
    mark_interrupted(trace_, *journal_);
    return LmRunOutcome::Interrupted;
  }

  void finish(LmRunSummary* summary) {
    trace_.commit(*journal_);
    if (!final_states_) throw std::logic_error("lm run: no checkpoint at the last step");
    const LmRunSummary s = trace_.finish(final_states_->first, final_states_->second);
    journal_.reset();
    remove_resume_files(ctl_.path);
    if (summary) *summary = s;
  }

  const LmRunSpec& spec_;
  const LmRunControl& ctl_;
  const CheckpointMark& mark_;
  const LmSpec& model_;
  const std::size_t R_;
  const int L_;
  const std::int64_t switch_step_;
  LmBatches batches_;
  LmTrace& trace_;
  std::optional<RowJournal>& journal_;
  LmState<Ref>& ref_;
  const std::int64_t start_;
  RunProgress& progress_;
  std::vector<std::unique_ptr<LmTrainer>> trainers_;
  std::vector<std::unique_ptr<RecipeGemm>> gemms_;
  std::optional<std::pair<LmState<Ref>, std::vector<LmState<float>>>> final_states_;
};

template <class Ref>
LmRunOutcome run_lm_in(const LmRunSpec& spec, const LmRunControl& ctl, LmRunSummary* summary) {
  std::vector<LmState<float>> lp(spec.recipes.size(), init_lm_state<float>(spec.model));
  LmState<Ref> ref = init_lm_state<Ref>(spec.model);
  const LmTraceInfo info = trace_info(spec, LmBatches(spec));
  if (!ctl.resume)
    create_run_files(
        ctl.path, ctl.config_text,
        [&](const std::string& partial, const std::string& run_id) { LmTrace::create(spec, ctl, info, partial, run_id); },
        [&](const CheckpointMark& m) {
          write_checkpoint_file(ctl.path, m, [&](h5::Group g, Fnv1a64* d) { write_lm_states(g, ref, lp, d); });
        });
  else if (LmTrace::is_complete(ctl.path))  // nothing to resume (throw_complete removes a kill's leftovers)
    throw_complete(ctl.path);
  const CheckpointMark mark = read_checkpoint_file(ctl.path, ctl.config_text,
                                                   [&](h5::Group g, Fnv1a64* d) { read_lm_states(g, ref, lp, d); });
  std::optional<RowJournal> journal;
  journal.emplace(reopen_journal(ctl.path, mark));
  LmTrace trace = open_verified_trace<LmTrace>(
      ctl.path, mark, [&] { return LmTrace::open(spec, ctl); },
      [&] { LmTrace::rebuild(spec, ctl, info, mark, *journal); }, ctl.note);
  const std::int64_t start = mark.step;
  if (start < 0 || start > spec.steps)
    throw ResumeRefused("its checkpoint is at step " + std::to_string(start) + ", outside the run's " +
                        std::to_string(spec.steps) + " steps");
  ref.step = start;
  for (auto& s : lp) s.step = start;
  RunProgress progress{start, false};
  return run_guarded(trace, ctl.path, ctl.resume, progress, [&] {
    LmRun<Ref> run(spec, ctl, mark, trace, journal, ref, progress);
    return run.run(lp, summary);
  });
}

}  // namespace

LmRunOutcome run_lm(const LmRunSpec& spec, const LmRunControl& ctl, LmRunSummary* summary) {
  try {
    return dispatch_mlp_precision(spec.reference_precision,
                                  [&](auto r) { return run_lm_in<decltype(r)>(spec, ctl, summary); });
  } catch (const ResumeRefused& e) {  // one line that says what was refused and what to do
    rethrow_resume_refused(ctl.path, e);
  }
}

}  // namespace fp4d
