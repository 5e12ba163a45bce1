// The `mlp` workload (sim/mlp.hpp): backward pass against finite differences, the GemmFn
// plumbing, float32 vs double drift within a rounding-derived bound, determinism, schedules,
// learning and spec validation.
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <filesystem>

#include "sim/mlp.hpp"
#include "sim/mlp_precision.hpp"
#include "sim/mlp_run.hpp"
#include "support/catch.hpp"
#include "support/printed_digits.hpp"
#include "support/config_error.hpp"
#include "support/trace_datasets.hpp"
#include "util/parallel_worth.hpp"

using namespace fp4d;

namespace {

using Weights = std::vector<std::vector<double>>;

template <class T>
bool bit_equal(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t l = 0; l < a.size(); ++l) {
    if (a[l].size() != b[l].size()) return false;
    if (!a[l].empty() && std::memcmp(a[l].data(), b[l].data(), a[l].size() * sizeof(T)) != 0) return false;
  }
  return true;
}

template <class T>
bool state_bit_equal(const MlpState<T>& a, const MlpState<T>& b) {
  return a.step == b.step && bit_equal(a.w, b.w) && bit_equal(a.m1, b.m1) && bit_equal(a.m2, b.m2);
}

// An independent forward pass in double (naive loops): the loss and the relu pattern of
// every pre-activation, to detect coordinates whose finite-difference stencil crosses a kink.
struct TestForward {
  double loss = 0;
  double y_norm = 0, r_norm = 0;  // regression: ||Y||, ||Y - T||
  std::vector<bool> positive;  // z > 0 for every hidden pre-activation, in order
};

TestForward test_forward(const MlpSpec& s, const Weights& w, std::int64_t step) {
  const Batch b = make_batch(s, step);
  const std::size_t L = s.widths.size() - 1;
  const std::int64_t M = s.batch;
  const bool swiglu = s.activation == Activation::Swiglu;
  std::vector<double> h(b.x.data.begin(), b.x.data.end());
  TestForward r;
  for (std::size_t l = 0; l < L; ++l) {
    const std::int64_t in = s.widths[l], out = s.widths[l + 1];
    const bool hidden = l + 1 < L;
    const std::int64_t rows = hidden && swiglu ? 2 * out : out;
    std::vector<double> x = h;
    if (s.norm == Norm::RmsNorm && l >= 1)  // x / sqrt(mean(x^2) + eps), row by row
      for (std::int64_t i = 0; i < M; ++i) {
        double ms = 0;
        for (std::int64_t k = 0; k < in; ++k) ms += h[i * in + k] * h[i * in + k] / static_cast<double>(in);
        for (std::int64_t k = 0; k < in; ++k) x[i * in + k] = h[i * in + k] / std::sqrt(ms + s.norm_eps);
      }
    std::vector<double> z(static_cast<std::size_t>(M * rows));
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < rows; ++j) {
        double acc = 0;
        for (std::int64_t k = 0; k < in; ++k) acc += x[i * in + k] * w[l][j * in + k];
        z[i * rows + j] = acc;
      }
    if (!hidden) {
      if (s.task == "classification") {  // cross-entropy against the teacher's argmax, naive
        double sum = 0;
        for (std::int64_t i = 0; i < M; ++i) {
          std::int64_t label = 0;
          for (std::int64_t j = 1; j < out; ++j)
            if (b.t.data[i * out + j] > b.t.data[i * out + label]) label = j;
          double se = 0;
          for (std::int64_t j = 0; j < out; ++j) se += std::exp(z[i * out + j]);
          sum += std::log(se) - z[i * out + label];
        }
        r.loss = sum / static_cast<double>(M);
        break;
      }
      double sum = 0, yy = 0;
      for (std::size_t i = 0; i < z.size(); ++i) sum += (z[i] - b.t.data[i]) * (z[i] - b.t.data[i]), yy += z[i] * z[i];
      r.loss = 0.5 * sum / static_cast<double>(z.size());
      r.y_norm = std::sqrt(yy);
      r.r_norm = std::sqrt(sum);
      break;
    }
    // The residual: layers 1 .. L-2 with equal widths add their (un-normalised) input.
    const bool skip = s.residual && l >= 1 && in == out;
    std::vector<double> hn(static_cast<std::size_t>(M * out));
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < out; ++j) {
        double f;
        if (swiglu) {  // [gate; up]: silu(g) u
          const double g = z[i * rows + j], u = z[i * rows + out + j];
          f = g / (1.0 + std::exp(-g)) * u;
        } else {
          const double zz = z[i * out + j];
          r.positive.push_back(zz > 0);
          f = s.activation == Activation::Relu ? (zz > 0 ? zz : 0.0) : 0.5 * zz * (1.0 + std::erf(zz / std::sqrt(2.0)));
        }
        hn[i * out + j] = skip ? h[i * in + j] + f : f;
      }
    h = hn;
  }
  return r;
}

// Equal up to a few ulps (the schedules' arithmetic in double).
bool near(double a, double b) { return std::abs(a - b) <= 1e-14 * std::abs(b); }

double norm_all(const std::vector<std::vector<double>>& a) {
  double s = 0;
  for (const auto& v : a)
    for (double x : v) s += x * x;
  return std::sqrt(s);
}

double diff_norm(const std::vector<std::vector<float>>& a, const std::vector<std::vector<double>>& b) {
  double s = 0;
  for (std::size_t l = 0; l < a.size(); ++l)
    for (std::size_t i = 0; i < a[l].size(); ++i) {
      const double d = static_cast<double>(a[l][i]) - b[l][i];
      s += d * d;
    }
  return std::sqrt(s);
}

MlpSpec small_spec() {
  MlpSpec s;
  s.widths = {16, 64, 64, 8};
  s.batch = 32;
  s.teacher_width = 32;
  s.seed = 11;
  return s;
}

}  // namespace

