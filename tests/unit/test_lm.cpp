// The `lm` model (sim/lm.hpp, model/lm_spec.hpp): the forward pass against an independent
// naive one, every parameter's backward against finite differences, causality, RoPE and the
// softmax, the GemmFn plumbing, float32 vs double within a rounding-derived bound, the optimizer
// step, the orders of the sums the GPU step shares (model/sum_order.hpp), learning, determinism, the spec's layout, validation and tiling messages, and the wide
// references: binary128 against double and mp256 within rounding-derived bounds, and binary128
// gradients against binary128 finite differences.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "model/mlp_spec.hpp"
#include "model/recipe_gemm.hpp"
#include "model/tree_sum.hpp"
#include "sim/lm.hpp"
#include "sim/lm_attention.hpp"
#include "sim/lm_mamba.hpp"
#include "sim/mlp_precision.hpp"
#include "support/catch.hpp"
#include "support/thrown.hpp"
#include "support/printed_digits.hpp"
#include "util/parallel_worth.hpp"

using namespace fp4d;

namespace {

using Params = std::vector<std::vector<double>>;
const double kU = std::ldexp(1.0, -53);   // double's unit roundoff
const double kUf = std::ldexp(1.0, -24);  // float32's

// Deterministic token ids (an LCG: the model must not care where its tokens come from).
std::vector<std::int32_t> random_tokens(const LmSpec& s, std::int64_t batch, std::uint32_t seed) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(batch * (s.seq_len + 1)));
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (auto& v : t) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<std::int32_t>((x >> 8) % static_cast<std::uint32_t>(s.vocab));
  }
  return t;
}

std::size_t param_index(const LmSpec& s, const std::string& name) {
  const auto info = lm_params(s);
  for (std::size_t i = 0; i < info.size(); ++i)
    if (info[i].name == name) return i;
  FAIL("no parameter " << name);
  return 0;
}

// ---- an independent forward pass: naive loops in double, from lm_spec.hpp's conventions ----
double naive_loss(const LmSpec& s, const Params& p, const std::vector<std::int32_t>& tok, std::int64_t batch,
                  std::vector<double>* logits_out = nullptr) {
  const std::int64_t S = s.seq_len, d = s.d_model, H = s.heads, G = s.kv_heads, hd = d / H, V = s.vocab, F = s.ffn;
  const std::int64_t M = batch * S;
  const auto& E = p[param_index(s, "embedding")];
  std::vector<double> h(static_cast<std::size_t>(M * d));
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < d; ++j) h[i * d + j] = E[tok[(i / S) * (S + 1) + i % S] * d + j];
  const auto rmsnorm = [&](const std::vector<double>& x, const std::vector<double>& g) {
    std::vector<double> y(x.size());
    for (std::int64_t i = 0; i < M; ++i) {
      double ms = 0;
      for (std::int64_t j = 0; j < d; ++j) ms += x[i * d + j] * x[i * d + j];
      const double r = 1.0 / std::sqrt(ms / static_cast<double>(d) + s.norm_eps);
      for (std::int64_t j = 0; j < d; ++j) y[i * d + j] = x[i * d + j] * r * g[j];
    }
    return y;
  };
  // y [M x rows] = x [M x cols] W^T for rows r0 .. r0 + rows - 1 of W (cols wide).
  const auto linear = [&](const std::vector<double>& x, const std::vector<double>& W, std::int64_t r0,
                          std::int64_t rows, std::int64_t cols) {
    std::vector<double> y(static_cast<std::size_t>(M * rows));
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t r = 0; r < rows; ++r) {
        double acc = 0;
        for (std::int64_t c = 0; c < cols; ++c) acc += x[i * cols + c] * W[(r0 + r) * cols + c];
        y[i * rows + r] = acc;
      }
    return y;
  };
  const auto rope = [&](std::vector<double>& x, std::int64_t heads) {
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t hh = 0; hh < heads; ++hh)
        for (std::int64_t k = 0; k < hd / 2; ++k) {
          const double a = static_cast<double>(i % S) * std::pow(s.rope_base, -2.0 * k / hd);
          double& x0 = x[i * heads * hd + hh * hd + 2 * k];
          double& x1 = x[i * heads * hd + hh * hd + 2 * k + 1];
          const double y0 = x0 * std::cos(a) - x1 * std::sin(a), y1 = x0 * std::sin(a) + x1 * std::cos(a);
          x0 = y0, x1 = y1;
        }
  };
  for (std::size_t b = 0; b < s.pattern.size(); ++b) {
    const std::string pre = "blocks." + std::to_string(b) + ".";
    const std::vector<double> a = rmsnorm(h, p[param_index(s, pre + "norm")]);
    std::vector<double> z;
    if (s.pattern[b] == 'A') {
      std::vector<double> q, k, v;
      if (s.fused_qkv) {
        const auto& W = p[param_index(s, pre + "qkv")];
        q = linear(a, W, 0, H * hd, d), k = linear(a, W, H * hd, G * hd, d), v = linear(a, W, (H + G) * hd, G * hd, d);
      } else {
        q = linear(a, p[param_index(s, pre + "q")], 0, H * hd, d);
        k = linear(a, p[param_index(s, pre + "k")], 0, G * hd, d);
        v = linear(a, p[param_index(s, pre + "v")], 0, G * hd, d);
      }
      rope(q, H);
      rope(k, G);
      std::vector<double> o(static_cast<std::size_t>(M * H * hd), 0.0);
      for (std::int64_t bb = 0; bb < batch; ++bb)
        for (std::int64_t hh = 0; hh < H; ++hh) {
          const std::int64_t g = hh / (H / G);
          for (std::int64_t t = 0; t < S; ++t) {
            std::vector<double> sc(static_cast<std::size_t>(t + 1));
            double mx = -1e300, sum = 0;
            for (std::int64_t u = 0; u <= t; ++u) {
              double acc = 0;
              for (std::int64_t j = 0; j < hd; ++j)
                acc += q[(bb * S + t) * H * hd + hh * hd + j] * k[(bb * S + u) * G * hd + g * hd + j];
              sc[u] = acc / std::sqrt(static_cast<double>(hd));
              mx = std::max(mx, sc[u]);
            }
            for (auto& x : sc) sum += (x = std::exp(x - mx));
            for (std::int64_t u = 0; u <= t; ++u)
              for (std::int64_t j = 0; j < hd; ++j)
                o[(bb * S + t) * H * hd + hh * hd + j] += sc[u] / sum * v[(bb * S + u) * G * hd + g * hd + j];
          }
        }
      z = linear(o, p[param_index(s, pre + "o")], 0, d, H * hd);
    } else {
      const std::vector<double> gu = linear(a, p[param_index(s, pre + "gateup")], 0, 2 * F, d);
      std::vector<double> f(static_cast<std::size_t>(M * F));
      for (std::int64_t i = 0; i < M; ++i)
        for (std::int64_t j = 0; j < F; ++j) {
          const double g = gu[i * 2 * F + j], u = gu[i * 2 * F + F + j];
          f[i * F + j] = g / (1.0 + std::exp(-g)) * u;
        }
      z = linear(f, p[param_index(s, pre + "down")], 0, d, F);
    }
    for (std::size_t i = 0; i < h.size(); ++i) h[i] += z[i];
  }
  const std::vector<double> a = rmsnorm(h, p[param_index(s, "final_norm")]);
  const std::vector<double> logits = linear(a, p[param_index(s, s.tied_embeddings ? "embedding" : "head")], 0, V, d);
  if (logits_out) *logits_out = logits;
  double loss = 0;
  for (std::int64_t i = 0; i < M; ++i) {
    double mx = -1e300, se = 0;
    for (std::int64_t j = 0; j < V; ++j) mx = std::max(mx, logits[i * V + j]);
    for (std::int64_t j = 0; j < V; ++j) se += std::exp(logits[i * V + j] - mx);
    loss += mx + std::log(se) - logits[i * V + tok[(i / S) * (S + 1) + i % S + 1]];
  }
  return loss / static_cast<double>(M);
}

LmSpec tiny_spec() {
  LmSpec s;
  s.vocab = 16;
  s.d_model = 8;
  s.heads = 2;
  s.kv_heads = 2;
  s.ffn = 12;
  s.seq_len = 5;
  s.batch = 2;
  s.pattern = "AFA";
  s.init = "scaled";
  s.seed = 7;
  return s;
}

// The tiny model's parameters with the gains moved off 1 (so that their products matter).
Params tiny_params(const LmSpec& s) {
  Params p = init_lm_state<double>(s).p;
  const auto info = lm_params(s);
  for (std::size_t i = 0; i < info.size(); ++i)
    if (info[i].kind == LmParamKind::NormGain)
      for (std::size_t j = 0; j < p[i].size(); ++j) p[i][j] = 1.0 + 0.25 * std::sin(3.0 * static_cast<double>(i + j));
  return p;
}

}  // namespace

