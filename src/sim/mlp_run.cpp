#include "sim/mlp_run.hpp"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <type_traits>

#include "sim/batch_prefetch.hpp"
#include "sim/local_error.hpp"
#include "sim/omp_threads.hpp"
#include "sim/parallel_runs.hpp"
#include "sim/run_config.hpp"
#include "trace/h5.hpp"
#include "trace/mlp_checkpoint.hpp"
#include "trace/mlp_trace.hpp"
#include "trace/row_journal.hpp"
#include "trace/run_files.hpp"
#include "util/checked_size.hpp"

namespace fp4d {

// ---- config ---------------------------------------------------------------------------------

MlpRunSpec parse_mlp_run(Config& cfg, std::int64_t steps) {
  MlpRunSpec r;
  MlpSpec& m = r.model;
  m.widths = cfg.get_ints("mlp.widths", m.widths);
  m.activation = [&] {
    const std::string a = cfg.get_string("mlp.activation", "relu");
    try {
      return parse_activation(a);
    } catch (const std::exception& e) {
      cfg.require(false, "mlp.activation", e.what());
    }
    return Activation::Relu;
  }();
  m.norm = [&] {
    const std::string n = cfg.get_string("mlp.norm", "none");
    try {
      return parse_norm(n);
    } catch (const std::exception& e) {
      cfg.require(false, "mlp.norm", e.what());
    }
    return Norm::None;
  }();
  m.norm_eps = cfg.get_double("mlp.norm_eps", m.norm_eps);
  m.residual = cfg.get_bool("mlp.residual", m.residual);
  m.batch = cfg.get_int("mlp.batch", m.batch);
  m.task = cfg.get_string("mlp.task", m.task);
  const std::int64_t seed = cfg.get_int("mlp.seed", 1);
  // A negative seed would be reinterpreted as a huge unsigned one: refuse it, as sum/dot do.
  cfg.require(seed >= 0, "mlp.seed", "must be >= 0");
  m.seed = static_cast<std::uint64_t>(seed);
  m.teacher_width = cfg.get_int("mlp.teacher_width", m.teacher_width);
  m.outlier_fraction = cfg.get_double("mlp.outlier_fraction", m.outlier_fraction);
  m.outlier_scale = cfg.get_double("mlp.outlier_scale", m.outlier_scale);
  m.student_t_nu = cfg.get_double("mlp.student_t_nu", m.student_t_nu);
  const std::string opt = cfg.get_string("mlp.optimizer", "sgd");
  cfg.require(opt == "sgd" || opt == "adamw", "mlp.optimizer", "must be sgd or adamw");
  m.optimizer = opt == "sgd" ? Optimizer::Sgd : Optimizer::AdamW;
  m.lr = cfg.get_double("mlp.lr", m.lr);
  m.momentum = cfg.get_double("mlp.momentum", m.momentum);
  m.beta1 = cfg.get_double("mlp.beta1", m.beta1);
  m.beta2 = cfg.get_double("mlp.beta2", m.beta2);
  m.eps = cfg.get_double("mlp.eps", m.eps);
  m.weight_decay = cfg.get_double("mlp.weight_decay", m.weight_decay);
  m.schedule = cfg.get_string("mlp.schedule", m.schedule);
  m.warmup_steps = cfg.get_int("mlp.warmup_steps", m.warmup_steps);
  m.decay_fraction = cfg.get_double("mlp.decay_fraction", m.decay_fraction);
  r.steps = cfg.get_int("mlp.steps", r.steps);
  if (steps > 0) r.steps = steps;
  cfg.require(r.steps >= 1, "mlp.steps", "must be >= 1");
  m.total_steps = r.steps;
  try {
    validate(m);
  } catch (const std::invalid_argument& e) {
    // validate says "mlp: FIELD why": name the config key with its line where the config
    // sets it (total_steps is mlp.steps, or --steps).
    const std::string msg = e.what(), with_steps = steps > 0 ? " (with --steps " + std::to_string(steps) + ")" : "";
    if (msg.rfind("mlp: ", 0) == 0) {
      const std::size_t sp = msg.find(' ', 5);
      const std::string field = msg.substr(5, sp == std::string::npos ? std::string::npos : sp - 5);
      const std::string key = "mlp." + (field == "total_steps" ? std::string("steps") : field);
      if (cfg.has(key) && sp != std::string::npos) cfg.require(false, key, msg.substr(sp + 1) + with_steps);
    }
    throw ConfigError(cfg.source() + ": " + msg + with_steps);
  }
  // Every tensor the model forms - weights (twice the rows under swiglu), a batch's
  // activations, the teacher's - within the per-tensor element limit, checked here because
  // this runs before a trace exists: a size that overflows would otherwise crash the run
  // with its trace left "running".
  const auto within_limit = [&](const std::string& key, std::int64_t a, std::int64_t b, const std::string& what) {
    try {
      (void)checked_elements(a, b, what);
    } catch (const SizeError& e) {
      cfg.require(false, key, e.what());
    }
  };
  for (std::size_t i = 0; i < m.widths.size(); ++i)
    within_limit("mlp.widths", 1, m.widths[i], "entry " + std::to_string(i));  // so 2 * width below cannot wrap
  within_limit("mlp.batch", 1, m.batch, "batch");
  within_limit("mlp.teacher_width", 1, m.teacher_width, "teacher width");
  for (std::size_t l = 0; l + 1 < m.widths.size(); ++l) {
    within_limit("mlp.widths", weight_rows(m, static_cast<int>(l)), m.widths[l], "weights of layer " + std::to_string(l));
    within_limit("mlp.widths", m.batch, m.widths[l + 1], "activations of layer " + std::to_string(l) + " for the batch");
  }
  within_limit("mlp.widths", m.batch, m.widths.front(), "input batch");
  within_limit("mlp.teacher_width", m.teacher_width, std::max(m.widths.front(), m.widths.back()), "teacher weights");
  within_limit("mlp.teacher_width", m.batch, m.teacher_width, "teacher activations for the batch");

  parse_recipe_names(cfg, r.recipes, r.edge_recipe);
  parse_accumulator(cfg, r.recipes, r.edge_recipe, r.accumulator);
  for (const std::int64_t l : cfg.get_ints("recipes.high_precision_layers", {})) {
    cfg.require(l >= 0 && l + 1 < static_cast<std::int64_t>(m.widths.size()), "recipes.high_precision_layers",
                "layer " + std::to_string(l) + " does not exist (" + std::to_string(m.widths.size() - 1) + " layers)");
    // A repeated layer changes nothing but is recorded in the trace's config twice: most
    // likely a typo for another layer, so refuse it.
    cfg.require(std::find(r.high_precision_layers.begin(), r.high_precision_layers.end(), static_cast<int>(l)) ==
                    r.high_precision_layers.end(),
                "recipes.high_precision_layers", "layer " + std::to_string(l) + " is listed twice");
    r.high_precision_layers.push_back(static_cast<int>(l));
  }
  for (const std::string& name : r.recipes) {
    try {
      RecipeGemm check(RecipeGemmOptions{name, r.edge_recipe, r.high_precision_layers, 0, {}},
                       static_cast<int>(m.widths.size() - 1));
      (void)check;
    } catch (const std::invalid_argument& e) {
      cfg.require(false, "recipes.names", e.what());
    }
    const bool rht = name != "fp32" && gemm_recipe(name).kind == GemmRecipe::Kind::Nvfp4 && gemm_recipe(name).rht_wgrad;
    cfg.require(!rht || m.batch % 16 == 0, "mlp.batch",
                "recipe " + name + " applies RHT-16 along the batch in the Wgrad GEMM: the batch must be a multiple of 16");
  }
  parse_reference_cadence(cfg, r.reference_enabled, r.compare_every, r.probe_draws);
  r.queue = cfg.get_int("reference.queue", r.queue);
  cfg.require(r.queue >= 1, "reference.queue", "must be >= 1");
  const std::string precision = cfg.get_string("reference.precision", "double");
  try {
    r.reference_precision = parse_mlp_precision(precision);
  } catch (const std::exception& e) {
    cfg.require(false, "reference.precision", e.what());
  }
  const std::string check = cfg.get_string("reference.check_precision", "none");
  if (check != "none") {
    try {
      r.check_precision = parse_mlp_precision(check);
    } catch (const std::exception& e) {
      cfg.require(false, "reference.check_precision", std::string(e.what()) + " or none");
    }
    cfg.require(significand_bits(*r.check_precision) > significand_bits(r.reference_precision),
                "reference.check_precision", "must be wider than reference.precision (" + precision + ")");
    cfg.require(r.reference_enabled, "reference.check_precision", "needs the reference (reference.enabled = true)");
  }
  parse_trace_cadence(cfg, r.trace_every, r.flush_every);
  return r;
}

// ---- the run --------------------------------------------------------------------------------

namespace {

using Weights = std::vector<std::vector<double>>;

// The reference's own error at a compare step s (check_precision): the step redone in the
// wider precision C from the reference's state before it; per layer ||W_R - W_C|| / ||W_C||
// after the step, and |loss_R - loss_C| / |loss_C| of the step.
struct ReferenceCheck {
  std::vector<double> weight_rel_error;
  double loss_rel_error = 0;
};

template <class R, class C>
C widen(const R& x) {
  if constexpr (std::is_floating_point_v<R>) return C(x);  // double -> wider: exact
  else return static_cast<C>(x);                          // binary128 -> mp256: exact (113 <= 256 bits)
}

template <class R, class C>
ReferenceCheck check_reference_step(const MlpSpec& model, const MlpState<R>& before, const MlpState<R>& after,
                                    double loss) {
  MlpState<C> c;
  c.step = before.step;
  const auto conv = [](const std::vector<std::vector<R>>& v) {
    std::vector<std::vector<C>> out(v.size());
    for (std::size_t l = 0; l < v.size(); ++l)
      for (const R& x : v[l]) out[l].push_back(widen<R, C>(x));
    return out;
  };
  c.w = conv(before.w), c.m1 = conv(before.m1), c.m2 = conv(before.m2);
  const StepStats st = train_step<C>(model, c, nullptr);
  ReferenceCheck r;
  for (std::size_t l = 0; l < c.w.size(); ++l) {
    C num = C(0), den = C(0);  // in C: the differences are far below double's resolution of W
    for (std::size_t i = 0; i < c.w[l].size(); ++i) {
      const C d = widen<R, C>(after.w[l][i]) - c.w[l][i];
      num += d * d;
      den += c.w[l][i] * c.w[l][i];
    }
    r.weight_rel_error.push_back(std::sqrt(mlp_to_double(num)) / std::sqrt(mlp_to_double(den)));
  }
  r.loss_rel_error = st.loss != 0 ? std::abs(loss - st.loss) / std::abs(st.loss) : std::abs(loss);
  return r;
}

// What the reference thread publishes: its loss at every step, its weights at compare steps,
// its whole state at checkpoint steps.
template <class R>
struct ReferenceFeed {
  std::mutex mu;
  std::condition_variable cv;
  std::int64_t done = 0;  // steps completed (loss of steps < done known)
  std::map<std::int64_t, double> loss;
  std::map<std::int64_t, Weights> weights;              // after step s (state at s + 1)
  std::map<std::int64_t, MlpState<R>> checkpoints;  // state at step s (before it)
  std::map<std::int64_t, ReferenceCheck> checks;   // compare steps, with check_precision
  std::exception_ptr error;
  bool stop = false;
};

struct Record {
  std::int64_t step = 0;
  std::vector<double> loss;                  // per run
  std::vector<std::vector<double>> lost;     // per run, per layer
  std::vector<std::vector<OperandRecord>> ops;  // per run, per slot
  std::optional<std::vector<std::vector<std::vector<float>>>> weights;  // compare step: per run, per layer
  std::optional<std::vector<MlpState<float>>> checkpoint;               // flush step: states at step + 1
  // compare step, per run and layer: the local-error probe (see local_error)
  std::optional<std::vector<std::vector<double>>> grad_cosine, grad_error, grad_bias;
};

// The local error at a run's own weights W (after step s): the gradient the recipe computes on
// batch s + 1 (the one the run uses next) against the exact gradient at the same W in double;
// per layer cosine and ||g_q - g|| / ||g||. The error injected by one step's quantization,
// apart from the error the weights accumulated before it.
// With SR, `draws` independent quantizations of that gradient (SR seeds moved off the
// training's by the draw index) give the bias of their mean, ||mean_d g_d - g|| / ||g||: what
// SR leaves after averaging (-> 0 as draws grow if SR is unbiased, down to the deterministic
// part of the error: clipping, RNE operands, the RHT, float32 arithmetic).
void local_error(const MlpSpec& model, const std::vector<std::vector<float>>& w, std::int64_t batch, const GemmFn& gemm,
                 int draws, std::vector<double>* cosine, std::vector<double>* rel, std::vector<double>* bias) {
  std::vector<std::vector<double>> wd(w.size());
  for (std::size_t l = 0; l < w.size(); ++l) wd[l].assign(w[l].begin(), w[l].end());
  std::vector<std::vector<double>> g;
  std::vector<std::vector<float>> gq;
  loss_and_gradients<double>(model, wd, batch, nullptr, &g);
  loss_and_gradients<float>(model, w, batch, gemm, &gq);
  std::vector<std::vector<double>> sum(w.size());
  for (std::size_t l = 0; l < w.size(); ++l) sum[l].assign(gq[l].begin(), gq[l].end());
  for (int d = 1; d < draws; ++d) {
    std::vector<std::vector<float>> gd;
    loss_and_gradients<float>(model, w, batch, sr_draw(gemm, d), &gd);
    for (std::size_t l = 0; l < w.size(); ++l)
      for (std::size_t i = 0; i < gd[l].size(); ++i) sum[l][i] += gd[l][i];
  }
  cosine->clear(), rel->clear(), bias->clear();
  for (std::size_t l = 0; l < w.size(); ++l) {
    const GradientError e = gradient_error(g[l], gq[l], sum[l], draws);
    cosine->push_back(e.cosine), rel->push_back(e.rel), bias->push_back(e.sr_mean_rel);
  }
}

// A new run's files (create_run_files) with the initial states as its step-0 checkpoint.
template <class Ref>
void create_mlp_run_files(const MlpRunSpec& spec, const MlpRunControl& ctl, const MlpState<Ref>& ref,
                          const std::vector<MlpState<float>>& lp) {
  create_run_files(
      ctl.path, ctl.config_text,
      [&](const std::string& partial, const std::string& run_id) { MlpTrace::create(spec, ctl, partial, run_id); },
      [&](const CheckpointMark& m) { write_checkpoint(ctl.path, m, ref, lp); });
}



// What the reference's side gives a record once it has caught up with its step.
template <class Ref>
struct ReferenceSide {
  double loss = 0;
  std::optional<Weights> weights;
  std::optional<ReferenceCheck> check;
  std::optional<MlpState<Ref>> checkpoint;
};

}  // namespace

// One run of the workload, from its checkpoint on, with the reference in Ref: the reference
// trains in its own thread; the low-precision runs go ahead and keep their records in a
// bounded queue (`pending`) until the reference has reached the same step.
template <class Ref>
class MlpRun {
 public:
  MlpRun(const MlpRunSpec& spec, const MlpRunControl& ctl, const CheckpointMark& mark, MlpTrace& trace,
         std::optional<RowJournal>& journal, MlpState<Ref>& ref, RunProgress& progress)
      : spec_(spec), ctl_(ctl), mark_(mark), model_(spec.model), L_(static_cast<int>(spec.model.widths.size() - 1)),
        R_(spec.recipes.size()), trace_(trace), journal_(journal), ref_(ref), start_(mark.step), progress_(progress) {}
  ~MlpRun() { stop_reference(); }
  MlpRun(const MlpRun&) = delete;
  MlpRun& operator=(const MlpRun&) = delete;