// 1. Gradient check, Richardson-extrapolated central differences on f(w) = loss:
//      D(h) = (f(w + h) - f(w - h)) / 2h = f' + h^2 f'''/6 + h^4 f^(5)/120 + ...,
//      R = (4 D(h) - D(2h)) / 3 = f' - h^4 f^(5)/30 + ...
//    (plain central differences are not enough once swiglu and RMSNorm are in: along some
//    first-layer weights |f'''| reaches ~2e4, a truncation of 5e-8 at h = 2^-18).
//    Rounding: each f is evaluated with an absolute error delta_f, so D(h) is off by
//    <= delta_f / h, D(2h) by <= delta_f / 2h and R by <= (4 + 1/2) / 3 delta_f / h =
//    1.5 delta_f / h. delta_f: the forward pass has <= 4 layers with reductions of <= 14
//    terms, a norm and a loss sum of <= 12 terms, so its relative error is a few tens of u
//    (u = 2^-53) with respect to the magnitudes involved (|Y|, |T| = O(1), loss O(1));
//    allowing delta_f <= 1000 u (a generous factor for the cancellation in Y - T) and
//    h = 2^-16 (~1.5e-5) gives 1.5 * 1000 * 1.1e-16 / 1.5e-5 ~ 1.1e-8. Truncation:
//    h^4 |f^(5)| / 30 ~ 1.8e-21 |f^(5)|, below 2e-12 for |f^(5)| up to 1e9 (the measured
//    f''' ~ 2e4 is the largest third derivative here; a fifth derivative 5e4 times larger
//    is still covered). Tolerance per coordinate: 2e-8 absolute, and the whole gradient
//    within 1e-6 relative (a wrong backward pass - a missing act', a transposed dW, a
//    missing norm or skip term - is off by O(|g|) ~ 1e-3 .. 1). With relu, coordinates whose
//    stencil w +- h, w +- 2h changes the sign of any pre-activation are skipped explicitly
//    (at most 10% allowed); the independent forward pass (test_forward) must match the
//    model's loss to 1e-13.
//    The model features are covered by the same bound: swiglu's silu, RMSNorm (rows of O(1)
//    rms, eps 1e-6 negligible) and the residual's identity path are smooth with O(1)
//    derivatives except along the few coordinates measured above.
namespace {
void check_gradient(const MlpSpec& s) {
  const auto st = init_state<double>(s);
  const std::int64_t step = 2;
  Weights g;
  const double f0 = loss_and_gradients<double>(s, st.w, step, nullptr, &g);
  const TestForward base = test_forward(s, st.w, step);
  REQUIRE(std::abs(f0 - base.loss) <= 1e-13 * base.loss);  // the forward pass, independently
  REQUIRE(g.size() == s.widths.size() - 1);

  const double h = std::ldexp(1.0, -16);
  int checked = 0, skipped = 0;
  double err2 = 0, g2 = 0, max_abs = 0;
  for (std::size_t l = 0; l < st.w.size(); ++l)
    for (std::size_t i = 0; i < st.w[l].size(); ++i) {
      bool kink = false;
      // D(step): the central difference (w +- step are exact: w = O(1), step a power of 2 >= 2^-16).
      const auto central = [&](double hh) {
        Weights wp = st.w, wm = st.w;
        wp[l][i] += hh;
        wm[l][i] -= hh;
        if (s.activation == Activation::Relu)
          kink = kink || test_forward(s, wp, step).positive != base.positive ||
                 test_forward(s, wm, step).positive != base.positive;
        const double fp = loss_and_gradients<double>(s, wp, step, nullptr, nullptr);
        const double fm = loss_and_gradients<double>(s, wm, step, nullptr, nullptr);
        return (fp - fm) / (wp[l][i] - wm[l][i]);
      };
      const double d1 = central(h), d2 = central(2 * h);
      if (kink) {
        ++skipped;
        continue;
      }
      const double fd = (4 * d1 - d2) / 3;
      const double e = std::abs(fd - g[l][i]);
      INFO("layer " << l << " element " << i << " fd " << fd << " backward " << g[l][i]);
      CHECK(e <= 2e-8);
      max_abs = std::max(max_abs, e);
      err2 += e * e;
      g2 += g[l][i] * g[l][i];
      ++checked;
    }
  INFO("checked " << checked << " skipped " << skipped << " max abs error " << max_abs);
  REQUIRE(checked >= 9 * (checked + skipped) / 10);
  REQUIRE(g2 > 0);
  CHECK(std::sqrt(err2 / g2) <= 1e-6);
}
}  // namespace

TEST_CASE("mlp: backward pass matches central finite differences in double", "[mlp]") {
  for (const char* task : {"regression", "classification"})
  for (const Activation act : {Activation::Relu, Activation::Gelu}) {
    MlpSpec s;
    s.task = task;
    INFO("task " << task);
    s.widths = {5, 7, 6, 3};
    s.batch = 4;
    s.teacher_width = 8;
    s.seed = 3;
    s.activation = act;
    INFO("activation " << to_string(act));
    check_gradient(s);
  }
}