// 1. The forward pass against the naive one, and every parameter's gradient against central
//    differences D(h) = (f(w + h) - f(w - h)) / 2h in double, f = the loss.
//    Truncation: D(h) - f' = h^2 f'''(xi) / 6 for some xi in [w - h, w + h]. f''' is measured
//    per coordinate by the five-point third difference at H = 2^-9,
//      T3 = (f(w + 2H) - 2 f(w + H) + 2 f(w - H) - f(w - 2H)) / (2 H^3) = f''' + H^2 f^(5) / 4 + ...,
//    and bounded by 2 |T3| + 1 (covering the estimate's own truncation and the variation of
//    f''' between w and xi). H is small enough that H^2 f^(5) / 4 stays well below f''' also
//    through a Mamba block's decays exp(dt A), whose derivatives grow like |A|^k (|A| <= 16:
//    at H = 2^-6 the estimate missed an f''' of 1.5e4 by a factor 7), and large enough that its
//    own rounding, delta_f / H^3 < 1e-4, stays negligible.
//    Rounding: each f is computed with an absolute error delta_f. The loss is a mean of
//    logsumexp(l) - l_y, 1-Lipschitz in each logit row's max norm; each logit comes out of a
//    chain of N <= 16 reductions (norm, QKV, QK^T, PV, o, gate-up, down per block, final norm,
//    head) of length K <= 16 (d, ffn, seq, vocab), each within gamma_K ~ K u of the sum of
//    its terms' magnitudes, which the norms keep O(1) relative to the values: delta_f <= N K u
//    max(1, |f|) <= 256 u max(1, |f|); doubled: 512 u max(1, |f|). Two evaluations, divided
//    by 2h: a rounding error <= delta_f / h in D(h).
//    h = 2^-14: the rounding term is ~ 512 * 1.1e-16 * 3 / 6.1e-5 ~ 2.8e-9, the truncation term
//    6.2e-10 (2 |T3| + 1): every tolerance is ~ 1e-8 where the gradients are 1e-3 .. 1, so a
//    wrong term of the backward (a missing RoPE transpose, GQA sum, gain, norm projection,
//    tied-head sum, softmax term) is off by far more.
namespace {
// (The naive pass knows A and F blocks; the Mamba mixer has its own naive oracle in
// test_lm_mamba.cpp, so patterns with M check the gradients only.)
void check_gradients(const LmSpec& s) {
  const Params p = tiny_params(s);
  const auto tok = random_tokens(s, s.batch, 3);
  const auto info = lm_params(s);
  Params g;
  const double f0 = lm_loss_and_gradients<double>(s, p, tok.data(), s.batch, nullptr, &g, 0);
  if (s.pattern.find('M') == std::string::npos) {
    const double naive = naive_loss(s, p, tok, s.batch);
    INFO("loss " << f0 << " naive " << naive);
    REQUIRE(std::abs(f0 - naive) <= 512 * kU * std::max(1.0, f0));
  }
  REQUIRE(g.size() == info.size());
  const double h = std::ldexp(1.0, -14), H = std::ldexp(1.0, -9);
  const double delta_f = 512 * kU * std::max(1.0, std::abs(f0));
  const auto f_at = [&](std::size_t i, std::size_t j, double dx) {
    Params q = p;
    q[i][j] += dx;  // exact: |w| = O(1), dx a power of 2 >= 2^-14
    return lm_loss_and_gradients<double>(s, q, tok.data(), s.batch, nullptr, nullptr, 0);
  };
  for (std::size_t i = 0; i < info.size(); ++i) {
    REQUIRE(g[i].size() == p[i].size());
    double err2 = 0, g2 = 0, worst = 0;
    for (std::size_t j = 0; j < p[i].size(); ++j) {
      const double fd = (f_at(i, j, h) - f_at(i, j, -h)) / (2 * h);
      const double t3 = (f_at(i, j, 2 * H) - 2 * f_at(i, j, H) + 2 * f_at(i, j, -H) - f_at(i, j, -2 * H)) /
                        (2 * H * H * H);
      const double tol = h * h * (2 * std::abs(t3) + 1) / 6 + delta_f / h;
      const double e = std::abs(fd - g[i][j]);
      INFO(info[i].name << " element " << j << " fd " << fd << " backward " << g[i][j] << " f''' ~ " << t3
                        << " tolerance " << tol);
      CHECK(e <= tol);
      worst = std::max(worst, e / tol);
      err2 += e * e;
      g2 += g[i][j] * g[i][j];
    }
    INFO(info[i].name << ": |g| " << std::sqrt(g2) << ", worst error / tolerance " << worst);
    CHECK(g2 > 0);  // every parameter kind takes part: the comparison is not 0 = 0
  }
}

// A variant of the tiny model: fused or separate QKV, tied or untied head, kv heads, pattern.
struct Variant {
  bool fused, tied;
  std::int64_t kv_heads;
  const char* pattern;
};
LmSpec tiny_spec(const Variant& v) {
  LmSpec s = tiny_spec();
  s.fused_qkv = v.fused;
  s.tied_embeddings = v.tied;
  s.kv_heads = v.kv_heads;
  s.pattern = v.pattern;
  return s;
}
}  // namespace

TEST_CASE("lm: forward matches a naive pass; every gradient matches central differences", "[lm]") {
  for (const Variant v : {Variant{true, false, 2, "AFA"}, Variant{false, true, 1, "AFA"}, Variant{true, true, 1, "FA"},
                          Variant{false, false, 2, "FAF"}}) {
    const LmSpec s = tiny_spec(v);
    INFO("fused " << v.fused << " tied " << v.tied << " kv_heads " << v.kv_heads << " pattern " << v.pattern);
    check_gradients(s);
  }
}

TEST_CASE("lm: every gradient of Mamba-2 and hybrid stacks matches central differences", "[lm]") {
  // The tiny model with mixers of 4 heads of 4 channels (d_inner 16), state 3, 2 groups; chunk
  // 5 (one chunk) and 1 (the plain recurrence), conv width 4 and 3 (the causal zero padding
  // takes part at the first width - 1 positions).
  for (const char* pattern : {"MF", "MFA", "AM"}) {
    for (const std::int64_t chunk : {5, 1}) {
      LmSpec s = tiny_spec();
      s.pattern = pattern;
      s.mamba.head_dim = 4, s.mamba.state = 3, s.mamba.groups = 2, s.mamba.chunk = chunk;
      s.mamba.conv_width = chunk == 1 ? 3 : 4;
      INFO("pattern " << pattern << " chunk " << chunk);
      check_gradients(s);
    }
  }
}

// 2. Causality: changing input token t changes no logit at positions < t of its sequence, no
//    logit of another sequence, and no loss term at positions < t - 1 (position t - 1 has
//    token t as its target) - bit for bit, in the reference, in the float run with BF16
//    attention, and through a float32 GemmFn (the plain recipe products are row-wise).
TEST_CASE("lm: changing token t changes nothing before t", "[lm]") {
  // Also for Mamba-2 blocks (the conv and the scan must be causal; chunk 4 of 8 positions makes
  // a change cross a chunk boundary) and a hybrid.
  for (const char* pattern : {"AFAF", "MFMF", "MFAF"}) {
  INFO("pattern " << pattern);
  LmSpec s;
  s.vocab = 32, s.d_model = 16, s.heads = 2, s.kv_heads = 1, s.ffn = 32, s.seq_len = 8, s.batch = 2;
  s.pattern = pattern;
  s.mamba.head_dim = 4, s.mamba.state = 4, s.mamba.groups = 2, s.mamba.chunk = 4;
  s.init = "scaled";
  RecipeGemmOptions o;
  o.recipe = "fp32";
  RecipeGemm fp32(o, static_cast<int>(lm_linears(s).size()));
  const auto base = random_tokens(s, s.batch, 9);
  const std::int64_t S = s.seq_len, V = s.vocab;
  const auto term = [&](const auto& logits, const std::vector<std::int32_t>& tok, std::int64_t row) {
    double mx = -1e300, se = 0;
    for (std::int64_t j = 0; j < V; ++j) mx = std::max(mx, static_cast<double>(logits[row * V + j]));
    for (std::int64_t j = 0; j < V; ++j) se += std::exp(static_cast<double>(logits[row * V + j]) - mx);
    return mx + std::log(se) - static_cast<double>(logits[row * V + tok[(row / S) * (S + 1) + row % S + 1]]);
  };
  const auto check = [&](const auto& run) {
    const auto l0 = run(base);
    for (std::int64_t t = 1; t < S; ++t) {
      auto tok = base;
      tok[static_cast<std::size_t>(t)] = (tok[static_cast<std::size_t>(t)] + 5) % static_cast<std::int32_t>(V);
      const auto l1 = run(tok);
      INFO("changed position " << t);
      using E = typename std::decay_t<decltype(l0)>::value_type;
      CHECK(std::memcmp(l0.data(), l1.data(), static_cast<std::size_t>(t * V) * sizeof(E)) == 0);
      CHECK(std::memcmp(l0.data() + t * V, l1.data() + t * V, static_cast<std::size_t>(V) * sizeof(E)) != 0);
      CHECK(std::memcmp(l0.data() + S * V, l1.data() + S * V, static_cast<std::size_t>(S * V) * sizeof(E)) == 0);
      for (std::int64_t r = 0; r + 1 < t; ++r) CHECK(term(l0, base, r) == term(l1, tok, r));
      CHECK(term(l0, base, t - 1) != term(l1, tok, t - 1));
    }
  };
  const auto pd = init_lm_state<double>(s).p;
  const auto pf = init_lm_state<float>(s).p;
  check([&](const std::vector<std::int32_t>& t) {
    return lm_logits<double>(s, pd, t.data(), s.batch, nullptr, 0, LmPrecision{false});
  });
  check([&](const std::vector<std::int32_t>& t) {
    return lm_logits<float>(s, pf, t.data(), s.batch, nullptr, 0, LmPrecision{true});
  });
  check([&](const std::vector<std::int32_t>& t) {
    return lm_logits<float>(s, pf, t.data(), s.batch, fp32.fn(), 0, LmPrecision{true});
  });
  }
}

