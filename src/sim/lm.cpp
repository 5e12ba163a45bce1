// The `lm` model (sim/lm.hpp): the blocks' forward and backward passes, the loss, clipping
// and AdamW. Attention and RoPE are in sim/lm_attention.cpp.
#include "sim/lm.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "format/philox.hpp"
#include "model/mlp_math.hpp"
#include "model/sum_order.hpp"
#include "model/tree_sum.hpp"
#include "sim/generators.hpp"
#include "sim/lm_attention.hpp"
#include "sim/lm_mamba.hpp"
#include "sim/mlp_precision.hpp"
#include "sim/plain_gemm.hpp"

namespace fp4d {

namespace {

// The wider of T and double: the loss and the clipping norm are summed in it (a reference wider
// than double sums them in its own type).
template <class T>
using Wide = std::conditional_t<std::is_floating_point_v<T>, double, T>;

// ---- initialisation --------------------------------------------------------------------------
// Each parameter's values are sim/generators' normal draws from a seed derived from (spec seed,
// parameter index) through one Philox block (as sim/mlp.cpp derives its streams).
constexpr std::uint32_t kLmTag = 0x4c4d0000u;  // "LM"
constexpr std::uint32_t kInitPurpose = 1;

std::uint64_t init_seed(std::uint64_t seed, std::uint64_t index) {
  const Philox4x32 c{
      {static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), kInitPurpose, kLmTag}};
  const Philox4x32 r = philox4x32_10(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  return static_cast<std::uint64_t>(r.v[0]) | (static_cast<std::uint64_t>(r.v[1]) << 32);
}

// Standard deviation of a matrix parameter under the spec's init (lm_spec.hpp).
double init_std(const LmSpec& s, const LmParam& p, const std::vector<LmLinear>& lin, std::int64_t n_blocks) {
  if (p.mixer == LmMixerParam::ConvW) return 1.0 / std::sqrt(3.0 * static_cast<double>(p.cols));  // cols = K
  if (s.init == "scaled") return 1.0 / std::sqrt(static_cast<double>(p.cols));
  const LmLinearKind k = p.linear >= 0 ? lin[static_cast<std::size_t>(p.linear)].kind : LmLinearKind::Head;
  const bool residual_out = k == LmLinearKind::AttnOut || k == LmLinearKind::FfnDown || k == LmLinearKind::MambaOut;
  return residual_out ? 0.02 / std::sqrt(2.0 * static_cast<double>(n_blocks)) : 0.02;
}

// ---- checks ----------------------------------------------------------------------------------
template <class T>
void check_params(const std::vector<LmParam>& info, const std::vector<std::vector<T>>& p, const char* what) {
  if (p.size() != info.size())
    throw std::invalid_argument(std::string("lm: ") + what + " has " + std::to_string(p.size()) +
                                " parameters, the spec needs " + std::to_string(info.size()));
  for (std::size_t i = 0; i < info.size(); ++i)
    if (static_cast<std::int64_t>(p[i].size()) != info[i].rows * info[i].cols)
      throw std::invalid_argument(std::string("lm: ") + what + " parameter " + info[i].name + " has " +
                                  std::to_string(p[i].size()) + " elements, expected " +
                                  std::to_string(info[i].rows * info[i].cols));
}

void check_tokens(const LmSpec& s, const std::int32_t* tokens, std::int64_t batch) {
  if (batch < 1) throw std::invalid_argument("lm: batch must be >= 1");
  if (!tokens) throw std::invalid_argument("lm: no tokens");
  const std::int64_t n = batch * (s.seq_len + 1);
  for (std::int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= s.vocab)
      throw std::invalid_argument("lm: token " + std::to_string(tokens[i]) + " at sequence " +
                                  std::to_string(i / (s.seq_len + 1)) + ", position " +
                                  std::to_string(i % (s.seq_len + 1)) + " is outside [0, vocab = " +
                                  std::to_string(s.vocab) + ")");
}

// ---- linear layers ---------------------------------------------------------------------------
// The three GEMMs of linear layer `l` (weight w, rows x cols): through the GemmFn (shape
// checked; Wgrad's dW^T transposed back; float32 only, which run_model enforces) or
// sim/plain_gemm in T.
template <class T>
struct Linears {
  const GemmFn& gemm;
  std::int64_t step;
  std::int64_t M;