TEST_CASE("mlp: swiglu, rmsnorm and residual backward passes match central finite differences", "[mlp]") {
  struct Variant {
    Activation act;
    Norm norm;
    bool residual;
  };
  const std::vector<Variant> variants = {
      {Activation::Swiglu, Norm::None, false},   {Activation::Gelu, Norm::RmsNorm, false},
      {Activation::Gelu, Norm::None, true},      {Activation::Relu, Norm::RmsNorm, true},
      {Activation::Swiglu, Norm::RmsNorm, true},
  };
  for (const char* task : {"regression", "classification"})
    for (const Variant& v : variants) {
      MlpSpec s;
      s.task = task;
      s.widths = {5, 7, 7, 7, 3};  // layers 1 and 2 are 7 -> 7: both get the skip
      s.batch = 4;
      s.teacher_width = 8;
      s.seed = 5;
      s.activation = v.act;
      s.norm = v.norm;
      s.residual = v.residual;
      INFO("task " << task << " activation " << to_string(v.act) << " norm " << to_string(v.norm) << " residual "
                   << v.residual);
      REQUIRE(residual_at(s, 1) == v.residual);
      REQUIRE(residual_at(s, 2) == v.residual);
      REQUIRE_FALSE(residual_at(s, 0));
      REQUIRE_FALSE(residual_at(s, 3));
      REQUIRE(weight_rows(s, 0) == (v.act == Activation::Swiglu ? 14 : 7));
      REQUIRE(weight_rows(s, 3) == 3);  // the output layer is never gated
      check_gradient(s);
    }
}

namespace {
// The plain float32 product of a GemmFn call in its role's documented orientation
// (sim/mlp.hpp): c = 0; c += a b in ascending reduction index. Fprop: first [M x in],
// second W [out x in] -> M x out; Dgrad: dZ [M x out], W [out x in] -> M x in; Wgrad:
// H [M x in], dZ [M x out] -> in x out (= dW^T).
Matrix plain_float32_product(GemmRole role, const Matrix& a, const Matrix& b) {
  const bool wgrad = role == GemmRole::Wgrad, fprop = role == GemmRole::Fprop;
  const std::int64_t rows = wgrad ? a.cols : a.rows, cols = fprop ? b.rows : b.cols, K = wgrad ? a.rows : a.cols;
  Matrix r(rows, cols);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) {
      float acc = 0.0f;
      for (std::int64_t k = 0; k < K; ++k) acc += (wgrad ? a(k, i) : a(i, k)) * (fprop ? b(j, k) : b(k, j));
      r(i, j) = acc;
    }
  return r;
}
}  // namespace

// 2. The GemmFn plumbing: a GemmFn computing the plain float32 product in the documented
//    orientation of each role (c = 0; c += a b in ascending reduction index) reproduces the
//    built-in float path bit for bit, and is called with the right roles, layers, steps and
//    operand shapes, in the order fprop 0..L-1, then (wgrad l, dgrad l) for l = L-1..1, wgrad 0.
//    The second shape has a reduction longer than the kernel's k-block (256: fprop 300), so
//    the blocked kernel's store-and-reload between k-blocks is covered: it must not change
//    any element's order (tests/unit/test_dense_gemm.cpp covers the kernel on its own).
TEST_CASE("mlp: a plain float32 GemmFn reproduces the built-in float path bit for bit", "[mlp]") {
  for (const bool long_k : {false, true})
  for (const Optimizer opt : {Optimizer::Sgd, Optimizer::AdamW}) {
    MlpSpec s = small_spec();
    if (long_k) s.widths = {16, 300, 136, 8}, s.batch = 160;
    INFO("widths[1] " << s.widths[1] << " batch " << s.batch);
    s.optimizer = opt;
    s.lr = opt == Optimizer::Sgd ? 0.05 : 1e-3;
    s.weight_decay = 0.01;
    const auto L = static_cast<int>(s.widths.size() - 1);
    const std::int64_t M = s.batch;
    std::vector<std::string> calls;
    std::int64_t expected_step = 0;
    GemmFn fn = [&](const GemmCall& c, const Matrix& a, const Matrix& b) {
      REQUIRE(c.step == expected_step);
      REQUIRE(c.layer >= 0);
      REQUIRE(c.layer < L);
      const std::int64_t in = s.widths[static_cast<std::size_t>(c.layer)];
      const std::int64_t out = s.widths[static_cast<std::size_t>(c.layer) + 1];
      calls.push_back(to_string(c.role) + std::to_string(c.layer));
      switch (c.role) {
        case GemmRole::Fprop:  // H [M x in], W [out x in] -> M x out
          REQUIRE((a.rows == M && a.cols == in && b.rows == out && b.cols == in));
          break;
        case GemmRole::Dgrad:  // dZ [M x out], W [out x in] -> M x in
          REQUIRE((a.rows == M && a.cols == out && b.rows == out && b.cols == in));
          break;
        case GemmRole::Wgrad:  // H [M x in], dZ [M x out] -> in x out (= dW^T)
          REQUIRE((a.rows == M && a.cols == in && b.rows == M && b.cols == out));
          break;
      }
      const Matrix r = plain_float32_product(c.role, a, b);
      return r;
    };
    auto plain = init_state<float>(s);
    auto viafn = init_state<float>(s);
    const std::vector<std::string> one_step = {"fprop0", "fprop1", "fprop2", "wgrad2", "dgrad2",
                                               "wgrad1", "dgrad1", "wgrad0"};
    for (int k = 0; k < 4; ++k) {
      calls.clear();
      expected_step = k;
      const StepStats a = train_step<float>(s, plain, nullptr);
      const StepStats b = train_step<float>(s, viafn, fn);
      CHECK(calls == one_step);
      CHECK(std::memcmp(&a.loss, &b.loss, sizeof(double)) == 0);
      CHECK(a.lost_update_fraction == b.lost_update_fraction);
      REQUIRE(state_bit_equal(plain, viafn));
    }
    CHECK(plain.step == 4);
    // Sanity: training moved the weights (the comparison is not between two frozen states).
    CHECK_FALSE(bit_equal(plain.w, init_state<float>(s).w));
  }
  // The reference run refuses a GemmFn.
  MlpSpec s = small_spec();
  auto d = init_state<double>(s);
  GemmFn any = [](const GemmCall&, const Matrix& a, const Matrix&) { return a; };
  CHECK_THROWS_AS(train_step<double>(s, d, any), std::invalid_argument);
  // A GemmFn returning the wrong shape (wgrad not transposed) is an error, not silently used.
  auto f = init_state<float>(s);
  GemmFn wrong = [&](const GemmCall& c, const Matrix& a, const Matrix& b) {
    if (c.role == GemmRole::Wgrad) return Matrix(b.cols, a.cols);
    if (c.role == GemmRole::Fprop) return Matrix(a.rows, b.rows);
    return Matrix(a.rows, b.cols);
  };
  CHECK_THROWS(train_step<float>(s, f, wrong));
}

