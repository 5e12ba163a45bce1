// The `mlp` workload (sim/mlp.hpp); numerics in docs/numerics.md section 8d.
#include "sim/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include <boost/math/constants/constants.hpp>

#include "format/philox.hpp"
#include "model/mlp_math.hpp"
#include "model/tree_sum.hpp"
#include "quant/dense_gemm.hpp"
#include "sim/generators.hpp"
#include "sim/mlp_precision.hpp"
#include "sim/plain_gemm.hpp"

namespace fp4d {

namespace {

// ---- seeds ---------------------------------------------------------------------------------
// Every random tensor of the workload is drawn by sim/generators (generate()) from a seed
// derived from (spec seed, purpose, index) through one Philox block, so the inputs of each
// step, the teacher, the outlier channels and each layer's initial weights are independent
// streams of one user seed.
constexpr std::uint32_t kMlpTag = 0x4d4c5000u;  // "MLP"
enum Purpose : std::uint32_t { kInputs = 1, kTeacher = 2, kInit = 3, kOutlierChannels = 4 };

std::uint64_t derive_seed(std::uint64_t seed, Purpose purpose, std::uint64_t index) {
  const Philox4x32 c{{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                      static_cast<std::uint32_t>(purpose), kMlpTag}};
  const Philox4x32 r = philox4x32_10(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  return static_cast<std::uint64_t>(r.v[0]) | (static_cast<std::uint64_t>(r.v[1]) << 32);
}

Matrix normal_matrix(std::uint64_t seed, std::int64_t rows, std::int64_t cols, double scale) {
  GeneratorSpec g;
  g.kind = "normal";
  g.rows = rows;
  g.cols = cols;
  g.seed = seed;
  g.scale = scale;
  return generate(g);
}

// The outlier channels: the columns generate("outliers") scales for a fixed seed (the same
// channels at every step, as LLM outlier features are). Found by generating one row with
// and without the outlier factor 2 (exact in float32; a normal draw is never 0 in float32).
std::vector<std::int64_t> outlier_channels(const MlpSpec& s) {
  std::vector<std::int64_t> cols;
  if (!(s.outlier_fraction > 0.0)) return cols;
  GeneratorSpec g;
  g.kind = "outliers";
  g.rows = 1;
  g.cols = s.widths.front();
  g.seed = derive_seed(s.seed, kOutlierChannels, 0);
  g.outlier_fraction = s.outlier_fraction;
  g.outlier_scale = 2.0;
  const Matrix with = generate(g);
  g.kind = "normal";
  const Matrix without = generate(g);
  for (std::int64_t c = 0; c < g.cols; ++c)
    if (with(0, c) != without(0, c)) cols.push_back(c);
  return cols;
}

// The teacher: H = relu(X W1^T), T = H W2^T, W1 ~ N(0, 1/in) [width x in],
// W2 ~ N(0, 2/width) [out x width] (He scaling: targets of about unit variance for normal
// inputs). Built once per (seed, shape) and cached: it is a pure function of those.
struct Teacher {
  std::uint64_t seed = 0;
  std::int64_t in = 0, out = 0, width = 0;
  Matrix w1, w2;
  // The same weights in double (exact), for the targets' GEMMs in make_batch.
  std::vector<double> w1d, w2d;
};

std::shared_ptr<const Teacher> teacher_for(const MlpSpec& s) {
  static std::mutex mu;
  static std::shared_ptr<const Teacher> last;
  const std::int64_t in = s.widths.front(), out = s.widths.back();
  std::lock_guard<std::mutex> lock(mu);
  if (last && last->seed == s.seed && last->in == in && last->out == out && last->width == s.teacher_width)
    return last;
  auto t = std::make_shared<Teacher>();
  t->seed = s.seed;
  t->in = in;
  t->out = out;
  t->width = s.teacher_width;
  t->w1 = normal_matrix(derive_seed(s.seed, kTeacher, 0), s.teacher_width, in, 1.0 / std::sqrt(static_cast<double>(in)));
  t->w2 = normal_matrix(derive_seed(s.seed, kTeacher, 1), out, s.teacher_width,
                        std::sqrt(2.0 / static_cast<double>(s.teacher_width)));
  t->w1d.assign(t->w1.data.begin(), t->w1.data.end());
  t->w2d.assign(t->w2.data.begin(), t->w2.data.end());
  last = t;
  return t;
}

// ---- dense kernels in T: sim/plain_gemm.hpp (shared with the lm) -------------------------

template <class T>
Matrix to_matrix(const std::vector<T>& x, std::int64_t rows, std::int64_t cols) {
  Matrix m(rows, cols);
  for (std::size_t i = 0; i < x.size(); ++i) m.data[i] = static_cast<float>(x[i]);
  return m;
}

template <class T>
std::vector<T> from_matrix(const Matrix& m) {
  return std::vector<T>(m.data.begin(), m.data.end());
}

// ---- element-wise math in T: model/mlp_math.hpp (shared with the CUDA step) ----------------
using mlp_math::exp_of;
using mlp_math::sqrt_of;

// 1/sqrt(2) and 1/sqrt(2 pi): the rounded literals for float and double (unchanged bits),
// computed in T for a wider T (a double literal would cap its accuracy at double's).
template <class T>
T inv_sqrt2() {
  if constexpr (std::is_floating_point_v<T>) return T(0.70710678118654752440084436210485);
  else return T(1) / sqrt_of(T(2));
}
template <class T>
T inv_sqrt2pi() {
  if constexpr (std::is_floating_point_v<T>) return T(0.39894228040143267793994605993438);
  else return T(1) / sqrt_of(T(2) * boost::math::constants::pi<T>());
}

// relu and gelu; swiglu is applied pairwise by the forward pass (mlp_math::sigmoid).
template <class T>
T act(Activation a, const T& z) {
  if (a == Activation::Relu) return mlp_math::relu(z);
  return mlp_math::gelu(z, inv_sqrt2<T>());
}

template <class T>
T act_derivative(Activation a, const T& z) {
  if (a == Activation::Relu) return mlp_math::relu_derivative(z);
  return mlp_math::gelu_derivative(z, inv_sqrt2<T>(), inv_sqrt2pi<T>());
}

void check_weights_shape(const MlpSpec& s, std::size_t layers, const std::vector<std::size_t>& sizes, const char* what) {
  const std::size_t L = s.widths.size() - 1;
  if (layers != L) throw std::invalid_argument(std::string("mlp: ") + what + " has " + std::to_string(layers) +
                                               " layers, widths need " + std::to_string(L));
  for (std::size_t l = 0; l < L; ++l) {
    const auto want = static_cast<std::size_t>(weight_rows(s, static_cast<int>(l)) * s.widths[l]);
    if (sizes[l] != want)
      throw std::invalid_argument(std::string("mlp: ") + what + " layer " + std::to_string(l) + " has " +
                                  std::to_string(sizes[l]) + " elements, expected " + std::to_string(want));
  }
}

template <class T>
void check_weights(const MlpSpec& s, const std::vector<std::vector<T>>& w, const char* what) {
  std::vector<std::size_t> sizes;
  for (const auto& x : w) sizes.push_back(x.size());
  check_weights_shape(s, w.size(), sizes, what);
}

// One GEMM of the step: the supplied GemmFn (checked shape) or the plain kernel.
template <class T>
std::vector<T> call_gemm(const GemmFn& gemm, const GemmCall& call, const std::vector<T>& first, std::int64_t r1,
                         std::int64_t c1, const std::vector<T>& second, std::int64_t r2, std::int64_t c2,
                         std::int64_t rows, std::int64_t cols) {
  const Matrix out = gemm(call, to_matrix(first, r1, c1), to_matrix(second, r2, c2));
  if (out.rows != rows || out.cols != cols || out.data.size() != static_cast<std::size_t>(rows * cols)) {
    std::ostringstream m;
    m << "mlp: the GemmFn returned " << out.rows << " x " << out.cols << " for " << to_string(call.role) << " of layer "
      << call.layer << ", expected " << rows << " x " << cols;
    throw std::runtime_error(m.str());
  }
  return from_matrix<T>(out);
}

// RMSNorm of the rows of x (M x n), in T: sum of squares in ascending j, rinv_i =
// 1 / sqrt(sum / n + eps), y = x rinv_i.
template <class T>
void rmsnorm_forward(const std::vector<T>& x, std::int64_t M, std::int64_t n, const T& eps, std::vector<T>& y,
                     std::vector<T>& rinv) {
  y.resize(x.size());
  rinv.resize(static_cast<std::size_t>(M));
  const T nt = static_cast<T>(n);
  for (std::int64_t i = 0; i < M; ++i) {
    const T* xi = x.data() + i * n;
    T ss = T(0);
    for (std::int64_t j = 0; j < n; ++j) ss += xi[j] * xi[j];
    const T r = T(1) / sqrt_of(T(ss / nt + eps));
    rinv[static_cast<std::size_t>(i)] = r;
    for (std::int64_t j = 0; j < n; ++j) y[static_cast<std::size_t>(i * n + j)] = xi[j] * r;
  }
}
// Its backward: dx_ij = rinv_i (dy_ij - y_ij (sum_k dy_ik y_ik) / n), sum in ascending k.
template <class T>
std::vector<T> rmsnorm_backward(const std::vector<T>& dy, const std::vector<T>& y, const std::vector<T>& rinv,
                                std::int64_t M, std::int64_t n) {
  std::vector<T> dx(dy.size());
  const T nt = static_cast<T>(n);
  for (std::int64_t i = 0; i < M; ++i) {
    const T* dyi = dy.data() + i * n;
    const T* yi = y.data() + i * n;
    T dot = T(0);
    for (std::int64_t j = 0; j < n; ++j) dot += dyi[j] * yi[j];
    const T c = dot / nt;
    const T r = rinv[static_cast<std::size_t>(i)];
    for (std::int64_t j = 0; j < n; ++j) dx[static_cast<std::size_t>(i * n + j)] = r * (dyi[j] - yi[j] * c);
  }
  return dx;
}

// Forward and backward on batch `step`; returns the loss (accumulated in the wider of T and
// double from the T outputs). grads, if given, receives dW_l (rows_l x in).
// Counts the calls of a function in progress on this thread (for its reuse of thread-local
// buffers: only the outermost call uses them).
struct CallDepth {
  int& d;
  explicit CallDepth(int& x) : d(x) { ++d; }
  ~CallDepth() { --d; }
  CallDepth(const CallDepth&) = delete;
  CallDepth& operator=(const CallDepth&) = delete;
};

// forward_backward's per-layer arrays, kept between steps (see there).
template <class T>
struct StepBuffers {
  std::vector<std::vector<T>> h, a, rinv, z;
  std::vector<T> dz, dh, dh_next;
  void size(std::size_t layers) {
    for (auto* v : {&h, &a, &rinv, &z}) v->resize(layers);
  }
};

template <class T>
double forward_backward(const MlpSpec& s, const std::vector<std::vector<T>>& w, std::int64_t step, const GemmFn& gemm,
                        std::vector<std::vector<T>>* grads) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  if constexpr (!std::is_same_v<T, float>) {
    if (gemm) throw std::invalid_argument("mlp: a GemmFn is only accepted for the float32 run (T = float)");
  }
  check_weights(s, w, "weights");
  const auto L = static_cast<int>(s.widths.size() - 1);
  const std::int64_t M = s.batch;
  const Batch batch = make_batch(s, step);
  const T eps = static_cast<T>(s.norm_eps);
  const bool swiglu = s.activation == Activation::Swiglu;

  // h[l]: input of layer l (M x widths[l]); a[l]: its GEMM operand (h[l] or rmsnorm(h[l]),
  // rinv[l] the norm's row factors); z[l]: the GEMM's output (M x rows_l).
  // The step's buffers outlive it (one set per thread and T): a step of a 512-wide model
  // otherwise allocates ~15 fresh 2 MB arrays, and their page faults cost ~10% of the
  // step (perf; docs/performance.md). Every element is
  // written before it is read in each step, so nothing carries over between steps.
  // A nested call on the same thread (a GemmFn that itself evaluates the model) must not
  // clobber the outer call's buffers: it gets a fresh set.
  static thread_local StepBuffers<T> outer;
  static thread_local int depth = 0;
  StepBuffers<T> nested;
  StepBuffers<T>& ws = depth == 0 ? outer : nested;
  const CallDepth in_call(depth);
  ws.size(static_cast<std::size_t>(L));
  auto& h = ws.h;
  auto& a = ws.a;
  auto& rinv = ws.rinv;
  auto& z = ws.z;
  const auto operand = [&](int l) -> const std::vector<T>& {
    return norm_at(s, l) ? a[static_cast<std::size_t>(l)] : h[static_cast<std::size_t>(l)];
  };
  h[0].assign(batch.x.data.begin(), batch.x.data.end());
  for (int l = 0; l < L; ++l) {
    const auto li = static_cast<std::size_t>(l);
    const std::int64_t in = s.widths[li], out = s.widths[li + 1], rows = weight_rows(s, l);
    if (norm_at(s, l)) rmsnorm_forward(h[li], M, in, eps, a[li], rinv[li]);
    const std::vector<T>& x = operand(l);
    const auto& wl = w[li];
    auto& zl = z[li];
    if (gemm) {
      zl = call_gemm(gemm, GemmCall{GemmRole::Fprop, l, step}, x, M, in, wl, rows, in, M, rows);
    } else {
      plain_gemm(x, false, wl, true, zl, M, in, rows);  // X W^T
    }
    if (l + 1 < L) {
      auto& hn = h[li + 1];
      hn.resize(static_cast<std::size_t>(M * out));
      if (swiglu) {
        for (std::int64_t i = 0; i < M; ++i)
          for (std::int64_t j = 0; j < out; ++j) {
            const T& g = zl[static_cast<std::size_t>(i * rows + j)];
            const T& u = zl[static_cast<std::size_t>(i * rows + out + j)];
            hn[static_cast<std::size_t>(i * out + j)] = mlp_math::silu(g) * u;
          }
      } else {
        for (std::size_t i = 0; i < zl.size(); ++i) hn[i] = act(s.activation, zl[i]);
      }
      if (residual_at(s, l))
        for (std::size_t i = 0; i < hn.size(); ++i) hn[i] = h[li][i] + hn[i];
    }
  }

  const std::int64_t out_w = s.widths.back();
  const auto& y = z[static_cast<std::size_t>(L) - 1];
  std::vector<T>& dz = ws.dz;
  // The loss: one term per row in Acc, summed by tree_sum (the GPU step's order).
  std::vector<Acc> row_terms(static_cast<std::size_t>(M), Acc(0));
  Acc loss = Acc(0);
  if (s.task == "classification") {
    // Softmax cross-entropy against the teacher's argmax class. Loss in Acc; the gradient
    // (softmax(Y) - onehot) / M in T, each row in ascending order (max, exp, sum, divide).
    if (grads) dz.resize(y.size());
    for (std::int64_t i = 0; i < M; ++i) {
      const T* yi = y.data() + i * out_w;
      const float* ti = batch.t.data.data() + i * out_w;
      std::int64_t label = 0;
      for (std::int64_t j = 1; j < out_w; ++j)
        if (ti[j] > ti[label]) label = j;
      Acc mx = static_cast<Acc>(yi[0]);
      for (std::int64_t j = 1; j < out_w; ++j) mx = std::max(mx, static_cast<Acc>(yi[j]));
      Acc se = Acc(0);
      for (std::int64_t j = 0; j < out_w; ++j) se += exp_of(Acc(static_cast<Acc>(yi[j]) - mx));
      row_terms[static_cast<std::size_t>(i)] = (mx + mlp_math::log_of(se)) - static_cast<Acc>(yi[label]);
      if (!grads) continue;
      T m = yi[0];
      for (std::int64_t j = 1; j < out_w; ++j) m = std::max(m, yi[j]);
      T sum = T(0);
      for (std::int64_t j = 0; j < out_w; ++j) sum = sum + exp_of(T(yi[j] - m));
      for (std::int64_t j = 0; j < out_w; ++j) {
        const T p = exp_of(T(yi[j] - m)) / sum;
        dz[static_cast<std::size_t>(i * out_w + j)] = (p - (j == label ? T(1) : T(0))) / static_cast<T>(M);
      }
    }
    loss = tree_sum(row_terms.data(), M) / static_cast<Acc>(M);
    if (!grads) return static_cast<double>(loss);
    grads->resize(static_cast<std::size_t>(L));
  } else {
    // Loss 0.5 mean (Y - T)^2: each row's squares summed in Acc in ascending order.
    for (std::int64_t i = 0; i < M; ++i) {
      Acc r = Acc(0);
      for (std::int64_t j = 0; j < out_w; ++j) {
        const auto e = static_cast<std::size_t>(i * out_w + j);
        const Acc d = static_cast<Acc>(y[e]) - static_cast<Acc>(batch.t.data[e]);
        r += d * d;
      }
      row_terms[static_cast<std::size_t>(i)] = r;
    }
    loss = Acc(0.5) * tree_sum(row_terms.data(), M) / static_cast<Acc>(M * out_w);
    if (!grads) return static_cast<double>(loss);
    grads->resize(static_cast<std::size_t>(L));
    // dZ_{L-1} = (Y - T) / (M out), in T.
    const T denom = static_cast<T>(M * out_w);
    dz.resize(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) dz[i] = (y[i] - static_cast<T>(batch.t.data[i])) / denom;
  }
  std::vector<T>& dh_next = ws.dh_next;  // the gradient of H_{l+1} (layer l's output), kept for its residual
  for (int l = L - 1; l >= 0; --l) {
    const auto li = static_cast<std::size_t>(l);
    const std::int64_t in = s.widths[li], rows = weight_rows(s, l);
    const std::vector<T>& x = operand(l);
    auto& dw = (*grads)[li];
    if (gemm) {
      // Wgrad: first = A_l (M x in), second = dZ_l (M x rows) -> in x rows = dW^T.
      const std::vector<T> dwt = call_gemm(gemm, GemmCall{GemmRole::Wgrad, l, step}, x, M, in, dz, M, rows, in, rows);
      dw = transposed(dwt, in, rows);
    } else {
      plain_gemm(dz, true, x, false, dw, rows, M, in);  // dZ^T X
    }
    if (l == 0) break;
    std::vector<T>& dh = ws.dh;
    if (gemm) {
      // Dgrad: first = dZ_l (M x rows), second = W_l (rows x in) -> M x in.
      dh = call_gemm(gemm, GemmCall{GemmRole::Dgrad, l, step}, dz, M, rows, w[li], rows, in, M, in);
    } else {
      plain_gemm(dz, false, w[li], false, dh, M, rows, in);  // dZ W
    }
    if (norm_at(s, l)) dh = rmsnorm_backward(dh, a[li], rinv[li], M, in);
    if (residual_at(s, l))
      for (std::size_t i = 0; i < dh.size(); ++i) dh[i] = dh[i] + dh_next[i];
    // Through layer l-1's activation: dZ_{l-1}.
    const auto& zp = z[li - 1];
    const std::int64_t prow = weight_rows(s, l - 1);
    dz.resize(zp.size());
    if (swiglu) {
      for (std::int64_t i = 0; i < M; ++i)
        for (std::int64_t j = 0; j < in; ++j) {
          const T& g = zp[static_cast<std::size_t>(i * prow + j)];
          const T& u = zp[static_cast<std::size_t>(i * prow + in + j)];
          const T& d = dh[static_cast<std::size_t>(i * in + j)];
          const T sg = mlp_math::sigmoid(g);
          dz[static_cast<std::size_t>(i * prow + j)] = (d * u) * mlp_math::silu_derivative(g, sg);
          dz[static_cast<std::size_t>(i * prow + in + j)] = d * (g * sg);
        }
    } else {
      for (std::size_t i = 0; i < dh.size(); ++i) dz[i] = dh[i] * act_derivative(s.activation, zp[i]);
    }
    std::swap(dh, dh_next);
  }
  return static_cast<double>(loss);
}

}  // namespace

// ---- spec --------------------------------------------------------------------------------
Batch make_batch(const MlpSpec& s, std::int64_t step) {
  validate(s);
  const std::int64_t M = s.batch, in = s.widths.front(), out = s.widths.back();
  GeneratorSpec g;
  g.kind = s.student_t_nu > 0.0 ? "student-t" : "normal";
  g.nu = s.student_t_nu > 0.0 ? s.student_t_nu : 3.0;
  g.rows = M;
  g.cols = in;
  g.seed = derive_seed(s.seed, kInputs, static_cast<std::uint64_t>(step));
  Batch b;
  b.x = generate(g);
  for (const std::int64_t c : outlier_channels(s))
    for (std::int64_t r = 0; r < M; ++r) b.x(r, c) = static_cast<float>(b.x(r, c) * s.outlier_scale);

  const auto teacher = teacher_for(s);
  const std::int64_t tw = s.teacher_width;
  b.t = Matrix(M, out);
  // hid = relu(X W1^T) and T = hid W2^T in double, every sum ascending with products and sums
  // rounded separately (dense_gemm_unfused); X and the weights convert to double exactly.
  const std::vector<double> xd(b.x.data.begin(), b.x.data.end());
  std::vector<double> hid(static_cast<std::size_t>(M * tw)), t(static_cast<std::size_t>(M * out));
  dense_gemm_unfused(xd.data(), false, teacher->w1d.data(), true, hid.data(), M, in, tw);
  for (double& h : hid) h = h > 0.0 ? h : 0.0;
  dense_gemm_unfused(hid.data(), false, teacher->w2d.data(), true, t.data(), M, tw, out);
  for (std::size_t i = 0; i < t.size(); ++i) b.t.data[i] = static_cast<float>(t[i]);
  return b;
}

template <class T>
MlpState<T> init_state(const MlpSpec& s) {
  validate(s);
  MlpState<T> st;
  const std::size_t L = s.widths.size() - 1;
  for (std::size_t l = 0; l < L; ++l) {
    const Matrix w = normal_matrix(derive_seed(s.seed, kInit, l), weight_rows(s, static_cast<int>(l)), s.widths[l],
                                   1.0 / std::sqrt(static_cast<double>(s.widths[l])));
    st.w.push_back(from_matrix<T>(w));
    st.m1.emplace_back(w.data.size(), T(0));
    if (s.optimizer == Optimizer::AdamW) st.m2.emplace_back(w.data.size(), T(0));
  }
  return st;
}

template <class T>
double loss_and_gradients(const MlpSpec& s, const std::vector<std::vector<T>>& w, std::int64_t step, const GemmFn& gemm,
                          std::vector<std::vector<T>>* grads) {
  validate(s);
  return forward_backward<T>(s, w, step, gemm, grads);
}

template <class T>
StepStats train_step(const MlpSpec& s, MlpState<T>& state, const GemmFn& gemm) {
  validate(s);
  check_weights(s, state.w, "state.w");
  check_weights(s, state.m1, "state.m1");
  if (s.optimizer == Optimizer::AdamW) check_weights(s, state.m2, "state.m2");

  // The gradients' buffers, reused between steps as forward_backward's are (a nested call on
  // the same thread gets its own).
  static thread_local std::vector<std::vector<T>> outer_g;
  static thread_local int depth = 0;
  std::vector<std::vector<T>> nested_g;
  std::vector<std::vector<T>>& g = depth == 0 ? outer_g : nested_g;
  const CallDepth in_call(depth);
  StepStats stats;
  stats.loss = forward_backward<T>(s, state.w, state.step, gemm, &g);

  const T lr = static_cast<T>(lr_at(s, state.step));
  const T wd = static_cast<T>(s.weight_decay);
  const std::size_t L = state.w.size();
  stats.lost_update_fraction.assign(L, 0.0);
  for (std::size_t l = 0; l < L; ++l) {
    auto& w = state.w[l];
    auto& m1 = state.m1[l];
    const auto& gl = g[l];
    const auto n = static_cast<std::int64_t>(w.size());
    std::int64_t lost = 0;
    if (s.optimizer == Optimizer::Sgd) {
      const T mu = static_cast<T>(s.momentum);
      const bool decay = s.weight_decay > 0.0;
#pragma omp parallel for schedule(static) reduction(+ : lost) if (n > (1 << 15))
      for (std::int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(i);
        lost += mlp_math::sgd_update(w[k], m1[k], gl[k], mu, lr, wd, decay) ? 1 : 0;
      }
    } else {
      // AdamW, with its coefficients computed in the wider of T and double (mlp_math).
      auto& m2 = state.m2[l];
      const auto c = mlp_math::adam_coefficients<T>(lr_at(s, state.step), s.beta1, s.beta2, s.eps, s.weight_decay,
                                                    state.step);
#pragma omp parallel for schedule(static) reduction(+ : lost) if (n > (1 << 15))
      for (std::int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(i);
        lost += mlp_math::adamw_update(w[k], m1[k], m2[k], gl[k], c) ? 1 : 0;
      }
    }
    stats.lost_update_fraction[l] = n > 0 ? static_cast<double>(lost) / static_cast<double>(n) : 0.0;
  }
  ++state.step;
  return stats;
}

// ---- reference precisions ---------------------------------------------------------------
MlpPrecision parse_mlp_precision(const std::string& s) {
  if (s == "double") return MlpPrecision::Double;
  if (s == "binary128") return MlpPrecision::Binary128;
  if (s == "mp256") return MlpPrecision::Mp256;
  throw std::invalid_argument("unknown reference precision '" + s + "' (known: double, binary128, mp256)");
}

std::string to_string(MlpPrecision p) {
  switch (p) {
    case MlpPrecision::Double: return "double";
    case MlpPrecision::Binary128: return "binary128";
    case MlpPrecision::Mp256: break;
  }
  return "mp256";
}

int significand_bits(MlpPrecision p) {
  switch (p) {
    case MlpPrecision::Double: return 53;
    case MlpPrecision::Binary128: return 113;
    case MlpPrecision::Mp256: break;
  }
  return 256;
}

#define FP4D_MLP_INSTANTIATE(T)                                                                          \
  template MlpState<T> init_state<T>(const MlpSpec&);                                                    \
  template StepStats train_step<T>(const MlpSpec&, MlpState<T>&, const GemmFn&);                        \
  template double loss_and_gradients<T>(const MlpSpec&, const std::vector<std::vector<T>>&, std::int64_t, \
                                        const GemmFn&, std::vector<std::vector<T>>*);
FP4D_MLP_INSTANTIATE(mlp_binary128)
FP4D_MLP_INSTANTIATE(mlp_mp256)
#undef FP4D_MLP_INSTANTIATE

template MlpState<float> init_state<float>(const MlpSpec&);
template MlpState<double> init_state<double>(const MlpSpec&);
template StepStats train_step<float>(const MlpSpec&, MlpState<float>&, const GemmFn&);
template StepStats train_step<double>(const MlpSpec&, MlpState<double>&, const GemmFn&);
template double loss_and_gradients<float>(const MlpSpec&, const std::vector<std::vector<float>>&, std::int64_t,
                                          const GemmFn&, std::vector<std::vector<float>>*);
template double loss_and_gradients<double>(const MlpSpec&, const std::vector<std::vector<double>>&, std::int64_t,
                                           const GemmFn&, std::vector<std::vector<double>>*);

}  // namespace fp4d