  std::vector<T> call(GemmRole role, int l, const std::vector<T>& first, std::int64_t c1, const std::vector<T>& second,
                      std::int64_t r2, std::int64_t c2, std::int64_t rows, std::int64_t cols) const {
    Matrix a(M, c1), b(r2, c2);
    std::copy(first.begin(), first.end(), a.data.begin());
    std::copy(second.begin(), second.end(), b.data.begin());
    const Matrix out = gemm(GemmCall{role, l, step}, a, b);
    if (out.rows != rows || out.cols != cols || out.data.size() != static_cast<std::size_t>(rows * cols)) {
      std::ostringstream m;
      m << "lm: the GemmFn returned " << out.rows << " x " << out.cols << " for " << to_string(role) << " of linear "
        << l << ", expected " << rows << " x " << cols;
      throw std::runtime_error(m.str());
    }
    return std::vector<T>(out.data.begin(), out.data.end());
  }

  // Z = A W^T [M x rows].
  std::vector<T> fprop(int l, const std::vector<T>& a, const std::vector<T>& w, std::int64_t rows,
                       std::int64_t cols) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (gemm) return call(GemmRole::Fprop, l, a, cols, w, rows, cols, M, rows);
    }
    std::vector<T> z;
    plain_gemm(a, false, w, true, z, M, cols, rows);
    return z;
  }
  // dA = dZ W [M x cols].
  std::vector<T> dgrad(int l, const std::vector<T>& dz, const std::vector<T>& w, std::int64_t rows,
                       std::int64_t cols) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (gemm) return call(GemmRole::Dgrad, l, dz, rows, w, rows, cols, M, cols);
    }
    std::vector<T> da;
    plain_gemm(dz, false, w, false, da, M, rows, cols);
    return da;
  }
  // dW = dZ^T A [rows x cols].
  std::vector<T> wgrad(int l, const std::vector<T>& a, const std::vector<T>& dz, std::int64_t rows,
                       std::int64_t cols) const {
    std::vector<T> dw(static_cast<std::size_t>(rows * cols));
    if constexpr (std::is_floating_point_v<T>) {
      if (gemm) {
        const std::vector<T> dwt = call(GemmRole::Wgrad, l, a, cols, dz, M, rows, cols, rows);
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t c = 0; c < cols; ++c)
            dw[static_cast<std::size_t>(r * cols + c)] = dwt[static_cast<std::size_t>(c * rows + r)];
        return dw;
      }
    }
    plain_gemm(dz, true, a, false, dw, rows, M, cols);
    return dw;
  }
};

// ---- RMSNorm with gain -------------------------------------------------------------------------
template <class T>
struct NormCache {
  std::vector<T> n, rinv, a;  // normalised rows, 1 / rms, the gained output (the next GEMM's input)
};

template <class T>
void rmsnorm_forward(const std::vector<T>& h, const std::vector<T>& g, std::int64_t M, std::int64_t d, T eps,
                     NormCache<T>& c) {
  c.n.resize(h.size());
  c.a.resize(h.size());
  c.rinv.resize(static_cast<std::size_t>(M));
  const T dt = static_cast<T>(d);
  for (std::int64_t i = 0; i < M; ++i) {
    const T* hi = h.data() + i * d;
    T ss = T(0);
    for (std::int64_t j = 0; j < d; ++j) ss = ss + hi[j] * hi[j];
    const T r = T(1) / mlp_math::sqrt_of(T(ss / dt + eps));
    c.rinv[static_cast<std::size_t>(i)] = r;
    for (std::int64_t j = 0; j < d; ++j) {
      const auto k = static_cast<std::size_t>(i * d + j);
      c.n[k] = hi[j] * r;
      c.a[k] = c.n[k] * g[static_cast<std::size_t>(j)];
    }
  }
}