// 3. float32 vs double from the same initialisation and data. Per step the float run
//    injects (i) the rounding of W - lr v to float32: <= u ||W|| (u = 2^-24), and (ii) the
//    error of the update lr v: v carries every past gradient with weights mu^j (sum 1/(1-mu)),
//    each gradient off by a relative eps_g <= 2L gamma_K ~ 2 L K u (L forward and L - 1
//    backward products chained, each within the gamma_K = K u bound of a length-K float32
//    reduction, K the largest reduction length; element-wise steps add O(u)). Relative to
//    ||W|| the injection per step is therefore <= u (1 + 2 L K rho / (1 - mu)), with
//    rho = max_t lr ||g_t|| / ||W_t|| measured on the double run. The training map is close
//    to the identity at this learning rate, so injected errors add rather than grow (the
//    dynamics' amplification (1 + lr ||Hessian||)^k is ~1 over 20 steps; a factor c = 2
//    covers it and the O(u) element-wise terms):
//      ||W_f - W_d|| / ||W_d|| <= c k u (1 + 2 L K rho / (1 - mu)).
//    With the asserted small-step condition rho <= (1 - mu) / (2L) this is <= 2 c k K u,
//    the c k K u form. And the difference is non-zero (the float run does round).
//    The model features keep the form of the bound: swiglu and the residual add O(u)
//    element-wise steps, RMSNorm a row reduction of <= K terms (inside the 2 L K u per
//    gradient) and a rescaling by an O(1) factor; so the same bound is asserted for them.
TEST_CASE("mlp: float32 drifts from the double reference within the float32 rounding bound", "[mlp]") {
  for (int variant = 0; variant < 2; ++variant) {
  MlpSpec s = small_spec();
  s.lr = 0.02;
  if (variant == 1) {  // every feature: {16, 64, 64, 8} has the 64 -> 64 layer 1 for the skip
    s.activation = Activation::Swiglu;
    s.norm = Norm::RmsNorm;
    s.residual = true;
  }
  INFO("variant " << (variant == 0 ? "relu" : "swiglu + rmsnorm + residual"));
  const int k_steps = 20;
  auto f = init_state<float>(s);
  auto d = init_state<double>(s);
  // Same initial values.
  REQUIRE(diff_norm(f.w, d.w) == 0.0);
  const auto L = static_cast<double>(s.widths.size() - 1);
  double K = static_cast<double>(s.batch);
  for (auto w : s.widths) K = std::max(K, static_cast<double>(w));
  const double u = std::ldexp(1.0, -24);
  const double c = 2.0;
  double rho = 0;
  for (int k = 1; k <= k_steps; ++k) {
    Weights g;
    loss_and_gradients<double>(s, d.w, d.step, nullptr, &g);
    rho = std::max(rho, lr_at(s, d.step) * norm_all(g) / norm_all(d.w));
    train_step<float>(s, f, nullptr);
    train_step<double>(s, d, nullptr);
    const double rel = diff_norm(f.w, d.w) / norm_all(d.w);
    const double bound = c * k * u * (1.0 + 2.0 * L * K * rho / (1.0 - s.momentum));
    INFO("step " << k << " relative weight difference " << rel << " bound " << bound << " rho " << rho);
    CHECK(rel <= bound);
    CHECK(rel > 0.0);
  }
  INFO("rho " << rho);
  CHECK(rho <= (1.0 - s.momentum) / (2.0 * L));
  }
}

