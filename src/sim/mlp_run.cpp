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
#include "sim/parallel_runs.hpp"
#include "trace/h5.hpp"
#include "trace/output_file.hpp"
#include "trace/row_journal.hpp"
#include "trace/tensor_io.hpp"
#include "util/checked_size.hpp"
#include "util/digest.hpp"

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

  r.recipes = cfg.get_strings("recipes.names", r.recipes);
  cfg.require(!r.recipes.empty(), "recipes.names", "needs at least one recipe");
  for (std::size_t i = 0; i < r.recipes.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      cfg.require(r.recipes[i] != r.recipes[j], "recipes.names", "lists '" + r.recipes[i] + "' twice");
  r.edge_recipe = cfg.get_string("recipes.edge_recipe", r.edge_recipe);
  try {
    (void)gemm_recipe(r.edge_recipe);  // as RecipeGemm reads it (else blamed on recipes.names below)
  } catch (const std::invalid_argument& e) {
    cfg.require(false, "recipes.edge_recipe", e.what());
  }
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
  r.reference_enabled = cfg.get_bool("reference.enabled", r.reference_enabled);
  r.compare_every = cfg.get_int("reference.compare_every", r.compare_every);
  cfg.require(r.compare_every >= 1, "reference.compare_every", "must be >= 1");
  r.probe_draws = cfg.get_int("reference.probe_draws", r.probe_draws);
  cfg.require(r.probe_draws >= 1 && r.probe_draws <= 1024, "reference.probe_draws", "must be in [1, 1024]");
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
  r.trace_every = cfg.get_int("trace.every", r.trace_every);
  cfg.require(r.trace_every >= 1, "trace.every", "must be >= 1");
  r.flush_every = cfg.get_int("trace.flush_every", r.flush_every);
  cfg.require(r.flush_every >= 1, "trace.flush_every", "must be >= 1");
  return r;
}

// ---- the run --------------------------------------------------------------------------------

namespace {

using Weights = std::vector<std::vector<double>>;

double rel_error(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

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
  std::vector<std::vector<double>> mean(w.size());
  for (std::size_t l = 0; l < w.size(); ++l) mean[l].assign(gq[l].begin(), gq[l].end());
  for (int d = 1; d < draws; ++d) {
    const GemmFn other = [&, d](const GemmCall& c, const Matrix& a, const Matrix& b) {
      GemmCall moved = c;
      moved.step = c.step + (static_cast<std::int64_t>(d) << 40);  // only the SR seed depends on it
      return gemm(moved, a, b);
    };
    std::vector<std::vector<float>> gd;
    loss_and_gradients<float>(model, w, batch, other, &gd);
    for (std::size_t l = 0; l < w.size(); ++l)
      for (std::size_t i = 0; i < gd[l].size(); ++i) mean[l][i] += gd[l][i];
  }
  cosine->assign(w.size(), 0.0);
  rel->assign(w.size(), 0.0);
  bias->assign(w.size(), 0.0);
  for (std::size_t l = 0; l < w.size(); ++l) {
    double nb = 0, ne = 0;
    for (std::size_t i = 0; i < g[l].size(); ++i) {
      const double m = mean[l][i] / draws - g[l][i];
      nb += m * m, ne += g[l][i] * g[l][i];
    }
    (*bias)[l] = ne > 0 ? std::sqrt(nb / ne) : std::sqrt(nb);
  }
  for (std::size_t l = 0; l < w.size(); ++l) {
    double dot = 0, nq = 0, ne = 0, nd = 0;
    for (std::size_t i = 0; i < g[l].size(); ++i) {
      const double q = gq[l][i], e = g[l][i];
      dot += q * e, nq += q * q, ne += e * e, nd += (q - e) * (q - e);
    }
    (*cosine)[l] = nq > 0 && ne > 0 ? dot / std::sqrt(nq * ne) : 0.0;
    (*rel)[l] = ne > 0 ? std::sqrt(nd / ne) : std::sqrt(nd);
  }
}

// Rows reach the trace file only at flush points: between flushes the file is not touched, so
// a process killed outright (SIGKILL, a lost node) leaves it exactly as at its last flush -
// readable, and resumable from its checkpoint. (An HDF5 1.10 file being written is not
// crash-safe: appending record by record, a kill mid-way left chunks that failed to inflate.)
class StagedRows {
 public:
  template <class T>
  void add(h5::Appendable<T>& ds, const std::vector<T>& row) {
    auto& v = buffer<T>()[&ds];
    v.insert(v.end(), row.begin(), row.end());
  }
  // Appends the staged rows to the trace and to the journal (when there is one).
  void commit(RowJournal* journal) {
    const auto put = [&](auto& buffers) {
      for (auto& [ds, v] : buffers) {
        if (v.empty()) continue;
        ds->append(v);
        if (journal) journal->append(ds->path(), v);
        digests_.try_emplace(ds->path()).first->second.add(v);
        v.clear();
      }
    };
    put(d_);
    put(i_);
  }
  // The running digest of every row committed so far, per dataset path: a checkpoint stores
  // them, and a resume must find the same rows in the trace or refuse it.
  std::map<std::string, Fnv1a64>& digests() { return digests_; }