// dh += the gradient through the norm of da; dg_j = sum_i da_ij n_ij in model/sum_order.hpp's
// row chunks (the GPU step's order: a chunk of rows per thread).
template <class T>
void rmsnorm_backward(const std::vector<T>& da, const NormCache<T>& c, const std::vector<T>& g, std::int64_t M,
                      std::int64_t d, std::vector<T>& dh, std::vector<T>& dg) {
  dg.resize(static_cast<std::size_t>(d));
  for (std::int64_t j = 0; j < d; ++j)
    dg[static_cast<std::size_t>(j)] = chunked_sum<T>(M, kRowChunk, [&](std::int64_t i) -> T {
      const auto k = static_cast<std::size_t>(i * d + j);
      return da[k] * c.n[k];
    });
  const T dt = static_cast<T>(d);
  std::vector<T> dn(static_cast<std::size_t>(d));
  for (std::int64_t i = 0; i < M; ++i) {
    const T* dai = da.data() + i * d;
    const T* ni = c.n.data() + i * d;
    T dot = T(0);
    for (std::int64_t j = 0; j < d; ++j) {
      const auto jj = static_cast<std::size_t>(j);
      dn[jj] = dai[j] * g[jj];
      dot = dot + dn[jj] * ni[j];
    }
    const T mean = dot / dt;
    const T r = c.rinv[static_cast<std::size_t>(i)];
    T* dhi = dh.data() + i * d;
    for (std::int64_t j = 0; j < d; ++j) dhi[j] = dhi[j] + r * (dn[static_cast<std::size_t>(j)] - ni[j] * mean);
  }
}

// ---- the model -------------------------------------------------------------------------------
template <class T>
struct BlockCache {
  NormCache<T> norm;
  std::vector<T> q, k, v, o;  // attention: q and k after RoPE; o = the heads' outputs
  std::vector<T> gu, f;       // FFN: [G U], silu(G) U
  std::vector<T> zx, my;      // Mamba: the in-projection's output, the mixer's output
  MambaCache<T> mamba;
};

template <class T>
struct Model {
  const LmSpec& s;
  const std::vector<std::vector<T>>& p;
  const std::vector<LmParam> info;
  const std::vector<LmLinear> lin;
  const std::vector<LmBlockKind> blocks;
  std::vector<int> first_lin;        // per block: its first linear layer
  std::vector<std::size_t> gain;     // per block: the parameter of its norm gain
  std::size_t final_gain = 0;        // the final norm's gain
  Linears<T> L;
  bool bf16;
  AttentionShape shape;
  MambaShape mshape;
  std::vector<std::size_t> mixer;    // per M block: its conv_w parameter (the mixer's six follow)
  RopeTable<T> rope;
  std::int64_t M, d;

  Model(const LmSpec& spec, const std::vector<std::vector<T>>& params, const GemmFn& gemm, std::int64_t step,
        std::int64_t batch, const LmPrecision& prec)
      : s(spec),
        p(params),
        info(lm_params(spec)),
        lin(lm_linears(spec)),
        blocks(lm_blocks(spec)),
        L{gemm, step, batch * spec.seq_len},
        bf16(prec.bf16_mixers),
        shape{batch, spec.seq_len, spec.heads, spec.kv_heads, lm_head_dim(spec)},
        rope(rope_table<T>(spec.seq_len, lm_head_dim(spec), spec.rope_base)),
        M(batch * spec.seq_len),
        d(spec.d_model) {
    first_lin.assign(blocks.size(), -1);
    mixer.assign(blocks.size(), 0);
    gain.assign(blocks.size(), 0);
    for (std::size_t l = lin.size(); l-- > 0;)
      if (lin[l].block >= 0) first_lin[static_cast<std::size_t>(lin[l].block)] = static_cast<int>(l);
    for (std::size_t i = 0; i < info.size(); ++i) {
      if (info[i].kind != LmParamKind::NormGain) continue;
      if (info[i].block >= 0) gain[static_cast<std::size_t>(info[i].block)] = i;
      else final_gain = i;
    }
    for (std::size_t i = 0; i < info.size(); ++i)
      if (info[i].mixer == LmMixerParam::ConvW) mixer[static_cast<std::size_t>(info[i].block)] = i;
    const LmMamba& mb = spec.mamba;
    mshape = MambaShape{batch, spec.seq_len, lm_mamba_heads(spec), mb.head_dim, mb.state, mb.groups, mb.conv_width,
                        mb.chunk};
  }