// 4. Determinism and schedules.
TEST_CASE("mlp: runs, batches and schedules are deterministic", "[mlp]") {
  SECTION("two runs with one seed are bit-identical, whatever the thread count") {
    const ParallelWorkThreshold every_loop_parallel(0);  // the threads must take part
    for (const Optimizer opt : {Optimizer::Sgd, Optimizer::AdamW})
    for (const bool features : {false, true}) {
      MlpSpec s;  // the default size: large enough for the OpenMP regions to split
      s.optimizer = opt;
      s.lr = opt == Optimizer::Sgd ? 0.05 : 1e-3;
      s.activation = features ? Activation::Swiglu : Activation::Gelu;
      if (features) s.norm = Norm::RmsNorm, s.residual = true;  // {64, 256, 256, 16}: layer 1 is 256 -> 256
      INFO("features " << features);
      const int threads = omp_get_max_threads();
      auto a = init_state<float>(s);
      auto b = init_state<float>(s);
      omp_set_num_threads(1);
      for (int k = 0; k < 2; ++k) train_step<float>(s, a, nullptr);
      omp_set_num_threads(std::max(2, threads));
      for (int k = 0; k < 2; ++k) train_step<float>(s, b, nullptr);
      omp_set_num_threads(threads);
      CHECK(state_bit_equal(a, b));
      auto c = init_state<float>(s);
      for (int k = 0; k < 2; ++k) train_step<float>(s, c, nullptr);
      CHECK(state_bit_equal(a, c));
      MlpSpec other = s;
      other.seed = s.seed + 1;
      CHECK_FALSE(bit_equal(init_state<float>(other).w, a.w));
    }
  }
  SECTION("make_batch is a pure function of (seed, step)") {
    MlpSpec s = small_spec();
    s.student_t_nu = 4.0;
    s.outlier_fraction = 0.125;  // 2 of 16 channels
    s.outlier_scale = 64.0;
    const Batch a = make_batch(s, 5), b = make_batch(s, 5), c = make_batch(s, 6);
    CHECK(a.x.data == b.x.data);
    CHECK(a.t.data == b.t.data);
    CHECK(a.x.data != c.x.data);
    CHECK(a.t.data != c.t.data);
    CHECK((a.x.rows == s.batch && a.x.cols == 16 && a.t.rows == s.batch && a.t.cols == 8));
    MlpSpec other = s;
    other.seed = 12;
    CHECK(make_batch(other, 5).x.data != a.x.data);
    // The outlier channels are the same two channels at every step.
    auto big_channels = [&](const Batch& bt) {
      std::set<std::int64_t> cols;
      for (std::int64_t j = 0; j < bt.x.cols; ++j) {
        double m = 0;
        for (std::int64_t i = 0; i < bt.x.rows; ++i) m += std::abs(bt.x(i, j));
        if (m / static_cast<double>(bt.x.rows) > 16.0) cols.insert(j);
      }
      return cols;
    };
    CHECK(big_channels(a).size() == 2);
    CHECK(big_channels(a) == big_channels(c));
    // Inputs, teacher and initialisation are different streams: step 0's inputs are not
    // the first layer's initial weights (scaled) nor each other's.
    s.outlier_fraction = 0;
    s.student_t_nu = 0;
    s.batch = 64;
    const Batch x0 = make_batch(s, 0);
    const auto w0 = init_state<double>(s).w[0];  // 64 x 16 = the shape of x0
    int same_sign = 0;
    for (std::size_t i = 0; i < w0.size(); ++i) same_sign += (w0[i] > 0) == (x0.x.data[i] > 0);
    CHECK(std::abs(same_sign - 512) < 120);  // ~N(512, 16^2) if independent
  }
  SECTION("lr_at at hand-computed points") {
    MlpSpec s;
    s.lr = 0.1;
    s.warmup_steps = 10;
    s.total_steps = 110;
    s.schedule = "constant";
    CHECK(lr_at(s, 0) == 0.1);
    CHECK(lr_at(s, 500) == 0.1);
    s.schedule = "warmup-cosine";
    CHECK(near(lr_at(s, 0), 0.01));   // (0 + 1) / 10
    CHECK(near(lr_at(s, 4), 0.05));   // (4 + 1) / 10
    CHECK(near(lr_at(s, 9), 0.1));
    CHECK(near(lr_at(s, 10), 0.1));   // cosine at progress 0
    CHECK(near(lr_at(s, 60), 0.05));  // progress 1/2: 0.5 (1 + cos pi/2)
    CHECK(near(lr_at(s, 35), 0.1 * 0.5 * (1 + std::sqrt(0.5))));  // progress 1/4
    CHECK(lr_at(s, 110) == 0.0);
    CHECK(lr_at(s, 1000) == 0.0);
    s.schedule = "warmup-stable-decay";
    s.decay_fraction = 0.2;  // decays over steps 88..110
    CHECK(near(lr_at(s, 0), 0.01));
    CHECK(lr_at(s, 50) == 0.1);
    CHECK(lr_at(s, 88) == 0.1);
    CHECK(near(lr_at(s, 99), 0.05));  // (110 - 99) / 22
    CHECK(near(lr_at(s, 109), 0.1 / 22));
    CHECK(lr_at(s, 110) == 0.0);
    s.decay_fraction = 0.0;
    CHECK(lr_at(s, 109) == 0.1);
  }
}

// 5. Learning works, and bad specs are refused naming the field.
TEST_CASE("mlp: the loss decreases over 200 steps in double", "[mlp]") {
  for (const Optimizer opt : {Optimizer::Sgd, Optimizer::AdamW})
  for (const bool features : {false, true}) {
    MlpSpec s = small_spec();
    s.widths = {16, 64, 64, 4};
    s.optimizer = opt;
    s.lr = opt == Optimizer::Sgd ? 0.05 : 3e-3;
    if (features) s.activation = Activation::Swiglu, s.norm = Norm::RmsNorm, s.residual = true;
    INFO("features " << features);
    auto st = init_state<double>(s);
    std::vector<double> loss;
    for (int k = 0; k < 200; ++k) loss.push_back(train_step<double>(s, st, nullptr).loss);
    double first = 0, last = 0;
    for (int k = 0; k < 20; ++k) {
      first += loss[k];
      last += loss[180 + k];
    }
    INFO((opt == Optimizer::Sgd ? "sgd" : "adamw") << ": mean loss of steps 0-19 " << first / 20 << ", of 180-199 "
                                                      << last / 20);
    CHECK(std::isfinite(last));
    CHECK(last < 0.5 * first);
  }
}