// 3. RoPE and the softmax.
//    RoPE: R(m)^T R(n) = R(n - m) in exact arithmetic, so q_m . k_n depends on n - m only. In
//    double the table's angles t theta (theta <= 1, t <= 63) are rounded with an absolute
//    error <= 63 u and cos/sin add <= 1 ulp: each table entry is off by <= 64 u. A rotated
//    component x0 c - x1 s is then off by <= 2 max|x| (64 u + 2 u), and a dot of hd such
//    components, summed in double, by <= hd (2 * 2 * 66 u + hd u) max|q| max|k| * 2 (both
//    factors rotated) <= 8 hd (66 + hd) u max|q| max|k|: the bound below.
TEST_CASE("lm: RoPE depends on relative positions only; softmax rows sum to 1", "[lm]") {
  const std::int64_t seq = 64, hd = 8;
  const auto table = rope_table<double>(seq, hd, 10000.0);
  // Pinned convention: pair (0, 1) of a unit vector at position t turns by t theta_0 = t,
  // pair (2, 3) by t theta_1 = t 10000^(-2/8); position 0 is the identity.
  std::vector<double> e(static_cast<std::size_t>(seq * hd), 0.0);
  for (std::int64_t t = 0; t < seq; ++t) e[t * hd] = 1.0, e[t * hd + 2] = 1.0;
  rope_rotate(table, e.data(), seq, 1, false);
  CHECK(e[0] == 1.0);
  CHECK(e[1] == 0.0);
  CHECK(e[3 * hd] == std::cos(3.0));
  CHECK(e[3 * hd + 1] == std::sin(3.0));
  CHECK(std::abs(e[5 * hd + 2] - std::cos(5.0 * std::pow(10000.0, -0.25))) <= 4 * kU);
  CHECK(std::abs(e[5 * hd + 3] - std::sin(5.0 * std::pow(10000.0, -0.25))) <= 4 * kU);
  // The inverse rotation undoes the rotation (up to rounding).
  rope_rotate(table, e.data(), seq, 1, true);
  for (std::int64_t t = 0; t < seq; ++t) CHECK(std::abs(e[t * hd] - 1.0) <= 8 * kU);

  std::vector<double> q(static_cast<std::size_t>(hd)), k(q.size());
  for (std::int64_t j = 0; j < hd; ++j) q[j] = std::sin(1.0 + 7.0 * j), k[j] = std::cos(2.0 + 3.0 * j);
  const auto at = [&](const std::vector<double>& x, std::int64_t pos) {
    std::vector<double> rows(static_cast<std::size_t>(seq * hd), 0.0);
    std::copy(x.begin(), x.end(), rows.begin() + pos * hd);
    rope_rotate(table, rows.data(), seq, 1, false);
    return std::vector<double>(rows.begin() + pos * hd, rows.begin() + (pos + 1) * hd);
  };
  const auto dot = [&](std::int64_t m, std::int64_t n) {
    const auto a = at(q, m), b = at(k, n);
    double s = 0;
    for (std::int64_t j = 0; j < hd; ++j) s += a[j] * b[j];
    return s;
  };
  const double bound = 8.0 * hd * (66 + hd) * kU;  // max|q|, max|k| <= 1
  for (const std::int64_t off : {0, 1, 3, 17}) {
    const double ref = dot(off, 0);
    for (const std::int64_t m : {off + 5, off + 20, std::int64_t{63}}) {
      INFO("offset " << off << " m " << m);
      CHECK(std::abs(dot(m, m - off) - ref) <= bound);
    }
  }
  CHECK(std::abs(dot(3, 0) - dot(4, 0)) > 1e-3);  // the rotation does depend on the offset

  // Softmax rows: non-negative, zero above the diagonal, summing to 1 within the rounding of a
  // sum of t + 1 terms each rounded once (<= (t + 2) u).
  AttentionShape sh{2, 16, 4, 2, 8};
  std::vector<double> qq(static_cast<std::size_t>(sh.rows() * sh.heads * sh.head_dim));
  std::vector<double> kk(static_cast<std::size_t>(sh.rows() * sh.kv_heads * sh.head_dim));
  for (std::size_t i = 0; i < qq.size(); ++i) qq[i] = 3.0 * std::sin(0.37 * i);
  for (std::size_t i = 0; i < kk.size(); ++i) kk[i] = 3.0 * std::cos(0.91 * i);
  std::vector<float> qf(qq.begin(), qq.end()), kf(kk.begin(), kk.end());
  for (std::int64_t b = 0; b < sh.batch; ++b)
    for (std::int64_t hh = 0; hh < sh.heads; ++hh) {
      const auto P = attention_probabilities<double>(sh, qq.data(), kk.data(), false, b, hh);
      const auto Pf = attention_probabilities<float>(sh, qf.data(), kf.data(), true, b, hh);
      for (std::int64_t t = 0; t < sh.seq; ++t) {
        double sum = 0, sumf = 0;
        for (std::int64_t u = 0; u < sh.seq; ++u) {
          const double p = P[t * sh.seq + u];
          CHECK(p >= 0.0);
          if (u > t) CHECK(p == 0.0);
          if (u > t) CHECK(Pf[t * sh.seq + u] == 0.0f);
          sum += p;
          sumf += Pf[t * sh.seq + u];
        }
        CHECK(std::abs(sum - 1.0) <= (t + 2) * kU * 2);
        CHECK(std::abs(sumf - 1.0) <= (t + 2) * kUf * 2);
      }
    }
}

namespace {
// The plain float32 product of a GemmFn call in its role's documented orientation
// (mlp_spec.hpp): c = 0; c += a b in ascending reduction index.
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

template <class T>
bool bit_equal(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(T)) != 0) return false;
  return true;
}
template <class T>
bool state_bit_equal(const LmState<T>& a, const LmState<T>& b) {
  return a.step == b.step && bit_equal(a.p, b.p) && bit_equal(a.m, b.m) && bit_equal(a.v, b.v);
}
}  // namespace

// 4. The GemmFn plumbing: a GemmFn computing the plain float32 product in each role's
//    documented orientation reproduces the built-in float path bit for bit (BF16 attention on
//    in both), and is called with the documented roles, linear indices, steps and shapes, in
//    the documented order.
TEST_CASE("lm: a plain float32 GemmFn reproduces the built-in float path bit for bit", "[lm]") {
  for (const bool fused : {true, false}) {
    LmSpec s;
    s.vocab = 48, s.d_model = 32, s.heads = 4, s.kv_heads = 2, s.ffn = 40, s.seq_len = 12, s.batch = 3;
    s.pattern = "AFFA";
    s.fused_qkv = fused;
    s.optimizer.max_grad_norm = 0.5;
    INFO("fused " << fused);
    const auto lin = lm_linears(s);
    const std::int64_t M = s.batch * s.seq_len;
    std::vector<std::string> calls;
    std::int64_t expected_step = 0;
    GemmFn fn = [&](const GemmCall& c, const Matrix& a, const Matrix& b) {
      REQUIRE(c.step == expected_step);
      REQUIRE(c.layer >= 0);
      REQUIRE(c.layer < static_cast<int>(lin.size()));
      const LmLinear& ll = lin[static_cast<std::size_t>(c.layer)];
      const std::int64_t rows = ll.rows, cols = ll.cols;
      calls.push_back(to_string(c.role) + std::to_string(c.layer));
      switch (c.role) {
        case GemmRole::Fprop: REQUIRE((a.rows == M && a.cols == cols && b.rows == rows && b.cols == cols)); break;
        case GemmRole::Dgrad: REQUIRE((a.rows == M && a.cols == rows && b.rows == rows && b.cols == cols)); break;
        case GemmRole::Wgrad: REQUIRE((a.rows == M && a.cols == cols && b.rows == M && b.cols == rows)); break;
      }
      return plain_float32_product(c.role, a, b);
    };
    std::vector<std::string> one_step;
    for (std::size_t l = 0; l < lin.size(); ++l) one_step.push_back("fprop" + std::to_string(l));
    // Backward: linears from the last to the first, Wgrad then Dgrad; separate q, k, v in
    // the order q, k, v.
    std::vector<int> order;
    for (int l = static_cast<int>(lin.size()) - 1; l >= 0; --l) {
      const auto k = lin[static_cast<std::size_t>(l)].kind;
      if (k == LmLinearKind::V) order.insert(order.end(), {l - 2, l - 1, l});
      else if (k != LmLinearKind::Q && k != LmLinearKind::K) order.push_back(l);
    }
    for (const int l : order)
      one_step.insert(one_step.end(), {"wgrad" + std::to_string(l), "dgrad" + std::to_string(l)});
    auto plain = init_lm_state<float>(s);
    auto viafn = init_lm_state<float>(s);
    for (int k = 0; k < 3; ++k) {
      const auto tok = random_tokens(s, s.batch, 100 + k);
      calls.clear();
      expected_step = k;
      const LmStepStats a = lm_train_step<float>(s, plain, tok.data(), nullptr, LmPrecision{true});
      const LmStepStats b = lm_train_step<float>(s, viafn, tok.data(), fn);  // the default policy: bf16 attention
      CHECK(calls == one_step);
      CHECK(std::memcmp(&a.loss, &b.loss, sizeof(double)) == 0);
      CHECK(a.grad_norm == b.grad_norm);
      CHECK(a.clip_factor == b.clip_factor);
      REQUIRE(state_bit_equal(plain, viafn));
    }
    CHECK_FALSE(bit_equal(plain.p, init_lm_state<float>(s).p));
    // BF16 attention is part of the float path: without it the step differs.
    auto nobf = init_lm_state<float>(s);
    const auto tok = random_tokens(s, s.batch, 100);
    lm_train_step<float>(s, nobf, tok.data(), nullptr, LmPrecision{false});
    auto withbf = init_lm_state<float>(s);
    lm_train_step<float>(s, withbf, tok.data(), nullptr, LmPrecision{true});
    CHECK_FALSE(bit_equal(nobf.p, withbf.p));
  }
  // The reference refuses a GemmFn and BF16 operands; a GemmFn of the wrong shape is an error.
  LmSpec s = tiny_spec();
  const auto tok = random_tokens(s, s.batch, 1);
  auto d = init_lm_state<double>(s);
  GemmFn any = [](const GemmCall&, const Matrix& a, const Matrix&) { return a; };
  CHECK_THROWS_AS(lm_train_step<double>(s, d, tok.data(), any), std::invalid_argument);
  CHECK_THROWS_AS(lm_train_step<double>(s, d, tok.data(), nullptr, LmPrecision{true}), std::invalid_argument);
  auto f = init_lm_state<float>(s);
  GemmFn wrong = [](const GemmCall& c, const Matrix& a, const Matrix& b) {
    if (c.role == GemmRole::Wgrad) return Matrix(b.cols, a.cols);  // dW, not dW^T
    if (c.role == GemmRole::Fprop) return Matrix(a.rows, b.rows);
    return Matrix(a.rows, b.cols);
  };
  CHECK_THROWS(lm_train_step<float>(s, f, tok.data(), wrong));
}