  std::size_t param_of(int l) const { return static_cast<std::size_t>(lin[static_cast<std::size_t>(l)].param); }
  // The mixer's own parameters of M block b, in lm_params order.
  MambaParams<T> mixer_params(std::size_t b) const {
    const std::size_t i = mixer[b];
    return MambaParams<T>{p[i].data(), p[i + 1].data(), p[i + 2].data(), p[i + 3].data(), p[i + 4].data(),
                          p[i + 5].data()};
  }
  const std::vector<T>& weight(int l) const { return p[param_of(l)]; }
  std::int64_t rows(int l) const { return lin[static_cast<std::size_t>(l)].rows; }
  std::int64_t cols(int l) const { return lin[static_cast<std::size_t>(l)].cols; }
  std::vector<T> fprop(int l, const std::vector<T>& a) const { return L.fprop(l, a, weight(l), rows(l), cols(l)); }
  std::vector<T> dgrad(int l, const std::vector<T>& dz) const { return L.dgrad(l, dz, weight(l), rows(l), cols(l)); }
  std::vector<T> wgrad(int l, const std::vector<T>& a, const std::vector<T>& dz) const {
    return L.wgrad(l, a, dz, rows(l), cols(l));
  }
};

// Splits [Q K V] (M x (qd + 2 kvd)) into its three column ranges, and joins them back.
template <class T>
void split_qkv(const std::vector<T>& qkv, std::int64_t M, std::int64_t qd, std::int64_t kvd, std::vector<T>& q,
               std::vector<T>& k, std::vector<T>& v) {
  const std::int64_t w = qd + 2 * kvd;
  q.resize(static_cast<std::size_t>(M * qd));
  k.resize(static_cast<std::size_t>(M * kvd));
  v.resize(static_cast<std::size_t>(M * kvd));
  for (std::int64_t i = 0; i < M; ++i) {
    const T* r = qkv.data() + i * w;
    std::copy(r, r + qd, q.data() + i * qd);
    std::copy(r + qd, r + qd + kvd, k.data() + i * kvd);
    std::copy(r + qd + kvd, r + w, v.data() + i * kvd);
  }
}
template <class T>
std::vector<T> join_qkv(const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v, std::int64_t M,
                        std::int64_t qd, std::int64_t kvd) {
  const std::int64_t w = qd + 2 * kvd;
  std::vector<T> qkv(static_cast<std::size_t>(M * w));
  for (std::int64_t i = 0; i < M; ++i) {
    T* r = qkv.data() + i * w;
    std::copy(q.data() + i * qd, q.data() + (i + 1) * qd, r);
    std::copy(k.data() + i * kvd, k.data() + (i + 1) * kvd, r + qd);
    std::copy(v.data() + i * kvd, v.data() + (i + 1) * kvd, r + qd + kvd);
  }
  return qkv;
}