TEST_CASE("mlp: validate rejects bad specs naming the field", "[mlp]") {
  CHECK_NOTHROW(validate(MlpSpec{}));
  struct Case {
    std::function<void(MlpSpec&)> set;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](MlpSpec& s) { s.widths = {8}; }, "widths"},
      {[](MlpSpec& s) { s.widths = {8, 0, 4}; }, "widths"},
      {[](MlpSpec& s) { s.batch = 0; }, "batch"},
      {[](MlpSpec& s) { s.lr = 0; }, "lr"},
      {[](MlpSpec& s) { s.lr = std::nan(""); }, "lr"},
      {[](MlpSpec& s) { s.momentum = 1.0; }, "momentum"},
      {[](MlpSpec& s) { s.momentum = -0.1; }, "momentum"},
      {[](MlpSpec& s) { s.beta1 = 1.0; }, "beta1"},
      {[](MlpSpec& s) { s.beta2 = -1e-3; }, "beta2"},
      {[](MlpSpec& s) { s.eps = 0; }, "eps"},
      {[](MlpSpec& s) { s.weight_decay = -1; }, "weight_decay"},
      {[](MlpSpec& s) { s.schedule = "linear"; }, "schedule"},
      {[](MlpSpec& s) { s.warmup_steps = 2000; }, "warmup_steps"},
      {[](MlpSpec& s) { s.decay_fraction = 1.5; }, "decay_fraction"},
      {[](MlpSpec& s) { s.outlier_fraction = -0.1; }, "outlier_fraction"},
      {[](MlpSpec& s) { s.outlier_scale = 0; }, "outlier_scale"},
      {[](MlpSpec& s) { s.student_t_nu = -1; }, "student_t_nu"},
      {[](MlpSpec& s) { s.teacher_width = 0; }, "teacher_width"},
      {[](MlpSpec& s) { s.task = "ranking"; }, "task"},
      {[](MlpSpec& s) { s.task = "classification", s.widths = {8, 1}; }, "widths"},
      {[](MlpSpec& s) { s.norm_eps = 0; }, "norm_eps"},
      {[](MlpSpec& s) { s.norm_eps = std::nan(""); }, "norm_eps"},
      {[](MlpSpec& s) { s.residual = true, s.widths = {8, 16, 32, 4}; }, "residual"},  // no equal-width hidden layer
      {[](MlpSpec& s) { s.residual = true, s.widths = {8, 8, 4}; }, "residual"},       // 8 -> 8 is the input layer
  };
  for (const auto& c : cases) {
    MlpSpec s;
    c.set(s);
    std::string msg;
    try {
      validate(s);
    } catch (const std::invalid_argument& e) {
      msg = e.what();
    }
    INFO("field " << c.field << ": message '" << msg << "'");
    CHECK(msg.find(c.field) != std::string::npos);
  }
  CHECK(parse_activation("relu") == Activation::Relu);
  CHECK(parse_activation("gelu") == Activation::Gelu);
  CHECK(to_string(parse_activation("gelu")) == "gelu");
  CHECK_THROWS_AS(parse_activation("swish"), std::invalid_argument);
  CHECK(parse_activation("swiglu") == Activation::Swiglu);
  CHECK(to_string(Activation::Swiglu) == "swiglu");
  CHECK(parse_norm("none") == Norm::None);
  CHECK(parse_norm("rmsnorm") == Norm::RmsNorm);
  CHECK(to_string(Norm::RmsNorm) == "rmsnorm");
  CHECK_THROWS_AS(parse_norm("layernorm"), std::invalid_argument);
  {  // residual = true on a valid shape: only the equal-width hidden layers get the skip
    MlpSpec r;
    r.widths = {8, 16, 16, 32, 32, 4};
    r.residual = true;
    CHECK_NOTHROW(validate(r));
    CHECK((!residual_at(r, 0) && residual_at(r, 1) && !residual_at(r, 2) && residual_at(r, 3) && !residual_at(r, 4)));
    r.activation = Activation::Swiglu;
    CHECK(weight_rows(r, 1) == 32);
    CHECK(weight_rows(r, 4) == 4);
    CHECK(init_state<float>(r).w[1].size() == 32 * 16);  // [gate; up] x in
  }
  // Weights of the wrong shape are refused.
  MlpSpec s;
  auto st = init_state<double>(s);
  st.w[1].pop_back();
  CHECK_THROWS_AS(train_step<double>(s, st, nullptr), std::invalid_argument);
}