  MlpRunOutcome run(std::vector<MlpState<float>>& lp, MlpRunSummary* summary) {
    // The states the trace keeps at the end (mlp/checkpoint): the last checkpoint's.
    if (start_ == spec_.steps) final_states_.emplace(ref_, lp);
    if (ctl_.resume) {
      trace_.set_status("running");
      trace_.set_resumed_at(start_);
    }
    trace_.sync();
    start_reference();
    make_trainers(lp);
    lp.clear();
    choose_concurrency();
    trace_.start_swmr_write();  // every attribute of the run is set: readers may open it from here
    for (std::int64_t s = start_; s < spec_.steps; ++s) {
      if (ctl_.stop && ctl_.stop->load()) return stop(s);
      progress_.stepped = true;
      pending_.push_back(step_all_runs(s));
      drain(pending_.size() > static_cast<std::size_t>(spec_.queue), s - spec_.queue);
    }
    finish(summary);
    return MlpRunOutcome::Complete;
  }

 private:
  bool is_compare(std::int64_t s) const { return (s + 1) % spec_.compare_every == 0 || s + 1 == spec_.steps; }
  bool is_flush(std::int64_t s) const { return (s + 1) % spec_.flush_every == 0 || s + 1 == spec_.steps; }
  bool is_record(std::int64_t s) const { return s % spec_.trace_every == 0 || s + 1 == spec_.steps; }

