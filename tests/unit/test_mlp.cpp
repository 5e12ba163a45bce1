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
#include <set>
#include <string>
#include <vector>

#include "sim/mlp.hpp"
#include "support/catch.hpp"

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
  std::vector<bool> positive;  // z > 0 for every hidden pre-activation, in order
};

TestForward test_forward(const MlpSpec& s, const Weights& w, std::int64_t step) {
  const Batch b = make_batch(s, step);
  const std::size_t L = s.widths.size() - 1;
  const std::int64_t M = s.batch;
  std::vector<double> h(b.x.data.begin(), b.x.data.end());
  TestForward r;
  for (std::size_t l = 0; l < L; ++l) {
    const std::int64_t in = s.widths[l], out = s.widths[l + 1];
    std::vector<double> z(static_cast<std::size_t>(M * out));
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < out; ++j) {
        double acc = 0;
        for (std::int64_t k = 0; k < in; ++k) acc += h[i * in + k] * w[l][j * in + k];
        z[i * out + j] = acc;
      }
    if (l + 1 == L) {
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
      double sum = 0;
      for (std::size_t i = 0; i < z.size(); ++i) sum += (z[i] - b.t.data[i]) * (z[i] - b.t.data[i]);
      r.loss = 0.5 * sum / static_cast<double>(z.size());
      break;
    }
    h.resize(z.size());
    for (std::size_t i = 0; i < z.size(); ++i) {
      r.positive.push_back(z[i] > 0);
      h[i] = s.activation == Activation::Relu ? (z[i] > 0 ? z[i] : 0.0)
                                              : 0.5 * z[i] * (1.0 + std::erf(z[i] / std::sqrt(2.0)));
    }
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

// 1. Gradient check. Central differences with step h on f(w) = loss:
//      |fd - g| <= h^2 |f'''| / 6 + delta_f / h,
//    delta_f the absolute rounding error of evaluating f in double. Here h = 2^-18 ~ 3.8e-6
//    ~ cbrt(u), u = 2^-53, which balances the two terms. delta_f: the forward pass has
//    3 layers with reductions of <= 7 terms and a 12-term loss sum, so its relative error is
//    at most a few tens of u with respect to the magnitudes involved (|Y|, |T| = O(1), loss
//    O(1)); allowing delta_f <= 1000 u (a generous factor for the cancellation in Y - T)
//    gives delta_f / h <= 1000 * 1.1e-16 / 3.8e-6 ~ 3e-8. Truncation: with relu and a fixed
//    activation pattern Y is linear in any single weight (each weight appears once on every
//    path), so f is quadratic along a coordinate and f''' = 0; with gelu |f'''| is a product
//    of O(1) weights, inputs and gelu derivatives (|gelu'''| < 1), far below 1e3, giving
//    h^2 / 6 * 1e3 ~ 2.4e-9. Tolerance per coordinate: 5e-8 absolute, and the whole gradient
//    within 1e-6 relative (a wrong backward pass - a missing act', a transposed dW - is off
//    by O(|g|) ~ 1e-3 .. 1e-1). Relu coordinates whose stencil w +- h changes the sign of
//    any pre-activation are skipped explicitly (at most 10% allowed).
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
    const auto st = init_state<double>(s);
    const std::int64_t step = 2;
    Weights g;
    const double f0 = loss_and_gradients<double>(s, st.w, step, nullptr, &g);
    const TestForward base = test_forward(s, st.w, step);
    REQUIRE(std::abs(f0 - base.loss) <= 1e-13 * base.loss);  // the forward pass, independently
    REQUIRE(g.size() == 3);

    const double h = std::ldexp(1.0, -18);
    int checked = 0, skipped = 0;
    double err2 = 0, g2 = 0, max_abs = 0;
    for (std::size_t l = 0; l < st.w.size(); ++l)
      for (std::size_t i = 0; i < st.w[l].size(); ++i) {
        Weights wp = st.w, wm = st.w;
        wp[l][i] += h;
        wm[l][i] -= h;
        if (act == Activation::Relu && (test_forward(s, wp, step).positive != base.positive ||
                                        test_forward(s, wm, step).positive != base.positive)) {
          ++skipped;
          continue;
        }
        const double fp = loss_and_gradients<double>(s, wp, step, nullptr, nullptr);
        const double fm = loss_and_gradients<double>(s, wm, step, nullptr, nullptr);
        const double fd = (fp - fm) / (wp[l][i] - wm[l][i]);
        const double e = std::abs(fd - g[l][i]);
        INFO("layer " << l << " element " << i << " fd " << fd << " backward " << g[l][i]);
        CHECK(e <= 5e-8);
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
}

// 2. The GemmFn plumbing: a GemmFn computing the plain float32 product in the documented
//    orientation of each role (c = 0; c += a b in ascending reduction index) reproduces the
//    built-in float path bit for bit, and is called with the right roles, layers, steps and
//    operand shapes, in the order fprop 0..L-1, then (wgrad l, dgrad l) for l = L-1..1, wgrad 0.
TEST_CASE("mlp: a plain float32 GemmFn reproduces the built-in float path bit for bit", "[mlp]") {
  for (const Optimizer opt : {Optimizer::Sgd, Optimizer::AdamW}) {
    MlpSpec s = small_spec();
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
      Matrix r;
      switch (c.role) {
        case GemmRole::Fprop:  // H [M x in], W [out x in] -> M x out
          REQUIRE((a.rows == M && a.cols == in && b.rows == out && b.cols == in));
          r = Matrix(M, out);
          for (std::int64_t i = 0; i < M; ++i)
            for (std::int64_t j = 0; j < out; ++j) {
              float acc = 0.0f;
              for (std::int64_t k = 0; k < in; ++k) acc += a(i, k) * b(j, k);
              r(i, j) = acc;
            }
          break;
        case GemmRole::Dgrad:  // dZ [M x out], W [out x in] -> M x in
          REQUIRE((a.rows == M && a.cols == out && b.rows == out && b.cols == in));
          r = Matrix(M, in);
          for (std::int64_t i = 0; i < M; ++i)
            for (std::int64_t j = 0; j < in; ++j) {
              float acc = 0.0f;
              for (std::int64_t k = 0; k < out; ++k) acc += a(i, k) * b(k, j);
              r(i, j) = acc;
            }
          break;
        case GemmRole::Wgrad:  // H [M x in], dZ [M x out] -> in x out (= dW^T)
          REQUIRE((a.rows == M && a.cols == in && b.rows == M && b.cols == out));
          r = Matrix(in, out);
          for (std::int64_t i = 0; i < in; ++i)
            for (std::int64_t j = 0; j < out; ++j) {
              float acc = 0.0f;
              for (std::int64_t k = 0; k < M; ++k) acc += a(k, i) * b(k, j);
              r(i, j) = acc;
            }
          break;
      }
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
TEST_CASE("mlp: float32 drifts from the double reference within the float32 rounding bound", "[mlp]") {
  MlpSpec s = small_spec();
  s.lr = 0.02;
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

// 4. Determinism and schedules.
TEST_CASE("mlp: runs, batches and schedules are deterministic", "[mlp]") {
  SECTION("two runs with one seed are bit-identical, whatever the thread count") {
    for (const Optimizer opt : {Optimizer::Sgd, Optimizer::AdamW}) {
      MlpSpec s;  // the default size: large enough for the OpenMP regions to split
      s.optimizer = opt;
      s.lr = opt == Optimizer::Sgd ? 0.05 : 1e-3;
      s.activation = Activation::Gelu;
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
  for (const Optimizer opt : {Optimizer::Sgd, Optimizer::AdamW}) {
    MlpSpec s = small_spec();
    s.widths = {16, 64, 64, 4};
    s.optimizer = opt;
    s.lr = opt == Optimizer::Sgd ? 0.05 : 3e-3;
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
  // Weights of the wrong shape are refused.
  MlpSpec s;
  auto st = init_state<double>(s);
  st.w[1].pop_back();
  CHECK_THROWS_AS(train_step<double>(s, st, nullptr), std::invalid_argument);
}

// Timing of one float32 train_step of the default model on one thread (not run by ctest).
TEST_CASE("mlp: train_step timing", "[mlp][.bench]") {
  MlpSpec s;  // {64, 256, 256, 16}, batch 64
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  auto st = init_state<float>(s);
  train_step<float>(s, st, nullptr);
  const int n = 200;
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < n; ++k) train_step<float>(s, st, nullptr);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / n;
  auto sd = init_state<double>(s);
  const auto t1 = std::chrono::steady_clock::now();
  for (int k = 0; k < n; ++k) train_step<double>(s, sd, nullptr);
  const double msd = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count() / n;
  omp_set_num_threads(threads);
  std::printf("train_step {64,256,256,16} batch 64, one thread: float %.3f ms, double %.3f ms\n", ms, msd);
  CHECK(ms < 10.0);
}