// 5. float32 (through RecipeGemm "fp32": plain float32 products, BF16 attention off) against
//    the double reference from the same initial values on the same tokens.
//    Gradients at equal weights: every gradient comes out of a chain of at most N sequential
//    reductions (forward: per A block norm, QKV, QK^T, PV, o; per F block norm, gate-up, down;
//    the final norm, head and loss; backward the same again plus the Wgrad), each of length
//    <= K (the longest: M = batch seq_len, the Wgrad's) and within gamma_K ~ K u of the
//    magnitudes involved, with O(1) amplification between them (norms rescale every block's
//    input to unit RMS); element-wise steps add O(u) each. So
//      ||g_f - g_d|| / ||g_d|| <= eps_g = 2 N K u   (u = 2^-24).
//    Weights after k steps: with AdamW's eps = 1 >> |g| the update lr m_hat / (sqrt(v_hat) +
//    eps) is a Lipschitz function of the gradients (slope <= 2 lr / eps, counting v_hat's
//    dependence), m_hat a weighted mean of past gradients, and the clip factor max / ||g|| is
//    off by <= eps_g relative; each step injects u ||W|| (rounding W - update) plus
//    2 (lr / eps) 2 eps_g G (G = max ||g_t||). The map is close to the identity at this rate,
//    so injections add (factor c = 2 for the dynamics and the O(u) element-wise terms):
//      ||W_f - W_d|| / ||W_d|| <= c k u (1 + 8 N K rho),   rho = (lr / eps) G / ||W_d||.
//    (With eps << |g| no rounding-scaled bound exists: lr sign(g) of a gradient element near
//    0 flips on any rounding.) Both differences must also be non-zero.
namespace {
double rel_diff(const std::vector<std::vector<float>>& a, const Params& b) {
  double e = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) {
      const double dlt = static_cast<double>(a[i][j]) - b[i][j];
      e += dlt * dlt;
      n += b[i][j] * b[i][j];
    }
  return std::sqrt(e / n);
}
double norm_of(const Params& a) {
  double n = 0;
  for (const auto& v : a)
    for (const double x : v) n += x * x;
  return std::sqrt(n);
}
}  // namespace

//    A hybrid "MFAF" adds per M block the reductions norm, in-projection, conv, the scan's
//    C . B dot, its sum over positions and its state term, gated norm, out-projection (8), and
//    the decays' exponent error: exp(cum_t - cum_u) is off by up to 2 (S + 1) u Lambda
//    relative, Lambda = sum_t |dt_t A| <= S dt_max 16 (A >= -16). At these weights dt_raw =
//    a . w_in row with ||a|| = sqrt(d) (unit RMS, gains 1) and ||w_in row|| <= 1.5 * 0.02
//    sqrt(d) (gpt2 init, a generous tail), so |dt_raw| <= 0.96 and dt <= softplus(-2.25 + 0.96)
//    < 0.25 (the largest dt_bias gives 0.1); forward and backward, N K grows by
//    4 (S + 1) Lambda per M block.
TEST_CASE("lm: float32 drifts from the double reference within the float32 rounding bound", "[lm]") {
  for (const char* pattern : {"AFAF", "MFAF"}) {
  INFO("pattern " << pattern);
  LmSpec s;
  s.vocab = 64, s.d_model = 32, s.heads = 4, s.kv_heads = 2, s.ffn = 64, s.seq_len = 16, s.batch = 4;
  s.pattern = pattern;
  s.mamba.head_dim = 8, s.mamba.state = 8, s.mamba.chunk = 8;
  s.optimizer.lr = 1e-3;
  s.optimizer.eps = 1.0;
  s.optimizer.weight_decay = 0.1;
  s.optimizer.max_grad_norm = 0.5;
  RecipeGemmOptions o;
  o.recipe = "fp32";
  RecipeGemm fp32(o, static_cast<int>(lm_linears(s).size()));
  const bool hybrid = s.pattern == "MFAF";
  const double N = hybrid ? 2.0 * (5 + 8 + 2 * 3 + 3) + 1 : 2.0 * (2 * 5 + 2 * 3 + 3) + 1;
  const double K = static_cast<double>(std::max({s.batch * s.seq_len, s.vocab, s.d_model, s.ffn, lm_mamba_d_inner(s)}));
  const double S = static_cast<double>(s.seq_len), lambda = S * 0.25 * 16;
  const double NK = N * K + (hybrid ? 4 * (S + 1) * lambda : 0.0);
  const double eps_g = 2 * NK * kUf, c = 2.0;
  auto f = init_lm_state<float>(s);
  auto d = init_lm_state<double>(s);
  REQUIRE(rel_diff(f.p, d.p) == 0.0);
  const LmPrecision off{false};
  double G = 0, rho = 0;
  for (int k = 1; k <= 6; ++k) {
    const auto tok = random_tokens(s, s.batch, 50 + k);
    std::vector<std::vector<float>> gf;
    Params gd;
    lm_loss_and_gradients<float>(s, f.p, tok.data(), s.batch, fp32.fn(), &gf, f.step, off);
    lm_loss_and_gradients<double>(s, d.p, tok.data(), s.batch, nullptr, &gd, d.step, off);
    G = std::max(G, norm_of(gd));
    rho = std::max(rho, s.optimizer.lr / s.optimizer.eps * G / norm_of(d.p));
    if (k == 1) {  // equal weights: the gradients' own error
      const double eg = rel_diff(gf, gd);
      INFO("gradient relative difference " << eg << " bound " << eps_g);
      CHECK(eg <= eps_g);
      CHECK(eg > 0.0);
    }
    const LmStepStats sf = lm_train_step<float>(s, f, tok.data(), fp32.fn(), off);
    const LmStepStats sd = lm_train_step<double>(s, d, tok.data(), nullptr);
    CHECK(sd.clip_factor < 1.0);  // clipping takes part
    CHECK(std::abs(sf.clip_factor - sd.clip_factor) <= 2 * eps_g * sd.clip_factor);
    const double rel = rel_diff(f.p, d.p), bound = c * k * kUf * (1 + 8 * NK * rho);
    INFO("step " << k << " weight relative difference " << rel << " bound " << bound << " rho " << rho);
    CHECK(rel <= bound);
    CHECK(rel > 0.0);
  }
  }
}

// 6. The optimizer step against AdamW's formula at step 0, computed here from the gradients:
//    m_hat = g', v_hat = g'^2 (bias corrections cancel at t = 1), g' = c g with the clip factor
//    c = max_grad_norm / ||g||; w' = w - lr (g' / (|g'| + eps) + wd w), wd only for the linear
//    matrices (not the embedding, tied or not, nor the gains). The tolerance covers double's
//    rounding of the few operations (|update| <= lr (1 + wd |w|), a relative 16 u of it).
TEST_CASE("lm: AdamW step, weight-decay exclusions and global-norm clipping", "[lm]") {
  for (const bool tied : {false, true})
    for (const double max_norm : {0.0, 1e-3}) {
      LmSpec s = tiny_spec();
      s.tied_embeddings = tied;
      s.optimizer.lr = 0.01;
      s.optimizer.eps = 0.05;
      s.optimizer.weight_decay = 0.5;
      s.optimizer.max_grad_norm = max_norm;
      INFO("tied " << tied << " max_grad_norm " << max_norm);
      const auto tok = random_tokens(s, s.batch, 4);
      auto st = init_lm_state<double>(s);
      const Params w0 = st.p;
      Params g;
      lm_loss_and_gradients<double>(s, w0, tok.data(), s.batch, nullptr, &g, 0);
      const double norm = norm_of(g);
      const LmStepStats r = lm_train_step<double>(s, st, tok.data(), nullptr);
      CHECK(std::abs(r.grad_norm - norm) <= 1e-14 * norm);
      const double clip = max_norm > 0 ? max_norm / norm : 1.0;
      REQUIRE((max_norm == 0 || clip < 1.0));  // clipping active when on
      CHECK(std::abs(r.clip_factor - clip) <= 1e-14);
      CHECK(r.lr == s.optimizer.lr);
      CHECK(st.step == 1);
      const auto info = lm_params(s);
      for (std::size_t i = 0; i < info.size(); ++i) {
        const bool decay = info[i].kind == LmParamKind::Linear;
        CHECK(info[i].weight_decay == decay);
        for (std::size_t j = 0; j < w0[i].size(); ++j) {
          const double gc = g[i][j] * clip, w = w0[i][j];
          const double upd = s.optimizer.lr * (gc / (std::abs(gc) + s.optimizer.eps) + (decay ? 0.5 * w : 0.0));
          INFO(info[i].name << " element " << j);
          CHECK(std::abs(st.p[i][j] - (w - upd)) <= 16 * kU * (s.optimizer.lr * (1 + std::abs(w)) + std::abs(w)));
        }
      }
    }
}