 private:
  std::map<std::string, Fnv1a64> digests_;
  template <class T>
  std::map<h5::Appendable<T>*, std::vector<T>>& buffer() {
    if constexpr (std::is_same_v<T, double>) return d_;
    else return i_;
  }
  std::map<h5::Appendable<double>*, std::vector<double>> d_;
  std::map<h5::Appendable<std::int64_t>*, std::vector<std::int64_t>> i_;
};

// The trace's datasets.
struct Trace {
  h5::File file;
  h5::Appendable<std::int64_t> step, compare_step;
  h5::Appendable<double> ref_loss;
  struct Run {
    h5::Appendable<double> loss, gap, lost, nmse, clipped, underflow, zero_scales, weight_error, grad_cosine, grad_error,
        grad_bias;
  };
  std::vector<Run> runs;
  h5::Appendable<double> check_weight, check_loss;  // with check_precision: [C, L], [C]
};

// Every appendable of the trace with the count its rows follow: true = records (one row per
// recorded step), false = compares (one row per weight comparison).
template <class F>
void for_each_dataset(Trace& t, F f) {
  f(t.step, true);
  f(t.ref_loss, true);
  f(t.compare_step, false);
  for (Trace::Run& r : t.runs) {
    for (auto* a : {&r.loss, &r.gap, &r.lost, &r.nmse, &r.clipped, &r.underflow, &r.zero_scales}) f(*a, true);
    for (auto* a : {&r.weight_error, &r.grad_cosine, &r.grad_error, &r.grad_bias}) f(*a, false);
  }
  if (t.check_weight.valid()) {
    f(t.check_weight, false);
    f(t.check_loss, false);
  }
}

std::string run_group(const std::string& recipe) { return "mlp/runs/" + recipe; }

// float and double as themselves; a wider reference scalar as limbs<T>() doubles per value
// ([n, K], exact: sim/mlp_precision.hpp).
// The digest, when given, runs over the values exactly as stored.
template <class T>
void write_state(h5::Group g, const std::string& prefix, const std::vector<std::vector<T>>& v, Fnv1a64* digest) {
  const h5::WriteOptions replace{false, true};
  for (std::size_t l = 0; l < v.size(); ++l) {
    const std::string name = prefix + "_" + std::to_string(l);
    if constexpr (std::is_floating_point_v<T>) {
      g.write(name, v[l], h5::Dims{v[l].size()}, replace);
      if (digest) digest->add(v[l]);
    } else {
      const std::vector<double> d = to_limbs(v[l], "checkpoint " + name);
      g.write(name, d, h5::Dims{v[l].size(), static_cast<std::uint64_t>(limbs<T>())}, replace);
      if (digest) digest->add(d);
    }
  }
}
template <class T>
std::vector<T> read_state(h5::Group g, const std::string& name, Fnv1a64* digest) {
  if constexpr (std::is_floating_point_v<T>) {
    std::vector<T> v = g.read<T>(name);
    if (digest) digest->add(v);
    return v;
  } else {
    const std::vector<double> d = g.read<double>(name);
    if (digest) digest->add(d);
    return from_limbs<T>(d, "checkpoint " + name);
  }
}
template <class T>
void write_mlp_state(h5::Group g, const std::string& prefix, const MlpState<T>& s, Fnv1a64* digest = nullptr) {
  write_state(g, prefix + "_w", s.w, digest);
  write_state(g, prefix + "_m1", s.m1, digest);
  if (!s.m2.empty()) write_state(g, prefix + "_m2", s.m2, digest);
}
template <class T>
void read_mlp_state(h5::Group g, const std::string& prefix, MlpState<T>& s, Fnv1a64* digest) {
  const auto read = [&](const std::string& name, std::vector<T>& into) {
    std::vector<T> v = read_state<T>(g, name, digest);
    if (v.size() != into.size())
      throw std::invalid_argument(name + " holds " + std::to_string(v.size()) + " values, the model needs " +
                                  std::to_string(into.size()));
    into = std::move(v);
  };
  // In write_mlp_state's order, which the digest follows.
  for (std::size_t l = 0; l < s.w.size(); ++l) read(prefix + "_w_" + std::to_string(l), s.w[l]);
  for (std::size_t l = 0; l < s.m1.size(); ++l) read(prefix + "_m1_" + std::to_string(l), s.m1[l]);
  for (std::size_t l = 0; l < s.m2.size(); ++l) read(prefix + "_m2_" + std::to_string(l), s.m2[l]);
}

// ---- the checkpoint ---------------------------------------------------------------------
// A checkpoint lives in a file of its own beside the trace, OUT.ckpt, replaced whole at every
// flush: written as OUT.ckpt.partial, fsynced, renamed over the old one (atomic on POSIX), the
// directory fsynced. A process killed at any instant therefore leaves the previous checkpoint
// or the new one, never a mix. (HDF5 1.10 rewrites a file in place, so a checkpoint kept
// inside the trace could be torn by a kill during a flush and still read as valid.)
// The rows are synced - in the trace and in its journal OUT.rows (trace/row_journal.hpp) -
// before the checkpoint that counts them is written, and the checkpoint carries what a resume
// must find again: the run id, the config's digest, the step, the row counts, a digest of
// every dataset's rows up to them, the journal's length and digest, and a digest of its own
// states. A resume whose trace does not hold those rows rebuilds it from the journal.

// Raised when a trace cannot be proven consistent with its checkpoint: nothing is changed.
struct ResumeRefused : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

std::string checkpoint_path(const std::string& trace) { return trace + ".ckpt"; }
std::string journal_path(const std::string& trace) { return trace + ".rows"; }

struct CheckpointMark {
  std::string run_id;
  std::uint64_t config_digest = 0;
  std::int64_t step = 0;
  std::uint64_t records = 0, compares = 0;
  std::map<std::string, std::uint64_t> digests;  // dataset path -> digest of its rows
  std::uint64_t journal_length = 0, journal_digest = 0;
};

std::uint64_t text_digest(const std::string& text) {
  Fnv1a64 d;
  d.add(text.data(), text.size());
  return d.value();
}

void sync_directory_of(const std::string& path) {
  const auto dir = std::filesystem::path(path).parent_path();
  h5::File::sync_directory(dir.empty() ? "." : dir.string());
}

template <class Ref>
void write_checkpoint(const std::string& trace_path, const CheckpointMark& m, const MlpState<Ref>& ref,
                      const std::vector<MlpState<float>>& runs) {
  h5::AtomicOutput out(checkpoint_path(trace_path));
  h5::File f = h5::File::create(out.temp_path());
  h5::Group g = f.root();
  Fnv1a64 states;
  write_mlp_state(g, "reference", ref, &states);
  for (std::size_t r = 0; r < runs.size(); ++r) write_mlp_state(g, "run_" + std::to_string(r), runs[r], &states);
  g.set_attr("schema", std::string("fp4drift.checkpoint"));
  g.set_attr("run_id", m.run_id);
  g.set_attr("config_digest", m.config_digest);
  g.set_attr("journal_length", m.journal_length);
  g.set_attr("journal_digest", m.journal_digest);
  g.set_attr("step", m.step);
  g.set_attr("records", m.records);
  g.set_attr("compares", m.compares);
  std::string names;
  std::vector<std::int64_t> values;
  for (const auto& [name, d] : m.digests) {
    names += (names.empty() ? "" : ",") + name;
    values.push_back(static_cast<std::int64_t>(d));
  }
  g.set_attr("record_datasets", names);
  if (!values.empty()) g.set_attr("record_digests", values);
  g.set_attr("state_digest", states.value());
  out.commit(f);
}

// Reads the checkpoint into ref and runs (their shapes given by the model), or refuses.
template <class Ref>
CheckpointMark read_checkpoint(const std::string& trace_path, const std::string& config_text, MlpState<Ref>& ref,
                               std::vector<MlpState<float>>& runs) {
  const std::string p = checkpoint_path(trace_path);
  if (!std::filesystem::exists(p)) throw ResumeRefused("its checkpoint " + p + " is missing");
  CheckpointMark m;
  try {
    h5::File f = h5::File::open_read(p);
    h5::Group g = f.root();
    if (g.get_attr_string("schema") != "fp4drift.checkpoint") throw ResumeRefused(p + " is not an fp4drift checkpoint");
    m.config_digest = g.get_attr_uint64("config_digest");
    if (m.config_digest != text_digest(config_text))
      throw std::invalid_argument("--resume: the config differs from the one " + trace_path +
                                  " was started with (resuming would not continue the same run)");
    m.run_id = g.get_attr_string("run_id");
    m.journal_length = g.get_attr_uint64("journal_length");
    m.journal_digest = g.get_attr_uint64("journal_digest");
    Fnv1a64 states;
    read_mlp_state(g, "reference", ref, &states);
    for (std::size_t r = 0; r < runs.size(); ++r) read_mlp_state(g, "run_" + std::to_string(r), runs[r], &states);
    if (states.value() != g.get_attr_uint64("state_digest")) throw ResumeRefused("the states in " + p + " fail their checksum");
    m.step = g.get_attr_int64("step");
    m.records = g.get_attr_uint64("records");
    m.compares = g.get_attr_uint64("compares");
    const std::string names = g.get_attr_string("record_datasets");
    const std::vector<std::int64_t> values = g.has_attr("record_digests") ? g.get_attr_int64_vector("record_digests") : std::vector<std::int64_t>{};
    std::size_t i = 0;
    for (std::size_t b = 0; b < names.size(); ++i) {
      const std::size_t e = std::min(names.find(',', b), names.size());
      if (i >= values.size()) throw ResumeRefused(p + " lists more datasets than digests");
      m.digests[names.substr(b, e - b)] = static_cast<std::uint64_t>(values[i]);
      b = e + 1;
    }
    if (i != values.size()) throw ResumeRefused(p + " lists fewer datasets than digests");
  } catch (const std::invalid_argument&) {  // ResumeRefused, or the config
    throw;
  } catch (const std::exception& e) {  // unreadable, a missing dataset or attribute, a wrong shape
    throw ResumeRefused("its checkpoint cannot be read (" + std::string(e.what()) + ")");
  }
  return m;
}

// Checks that every dataset of the trace holds at least the checkpoint's rows and that they
// are the rows the checkpoint's digests were taken of; then drops the rows after them (a run
// stopped after its checkpoint recorded further steps). Refuses, changing nothing, otherwise.
void verify_and_truncate(Trace& t, const CheckpointMark& m, std::map<std::string, Fnv1a64>& digests) {
  try {
    for_each_dataset(t, [&](auto& ds, bool by_records) {
      using T = typename std::remove_reference_t<decltype(ds)>::value_type;
      const std::uint64_t want = by_records ? m.records : m.compares;
      if (want == 0) return;
      const std::uint64_t have = ds.rows();
      if (have < want)
        throw ResumeRefused(ds.path() + " has " + std::to_string(have) + " rows, its checkpoint counts " + std::to_string(want));
      const auto it = m.digests.find(ds.path());
      if (it == m.digests.end()) throw ResumeRefused("the checkpoint has no digest of " + ds.path());
      std::vector<T> rows = ds.template read<T>();
      rows.resize(want * ds.row_elements());
      Fnv1a64 d;
      d.add(rows);
      if (d.value() != it->second)
        throw ResumeRefused("the rows of " + ds.path() + " are not those its checkpoint recorded");
    });
  } catch (const ResumeRefused&) {
    throw;
  } catch (const std::exception& e) {  // a chunk that fails its Fletcher32 checksum or to inflate
    throw ResumeRefused("the trace cannot be read back (" + std::string(e.what()) + ")");
  }
  for (const auto& [name, d] : m.digests) digests.emplace(name, Fnv1a64(d));
  for_each_dataset(t, [&](auto& ds, bool by_records) { ds.truncate(by_records ? m.records : m.compares); });
}

void remove_run_files(const std::string& trace, std::initializer_list<const char*> suffixes) {
  std::error_code ec;
  for (const char* s : suffixes) std::filesystem::remove(trace + s, ec);
}

std::string new_run_id() {
  std::random_device rd;
  const std::uint64_t id = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

// Creates the trace's datasets, empty, in `path` (the caller's OUT.partial).
Trace create_trace(const MlpRunSpec& spec, const MlpRunControl& ctl, const std::string& path, const std::string& run_id) {
  const auto parent = std::filesystem::path(ctl.path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw std::invalid_argument("output directory '" + parent.string() + "' does not exist");
  Trace t{h5::File::create(path), {}, {}, {}, {}, {}, {}};
  h5::Group root = t.file.root();
  write_provenance(root, "fp4drift.run", 1, ctl.command_line);
  root.set_attr("backend", ctl.backend);
  root.set_attr("status", std::string("running"));
  root.set_attr("run_id", run_id);
  root.set_attr("workload", std::string("mlp"));
  root.set_attr("config", ctl.config_text);
  root.set_attr("config_source", ctl.config_source);
  h5::Group m = root.require_group("mlp");
  m.set_attr("widths", spec.model.widths);
  m.set_attr("steps", spec.steps);
  std::string names;
  for (const std::string& r : spec.recipes) names += (names.empty() ? "" : ",") + r;
  m.set_attr("recipes", names);
  m.set_attr("compare_every", spec.compare_every);
  m.set_attr("trace_every", spec.trace_every);
  m.set_attr("reference_precision", to_string(spec.reference_precision));
  m.set_attr("reference_enabled", std::int64_t{spec.reference_enabled ? 1 : 0});
  m.set_attr("check_precision", spec.check_precision ? to_string(*spec.check_precision) : std::string("none"));
  m.set_attr("activation", to_string(spec.model.activation));
  m.set_attr("norm", to_string(spec.model.norm));
  m.set_attr("norm_eps", spec.model.norm_eps);
  m.set_attr("residual", spec.model.residual);
  m.set_attr("operand_slots", std::string("layer * 6 + role * 2 + operand; role fprop 0, dgrad 1, wgrad 2; "
                                          "operand 0 = first (X, dY, X^T), 1 = second (W, W^T, dY^T)"));
  const auto L = static_cast<std::uint64_t>(spec.model.widths.size() - 1);
  t.step = root.create_appendable<std::int64_t>("mlp/step", {});
  t.compare_step = root.create_appendable<std::int64_t>("mlp/compare_step", {});
  t.ref_loss = root.create_appendable<double>("mlp/reference/loss", {});
  for (const std::string& r : spec.recipes) {
    const std::string g = run_group(r);
    Trace::Run run{root.create_appendable<double>(g + "/loss", {}),
                   root.create_appendable<double>(g + "/rel_loss_gap", {}),
                   root.create_appendable<double>(g + "/lost_update_fraction", {L}),
                   root.create_appendable<double>(g + "/operand_nmse", {L * 6}),
                   root.create_appendable<double>(g + "/operand_clipped_fraction", {L * 6}),
                   root.create_appendable<double>(g + "/operand_underflow_fraction", {L * 6}),
                   root.create_appendable<double>(g + "/operand_zero_scale_fraction", {L * 6}),
                   root.create_appendable<double>(g + "/weight_rel_error", {L}),
                   root.create_appendable<double>(g + "/grad_cosine", {L}),
                   root.create_appendable<double>(g + "/grad_rel_error", {L}),
                   root.create_appendable<double>(g + "/grad_sr_mean_rel_error", {L})};
    t.runs.push_back(run);
  }
  if (spec.check_precision) {
    t.check_weight = root.create_appendable<double>("mlp/reference/check_weight_rel_error", {L});
    t.check_loss = root.create_appendable<double>("mlp/reference/check_loss_rel_error", {});
  }
  return t;
}

Trace open_trace(const MlpRunSpec& spec, const MlpRunControl& ctl) {
  Trace t{h5::File::open_rw(ctl.path), {}, {}, {}, {}, {}, {}};
  h5::Group root = t.file.root();
  if (root.get_attr_string("schema") != "fp4drift.run" || root.get_attr_string("workload") != "mlp")
    throw std::invalid_argument("--resume: " + ctl.path + " is not an fp4drift mlp run trace");
  if (root.get_attr_string("config") != ctl.config_text)
    throw std::invalid_argument("--resume: the config differs from the one " + ctl.path +
                                " was started with (resuming would not continue the same run)");
  if (root.get_attr_string("status") == "complete") throw std::invalid_argument("--resume: " + ctl.path + " is complete");
  if (!root.has_attr("run_id"))
    throw std::invalid_argument("--resume: " + ctl.path + " has no run id (it was written by an fp4drift whose "
                                "checkpoints could not be verified): start it again");
  t.step = root.open_appendable<std::int64_t>("mlp/step");
  t.compare_step = root.open_appendable<std::int64_t>("mlp/compare_step");
  t.ref_loss = root.open_appendable<double>("mlp/reference/loss");
  for (const std::string& r : spec.recipes) {
    const std::string g = run_group(r);
    t.runs.push_back(Trace::Run{root.open_appendable<double>(g + "/loss"), root.open_appendable<double>(g + "/rel_loss_gap"),
                                root.open_appendable<double>(g + "/lost_update_fraction"),
                                root.open_appendable<double>(g + "/operand_nmse"),
                                root.open_appendable<double>(g + "/operand_clipped_fraction"),
                                root.open_appendable<double>(g + "/operand_underflow_fraction"),
                                root.open_appendable<double>(g + "/operand_zero_scale_fraction"),
                                root.open_appendable<double>(g + "/weight_rel_error"),
                                root.open_appendable<double>(g + "/grad_cosine"),
                                root.open_appendable<double>(g + "/grad_rel_error"),
                                root.open_appendable<double>(g + "/grad_sr_mean_rel_error")});
  }
  if (spec.check_precision) {
    t.check_weight = root.open_appendable<double>("mlp/reference/check_weight_rel_error");
    t.check_loss = root.open_appendable<double>("mlp/reference/check_loss_rel_error");
  }
  return t;
}

// Makes the trace anew from its journal, for a resume that found the trace on disk unable to
// show the rows its checkpoint counts: the datasets get the journal's rows up to the
// checkpoint, the root its attributes anew (with rebuilt_at_step).
void rebuild_trace(const MlpRunSpec& spec, const MlpRunControl& ctl, const CheckpointMark& m, const RowJournal& journal) {
  const std::string partial = ctl.path + ".partial";
  {
    Trace t = create_trace(spec, ctl, partial, m.run_id);
    using Put = std::function<void(const std::vector<double>*, const std::vector<std::int64_t>*)>;
    std::map<std::string, Put> by_path;
    for_each_dataset(t, [&](auto& ds, bool) {
      by_path[ds.path()] = [&ds](const std::vector<double>* d, const std::vector<std::int64_t>* i) {
        using T = typename std::remove_reference_t<decltype(ds)>::value_type;
        if constexpr (std::is_same_v<T, double>) {
          if (!d) throw ResumeRefused("its journal holds integers for " + ds.path());
          ds.append(*d);
        } else {
          if (!i) throw ResumeRefused("its journal holds floats for " + ds.path());
          ds.append(*i);
        }
      };
    });
    journal.replay(m.journal_length, [&](const std::string& name, const std::vector<double>* d, const std::vector<std::int64_t>* i) {
      const auto it = by_path.find(name);
      if (it == by_path.end()) throw ResumeRefused("its journal names a dataset the trace does not have: " + name);
      it->second(d, i);
    });
    t.file.root().set_attr("rebuilt_at_step", m.step);
    t.file.sync();
  }
  std::filesystem::rename(partial, ctl.path);
  sync_directory_of(ctl.path);
}

// Least-squares slope of log(err) against log(step) over the compared steps with err > 0.
double growth_exponent(const std::vector<std::int64_t>& steps, const std::vector<double>& err) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (!(err[i] > 0) || steps[i] <= 0) continue;
    const double x = std::log(static_cast<double>(steps[i])), y = std::log(err[i]);
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double den = n * sxx - sx * sx;
  return n >= 2 && den > 0 ? (n * sxy - sx * sy) / den : std::nan("");
}

}  // namespace

// The run with the reference in Ref.
template <class Ref>
MlpRunOutcome run_mlp_in(const MlpRunSpec& spec, const MlpRunControl& ctl) {
  const MlpSpec& model = spec.model;
  const int L = static_cast<int>(model.widths.size() - 1);
  const std::size_t R = spec.recipes.size();

  // States at the start (fresh or from the checkpoint).
  std::vector<MlpState<float>> lp(R, init_state<float>(model));  // the runs' starting states
  MlpState<Ref> ref = init_state<Ref>(model);
  // A new trace is made as OUT.partial with its journal and step-0 checkpoint, and only then
  // named OUT: a process killed while creating it leaves no OUT, and the next run starts over.
  if (!ctl.resume) {
    CheckpointMark m;
    m.run_id = new_run_id();
    m.config_digest = text_digest(ctl.config_text);
    const std::string partial = ctl.path + ".partial";
    try {
      {
        Trace fresh = create_trace(spec, ctl, partial, m.run_id);
        fresh.file.sync();
      }
      const RowJournal j = RowJournal::create(journal_path(ctl.path), m.run_id);
      m.journal_length = j.length();
      m.journal_digest = j.digest();
      write_checkpoint(ctl.path, m, ref, lp);
      std::filesystem::rename(partial, ctl.path);
      sync_directory_of(ctl.path);
    } catch (...) {  // a failed creation leaves nothing behind
      remove_run_files(ctl.path, {".partial", ".ckpt", ".rows"});
      throw;
    }
  }
  // Fresh or resumed, the run starts from its checkpoint. The trace must hold the rows the
  // checkpoint counts; where it does not (a kill or a full disk tore it mid-flush), it is
  // rebuilt from the journal; where the journal cannot vouch for them either, the resume is
  // refused and nothing is changed.
  if (ctl.resume) {  // a complete trace has no checkpoint left: say what it is
    bool complete = false;
    try {
      complete = h5::File::open_read(ctl.path).root().get_attr_string("status") == "complete";
    } catch (const h5::Error&) {  // unreadable: the checks below say why
    }
    if (complete) throw std::invalid_argument("--resume: " + ctl.path + " is complete");
  }
  const CheckpointMark mark = read_checkpoint(ctl.path, ctl.config_text, ref, lp);
  std::optional<RowJournal> journal;
  try {
    journal.emplace(RowJournal::reopen(journal_path(ctl.path), mark.run_id, mark.journal_length, mark.journal_digest));
  } catch (const h5::DiskFull&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw ResumeRefused(e.what());
  }
  StagedRows staged;
  std::optional<Trace> opened;
  std::string damage;
  try {
    opened.emplace(open_trace(spec, ctl));
    if (opened->file.root().get_attr_string("run_id") != mark.run_id)
      throw std::invalid_argument("--resume: " + checkpoint_path(ctl.path) + " belongs to another run than " + ctl.path);
    verify_and_truncate(*opened, mark, staged.digests());
  } catch (const ResumeRefused& e) {
    damage = e.what();
  } catch (const h5::Error& e) {
    damage = e.what();
  }
  if (!damage.empty()) {
    opened.reset();
    rebuild_trace(spec, ctl, mark, *journal);
    if (ctl.note) ctl.note("the trace was damaged (" + damage + "); rebuilt it from its journal up to step " + std::to_string(mark.step));
    opened.emplace(open_trace(spec, ctl));
    verify_and_truncate(*opened, mark, staged.digests());
  }
  Trace& trace = *opened;
  h5::Group root = trace.file.root();
  const std::int64_t start = mark.step;
  if (start < 0 || start > spec.steps)
    throw ResumeRefused("its checkpoint is at step " + std::to_string(start) + ", outside the run's " +
                        std::to_string(spec.steps) + " steps");
  ref.step = start;
  for (auto& s : lp) s.step = start;
  // The states the trace keeps at the end (mlp/checkpoint): the last checkpoint's.
  std::optional<std::pair<MlpState<Ref>, std::vector<MlpState<float>>>> final_states;
  if (start == spec.steps) final_states.emplace(ref, lp);
  std::int64_t durable_step = start;  // the step of the checkpoint on disk
  bool stepped = false;               // a fresh run that fails before its first step made nothing worth keeping
  try {
    if (ctl.resume) {
      root.set_attr("status", std::string("running"));
      root.set_attr("resumed_at_step", start);
    }
    trace.file.sync();

    // The reference trains in its own thread.
    ReferenceFeed<Ref> feed;
    // The reference's own error at compare steps (check_precision): one step redone wider.
    std::function<ReferenceCheck(const MlpState<Ref>&, const MlpState<Ref>&, double)> check;
    if (spec.check_precision)
      dispatch_mlp_precision(*spec.check_precision, [&](auto c) {
        using C = decltype(c);
        if constexpr (std::numeric_limits<C>::digits > std::numeric_limits<Ref>::digits)
          check = [&model](const MlpState<Ref>& b, const MlpState<Ref>& a, double loss) {
            return check_reference_step<Ref, C>(model, b, a, loss);
          };
        else
          throw std::invalid_argument("mlp: check_precision must be wider than the reference's precision");
      });
    const auto is_compare = [&](std::int64_t s) { return (s + 1) % spec.compare_every == 0 || s + 1 == spec.steps; };
    const auto is_flush = [&](std::int64_t s) { return (s + 1) % spec.flush_every == 0 || s + 1 == spec.steps; };
    const auto is_record = [&](std::int64_t s) { return s % spec.trace_every == 0 || s + 1 == spec.steps; };
    std::thread reference([&] {
      if (!spec.reference_enabled) return;
      try {
        for (std::int64_t s = start; s < spec.steps; ++s) {
          {
            std::lock_guard<std::mutex> lk(feed.mu);
            if (feed.stop) return;
          }
          std::optional<MlpState<Ref>> before;
          if (check && is_compare(s)) before = ref;
          const StepStats st = train_step<Ref>(model, ref, nullptr);
          std::optional<ReferenceCheck> checked;
          if (before) checked = check(*before, ref, st.loss);
          std::lock_guard<std::mutex> lk(feed.mu);
          feed.loss[s] = st.loss;
          if (checked) feed.checks[s] = std::move(*checked);
          if (is_compare(s)) {
            Weights w(ref.w.size());
            for (std::size_t l = 0; l < w.size(); ++l)
              for (const Ref& x : ref.w[l]) w[l].push_back(mlp_to_double(x));  // RNE: W_Ref to double's 1e-16 (the comparison's scale is the low-precision error)
            feed.weights[s] = std::move(w);
          }
          if (is_flush(s)) feed.checkpoints[s] = ref;
          feed.done = s + 1;
          feed.cv.notify_all();
        }
      } catch (...) {
        std::lock_guard<std::mutex> lk(feed.mu);
        feed.error = std::current_exception();
        feed.cv.notify_all();
      }
    });
    struct Joiner {
      std::thread& t;
      ReferenceFeed<Ref>& f;
      ~Joiner() {
        {
          std::lock_guard<std::mutex> lk(f.mu);
          f.stop = true;
        }
        if (t.joinable()) t.join();
      }
    } joiner{reference, feed};

    // The runs (one trainer per recipe, on the backend) and, on the host, the recipes' GEMMs for
    // the local-error probe.
    std::vector<std::unique_ptr<RecipeGemm>> gemms;
    std::vector<std::unique_ptr<LowPrecisionTrainer>> trainers;
    bool need_batch = false;
    for (std::size_t r = 0; r < R; ++r) {
      const RecipeGemmOptions o{spec.recipes[r], spec.edge_recipe, spec.high_precision_layers, model.seed, ctl.product};
      gemms.push_back(std::make_unique<RecipeGemm>(o, L));
      trainers.push_back(ctl.trainer ? ctl.trainer(model, o, lp[r]) : make_cpu_trainer(model, o, lp[r]));
      need_batch = need_batch || trainers.back()->needs_batch();
      root.open_group(run_group(spec.recipes[r])).set_attr("gemm_path", trainers.back()->path());
    }
    lp.clear();
    // Device runs take their batches from workers that make them ahead (the reference thread
    // makes its own); make_batch is pure, so these are the same batches.
    std::optional<BatchPrefetcher> prefetch;
    if (need_batch) {
      const int hw = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
      prefetch.emplace(model, start, spec.steps, std::clamp(hw - 2, 1, 8), 32);
    }

    bool can = true, prefer = true;
    std::string cannot;
    for (std::size_t r = 0; r < R; ++r) {
      if (!trainers[r]->can_step_concurrently()) {
        can = false;
        if (cannot.empty()) cannot = spec.recipes[r] + " (" + trainers[r]->path() + ")";
      }
      prefer = prefer && trainers[r]->prefers_concurrent_steps();
    }
    const bool concurrent = R > 1 && can && ctl.concurrent_runs.value_or(prefer);
    if (R > 1 && ctl.concurrent_runs.value_or(false) && !can && ctl.note)
      ctl.note("concurrent runs asked for, but run " + cannot + " shares its backend's GEMM workspace: stepping the runs in sequence");
    root.set_attr("concurrent_runs", std::int64_t{concurrent ? 1 : 0});
    std::optional<ParallelRuns> team;
    if (concurrent) team.emplace(R);
    // While the runs step side by side, each one's OpenMP teams get a share of the cores (the
    // host statistics of device runs; the whole step of CPU runs). The calling thread gets
    // its own count back after every round (it also runs the probes and compares).
    const int omp_threads = omp_get_max_threads();
    const int omp_share = std::max(1, omp_threads / static_cast<int>(R));
    struct OmpThreads {  // sets this thread's count for a scope
      int saved;
      explicit OmpThreads(int n) : saved(omp_get_max_threads()) { omp_set_num_threads(n); }
      ~OmpThreads() { omp_set_num_threads(saved); }
    };

    std::deque<Record> pending;
    std::uint64_t records = trace.step.rows(), compares = trace.compare_step.rows();
    std::vector<std::int64_t> compared_steps = trace.compare_step.rows() ? trace.compare_step.read<std::int64_t>() : std::vector<std::int64_t>{};
    // Stages the records the reference has caught up with (written at the next checkpoint);
    // with wait, blocks until `upto`.
    const auto drain = [&](bool wait, std::int64_t upto) {
      std::unique_lock<std::mutex> lk(feed.mu);
      while (!pending.empty()) {
        Record& rec = pending.front();
        if (feed.error) std::rethrow_exception(feed.error);
        if (spec.reference_enabled && feed.done <= rec.step) {
          if (!wait || rec.step > upto) return;
          feed.cv.wait(lk, [&] { return feed.done > rec.step || feed.error; });
          continue;
        }
        // Without a reference: NaN losses (so NaN gaps), no compares, the initial reference
        // state in the checkpoint.
        const double ref_loss = spec.reference_enabled ? feed.loss.at(rec.step) : std::nan("");
        feed.loss.erase(rec.step);
        std::optional<Weights> ref_w;
        if (rec.weights) {
          ref_w = std::move(feed.weights.at(rec.step));
          feed.weights.erase(rec.step);
        }
        std::optional<ReferenceCheck> ref_check;
        if (rec.weights && check) {
          ref_check = std::move(feed.checks.at(rec.step));
          feed.checks.erase(rec.step);
        }
        std::optional<MlpState<Ref>> ref_ck;
        if (rec.checkpoint) {
          if (spec.reference_enabled) {
            ref_ck = std::move(feed.checkpoints.at(rec.step));
            feed.checkpoints.erase(rec.step);
          } else {
            ref_ck = ref;
          }
        }
        lk.unlock();
        if (is_record(rec.step)) {
          staged.add(trace.step, std::vector<std::int64_t>{rec.step});
          staged.add(trace.ref_loss, std::vector<double>{ref_loss});
          for (std::size_t r = 0; r < R; ++r) {
            Trace::Run& t = trace.runs[r];
            staged.add(t.loss, std::vector<double>{rec.loss[r]});
            staged.add(t.gap, std::vector<double>{ref_loss != 0 ? (rec.loss[r] - ref_loss) / ref_loss : 0.0});
            staged.add(t.lost, rec.lost[r]);
            std::vector<double> nmse, clip, under, zero;
            for (const OperandRecord& o : rec.ops[r]) {
              nmse.push_back(o.nmse), clip.push_back(o.clipped_fraction), under.push_back(o.underflow_fraction);
              zero.push_back(o.zero_scale_fraction);
            }
            staged.add(t.nmse, nmse), staged.add(t.clipped, clip), staged.add(t.underflow, under), staged.add(t.zero_scales, zero);
          }
          ++records;
        }
        if (rec.weights) {
          staged.add(trace.compare_step, std::vector<std::int64_t>{rec.step + 1});
          compared_steps.push_back(rec.step + 1);
          for (std::size_t r = 0; r < R; ++r) {
            std::vector<double> e(static_cast<std::size_t>(L));
            for (int l = 0; l < L; ++l) e[static_cast<std::size_t>(l)] = rel_error((*rec.weights)[r][static_cast<std::size_t>(l)], (*ref_w)[static_cast<std::size_t>(l)]);
            staged.add(trace.runs[r].weight_error, e);
            staged.add(trace.runs[r].grad_cosine, (*rec.grad_cosine)[r]);
            staged.add(trace.runs[r].grad_error, (*rec.grad_error)[r]);
            staged.add(trace.runs[r].grad_bias, (*rec.grad_bias)[r]);
          }
          if (ref_check) {
            staged.add(trace.check_weight, ref_check->weight_rel_error);
            staged.add(trace.check_loss, std::vector<double>{ref_check->loss_rel_error});
          }
          ++compares;
        }
        if (rec.checkpoint) {
          // Rows first, durable; then the checkpoint that counts them.
          staged.commit(&*journal);
          journal->sync();
          trace.file.sync();
          CheckpointMark m = mark;
          m.step = rec.step + 1;
          m.records = records;
          m.compares = compares;
          for (const auto& [name, d] : staged.digests()) m.digests[name] = d.value();
          m.journal_length = journal->length();
          m.journal_digest = journal->digest();
          write_checkpoint(ctl.path, m, *ref_ck, *rec.checkpoint);
          durable_step = m.step;
          if (m.step == spec.steps) final_states.emplace(std::move(*ref_ck), std::move(*rec.checkpoint));
        }
        if (ctl.progress) ctl.progress(rec.step + 1, spec.steps);
        pending.pop_front();
        lk.lock();
      }
    };

    for (std::int64_t s = start; s < spec.steps; ++s) {
      if (ctl.stop && ctl.stop->load()) {
        drain(false, s);
        staged.commit(&*journal);  // every record up to the stop (a resume drops those after the checkpoint)
        journal->sync();
        root.set_attr("status", std::string("interrupted"));
        trace.file.sync();
        return MlpRunOutcome::Interrupted;
      }
      stepped = true;
      Record rec;
      rec.step = s;
      const bool recorded = is_record(s);
      std::optional<Batch> batch;
      if (prefetch) batch = prefetch->take(s);
      std::vector<StepStats> st(R);
      rec.ops.resize(R);
      const auto step_run = [&](std::size_t r) {
        if (team && r > 0) omp_set_num_threads(omp_share);  // a worker thread's own count
        st[r] = trainers[r]->step(batch ? &*batch : nullptr, recorded ? &rec.ops[r] : nullptr);
      };
      if (team) {
        const OmpThreads share(omp_share);
        team->run(step_run);
      } else {
        // Every run's step begun before any is waited for: device runs overlap on the GPU
        // from this one thread (a CPU run does its whole step in begin_step, as before).
        for (std::size_t r = 0; r < R; ++r) trainers[r]->begin_step(batch ? &*batch : nullptr, recorded ? &rec.ops[r] : nullptr);
        for (std::size_t r = 0; r < R; ++r) st[r] = trainers[r]->end_step();
      }
      for (std::size_t r = 0; r < R; ++r) {
        rec.loss.push_back(st[r].loss);
        rec.lost.push_back(std::move(st[r].lost_update_fraction));
      }
      const bool compare = spec.reference_enabled && is_compare(s), flush = is_flush(s);
      std::vector<MlpState<float>> states;
      if (compare || flush)
        for (std::size_t r = 0; r < R; ++r) states.push_back(trainers[r]->state());
      if (compare) {
        rec.weights.emplace();
        rec.grad_cosine.emplace(R);
        rec.grad_error.emplace(R);
        rec.grad_bias.emplace(R);
        for (std::size_t r = 0; r < R; ++r) {
          rec.weights->push_back(states[r].w);
          local_error(model, states[r].w, s + 1, gemms[r]->fn(), gemms[r]->uses_sr() ? static_cast<int>(spec.probe_draws) : 1,
                      &(*rec.grad_cosine)[r], &(*rec.grad_error)[r], &(*rec.grad_bias)[r]);
        }
      }
      if (flush) rec.checkpoint = std::move(states);
      pending.push_back(std::move(rec));
      drain(pending.size() > static_cast<std::size_t>(spec.queue), s - spec.queue);
    }
    drain(true, spec.steps);
    staged.commit(&*journal);
    // Divergence: the first recorded step whose loss is not finite (-1: none).
    const std::vector<std::int64_t> steps = trace.step.read<std::int64_t>();
    const auto first_nonfinite = [&](const std::vector<double>& loss) {
      for (std::size_t i = 0; i < loss.size(); ++i)
        if (!std::isfinite(loss[i])) return steps[i];
      return std::int64_t{-1};
    };
    for (std::size_t r = 0; r < R; ++r) {
      const std::vector<double> e = trace.runs[r].weight_error.read<double>();
      // Growth exponent of the accumulated weight error, last layer, over the whole run.
      std::vector<double> last(compared_steps.size());
      for (std::size_t i = 0; i < compared_steps.size(); ++i) last[i] = e[i * static_cast<std::size_t>(L) + static_cast<std::size_t>(L - 1)];
      h5::Group g = root.open_group(run_group(spec.recipes[r]));
      g.set_attr("weight_error_growth_exponent", growth_exponent(compared_steps, last));
      g.set_attr("first_nonfinite_step", first_nonfinite(trace.runs[r].loss.read<double>()));
    }
    root.open_group("mlp/reference")
        .set_attr("first_nonfinite_step", spec.reference_enabled ? first_nonfinite(trace.ref_loss.read<double>()) : std::int64_t{-1});
    // The final states stay in the trace; its checkpoint file is not needed any more.
    if (!final_states) throw std::logic_error("mlp run: no checkpoint at the last step");
    h5::Group ck = root.require_group("mlp/checkpoint");
    write_mlp_state(ck, "reference", final_states->first);
    for (std::size_t r = 0; r < R; ++r) write_mlp_state(ck, "run_" + std::to_string(r), final_states->second[r]);
    ck.set_attr("step", spec.steps);
    ck.set_attr("records", static_cast<std::int64_t>(records));
    ck.set_attr("compares", static_cast<std::int64_t>(compares));
    root.set_attr("status", std::string("complete"));
    trace.file.sync();
    trace.file.close();
    journal.reset();
    std::filesystem::remove(checkpoint_path(ctl.path));
    std::filesystem::remove(journal_path(ctl.path));
    sync_directory_of(ctl.path);
    return MlpRunOutcome::Complete;
  } catch (const h5::DiskFull& e) {
    try {
      root.set_attr("status", std::string("failed"));
      trace.file.flush();
    } catch (...) {
    }
    throw h5::DiskFull(std::string(e.what()) + "; " + ctl.path + " keeps every step up to its checkpoint at step " +
                       std::to_string(durable_step) + ": free some space and continue with --resume");
  } catch (...) {
    if (!ctl.resume && !stepped) {  // set-up failed (a trainer, a GEMM workspace): as if never created
      try {
        trace.file.close();
      } catch (...) {
      }
      remove_run_files(ctl.path, {"", ".ckpt", ".rows"});
      throw;
    }
    try {
      root.set_attr("status", std::string("failed"));
      trace.file.flush();
    } catch (...) {
    }
    throw;
  }
}

MlpRunOutcome run_mlp(const MlpRunSpec& spec, const MlpRunControl& ctl) {
  // swiglu, rmsnorm and residual connections exist in the CPU training step only: another
  // backend must bring a trainer factory that knows what to do with them (the CUDA one runs
  // them with host quantization and its GEMMs); without one they are refused.
  const MlpSpec& model = spec.model;
  if (ctl.backend != "cpu" && !ctl.trainer &&
      (model.activation == Activation::Swiglu || model.norm != Norm::None || model.residual))
    throw std::invalid_argument("mlp: activation = \"swiglu\", norm = \"rmsnorm\" and residual = true run on "
                                "--backend cpu only (the " + ctl.backend + " backend's training step does not have them yet)");
  try {
    return dispatch_mlp_precision(spec.reference_precision,
                                  [&](auto r) { return run_mlp_in<decltype(r)>(spec, ctl); });
  } catch (const ResumeRefused& e) {  // one line that says what was refused and what to do
    throw ResumeRefused("--resume: " + ctl.path + " cannot be continued: " + e.what() + "; it is left as it was (remove " +
                        ctl.path + " and its .ckpt and .rows files to start the run again)");
  }
}

}  // namespace fp4d