// Forward (and, with grads, backward) of the whole model. Returns the loss; logits_out, if
// given, receives the logits.
template <class T>
double run_model(const LmSpec& s, const std::vector<std::vector<T>>& params, const std::int32_t* tokens,
                 std::int64_t batch, const GemmFn& gemm, std::int64_t step, const LmPrecision& prec,
                 std::vector<std::vector<T>>* grads, std::vector<T>* logits_out) {
  validate(s);
  if constexpr (!std::is_same_v<T, float>) {
    if (gemm) throw std::invalid_argument("lm: a GemmFn is only accepted for the float32 run (T = float)");
    if (prec.bf16_mixers)
      throw std::invalid_argument("lm: BF16 mixer operands need T = float (the reference has no rounding)");
  }
  check_tokens(s, tokens, batch);
  const Model<T> m(s, params, gemm, step, batch, prec);
  check_params(m.info, params, "params");
  const std::int64_t M = m.M, d = m.d, S = s.seq_len, V = s.vocab, F = s.ffn;
  const std::int64_t hd = m.shape.head_dim, qd = s.heads * hd, kvd = s.kv_heads * hd;
  const T eps = static_cast<T>(s.norm_eps);
  const auto input = [&](std::int64_t i) { return tokens[(i / S) * (S + 1) + i % S]; };
  const auto target = [&](std::int64_t i) { return tokens[(i / S) * (S + 1) + i % S + 1]; };

  // Embedding: the stored rows.
  std::vector<T> h(static_cast<std::size_t>(M * d));
  const std::vector<T>& E = params[0];
  for (std::int64_t i = 0; i < M; ++i) std::copy_n(E.data() + input(i) * d, d, h.data() + i * d);

  std::vector<BlockCache<T>> cache(m.blocks.size());
  for (std::size_t b = 0; b < m.blocks.size(); ++b) {
    BlockCache<T>& c = cache[b];
    rmsnorm_forward(h, params[m.gain[b]], M, d, eps, c.norm);
    const int l0 = m.first_lin[b];
    std::vector<T> z;
    if (m.blocks[b] == LmBlockKind::Attention) {
      int lo = l0 + 1;
      if (s.fused_qkv) {
        split_qkv(m.fprop(l0, c.norm.a), M, qd, kvd, c.q, c.k, c.v);
      } else {
        c.q = m.fprop(l0, c.norm.a);
        c.k = m.fprop(l0 + 1, c.norm.a);
        c.v = m.fprop(l0 + 2, c.norm.a);
        lo = l0 + 3;
      }
      rope_rotate(m.rope, c.q.data(), M, s.heads, false);
      rope_rotate(m.rope, c.k.data(), M, s.kv_heads, false);
      c.o.resize(static_cast<std::size_t>(M * qd));
      attention_forward(m.shape, c.q.data(), c.k.data(), c.v.data(), m.bf16, c.o.data());
      z = m.fprop(lo, c.o);
    } else if (m.blocks[b] == LmBlockKind::Mamba) {
      c.zx = m.fprop(l0, c.norm.a);
      c.my.resize(static_cast<std::size_t>(M * m.mshape.d_inner()));
      mamba_mixer_forward(m.mshape, m.mixer_params(b), c.zx.data(), eps, m.bf16, c.mamba, c.my.data());
      z = m.fprop(l0 + 1, c.my);
    } else {
      c.gu = m.fprop(l0, c.norm.a);
      c.f.resize(static_cast<std::size_t>(M * F));
      for (std::int64_t i = 0; i < M; ++i)
        for (std::int64_t j = 0; j < F; ++j) {
          const T& g = c.gu[static_cast<std::size_t>(i * 2 * F + j)];
          const T& u = c.gu[static_cast<std::size_t>(i * 2 * F + F + j)];
          c.f[static_cast<std::size_t>(i * F + j)] = mlp_math::silu(g) * u;
        }
      z = m.fprop(l0 + 1, c.f);
    }
    for (std::size_t i = 0; i < h.size(); ++i) h[i] = h[i] + z[i];
  }
  NormCache<T> fin;
  const std::vector<T>& gf = params[m.final_gain];
  rmsnorm_forward(h, gf, M, d, eps, fin);
  const int lh = static_cast<int>(m.lin.size()) - 1;
  std::vector<T> logits = m.fprop(lh, fin.a);

  // Loss (reported, in Wide<T>) and dlogits = (softmax - onehot) / M (in T, row by row,
  // ascending: max, exp, sum, divide).
  // One term per position, summed by tree_sum (the GPU step's order).
  using W = Wide<T>;
  std::vector<W> terms(static_cast<std::size_t>(M), W(0));
  for (std::int64_t i = 0; i < M; ++i) {
    const T* li = logits.data() + i * V;
    W mx = static_cast<W>(li[0]);
    for (std::int64_t j = 1; j < V; ++j) mx = std::max(mx, static_cast<W>(li[j]));
    W se = W(0);
    for (std::int64_t j = 0; j < V; ++j) se += mlp_math::exp_of(W(static_cast<W>(li[j]) - mx));
    terms[static_cast<std::size_t>(i)] = (mx + mlp_math::log_of(se)) - static_cast<W>(li[target(i)]);
  }
  const W loss = tree_sum(terms.data(), M) / static_cast<W>(M);
  if (logits_out) *logits_out = logits;
  if (!grads) return static_cast<double>(loss);

  std::vector<T>& dlog = logits;  // overwritten in place
  const T Mt = static_cast<T>(M);
  for (std::int64_t i = 0; i < M; ++i) {
    T* li = dlog.data() + i * V;
    T mx = li[0];
    for (std::int64_t j = 1; j < V; ++j) mx = std::max(mx, li[j]);
    T sum = T(0);
    for (std::int64_t j = 0; j < V; ++j) {
      li[j] = mlp_math::exp_of(T(li[j] - mx));
      sum = sum + li[j];
    }
    const std::int64_t y = target(i);
    for (std::int64_t j = 0; j < V; ++j) li[j] = (li[j] / sum - (j == y ? T(1) : T(0))) / Mt;
  }

  auto& g = *grads;
  g.assign(params.size(), {});
  const auto grad_of = [&](int l) -> std::vector<T>& { return g[m.param_of(l)]; };
  // Head.
  grad_of(lh) = m.wgrad(lh, fin.a, dlog);
  std::vector<T> dh(static_cast<std::size_t>(M * d), T(0));
  rmsnorm_backward(m.dgrad(lh, dlog), fin, gf, M, d, dh, g[m.final_gain]);

  for (std::size_t bi = m.blocks.size(); bi-- > 0;) {
    BlockCache<T>& c = cache[bi];
    const int l0 = m.first_lin[bi];
    std::vector<T> da;
    // dz = dh: the block output's gradient is the residual stream's.
    if (m.blocks[bi] == LmBlockKind::Attention) {
      const int lo = s.fused_qkv ? l0 + 1 : l0 + 3;
      grad_of(lo) = m.wgrad(lo, c.o, dh);
      const std::vector<T> dout = m.dgrad(lo, dh);
      std::vector<T> dq(static_cast<std::size_t>(M * qd)), dk(static_cast<std::size_t>(M * kvd)),
          dv(static_cast<std::size_t>(M * kvd));
      attention_backward(m.shape, c.q.data(), c.k.data(), c.v.data(), dout.data(), m.bf16, dq.data(), dk.data(),
                         dv.data());
      rope_rotate(m.rope, dq.data(), M, s.heads, true);
      rope_rotate(m.rope, dk.data(), M, s.kv_heads, true);
      if (s.fused_qkv) {
        const std::vector<T> dqkv = join_qkv(dq, dk, dv, M, qd, kvd);
        grad_of(l0) = m.wgrad(l0, c.norm.a, dqkv);
        da = m.dgrad(l0, dqkv);
      } else {
        const std::vector<T>* dpart[3] = {&dq, &dk, &dv};
        for (int j = 0; j < 3; ++j) {
          grad_of(l0 + j) = m.wgrad(l0 + j, c.norm.a, *dpart[j]);
          const std::vector<T> daj = m.dgrad(l0 + j, *dpart[j]);
          if (j == 0) da = daj;
          else
            for (std::size_t e = 0; e < da.size(); ++e) da[e] = da[e] + daj[e];
        }
      }
    } else if (m.blocks[bi] == LmBlockKind::Mamba) {
      grad_of(l0 + 1) = m.wgrad(l0 + 1, c.my, dh);
      const std::vector<T> dmy = m.dgrad(l0 + 1, dh);
      std::vector<T> dzx(c.zx.size());
      MambaGrads<T> mg;
      mamba_mixer_backward(m.mshape, m.mixer_params(bi), c.zx.data(), c.mamba, dmy.data(), eps, m.bf16, dzx.data(), mg);
      const std::size_t i0 = m.mixer[bi];
      g[i0] = std::move(mg.conv_w);
      g[i0 + 1] = std::move(mg.conv_b);
      g[i0 + 2] = std::move(mg.dt_bias);
      g[i0 + 3] = std::move(mg.a_log);
      g[i0 + 4] = std::move(mg.d_skip);
      g[i0 + 5] = std::move(mg.norm_g);
      grad_of(l0) = m.wgrad(l0, c.norm.a, dzx);
      da = m.dgrad(l0, dzx);
    } else {
      grad_of(l0 + 1) = m.wgrad(l0 + 1, c.f, dh);
      const std::vector<T> df = m.dgrad(l0 + 1, dh);
      std::vector<T> dgu(static_cast<std::size_t>(M * 2 * F));
      for (std::int64_t i = 0; i < M; ++i)
        for (std::int64_t j = 0; j < F; ++j) {
          const auto gi = static_cast<std::size_t>(i * 2 * F + j), ui = static_cast<std::size_t>(i * 2 * F + F + j);
          const T& gg = c.gu[gi];
          const T& u = c.gu[ui];
          const T& dd = df[static_cast<std::size_t>(i * F + j)];
          const T sg = mlp_math::sigmoid(gg);
          dgu[gi] = (dd * u) * mlp_math::silu_derivative(gg, sg);
          dgu[ui] = dd * (gg * sg);
        }
      grad_of(l0) = m.wgrad(l0, c.norm.a, dgu);
      da = m.dgrad(l0, dgu);
    }
    rmsnorm_backward(da, c.norm, params[m.gain[bi]], M, d, dh, g[m.gain[bi]]);
  }
  // Embedding: dE[x_i] += dH_0[i], ascending i, after the head's dW when tied.
  std::vector<T>& dE = g[0];
  if (!s.tied_embeddings) dE.assign(static_cast<std::size_t>(V * d), T(0));
  for (std::int64_t i = 0; i < M; ++i) {
    T* row = dE.data() + input(i) * d;
    const T* src = dh.data() + i * d;
    for (std::int64_t j = 0; j < d; ++j) row[j] = row[j] + src[j];
  }
  return static_cast<double>(loss);
}

}  // namespace