  // The reference's own error at compare steps (check_precision): one step redone wider.
  void choose_reference_check() {
    if (!spec_.check_precision) return;
    dispatch_mlp_precision(*spec_.check_precision, [&](auto c) {
      using C = decltype(c);
      if constexpr (std::numeric_limits<C>::digits > std::numeric_limits<Ref>::digits)
        check_ = [this](const MlpState<Ref>& b, const MlpState<Ref>& a, double loss) {
          return check_reference_step<Ref, C>(model_, b, a, loss);
        };
      else
        throw std::invalid_argument("mlp: check_precision must be wider than the reference's precision");
    });
  }

  // The reference trains in its own thread and publishes to feed_.
  void start_reference() {
    choose_reference_check();
    reference_ = std::thread([this] {
      if (!spec_.reference_enabled) return;
      try {
        for (std::int64_t s = start_; s < spec_.steps; ++s) {
          {
            std::lock_guard<std::mutex> lk(feed_.mu);
            if (feed_.stop) return;
          }
          reference_step(s);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lk(feed_.mu);
        feed_.error = std::current_exception();
        feed_.cv.notify_all();
      }
    });
  }

  void reference_step(std::int64_t s) {
    std::optional<MlpState<Ref>> before;
    if (check_ && is_compare(s)) before = ref_;
    const StepStats st = train_step<Ref>(model_, ref_, nullptr);
    std::optional<ReferenceCheck> checked;
    if (before) checked = check_(*before, ref_, st.loss);
    std::lock_guard<std::mutex> lk(feed_.mu);
    feed_.loss[s] = st.loss;
    if (checked) feed_.checks[s] = std::move(*checked);
    if (is_compare(s)) {
      Weights w(ref_.w.size());
      for (std::size_t l = 0; l < w.size(); ++l)
        for (const Ref& x : ref_.w[l]) w[l].push_back(mlp_to_double(x));  // RNE: W_Ref to double's 1e-16 (the comparison's scale is the low-precision error)
      feed_.weights[s] = std::move(w);
    }
    if (is_flush(s)) feed_.checkpoints[s] = ref_;
    feed_.done = s + 1;
    feed_.cv.notify_all();
  }

  void stop_reference() {
    {
      std::lock_guard<std::mutex> lk(feed_.mu);
      feed_.stop = true;
    }
    if (reference_.joinable()) reference_.join();
  }

  // The runs (one trainer per recipe, on the backend) and, on the host, the recipes' GEMMs for
  // the local-error probe. Device runs take their batches from workers that make them ahead
  // (the reference thread makes its own); make_batch is pure, so these are the same batches.
  void make_trainers(const std::vector<MlpState<float>>& lp) {
    bool need_batch = false;
    for (std::size_t r = 0; r < R_; ++r) {
      RecipeGemmOptions o{spec_.recipes[r], spec_.edge_recipe, spec_.high_precision_layers, model_.seed, ctl_.product};
      o.accumulator = spec_.accumulator;
      gemms_.push_back(std::make_unique<RecipeGemm>(o, L_));
      trainers_.push_back(ctl_.trainer ? ctl_.trainer(model_, o, lp[r]) : make_cpu_trainer(model_, o, lp[r]));
      need_batch = need_batch || trainers_.back()->needs_batch();
      trace_.set_gemm_path(r, trainers_.back()->path());
    }
    if (need_batch) {
      const int hw = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
      prefetch_.emplace(model_, start_, spec_.steps, std::clamp(hw - 2, 1, 8), 32);
    }
  }

  // Side by side on host threads, or in sequence (MlpRunControl::concurrent_runs). While the
  // runs step side by side, each one's OpenMP teams get a share of the cores (the host
  // statistics of device runs; the whole step of CPU runs).
  void choose_concurrency() {
    bool can = true, prefer = true;
    std::string cannot;
    for (std::size_t r = 0; r < R_; ++r) {
      if (!trainers_[r]->can_step_concurrently()) {
        can = false;
        if (cannot.empty()) cannot = spec_.recipes[r] + " (" + trainers_[r]->path() + ")";
      }
      prefer = prefer && trainers_[r]->prefers_concurrent_steps();
    }
    const bool concurrent = R_ > 1 && can && ctl_.concurrent_runs.value_or(prefer);
    if (R_ > 1 && ctl_.concurrent_runs.value_or(false) && !can && ctl_.note)
      ctl_.note("concurrent runs asked for, but run " + cannot + " shares its backend's GEMM workspace: stepping the runs in sequence");
    trace_.set_concurrent_runs(concurrent);
    if (concurrent) team_.emplace(R_);
    omp_share_ = std::max(1, omp_get_max_threads() / static_cast<int>(R_));
  }

  // Step s of every run; the record keeps what the trace wants of it.
  Record step_all_runs(std::int64_t s) {
    Record rec;
    rec.step = s;
    const bool recorded = is_record(s);
    std::optional<Batch> batch;
    if (prefetch_) batch = prefetch_->take(s);
    std::vector<StepStats> st(R_);
    rec.ops.resize(R_);
    const auto step_run = [&](std::size_t r) {
      if (team_ && r > 0) omp_set_num_threads(omp_share_);  // a worker thread's own count
      st[r] = trainers_[r]->step(batch ? &*batch : nullptr, recorded ? &rec.ops[r] : nullptr);
    };
    if (team_) {
      const OmpThreads share(omp_share_);  // the calling thread gets its own count back after the round
      team_->run(step_run);
    } else {
      // Every run's step begun before any is waited for: device runs overlap on the GPU
      // from this one thread (a CPU run does its whole step in begin_step).
      for (std::size_t r = 0; r < R_; ++r) trainers_[r]->begin_step(batch ? &*batch : nullptr, recorded ? &rec.ops[r] : nullptr);
      for (std::size_t r = 0; r < R_; ++r) st[r] = trainers_[r]->end_step();
    }
    for (std::size_t r = 0; r < R_; ++r) {
      rec.loss.push_back(st[r].loss);
      rec.lost.push_back(std::move(st[r].lost_update_fraction));
    }
    const bool compare = spec_.reference_enabled && is_compare(s), flush = is_flush(s);
    std::vector<MlpState<float>> states;
    if (compare || flush)
      for (std::size_t r = 0; r < R_; ++r) states.push_back(trainers_[r]->state());
    if (compare) probe(rec, states);
    if (flush) rec.checkpoint = std::move(states);
    return rec;
  }

  // A compare step: every run's weights, and the local-error probe at them.
  void probe(Record& rec, const std::vector<MlpState<float>>& states) {
    rec.weights.emplace();
    rec.grad_cosine.emplace(R_);
    rec.grad_error.emplace(R_);
    rec.grad_bias.emplace(R_);
    for (std::size_t r = 0; r < R_; ++r) {
      rec.weights->push_back(states[r].w);
      local_error(model_, states[r].w, rec.step + 1, gemms_[r]->fn(),
                  gemms_[r]->uses_sr() ? static_cast<int>(spec_.probe_draws) : 1, &(*rec.grad_cosine)[r],
                  &(*rec.grad_error)[r], &(*rec.grad_bias)[r]);
    }
  }

  // What the reference published for rec's step (called with feed_.mu held, once it has).
  // Without a reference: NaN losses (so NaN gaps), no compares, the initial reference state
  // in the checkpoint.
  ReferenceSide<Ref> take_reference_side(const Record& rec) {
    ReferenceSide<Ref> side;
    side.loss = spec_.reference_enabled ? feed_.loss.at(rec.step) : std::nan("");
    feed_.loss.erase(rec.step);
    if (rec.weights) {
      side.weights = std::move(feed_.weights.at(rec.step));
      feed_.weights.erase(rec.step);
    }
    if (rec.weights && check_) {
      side.check = std::move(feed_.checks.at(rec.step));
      feed_.checks.erase(rec.step);
    }
    if (rec.checkpoint) {
      if (spec_.reference_enabled) {
        side.checkpoint = std::move(feed_.checkpoints.at(rec.step));
        feed_.checkpoints.erase(rec.step);
      } else {
        side.checkpoint = ref_;
      }
    }
    return side;
  }

  // Stages the records the reference has caught up with (written at the next checkpoint);
  // with wait, blocks until `upto`.
  void drain(bool wait, std::int64_t upto) {
    std::unique_lock<std::mutex> lk(feed_.mu);
    while (!pending_.empty()) {
      Record& rec = pending_.front();
      if (feed_.error) std::rethrow_exception(feed_.error);
      if (spec_.reference_enabled && feed_.done <= rec.step) {
        if (!wait || rec.step > upto) return;
        feed_.cv.wait(lk, [&] { return feed_.done > rec.step || feed_.error; });
        continue;
      }
      ReferenceSide<Ref> side = take_reference_side(rec);
      lk.unlock();
      if (is_record(rec.step)) trace_.stage(record_row(rec, side.loss));
      if (rec.weights) trace_.stage(compare_row(rec, *side.weights, side.check));
      if (rec.checkpoint) checkpoint(rec.step + 1, *side.checkpoint, *rec.checkpoint);
      if (ctl_.progress) ctl_.progress(rec.step + 1, spec_.steps);
      pending_.pop_front();
      lk.lock();
    }
  }

  MlpRecordRow record_row(const Record& rec, double ref_loss) const {
    MlpRecordRow row;
    row.step = rec.step;
    row.reference_loss = ref_loss;
    for (std::size_t r = 0; r < R_; ++r)
      row.runs.push_back({rec.loss[r], ref_loss != 0 ? (rec.loss[r] - ref_loss) / ref_loss : 0.0, rec.lost[r], rec.ops[r]});
    return row;
  }

  MlpCompareRow compare_row(const Record& rec, const Weights& ref_w, const std::optional<ReferenceCheck>& check) const {
    MlpCompareRow row;
    row.step = rec.step;
    for (std::size_t r = 0; r < R_; ++r) {
      std::vector<double> e(static_cast<std::size_t>(L_));
      for (std::size_t l = 0; l < e.size(); ++l) e[l] = rel_error((*rec.weights)[r][l], ref_w[l]);
      row.runs.push_back({std::move(e), (*rec.grad_cosine)[r], (*rec.grad_error)[r], (*rec.grad_bias)[r]});
    }
    if (check) {
      row.check_weight_rel_error = check->weight_rel_error;
      row.check_loss_rel_error = check->loss_rel_error;
    }
    return row;
  }

  // A flush point: the rows first, durable (trace and journal); then the checkpoint that
  // counts them.
  void checkpoint(std::int64_t step, MlpState<Ref>& ref_state, std::vector<MlpState<float>>& states) {
    const CheckpointMark m = commit_durably(trace_, *journal_, mark_, step);
    write_checkpoint(ctl_.path, m, ref_state, states);
    progress_.durable_step = m.step;
    if (m.step == spec_.steps) final_states_.emplace(std::move(ref_state), std::move(states));
  }

  // SIGINT/SIGTERM: every record up to the stop reaches the trace (a resume drops those after
  // the checkpoint).
  MlpRunOutcome stop(std::int64_t s) {
    drain(false, s);
    mark_interrupted(trace_, *journal_);
    return MlpRunOutcome::Interrupted;
  }

  // The end: every record staged and committed, the final attributes and states, status
  // complete; the checkpoint and the journal are not needed any more.
  void finish(MlpRunSummary* summary) {
    drain(true, spec_.steps);
    trace_.commit(*journal_);
    if (!final_states_) throw std::logic_error("mlp run: no checkpoint at the last step");
    const MlpRunSummary s = trace_.finish(final_states_->first, final_states_->second);
    journal_.reset();
    remove_resume_files(ctl_.path);
    if (summary) *summary = s;
  }

  const MlpRunSpec& spec_;
  const MlpRunControl& ctl_;
  const CheckpointMark& mark_;  // the checkpoint the run started from
  const MlpSpec& model_;
  const int L_;
  const std::size_t R_;
  MlpTrace& trace_;
  std::optional<RowJournal>& journal_;
  MlpState<Ref>& ref_;  // the reference's state, stepped by its thread
  const std::int64_t start_;
  RunProgress& progress_;
  ReferenceFeed<Ref> feed_;
  std::function<ReferenceCheck(const MlpState<Ref>&, const MlpState<Ref>&, double)> check_;
  std::vector<std::unique_ptr<RecipeGemm>> gemms_;
  std::vector<std::unique_ptr<LowPrecisionTrainer>> trainers_;
  std::optional<BatchPrefetcher> prefetch_;
  std::optional<ParallelRuns> team_;
  int omp_share_ = 1;
  std::deque<Record> pending_;
  std::optional<std::pair<MlpState<Ref>, std::vector<MlpState<float>>>> final_states_;
  std::thread reference_;  // last: joined (the destructor) before anything it uses goes
};

// The run with the reference in Ref: its files made or found, the trace verified against the
// checkpoint, then stepped to the end or a stop.
template <class Ref>
MlpRunOutcome run_mlp_in(const MlpRunSpec& spec, const MlpRunControl& ctl, MlpRunSummary* summary) {
  std::vector<MlpState<float>> lp(spec.recipes.size(), init_state<float>(spec.model));  // the runs' starting states
  MlpState<Ref> ref = init_state<Ref>(spec.model);
  if (!ctl.resume) create_mlp_run_files(spec, ctl, ref, lp);
  else if (MlpTrace::is_complete(ctl.path))  // nothing to resume (throw_complete removes a kill's leftovers)
    throw_complete(ctl.path);
  // Fresh or resumed, the run starts from its checkpoint.
  const CheckpointMark mark = read_checkpoint(ctl.path, ctl.config_text, ref, lp);
  std::optional<RowJournal> journal;
  journal.emplace(reopen_journal(ctl.path, mark));
  MlpTrace trace = open_verified_trace<MlpTrace>(
      ctl.path, mark, [&] { return MlpTrace::open(spec, ctl); }, [&] { MlpTrace::rebuild(spec, ctl, mark, *journal); },
      ctl.note);
  const std::int64_t start = mark.step;
  if (start < 0 || start > spec.steps)
    throw ResumeRefused("its checkpoint is at step " + std::to_string(start) + ", outside the run's " +
                        std::to_string(spec.steps) + " steps");
  ref.step = start;
  for (auto& s : lp) s.step = start;
  RunProgress progress{start, false};
  return run_guarded(trace, ctl.path, ctl.resume, progress, [&] {
    MlpRun<Ref> run(spec, ctl, mark, trace, journal, ref, progress);
    return run.run(lp, summary);
  });
}

MlpRunOutcome run_mlp(const MlpRunSpec& spec, const MlpRunControl& ctl, MlpRunSummary* summary) {
  // swiglu, rmsnorm and residual connections exist in the CPU training step only: a device
  // backend must bring a trainer factory that knows what to do with them (the CUDA one runs
  // them with host quantization and its GEMMs); without one they are refused.
  const MlpSpec& model = spec.model;
  if (ctl.backend_is_device && !ctl.trainer &&
      (model.activation == Activation::Swiglu || model.norm != Norm::None || model.residual))
    throw std::invalid_argument("mlp: activation = \"swiglu\", norm = \"rmsnorm\" and residual = true run on "
                                "--backend cpu only (the " + ctl.backend + " backend's training step does not have them yet)");
  try {
    return dispatch_mlp_precision(spec.reference_precision,
                                  [&](auto r) { return run_mlp_in<decltype(r)>(spec, ctl, summary); });
  } catch (const ResumeRefused& e) {  // one line that says what was refused and what to do
    rethrow_resume_refused(ctl.path, e);
  }
}

}  // namespace fp4d