// The sums the GPU step shares with this one in model/sum_order.hpp's orders, recomputed from
// the step's own operands without the helpers: the final norm gain's gradient from the head
// GEMM's input (the normalised rows: the gain is 1 at initialisation) and Dgrad output, over
// the rows in chunks of 64 (each ascending, then the chunks); the clipping norm from the
// gradients, each parameter's squares in chunks of 256 (ascending, in double), the chunk sums
// in model/tree_sum.hpp's pairwise order. 200 rows make 4 row chunks (the last partial). Plain
// ascending sums give other bits here (in some gain column, and for the norm), so the checks
// see the order.
TEST_CASE("lm: the gains' gradients and the clipping norm follow model/sum_order.hpp's orders", "[lm]") {
  LmSpec s;
  s.vocab = 64, s.d_model = 32, s.heads = 4, s.kv_heads = 2, s.ffn = 48, s.seq_len = 40, s.batch = 5;
  s.pattern = "AF";
  const auto lin = lm_linears(s);
  const int head = static_cast<int>(lin.size()) - 1;
  Matrix head_input, head_da;
  const GemmFn fn = [&](const GemmCall& c, const Matrix& a, const Matrix& b) {
    Matrix r = plain_float32_product(c.role, a, b);
    if (c.layer == head && c.role == GemmRole::Fprop) head_input = a;
    if (c.layer == head && c.role == GemmRole::Dgrad) head_da = r;
    return r;
  };
  const auto tok = random_tokens(s, s.batch, 9);
  LmState<float> st = init_lm_state<float>(s);
  std::vector<std::vector<float>> g;
  lm_loss_and_gradients<float>(s, st.p, tok.data(), s.batch, fn, &g, 0, LmPrecision{});
  const std::size_t gf = param_index(s, "final_norm");
  for (const float v : st.p[gf]) REQUIRE(v == 1.0f);
  const std::int64_t M = s.batch * s.seq_len, d = s.d_model;
  REQUIRE((head_input.rows == M && head_input.cols == d && head_da.rows == M && head_da.cols == d));
  const auto bits = [](float x) {
    std::uint32_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
  };
  int differs = 0;
  for (std::int64_t j = 0; j < d; ++j) {
    float chunked = 0.0f, ascending = 0.0f;
    for (std::int64_t c0 = 0; c0 < M; c0 += 64) {
      float part = 0.0f;
      for (std::int64_t i = c0; i < std::min<std::int64_t>(c0 + 64, M); ++i) part = part + head_da(i, j) * head_input(i, j);
      chunked = chunked + part;
    }
    for (std::int64_t i = 0; i < M; ++i) ascending = ascending + head_da(i, j) * head_input(i, j);
    INFO("final norm gain, column " << j);
    CHECK(bits(g[gf][static_cast<std::size_t>(j)]) == bits(chunked));
    differs += chunked != ascending ? 1 : 0;
  }
  CHECK(differs > 0);
  std::vector<double> chunks;
  double ascending = 0;
  for (const auto& gi : g) {
    for (std::size_t c0 = 0; c0 < gi.size(); c0 += 256) {
      double part = 0;
      for (std::size_t e = c0; e < std::min<std::size_t>(c0 + 256, gi.size()); ++e)
        part = part + static_cast<double>(gi[e]) * static_cast<double>(gi[e]);
      chunks.push_back(part);
    }
    for (const float x : gi) ascending = ascending + static_cast<double>(x) * static_cast<double>(x);
  }
  const double tree = std::sqrt(tree_sum(chunks.data(), static_cast<std::int64_t>(chunks.size())));
  const LmStepStats r = lm_train_step<float>(s, st, tok.data(), fn, LmPrecision{});
  std::uint64_t a, b;
  std::memcpy(&a, &r.grad_norm, sizeof a);
  std::memcpy(&b, &tree, sizeof b);
  CHECK(a == b);
  CHECK(std::sqrt(ascending) != tree);  // one running sum's bits differ here: the check sees the order
}

// 7. Learning: tokens counting up (t -> t + 1 mod V, a different start per sequence and step)
//    in double; the loss must fall from log V (~2.77) to below 0.1 log V within 300 steps.
TEST_CASE("lm: a tiny model learns a counting sequence in double", "[lm]") {
  LmSpec s;
  s.vocab = 16, s.d_model = 32, s.heads = 2, s.kv_heads = 2, s.ffn = 64, s.seq_len = 16, s.batch = 4;
  s.pattern = "AF";
  s.optimizer.lr = 1e-2;
  s.optimizer.weight_decay = 0.0;
  s.optimizer.schedule = "warmup-cosine";
  s.optimizer.warmup_steps = 20;
  s.optimizer.total_steps = 300;
  auto st = init_lm_state<double>(s);
  std::vector<double> loss;
  for (int k = 0; k < 300; ++k) {
    std::vector<std::int32_t> tok(static_cast<std::size_t>(s.batch * (s.seq_len + 1)));
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t t = 0; t <= s.seq_len; ++t)
        tok[b * (s.seq_len + 1) + t] = static_cast<std::int32_t>((7 * (k * s.batch + b) + t) % s.vocab);
    loss.push_back(lm_train_step<double>(s, st, tok.data(), nullptr).loss);
  }
  const double logv = std::log(static_cast<double>(s.vocab));
  double last = 0;
  for (int k = 290; k < 300; ++k) last += loss[k] / 10;
  INFO("first loss " << loss[0] << " (log V " << logv << "), mean of the last 10 " << last);
  CHECK(std::abs(loss[0] - logv) < 0.1 * logv);
  CHECK(last < 0.1 * logv);
}

// 8. Determinism: the same run with 1 and 2 threads is bit-identical (the quick config: large
//    enough for the attention's and the GEMMs' parallel regions), and the initial values are
//    the same in every T; reference step timing.
TEST_CASE("lm: runs are deterministic whatever the thread count; initial values are T-independent", "[lm]") {
  const ParallelWorkThreshold every_loop_parallel(0);  // small tensors: the threads must take part
  LmSpec s;  // the quick config: vocab 256, d 64, 4 heads, ffn 128, AFAF, seq 64, batch 8
  s.kv_heads = 2;
  const auto tok = random_tokens(s, s.batch, 77);
  const int threads = omp_get_max_threads();
  auto a = init_lm_state<float>(s), b = a;
  omp_set_num_threads(1);
  for (int k = 0; k < 2; ++k) lm_train_step<float>(s, a, tok.data(), nullptr, LmPrecision{true});
  omp_set_num_threads(std::max(2, threads));
  for (int k = 0; k < 2; ++k) lm_train_step<float>(s, b, tok.data(), nullptr, LmPrecision{true});
  omp_set_num_threads(threads);
  CHECK(state_bit_equal(a, b));

  const auto f = init_lm_state<float>(s);
  const auto d = init_lm_state<double>(s);
  for (std::size_t i = 0; i < f.p.size(); ++i)
    for (std::size_t j = 0; j < f.p[i].size(); ++j) REQUIRE(static_cast<double>(f.p[i][j]) == d.p[i][j]);
  LmSpec other = s;
  other.seed = s.seed + 1;
  CHECK_FALSE(bit_equal(init_lm_state<float>(other).p, f.p));

  // gpt2 init: std 0.02, the residual outputs 0.02 / sqrt(2 * 4 blocks); gains 1; zero moments.
  // The sample std of n normal draws is within 5 / sqrt(2n) of sigma (relative, 5 sigma).
  const auto info = lm_params(s);
  for (std::size_t i = 0; i < info.size(); ++i) {
    if (info[i].kind == LmParamKind::NormGain) {
      for (const double x : d.p[i]) CHECK(x == 1.0);
      continue;
    }
    double ss = 0;
    for (const double x : d.p[i]) ss += x * x;
    const auto n = static_cast<double>(d.p[i].size());
    const bool resid = info[i].name.find(".o") != std::string::npos || info[i].name.find(".down") != std::string::npos;
    const double sigma = resid ? 0.02 / std::sqrt(8.0) : 0.02;
    INFO(info[i].name << " std " << std::sqrt(ss / n) << " expected " << sigma);
    CHECK(std::abs(std::sqrt(ss / n) / sigma - 1.0) <= 5.0 / std::sqrt(2 * n));
    for (const double x : d.m[i]) CHECK(x == 0.0);
  }
  LmSpec sc = s;
  sc.init = "scaled";
  const auto ds = init_lm_state<double>(sc);
  const std::size_t down = param_index(sc, "blocks.1.down");  // d x ffn: std 1 / sqrt(ffn)
  double ss = 0;
  for (const double x : ds.p[down]) ss += x * x;
  const auto n = static_cast<double>(ds.p[down].size());
  CHECK(std::abs(std::sqrt(ss / n) * std::sqrt(static_cast<double>(s.ffn)) - 1.0) <= 5.0 / std::sqrt(2 * n));

  // Reference step time of the quick config (reported; the CHECK only catches a gross regression).
  auto r = init_lm_state<double>(s);
  lm_train_step<double>(s, r, tok.data(), nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < 3; ++k) lm_train_step<double>(s, r, tok.data(), nullptr);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 3;
  WARN("quick config: double reference step " << sec * 1e3 << " ms with " << threads << " threads");
  CHECK(sec < 5.0);
}