template <class T>
LmState<T> init_lm_state(const LmSpec& s) {
  validate(s);
  const std::vector<LmParam> info = lm_params(s);
  const std::vector<LmLinear> lin = lm_linears(s);
  const auto n_blocks = static_cast<std::int64_t>(lm_blocks(s).size());
  LmState<T> st;
  for (std::size_t i = 0; i < info.size(); ++i) {
    const LmParam& p = info[i];
    const auto n = static_cast<std::size_t>(p.rows * p.cols);
    using MP = LmMixerParam;
    if (p.kind == LmParamKind::NormGain || p.mixer == MP::DSkip || p.mixer == MP::Norm) {
      st.p.emplace_back(n, T(1));
    } else if (p.mixer == MP::ConvB) {
      st.p.emplace_back(n, T(0));
    } else if (p.mixer == MP::ALog || p.mixer == MP::DtBias) {
      const std::vector<float> v = p.mixer == MP::ALog ? mamba_initial_a_log(p.cols) : mamba_initial_dt_bias(p.cols);
      st.p.emplace_back(v.begin(), v.end());
    } else {
      GeneratorSpec g;
      g.kind = "normal";
      g.rows = p.rows;
      g.cols = p.cols;
      g.seed = init_seed(s.seed, i);
      g.scale = init_std(s, p, lin, n_blocks);
      const Matrix w = generate(g);
      st.p.emplace_back(w.data.begin(), w.data.end());
    }
    st.m.emplace_back(n, T(0));
    st.v.emplace_back(n, T(0));
  }
  return st;
}