// 6. Wider references. The double reference against mp256 (cpp_bin_float<256>) from the same
//    initialisation and data: mp256's own rounding (2^-256) is nil at this scale, so the
//    difference is the double run's error, bounded as in test 3 with u = 2^-53:
//      ||W_d - W_mp|| / ||W_mp|| <= b_W(k) = c k u (1 + 2 L K rho / (1 - mu)).
//    Its loss then differs by at most B_k = kappa_k b_W(k) + e_eval relative, kappa_k =
//    ||grad L|| ||W|| / L (the loss's condition number in W, first order) and e_eval the
//    double evaluation of the loss at given weights: each of the L GEMMs is within gamma_K
//    |A||B| (Higham), |A||B| / |AB| ~ sqrt(K) for random signs, and dL / L = 2 <r, dY> /
//    ||r||^2 <= 2 ||dY|| / ||r||, so e_eval <= 2 L K^1.5 u ||Y|| / ||r|| (factor 2 spare).
//    The losses are printed with d = floor(-log10(max_k B_k)) significant digits; they
//    must agree in those digits up to one unit in the last (two values within half a unit
//    can round to neighbours), and within B_k at each step. binary128 vs mp256: the same
//    weight bound with u = 2^-113 (its losses are rounded to double on return, so only the
//    weights resolve it). Each wider run must differ from the narrower one (it is not
//    secretly the same arithmetic).
TEST_CASE("mlp: the double and binary128 references agree with mp256 to the digits their rounding predicts",
          "[mlp]") {
  {  // SGD with momentum: the optimizer test 3's bound is derived for
    MlpSpec s = small_spec();
    s.lr = 0.02;
    s.activation = Activation::Gelu;  // exp and erf of every precision in the loop
    const int k_steps = 12;
    auto d = init_state<double>(s);
    auto q = init_state<mlp_binary128>(s);
    auto m = init_state<mlp_mp256>(s);
    const auto L = static_cast<double>(s.widths.size() - 1);
    double K = static_cast<double>(s.batch);
    for (auto w : s.widths) K = std::max(K, static_cast<double>(w));
    const double ud = std::ldexp(1.0, -53), uq = std::ldexp(1.0, -113), c = 2.0;
    // Relative weight difference against mp256, the difference taken in mp256.
    const auto rel = [&](const auto& w) {
      mlp_mp256 num = 0, den = 0;
      for (std::size_t l = 0; l < w.size(); ++l)
        for (std::size_t i = 0; i < w[l].size(); ++i) {
          const mlp_mp256 x = static_cast<mlp_mp256>(w[l][i]) - m.w[l][i];
          num += x * x;
          den += m.w[l][i] * m.w[l][i];
        }
      return std::sqrt(mlp_to_double(num) / mlp_to_double(den));
    };
    double rho = 0, b_max = 0;
    std::vector<double> ld, lm, bound;
    bool d_differs = false, q_differs = false;
    for (int k = 1; k <= k_steps; ++k) {
      Weights wm(m.w.size()), g;
      for (std::size_t l = 0; l < m.w.size(); ++l)
        for (const auto& x : m.w[l]) wm[l].push_back(mlp_to_double(x));
      loss_and_gradients<double>(s, wm, m.step, nullptr, &g);
      rho = std::max(rho, lr_at(s, m.step) * norm_all(g) / norm_all(wm));
      // The bound on the loss of this step (evaluated at the weights before it, step k - 1).
      const double bw_before = k == 1 ? 0.0 : c * (k - 1) * ud * (1.0 + 2.0 * L * K * rho / (1.0 - s.momentum));
      const TestForward tf = test_forward(s, wm, m.step);
      const double kappa = norm_all(g) * norm_all(wm) / tf.loss;
      const double b = kappa * bw_before + 2.0 * L * std::pow(K, 1.5) * ud * tf.y_norm / tf.r_norm;
      ld.push_back(train_step<double>(s, d, nullptr).loss);
      train_step<mlp_binary128>(s, q, nullptr);
      lm.push_back(train_step<mlp_mp256>(s, m, nullptr).loss);
      bound.push_back(b);
      b_max = std::max(b_max, b);
      const double bw = c * k * ud * (1.0 + 2.0 * L * K * rho / (1.0 - s.momentum));
      const double bq = c * k * uq * (1.0 + 2.0 * L * K * rho / (1.0 - s.momentum));
      const double ed = rel(d.w), eq = rel(q.w);
      INFO("step " << k << ": double vs mp256 " << ed << " (bound " << bw << "), binary128 vs mp256 " << eq
                   << " (bound " << bq << ")");
      CHECK(ed <= bw);
      CHECK(eq <= bq);
      d_differs = d_differs || ed > 0;
      q_differs = q_differs || eq > 0;
    }
    CHECK(rho <= (1.0 - s.momentum) / (2.0 * L));  // the small-step condition of test 3
    CHECK(d_differs);
    CHECK(q_differs);
    const int digits = static_cast<int>(std::floor(-std::log10(b_max)));
    INFO("largest loss bound " << b_max << ": " << digits << " digits");
    CHECK(digits >= 8);  // the bound is meaningful (double's 16 digits minus the run's growth)
    for (std::size_t k = 0; k < ld.size(); ++k) {
      INFO("step " << k);
      fp4d::test::check_same_printed_digits(ld[k], lm[k], digits, "double against mp256");
      CHECK(std::abs(ld[k] - lm[k]) <= bound[k] * std::abs(lm[k]));
    }
  }
}

TEST_CASE("mlp: wide reference values are stored exactly as doubles, or refused", "[mlp]") {
  std::vector<mlp_mp256> v;
  mlp_mp256 x = 1;
  for (int i = 0; i < 40; ++i) {
    x = x / 3 - mlp_mp256(i) / 7;  // 256 significant bits, both signs, varied exponents
    v.push_back(x);
  }
  const std::vector<double> d = to_limbs(v, "test");
  REQUIRE(d.size() == v.size() * 5);  // ceil(256 / 53)
  const std::vector<mlp_mp256> back = from_limbs<mlp_mp256>(d, "test");
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(back[i] == v[i]);
  std::vector<mlp_binary128> q{mlp_binary128(1) / 3, -mlp_binary128(2) / 7};
  CHECK(from_limbs<mlp_binary128>(to_limbs(q, "test"), "test") == q);
  // 2^-1000 / 3: its lower limbs would fall below double's smallest subnormal.
  const std::vector<mlp_mp256> tiny{ldexp(mlp_mp256(1), -1000) / 3};
  CHECK_THROWS_AS(to_limbs(tiny, "tiny"), std::runtime_error);
  CHECK(parse_mlp_precision("mp256") == MlpPrecision::Mp256);
  CHECK(to_string(parse_mlp_precision("binary128")) == "binary128");
  CHECK(significand_bits(MlpPrecision::Binary128) == 113);
  CHECK_THROWS_AS(parse_mlp_precision("float80"), std::invalid_argument);
}

// The CPU-only features are refused on another backend before anything is written.
TEST_CASE("mlp: swiglu, rmsnorm and residual are refused on a non-CPU backend", "[mlp]") {
  const std::string path = (std::filesystem::temp_directory_path() / "fp4d_mlp_backend_refusal.h5").string();
  std::filesystem::remove(path);
  for (int f = 0; f < 3; ++f) {
    MlpRunSpec spec;
    spec.model.widths = {16, 32, 32, 8};
    spec.model.batch = 16;
    spec.steps = 2;
    spec.recipes = {"fp32"};
    if (f == 0) spec.model.activation = Activation::Swiglu;
    if (f == 1) spec.model.norm = Norm::RmsNorm;
    if (f == 2) spec.model.residual = true;
    MlpRunControl ctl;
    ctl.path = path;
    ctl.backend = "cuda";
    ctl.backend_is_device = true;
    std::string msg;
    try {
      run_mlp(spec, ctl);
    } catch (const std::invalid_argument& e) {
      msg = e.what();
    }
    INFO("feature " << f << ": '" << msg << "'");
    CHECK(msg.find("--backend cpu only") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(path));
  }
}