// 9. The spec: layout, high-precision layers, validation, tiling, schedules.
TEST_CASE("lm: linear layout, parameters and high-precision layers", "[lm]") {
  LmSpec s;  // AFAF, fused, untied
  const auto lin = lm_linears(s);
  const std::vector<LmLinearKind> kinds = {LmLinearKind::Qkv,       LmLinearKind::AttnOut, LmLinearKind::FfnGateUp,
                                           LmLinearKind::FfnDown,   LmLinearKind::Qkv,     LmLinearKind::AttnOut,
                                           LmLinearKind::FfnGateUp, LmLinearKind::FfnDown, LmLinearKind::Head};
  const std::vector<int> blocks = {0, 0, 1, 1, 2, 2, 3, 3, -1};
  REQUIRE(lin.size() == kinds.size());
  for (std::size_t l = 0; l < lin.size(); ++l) {
    CHECK(lin[l].kind == kinds[l]);
    CHECK(lin[l].block == blocks[l]);
  }
  CHECK((lin[0].rows == 3 * 64 && lin[0].cols == 64));
  CHECK((lin[1].rows == 64 && lin[1].cols == 64));
  CHECK((lin[2].rows == 256 && lin[2].cols == 64));
  CHECK((lin[3].rows == 64 && lin[3].cols == 128));
  CHECK((lin[8].rows == 256 && lin[8].cols == 64));
  const auto params = lm_params(s);
  CHECK(params.front().name == "embedding");
  CHECK(params[1].name == "blocks.0.norm");
  CHECK(params[2].name == "blocks.0.qkv");
  CHECK(params[static_cast<std::size_t>(lin[8].param)].name == "head");
  CHECK(params[params.size() - 2].name == "final_norm");
  for (std::size_t l = 0; l < lin.size(); ++l)
    CHECK(params[static_cast<std::size_t>(lin[l].param)].linear == static_cast<int>(l));

  s.kv_heads = 2;
  s.fused_qkv = false;
  s.tied_embeddings = true;
  const auto sep = lm_linears(s);
  REQUIRE(sep.size() == 13);  // q, k, v, o, gateup, down, q, k, v, o, gateup, down, head
  CHECK((sep[0].kind == LmLinearKind::Q && sep[0].rows == 64));
  CHECK((sep[1].kind == LmLinearKind::K && sep[1].rows == 32));
  CHECK((sep[2].kind == LmLinearKind::V && sep[2].rows == 32));
  CHECK(sep[12].kind == LmLinearKind::Head);
  CHECK(sep[12].param == 0);  // tied: E
  for (const auto& p : lm_params(s)) CHECK(p.name != "head");
  CHECK(lm_high_precision_linears(s, 0, 0) == std::vector<int>{12});
  CHECK(lm_high_precision_linears(s, 1, 1) == std::vector<int>{0, 1, 2, 3, 10, 11, 12});
  CHECK(lm_high_precision_linears(s, 2, 8).size() == 13);
  CHECK_THROWS_AS(lm_high_precision_linears(s, -1, 0), std::invalid_argument);
  // The list is what RecipeGemm takes.
  RecipeGemmOptions o;
  o.high_precision_layers = lm_high_precision_linears(s, 1, 1);
  RecipeGemm rg(o, static_cast<int>(sep.size()));
  CHECK(rg.recipe_name(12) == "bf16");
  CHECK(rg.recipe_name(5) == "nvfp4");
}


TEST_CASE("lm: validate names the key; tiling problems are reported", "[lm]") {
  CHECK_NOTHROW(validate(LmSpec{}));
  struct Case {
    std::function<void(LmSpec&)> set;
    std::string key;
  };
  const std::vector<Case> cases = {
      {[](LmSpec& s) { s.vocab = 1; }, "vocab"},
      {[](LmSpec& s) { s.d_model = 0; }, "d_model"},
      {[](LmSpec& s) { s.heads = 0; }, "heads"},
      {[](LmSpec& s) { s.heads = 3; }, "heads"},           // 64 % 3
      {[](LmSpec& s) { s.d_model = 12; }, "heads"},        // head_dim 3: odd
      {[](LmSpec& s) { s.kv_heads = 3; }, "kv_heads"},     // 4 % 3
      {[](LmSpec& s) { s.kv_heads = 0; }, "kv_heads"},
      {[](LmSpec& s) { s.ffn = 0; }, "ffn"},
      {[](LmSpec& s) { s.seq_len = 0; }, "seq_len"},
      {[](LmSpec& s) { s.batch = 0; }, "batch"},
      {[](LmSpec& s) { s.pattern = ""; }, "pattern"},
      {[](LmSpec& s) { s.pattern = "AFS"; }, "'S'"},
      {[](LmSpec& s) { s.pattern = "AFx"; }, "pattern"},
      {[](LmSpec& s) { s.rope_base = 1.0; }, "rope_base"},
      {[](LmSpec& s) { s.norm_eps = 0; }, "norm_eps"},
      {[](LmSpec& s) { s.init = "xavier"; }, "init"},
      {[](LmSpec& s) { s.optimizer.lr = 0; }, "optimizer.lr"},
      {[](LmSpec& s) { s.optimizer.lr = std::nan(""); }, "optimizer.lr"},
      {[](LmSpec& s) { s.optimizer.beta1 = 1.0; }, "optimizer.beta1"},
      {[](LmSpec& s) { s.optimizer.beta2 = -0.1; }, "optimizer.beta2"},
      {[](LmSpec& s) { s.optimizer.eps = 0; }, "optimizer.eps"},
      {[](LmSpec& s) { s.optimizer.weight_decay = -1; }, "optimizer.weight_decay"},
      {[](LmSpec& s) { s.optimizer.max_grad_norm = -1; }, "optimizer.max_grad_norm"},
      {[](LmSpec& s) { s.optimizer.schedule = "linear"; }, "optimizer.schedule"},
      {[](LmSpec& s) { s.optimizer.warmup_steps = 5000; }, "optimizer.warmup_steps"},
      {[](LmSpec& s) { s.optimizer.total_steps = -1; }, "optimizer.total_steps"},
      {[](LmSpec& s) { s.optimizer.decay_fraction = 2; }, "optimizer.decay_fraction"},
  };
  for (const auto& c : cases) {
    LmSpec s;
    c.set(s);
    const std::string msg = fp4d_test::message_of<std::invalid_argument>([&] { validate(s); });
    INFO("key " << c.key << ": message '" << msg << "'");
    CHECK(msg.rfind("lm: ", 0) == 0);
    CHECK(msg.find(c.key) != std::string::npos);
  }
  {
    LmSpec s;
    s.pattern = "AFS";
    const std::string msg = fp4d_test::message_of<std::invalid_argument>([&] { validate(s); });
    CHECK(msg.find("pattern") != std::string::npos);
    CHECK(msg.find("'S'") != std::string::npos);
  }
  // Out-of-range tokens are refused naming the position (sequence 1, position 1 of 6).
  LmSpec t = tiny_spec();
  auto tok = random_tokens(t, t.batch, 2);
  tok[7] = static_cast<std::int32_t>(t.vocab);
  auto st = init_lm_state<double>(t);
  const std::string msg = fp4d_test::message_of<std::invalid_argument>([&] { lm_train_step<double>(t, st, tok.data(), nullptr); });
  CHECK(msg.find("sequence 1, position 1") != std::string::npos);

  LmSpec s;
  CHECK(lm_tiling_problem(s).empty());
  s.ffn = 176;
  CHECK(lm_tiling_problem(s).empty());
  s.vocab = 100;
  CHECK(lm_tiling_problem(s).find("vocab = 100") != std::string::npos);
  s.vocab = 256;
  s.d_model = 40;  // head_dim 10: kv_heads * head_dim = 40
  const std::string m = lm_tiling_problem(s);
  INFO(m);
  CHECK(m.find("d_model = 40") != std::string::npos);
  CHECK(m.find("kv_heads * head_dim = 40") != std::string::npos);
  CHECK(m.find("multiple of 16") != std::string::npos);
  CHECK(m.find('\n') == std::string::npos);
  s.d_model = 64;
  s.batch = 3, s.seq_len = 7;
  CHECK(lm_tiling_problem(s).find("batch * seq_len = 21") != std::string::npos);
}

TEST_CASE("lm: the shared schedule is mlp's lr_at", "[lm]") {
  MlpSpec m;
  m.lr = 0.1;
  m.warmup_steps = 10;
  m.total_steps = 110;
  for (const char* name : {"constant", "warmup-cosine", "warmup-stable-decay"}) {
    m.schedule = name;
    const LrSchedule ls{name, 0.1, 10, 110, m.decay_fraction};
    for (const std::int64_t k : {0, 4, 9, 10, 35, 60, 88, 99, 109, 110, 500}) CHECK(scheduled_lr(ls, k) == lr_at(m, k));
  }
  LmSpec s;
  s.optimizer.schedule = "warmup-stable-decay";
  s.optimizer.lr = 0.1, s.optimizer.warmup_steps = 10, s.optimizer.total_steps = 110;
  CHECK(std::abs(scheduled_lr(lm_lr_schedule(s), 99) - 0.05) <= 1e-15);  // (110 - 99) / 22
  CHECK_THROWS_AS(scheduled_lr(LrSchedule{"linear", 0.1, 0, 10, 0.2}, 0), std::invalid_argument);
}