template <class T>
double lm_loss_and_gradients(const LmSpec& s, const std::vector<std::vector<T>>& params, const std::int32_t* tokens,
                             std::int64_t batch, const GemmFn& gemm, std::vector<std::vector<T>>* grads,
                             std::int64_t step, const LmPrecision& precision) {
  return run_model<T>(s, params, tokens, batch, gemm, step, precision, grads, nullptr);
}

template <class T>
std::vector<T> lm_logits(const LmSpec& s, const std::vector<std::vector<T>>& params, const std::int32_t* tokens,
                         std::int64_t batch, const GemmFn& gemm, std::int64_t step, const LmPrecision& precision) {
  std::vector<T> logits;
  run_model<T>(s, params, tokens, batch, gemm, step, precision, nullptr, &logits);
  return logits;
}

template <class T>
LmStepStats lm_train_step(const LmSpec& s, LmState<T>& state, const std::int32_t* tokens, const GemmFn& gemm,
                          const LmPrecision& precision) {
  validate(s);
  const std::vector<LmParam> info = lm_params(s);
  check_params(info, state.p, "state.p");
  check_params(info, state.m, "state.m");
  check_params(info, state.v, "state.v");
  std::vector<std::vector<T>> g;
  LmStepStats st;
  st.loss = run_model<T>(s, state.p, tokens, s.batch, gemm, state.step, precision, &g, nullptr);

  // Global norm in Wide<T>: each parameter's squares in chunks of kNormChunk elements, the
  // chunks of every parameter in lm_params order added by tree_sum (model/sum_order.hpp: the
  // GPU step's order); the clip factor in Wide<T>, rounded to T (so a wide reference's factor
  // is not one of double's), clipping in T.
  using W = Wide<T>;
  std::vector<W> chunks;
  for (const auto& gi : g) {
    const auto n = static_cast<std::int64_t>(gi.size());
    for (std::int64_t c = 0; c < chunk_count(n, kNormChunk); ++c)
      chunks.push_back(chunk_sum<W>(c, kNormChunk, n, [&](std::int64_t e) -> W {
        const W x = static_cast<W>(gi[static_cast<std::size_t>(e)]);
        return x * x;
      }));
  }
  const W ss = tree_sum(chunks.data(), static_cast<std::int64_t>(chunks.size()));
  using std::sqrt;
  const W norm = sqrt(ss);
  st.grad_norm = static_cast<double>(norm);
  const double max_norm = s.optimizer.max_grad_norm;
  if (max_norm > 0.0 && norm > W(max_norm)) {
    const W factor = W(max_norm) / norm;
    st.clip_factor = static_cast<double>(factor);
    const T f = static_cast<T>(factor);
    for (auto& gi : g)
      for (T& x : gi) x = x * f;
  }

  const LmOptimizer& o = s.optimizer;
  st.lr = scheduled_lr(lm_lr_schedule(s), state.step);
  const auto decay = mlp_math::adam_coefficients<T>(st.lr, o.beta1, o.beta2, o.eps, o.weight_decay, state.step);
  const auto no_decay = mlp_math::adam_coefficients<T>(st.lr, o.beta1, o.beta2, o.eps, 0.0, state.step);
  st.lost_update_fraction.assign(info.size(), 0.0);
  for (std::size_t i = 0; i < info.size(); ++i) {
    const auto& c = info[i].weight_decay ? decay : no_decay;
    auto& w = state.p[i];
    auto& m1 = state.m[i];
    auto& m2 = state.v[i];
    const auto& gi = g[i];
    const auto n = static_cast<std::int64_t>(w.size());
    std::int64_t lost = 0;
#pragma omp parallel for schedule(static) reduction(+ : lost) if (n > (1 << 15))
    for (std::int64_t e = 0; e < n; ++e) {
      const auto k = static_cast<std::size_t>(e);
      lost += mlp_math::adamw_update(w[k], m1[k], m2[k], gi[k], c) ? 1 : 0;
    }
    st.lost_update_fraction[i] = n > 0 ? static_cast<double>(lost) / static_cast<double>(n) : 0.0;
  }
  ++state.step;
  return st;
}

#define FP4D_LM_INSTANTIATE(T)                                                                                     \
  template LmState<T> init_lm_state<T>(const LmSpec&);                                                            \
  template double lm_loss_and_gradients<T>(const LmSpec&, const std::vector<std::vector<T>>&, const std::int32_t*, \
                                           std::int64_t, const GemmFn&, std::vector<std::vector<T>>*,             \
                                           std::int64_t, const LmPrecision&);                                     \
  template std::vector<T> lm_logits<T>(const LmSpec&, const std::vector<std::vector<T>>&, const std::int32_t*,    \
                                       std::int64_t, const GemmFn&, std::int64_t, const LmPrecision&);            \
  template LmStepStats lm_train_step<T>(const LmSpec&, LmState<T>&, const std::int32_t*, const GemmFn&,           \
                                        const LmPrecision&);
FP4D_LM_INSTANTIATE(float)
FP4D_LM_INSTANTIATE(double)
FP4D_LM_INSTANTIATE(mlp_binary128)
FP4D_LM_INSTANTIATE(mlp_mp256)
#undef FP4D_LM_INSTANTIATE

}  // namespace fp4d