// A backend's trainer factory makes every low-precision run (and may take the CPU-only
// features: the CUDA factory falls back to host quantization with its GEMMs).
TEST_CASE("mlp: run_mlp makes its runs with the backend's trainer factory", "[mlp]") {
  const std::string path = (std::filesystem::temp_directory_path() / "fp4d_mlp_factory.h5").string();
  std::filesystem::remove(path);
  MlpRunSpec spec;
  spec.model.widths = {16, 32, 32, 8};
  spec.model.batch = 16;
  spec.model.activation = Activation::Swiglu;
  spec.steps = 3;
  spec.recipes = {"fp32", "nvfp4"};
  MlpRunControl ctl;
  ctl.path = path;
  ctl.backend = "cuda";
  ctl.backend_is_device = true;
  std::vector<std::string> made;
  ctl.trainer = [&](const MlpSpec& m, const RecipeGemmOptions& o, const MlpState<float>& st) {
    made.push_back(o.recipe);
    return make_cpu_trainer(m, o, st);
  };
  CHECK(run_mlp(spec, ctl) == MlpRunOutcome::Complete);
  CHECK(made == std::vector<std::string>{"fp32", "nvfp4"});
  std::filesystem::remove(path);
}


// The runner's concurrent stepping (one host thread per run, sim/parallel_runs.hpp) writes
// the trace the sequential loop writes, bit for bit: three recipes, operand statistics every
// step, compares and checkpoints in between. (On the CPU the runs' OpenMP GEMMs then share
// the cores; the runner uses it by itself only for device runs.)
TEST_CASE("mlp: run_mlp with concurrent runs writes the sequential trace bit for bit", "[mlp]") {
  MlpRunSpec spec;
  spec.model.widths = {16, 32, 32, 8};
  spec.model.batch = 16;
  spec.steps = 12;
  spec.compare_every = 4;
  spec.flush_every = 5;
  spec.recipes = {"nvfp4", "bf16", "mxfp4"};
  test::Datasets traces[2];
  for (const bool concurrent : {false, true}) {
    MlpRunControl ctl;
    ctl.concurrent_runs = concurrent;
    traces[concurrent] = test::run_mlp_datasets(spec, ctl, "fp4d_mlp_concurrent_" + std::to_string(concurrent));
  }
  CHECK(traces[0].count("/mlp/runs/mxfp4/operand_nmse") == 1);
  test::check_same_datasets(traces[0], traces[1]);
}

// forward_backward keeps its buffers between steps (one set per thread); a GemmFn that itself
// evaluates the model on the same thread (nested forward_backward and train_step) must not
// disturb the outer step: the result equals the plain step's bit for bit.
TEST_CASE("mlp: a nested evaluation inside a GemmFn leaves the outer step unchanged", "[mlp]") {
  const MlpSpec s = small_spec();
  auto plain = init_state<float>(s), viafn = init_state<float>(s);
  auto side = init_state<float>(s);
  int nested_calls = 0;
  GemmFn fn = [&](const GemmCall& c, const Matrix& a, const Matrix& b) {
    // A different model evaluation in the middle of the step (another step index, another
    // set of weights): fills the thread's buffers if they were shared.
    std::vector<std::vector<float>> grads;
    (void)loss_and_gradients<float>(s, side.w, 1000 + c.step, nullptr, &grads);
    (void)train_step<float>(s, side, nullptr);
    ++nested_calls;
    return plain_float32_product(c.role, a, b);
  };
  for (int k = 0; k < 3; ++k) {
    const StepStats x = train_step<float>(s, plain, nullptr);
    const StepStats y = train_step<float>(s, viafn, fn);
    CHECK(std::memcmp(&x.loss, &y.loss, sizeof(double)) == 0);
    REQUIRE(state_bit_equal(plain, viafn));
  }
  CHECK(nested_calls > 0);
}

// Config errors of the mlp workload name the file, the line and the key, including those that
// MlpSpec's validate finds and an unknown edge recipe.
TEST_CASE("mlp: parse_mlp_run names the key and line of a bad value", "[mlp]") {
  using fp4d_test::config_error_of;
  const std::string head = "workload = \"mlp\"\n[mlp]\nwidths = [16, 32, 8]\nbatch = 16\nsteps = 10\n";
  const auto error_of = [](const std::string& text, std::int64_t steps = 0) {
    return config_error_of([&] {
      Config c = Config::parse(text, "t.toml");
      (void)parse_mlp_run(c, steps);
    });
  };
  CHECK(error_of(head + "lr = -1\n") == "t.toml:6: 'mlp.lr': must be > 0 and finite");
  CHECK(error_of(head + "momentum = 1.5\n") == "t.toml:6: 'mlp.momentum': must be in [0, 1)");
  CHECK(error_of(head + "warmup_steps = 20\n", 5) == "t.toml:6: 'mlp.warmup_steps': must be <= total_steps (with --steps 5)");
  const std::string e = error_of(head + "[recipes]\nnames = [\"nvfp4\"]\nedge_recipe = \"nvfp4x\"\n");
  CHECK(e.rfind("t.toml:8: 'recipes.edge_recipe': unknown GEMM recipe 'nvfp4x'", 0) == 0);
  CHECK(error_of(head + "seed = -3\n") == "t.toml:6: 'mlp.seed': must be >= 0");
  CHECK(error_of(head + "[recipes]\nnames = [\"nvfp4\"]\nhigh_precision_layers = [0, 1, 0]\n") ==
        "t.toml:8: 'recipes.high_precision_layers': layer 0 is listed twice");
  CHECK(error_of(head + "[recipes]\nnames = [\"nvfp4\"]\nhigh_precision_layers = [0, 1]\n").empty());
  CHECK(error_of(head).empty());
}