// 10. [long] A task that needs attention: x_{t+1} = (x_t + x_{t-1}) mod V (neither the current
//     token nor any bigram statistic predicts it: the model must read the previous position).
//     Random starting pairs per sequence and step; in double the loss must fall from log V to
//     below 0.1 log V (~0.28; the floor is log V / seq_len ~ 0.09: position 0 predicts a random
//     token). Without working RoPE and attention the loss stays near the bigram level (~log V).
//     About 15 s.
TEST_CASE("lm: a small model learns a sequence that needs attention", "[lm][long]") {
  LmSpec s;
  s.vocab = 16, s.d_model = 64, s.heads = 4, s.kv_heads = 2, s.ffn = 128, s.seq_len = 32, s.batch = 8;
  s.pattern = "AFAF";
  s.optimizer.lr = 3e-3;
  s.optimizer.weight_decay = 0.0;
  s.optimizer.schedule = "warmup-cosine";
  s.optimizer.warmup_steps = 50;
  const int steps = 1000;
  s.optimizer.total_steps = steps;
  auto st = init_lm_state<double>(s);
  std::vector<double> loss;
  for (int k = 0; k < steps; ++k) {
    auto tok = random_tokens(s, s.batch, 1000 + k);
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t t = 2; t <= s.seq_len; ++t) {
        auto* row = tok.data() + b * (s.seq_len + 1);
        row[t] = static_cast<std::int32_t>((row[t - 1] + row[t - 2]) % s.vocab);
      }
    loss.push_back(lm_train_step<double>(s, st, tok.data(), nullptr).loss);
  }
  const double logv = std::log(static_cast<double>(s.vocab));
  double last = 0;
  for (int k = steps - 10; k < steps; ++k) last += loss[k] / 10;
  INFO("first loss " << loss[0] << " (log V " << logv << "), mean of the last 10 " << last);
  CHECK(last < 0.1 * logv);
}

// 11. The binary128 reference (mlp_binary128, sim/mlp_precision.hpp) against double and mp256,
//     from the same initial values on the same tokens, with test 5's regime (AdamW eps = 1 >>
//     |g|, so that the update is Lipschitz in the gradients) and its bound with double's
//     unit roundoff u = 2^-53 in place of float32's: binary128's own rounding (2^-113) is 2^-60
//     of double's, inside the factor c = 2, so the double run's error is the difference:
//       gradients at equal weights  ||g_d - g_q|| / ||g_q|| <= eps_g = 2 N K u,
//       weights after k steps       ||W_d - W_q|| / ||W_q|| <= b_W(k) = c k u (1 + 8 N K rho).
//     Losses: lm_train_step reports the loss at the weights before its update, so step k's
//     losses differ by the loss's first-order response to the weight difference, kappa_k
//     b_W(k - 1) relative (kappa_k = ||grad L|| ||W|| / |L|, the loss's condition number in
//     W, measured in double at binary128's weights rounded to double; the second-order term is
//     O(b_W^2) ~ 1e-26, nil), plus double's evaluation of the loss at given weights: the
//     forward chain's N_f reductions of length <= K, each within gamma_K of the magnitudes
//     that the norms keep O(1) (test 1), doubled: 2 N_f K u max(1, |L|) absolute, plus the
//     wide loss's rounding to double on return (u relative). Call B_k the sum (relative).
//     The losses must agree within B_k at every step and, printed with floor(-log10 max B_k)
//     significant digits, up to one unit in the last digit (two values within half a unit can
//     round to neighbours): "binary128's loss rounds to double's".
//     binary128 against mp256 (cpp_bin_float<256>, whose 2^-256 is nil here): the same weight
//     bound with u = 2^-113; the difference is taken in mp256.
//     Neither wider run may be the narrower one in disguise: after every step the double and
//     binary128 weights differ, binary128's and mp256's differ, and some binary128 weight is
//     not a double (113-bit arithmetic leaves bits below double's last one; double arithmetic
//     in a binary128 container could not).
namespace {
using Quad = mlp_binary128;
using Mp = mlp_mp256;

template <class T>
std::vector<std::vector<T>> params_as(const Params& p) {
  std::vector<std::vector<T>> r(p.size());
  for (std::size_t i = 0; i < p.size(); ++i)
    for (const double x : p[i]) r[i].push_back(T(x));  // exact: widening
  return r;
}

// ||a - b|| / ||b||, every difference and sum in mp256 (exact differences for double and
// binary128 operands, whose 2^-113-scale gaps double could not even represent).
template <class A, class B>
double rel_diff_mp(const std::vector<std::vector<A>>& a, const std::vector<std::vector<B>>& b) {
  Mp num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) {
      const Mp bj = static_cast<Mp>(b[i][j]);
      const Mp x = static_cast<Mp>(a[i][j]) - bj;
      num += x * x;
      den += bj * bj;
    }
  return std::sqrt(mlp_to_double(num) / mlp_to_double(den));
}

template <class T>
Params rounded_to_double(const std::vector<std::vector<T>>& p) {
  Params r(p.size());
  for (std::size_t i = 0; i < p.size(); ++i)
    for (const T& x : p[i]) r[i].push_back(mlp_to_double(x));
  return r;
}

// Whether some value of p is not a double (x != its nearest double).
bool has_non_double(const std::vector<std::vector<Quad>>& p) {
  for (const auto& v : p)
    for (const Quad& x : v)
      if (x != Quad(mlp_to_double(x))) return true;
  return false;
}
}  // namespace

TEST_CASE("lm: the binary128 reference agrees with double to the digits double's rounding leaves, and is not double",
          "[lm]") {
  LmSpec s;
  s.vocab = 16, s.d_model = 16, s.heads = 2, s.kv_heads = 1, s.ffn = 32, s.seq_len = 8, s.batch = 2;
  s.pattern = "AF";
  s.optimizer.lr = 1e-3;
  s.optimizer.eps = 1.0;
  s.optimizer.weight_decay = 0.1;
  s.optimizer.max_grad_norm = 0.5;
  // N: the gradient chain of test 5 for one A and one F block; N_f: the forward's (A: norm, QKV,
  // QK^T, PV, o; F: norm, gate-up, down; final norm, head, loss); K: the longest reduction.
  const double N = 2.0 * (5 + 3 + 3) + 1, N_f = 5 + 3 + 3;
  const double K = static_cast<double>(std::max({s.batch * s.seq_len, s.vocab, s.d_model, s.ffn}));
  const double uq = std::ldexp(1.0, -113), c = 2.0, eps_g = 2 * N * K * kU;
  auto d = init_lm_state<double>(s);
  auto q = init_lm_state<Quad>(s);
  auto m = init_lm_state<Mp>(s);
  REQUIRE(rel_diff_mp(d.p, q.p) == 0.0);  // the same float32 initial values
  double rho = 0, b_max = 0;
  std::vector<double> ld, lq, bound;
  for (int k = 1; k <= 5; ++k) {
    const auto tok = random_tokens(s, s.batch, 200 + k);
    const Params wq = rounded_to_double(q.p);
    Params g;
    const double loss_at = lm_loss_and_gradients<double>(s, wq, tok.data(), s.batch, nullptr, &g, q.step);
    rho = std::max(rho, s.optimizer.lr / s.optimizer.eps * norm_of(g) / norm_of(wq));
    if (k == 1) {  // equal weights: the gradients' own error, and they differ
      std::vector<std::vector<Quad>> gq;
      lm_loss_and_gradients<Quad>(s, q.p, tok.data(), s.batch, nullptr, &gq, q.step);
      const double eg = rel_diff_mp(g, gq);
      INFO("gradient relative difference " << eg << " bound " << eps_g);
      CHECK(eg <= eps_g);
      CHECK(eg > 0.0);
    }
    const double kappa = norm_of(g) * norm_of(wq) / std::abs(loss_at);
    const double bw_before = c * (k - 1) * kU * (1 + 8 * N * K * rho);
    const double b = kappa * bw_before + 2 * N_f * K * kU * std::max(1.0, std::abs(loss_at)) / std::abs(loss_at) + kU;
    ld.push_back(lm_train_step<double>(s, d, tok.data(), nullptr).loss);
    lq.push_back(lm_train_step<Quad>(s, q, tok.data(), nullptr).loss);
    lm_train_step<Mp>(s, m, tok.data(), nullptr);
    bound.push_back(b);
    b_max = std::max(b_max, b);
    const double bw = c * k * kU * (1 + 8 * N * K * rho), bq = c * k * uq * (1 + 8 * N * K * rho);
    const double ed = rel_diff_mp(d.p, q.p), eq = rel_diff_mp(q.p, m.p);
    INFO("step " << k << ": double vs binary128 " << ed << " (bound " << bw << "), binary128 vs mp256 " << eq
                 << " (bound " << bq << "), rho " << rho);
    CHECK(ed <= bw);
    CHECK(eq <= bq);
    CHECK(ed > 0.0);
    CHECK(eq > 0.0);
    CHECK(has_non_double(q.p));
  }
  const int digits = static_cast<int>(std::floor(-std::log10(b_max)));
  INFO("largest loss bound " << b_max << ": " << digits << " digits");
  CHECK(digits >= 10);  // the comparison says something (double's 16 digits less the run's growth)
  for (std::size_t k = 0; k < ld.size(); ++k) {
    INFO("step " << k + 1 << " (bound " << bound[k] << ")");
    fp4d::test::check_same_printed_digits(ld[k], lq[k], digits, "double against binary128");
    CHECK(std::abs(ld[k] - lq[k]) <= bound[k] * std::abs(lq[k]));
  }
}

// 12. Every parameter's gradient in binary128 against central differences in binary128: test
//     1's derivation with u = 2^-113. The loss is evaluated here from lm_logits<binary128>
//     (logsumexp minus the target's logit, in binary128: lm_loss_and_gradients reports the
//     loss rounded to double, which would cap the differences at double's resolution), within
//     delta_f = 512 u max(1, |f|) (test 1's N K u for the tiny model, doubled). f''' per
//     coordinate from the five-point third difference at H = 2^-6, bounded by 2 |T3| + 1. With
//     h = 2^-35 (near the minimum of h^2 f''' / 6 + delta_f / h for f''' = O(10)) the
//     tolerance h^2 (2 |T3| + 1) / 6 + delta_f / h is ~ 1e-20 absolute: the differences
//     must resolve each gradient beyond double's last bit (tolerance < 2^-53 |g| for every
//     parameter's largest element), which no computation in double arithmetic could - its
//     rounding term alone would be 2^60 times larger. The perturbed weights are exact in
//     binary128 (values of <= 53 bits within 2^4 of 1, steps of powers of two >= 2^-35).
//     Three elements per parameter (its largest gradient, the first and the middle one), two
//     variants (fused QKV, untied, MHA; separate q, k, v, tied, GQA).
namespace {
Quad wide_loss(const LmSpec& s, const std::vector<std::vector<Quad>>& p, const std::vector<std::int32_t>& tok) {
  const std::vector<Quad> logits = lm_logits<Quad>(s, p, tok.data(), s.batch, nullptr, 0, LmPrecision{});
  const std::int64_t S = s.seq_len, V = s.vocab, M = s.batch * S;
  Quad loss = 0;
  for (std::int64_t i = 0; i < M; ++i) {
    const Quad* li = logits.data() + i * V;
    Quad mx = li[0];
    for (std::int64_t j = 1; j < V; ++j) mx = std::max(mx, li[j]);
    Quad se = 0;
    for (std::int64_t j = 0; j < V; ++j) se += exp(Quad(li[j] - mx));
    loss += (mx + log(se)) - li[tok[static_cast<std::size_t>((i / S) * (S + 1) + i % S + 1)]];
  }
  return loss / Quad(M);
}
}  // namespace

TEST_CASE("lm: binary128 gradients match binary128 central differences beyond double's resolution", "[lm]") {
  for (const Variant v : {Variant{true, false, 2, "AFA"}, Variant{false, true, 1, "FA"}}) {
    const LmSpec s = tiny_spec(v);
    INFO("fused " << v.fused << " tied " << v.tied << " kv_heads " << v.kv_heads << " pattern " << v.pattern);
    const std::vector<std::vector<Quad>> p = params_as<Quad>(tiny_params(s));
    const auto tok = random_tokens(s, s.batch, 3);
    const auto info = lm_params(s);
    std::vector<std::vector<Quad>> g;
    lm_loss_and_gradients<Quad>(s, p, tok.data(), s.batch, nullptr, &g, 0);
    const Quad f0 = wide_loss(s, p, tok);
    // The model's own (double-rounded) loss is the wide one rounded.
    CHECK(lm_loss_and_gradients<Quad>(s, p, tok.data(), s.batch, nullptr, nullptr, 0) == mlp_to_double(f0));
    const double uq = std::ldexp(1.0, -113);
    const Quad h = ldexp(Quad(1), -35), H = ldexp(Quad(1), -6);
    const double delta_f = 512 * uq * std::max(1.0, std::abs(mlp_to_double(f0)));
    const auto f_at = [&](std::size_t i, std::size_t j, const Quad& dx) {
      std::vector<std::vector<Quad>> w = p;
      w[i][j] += dx;
      return wide_loss(s, w, tok);
    };
    for (std::size_t i = 0; i < info.size(); ++i) {
      std::size_t top = 0;
      for (std::size_t j = 1; j < g[i].size(); ++j)
        if (abs(g[i][j]) > abs(g[i][top])) top = j;
      for (const std::size_t j : {top, std::size_t{0}, g[i].size() / 2}) {
        const Quad fd = (f_at(i, j, h) - f_at(i, j, -h)) / (2 * h);
        const double t3 = mlp_to_double(
            (f_at(i, j, 2 * H) - 2 * f_at(i, j, H) + 2 * f_at(i, j, -H) - f_at(i, j, -2 * H)) / (2 * H * H * H));
        const double hd = mlp_to_double(h);
        const double tol = hd * hd * (2 * std::abs(t3) + 1) / 6 + delta_f / hd;
        const double e = mlp_to_double(abs(Quad(fd - g[i][j])));
        const double gj = mlp_to_double(g[i][j]);
        INFO(info[i].name << " element " << j << " backward " << gj << " |fd - backward| " << e << " tolerance "
                          << tol << " (relative " << tol / std::abs(gj) << ")");
        CHECK(e <= tol);
        if (j == top) {
          CHECK(gj != 0.0);
          CHECK(tol < kU * std::abs(gj));
        }
      }
    }
  }
}

TEST_CASE("lm: Mamba-2 blocks' layout, validation and tiling", "[lm]") {
  LmSpec s;
  s.d_model = 32, s.pattern = "MA", s.mamba.head_dim = 4, s.mamba.state = 8, s.mamba.groups = 2;
  // d_inner 64, 16 mixer heads; conv channels 64 + 2 * 16; in-projection rows 128 + 32 + 16.
  const auto lin = lm_linears(s);
  REQUIRE(lin.size() == 5);
  CHECK(to_string(lin[0].kind) == "mamba_in");
  CHECK((lin[0].rows == 176 && lin[0].cols == 32));
  CHECK(to_string(lin[1].kind) == "mamba_out");
  CHECK((lin[1].rows == 32 && lin[1].cols == 64));
  CHECK(to_string(lin[2].kind) == "qkv");
  const auto info = lm_params(s);
  std::vector<std::string> names;
  for (const auto& p : info) names.push_back(p.name);
  const std::vector<std::string> want{"embedding",       "blocks.0.norm",   "blocks.0.mamba_in", "blocks.0.conv_w",
                                      "blocks.0.conv_b", "blocks.0.dt_bias", "blocks.0.a_log",   "blocks.0.d_skip",
                                      "blocks.0.mixer_norm", "blocks.0.mamba_out", "blocks.1.norm", "blocks.1.qkv",
                                      "blocks.1.o",      "final_norm",      "head"};
  CHECK(names == want);
  for (const auto& p : info) {
    INFO(p.name);
    CHECK(p.weight_decay == (p.kind == LmParamKind::Linear));
  }
  CHECK((info[3].rows == 96 && info[3].cols == 4));  // conv_w: conv channels x width
  // The initial values as documented: conv bias 0, D and the gated norm's gain 1, the decays
  // and steps from lm_mamba's tables, conv weights with standard deviation 1 / sqrt(3 K).
  const auto st = init_lm_state<double>(s);
  for (double v : st.p[4]) CHECK(v == 0.0);
  for (double v : st.p[7]) CHECK(v == 1.0);
  for (double v : st.p[8]) CHECK(v == 1.0);
  const auto a = mamba_initial_a_log(16);
  CHECK(st.p[6] == std::vector<double>(a.begin(), a.end()));
  double ss = 0;
  for (double v : st.p[3]) ss += v * v;
  const double sd = std::sqrt(ss / static_cast<double>(st.p[3].size()));
  CHECK(std::abs(sd - 1.0 / std::sqrt(12.0)) < 0.25 / std::sqrt(12.0));  // 384 draws: 4 standard errors
  // High-precision blocks cover the mixer's two linears.
  CHECK(lm_high_precision_linears(s, 1, 0) == std::vector<int>{0, 1, 4});
  CHECK(lm_tiling_problem(s).empty());

  const auto message = [](const LmSpec& t) {
    try {
      validate(t);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(message(s).empty());
  LmSpec t = s;
  t.pattern = "FF";
  CHECK(message(t).find("no sequence mixer") != std::string::npos);
  t = s, t.mamba.chunk = 5;
  CHECK(message(t).find("mamba.chunk") != std::string::npos);
  t = s, t.mamba.groups = 3;
  CHECK(message(t).find("mamba.groups") != std::string::npos);
  t = s, t.mamba.head_dim = 5;
  CHECK(message(t).find("mamba.head_dim") != std::string::npos);
  t = s, t.mamba.state = 0;
  CHECK(message(t).find("mamba.state") != std::string::npos);
  t = s, t.mamba.conv_width = 0;
  CHECK(message(t).find("mamba.conv_width") != std::string::npos);
  t = s, t.pattern = "AF", t.mamba.chunk = 5;  // without M blocks the mixer's keys are not used
  CHECK(message(t).empty());
  t = s, t.mamba.head_dim = 8;  // 8 mixer heads: 128 + 32 + 8 in-projection rows
  CHECK(lm_tiling_problem(t).find("in-projection rows") != std::string::npos);
}
