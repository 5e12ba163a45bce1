#include "model/lm_spec.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace fp4d {

namespace {
[[noreturn]] void bad(const std::string& key, const std::string& why) {
  throw std::invalid_argument("lm: " + key + " " + why);
}
}  // namespace

std::int64_t lm_head_dim(const LmSpec& s) { return s.heads > 0 ? s.d_model / s.heads : 0; }
std::int64_t lm_mamba_d_inner(const LmSpec& s) { return s.mamba.expand * s.d_model; }
std::int64_t lm_mamba_heads(const LmSpec& s) {
  return s.mamba.head_dim > 0 ? lm_mamba_d_inner(s) / s.mamba.head_dim : 0;
}

std::vector<LmBlockKind> lm_blocks(const LmSpec& s) {
  const char* known = "A attention, F SwiGLU FFN, M Mamba-2 mixer";
  if (s.pattern.empty()) bad("pattern", std::string("is empty (one letter per block: ") + known + ")");
  std::vector<LmBlockKind> blocks;
  bool mixer = false;
  for (std::size_t i = 0; i < s.pattern.size(); ++i) {
    const char c = s.pattern[i];
    if (c == 'A') blocks.push_back(LmBlockKind::Attention);
    else if (c == 'F') blocks.push_back(LmBlockKind::Ffn);
    else if (c == 'M') blocks.push_back(LmBlockKind::Mamba);
    else
      bad("pattern", "'" + s.pattern + "' has the unknown letter '" + std::string(1, c) + "' at position " +
                         std::to_string(i) + " (known: " + known + ")");
    mixer = mixer || c != 'F';
  }
  if (!mixer)
    bad("pattern", "'" + s.pattern + "' has no sequence mixer (A or M): no position could see another");
  return blocks;
}

void validate(const LmSpec& s) {
  if (s.vocab < 2) bad("vocab", "must be >= 2");
  if (s.d_model < 1) bad("d_model", "must be >= 1");
  if (s.heads < 1) bad("heads", "must be >= 1");
  if (s.kv_heads < 1) bad("kv_heads", "must be >= 1");
  if (s.d_model % s.heads != 0)
    bad("heads", "= " + std::to_string(s.heads) + " does not divide d_model = " + std::to_string(s.d_model));
  if (s.heads % s.kv_heads != 0)
    bad("kv_heads", "= " + std::to_string(s.kv_heads) + " does not divide heads = " + std::to_string(s.heads));
  if (lm_head_dim(s) % 2 != 0)
    bad("heads", "gives the odd head dimension d_model / heads = " + std::to_string(lm_head_dim(s)) +
                     " (RoPE rotates pairs of dimensions)");
  if (s.ffn < 1) bad("ffn", "must be >= 1");
  if (s.seq_len < 1) bad("seq_len", "must be >= 1");
  if (s.batch < 1) bad("batch", "must be >= 1");
  const std::vector<LmBlockKind> blocks = lm_blocks(s);
  if (std::find(blocks.begin(), blocks.end(), LmBlockKind::Mamba) != blocks.end()) {
    const LmMamba& m = s.mamba;
    if (m.state < 1) bad("mamba.state", "must be >= 1");
    if (m.expand < 1) bad("mamba.expand", "must be >= 1");
    if (m.head_dim < 1) bad("mamba.head_dim", "must be >= 1");
    if (lm_mamba_d_inner(s) % m.head_dim != 0)
      bad("mamba.head_dim", "= " + std::to_string(m.head_dim) + " does not divide d_inner = expand * d_model = " +
                                std::to_string(lm_mamba_d_inner(s)));
    if (m.groups < 1 || lm_mamba_heads(s) % m.groups != 0)
      bad("mamba.groups", "= " + std::to_string(m.groups) + " must be >= 1 and divide the mixer heads (" +
                              std::to_string(lm_mamba_heads(s)) + " = d_inner / head_dim)");
    if (m.conv_width < 1) bad("mamba.conv_width", "must be >= 1");
    if (m.chunk < 1 || s.seq_len % m.chunk != 0)
      bad("mamba.chunk", "= " + std::to_string(m.chunk) + " must be >= 1 and divide seq_len = " + std::to_string(s.seq_len));
  }
  if (!(s.rope_base > 1.0) || !std::isfinite(s.rope_base)) bad("rope_base", "must be > 1 and finite");
  if (!(s.norm_eps > 0.0) || !std::isfinite(s.norm_eps)) bad("norm_eps", "must be > 0 and finite");
  if (s.init != "gpt2" && s.init != "scaled") bad("init", "'" + s.init + "' is unknown (known: gpt2, scaled)");
  const LmOptimizer& o = s.optimizer;
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0)) bad("optimizer.beta1", "must be in [0, 1)");
  if (!(o.beta2 >= 0.0 && o.beta2 < 1.0)) bad("optimizer.beta2", "must be in [0, 1)");
  if (!(o.eps > 0.0) || !std::isfinite(o.eps)) bad("optimizer.eps", "must be > 0 and finite");
  if (!(o.weight_decay >= 0.0) || !std::isfinite(o.weight_decay))
    bad("optimizer.weight_decay", "must be >= 0 and finite");
  if (!(o.max_grad_norm >= 0.0) || !std::isfinite(o.max_grad_norm))
    bad("optimizer.max_grad_norm", "must be >= 0 and finite (0: no clipping)");
  validate_lr_schedule(lm_lr_schedule(s), "lm: optimizer.");
}

std::string to_string(LmLinearKind k) {
  switch (k) {
    case LmLinearKind::Qkv: return "qkv";
    case LmLinearKind::Q: return "q";
    case LmLinearKind::K: return "k";
    case LmLinearKind::V: return "v";
    case LmLinearKind::AttnOut: return "o";
    case LmLinearKind::FfnGateUp: return "gateup";
    case LmLinearKind::FfnDown: return "down";
    case LmLinearKind::MambaIn: return "mamba_in";
    case LmLinearKind::MambaOut: return "mamba_out";
    case LmLinearKind::Head: break;
  }
  return "head";
}

namespace {
// Both lists at once: the parameters in state order, the linear layers in GemmCall order.
void layout(const LmSpec& s, std::vector<LmParam>& p, std::vector<LmLinear>& lin) {
  const std::vector<LmBlockKind> blocks = lm_blocks(s);
  const std::int64_t d = s.d_model, hd = lm_head_dim(s), qd = s.heads * hd, kvd = s.kv_heads * hd;
  p.push_back({"embedding", LmParamKind::Embedding, -1, -1, s.vocab, d, false});
  auto add_linear = [&](int b, LmLinearKind k, std::int64_t rows, std::int64_t cols) {
    const auto l = static_cast<int>(lin.size());
    lin.push_back({b, k, rows, cols, static_cast<int>(p.size())});
    p.push_back({"blocks." + std::to_string(b) + "." + to_string(k), LmParamKind::Linear, b, l, rows, cols, true});
  };
  for (std::size_t bi = 0; bi < blocks.size(); ++bi) {
    const int b = static_cast<int>(bi);
    p.push_back({"blocks." + std::to_string(b) + ".norm", LmParamKind::NormGain, b, -1, 1, d, false});
    if (blocks[bi] == LmBlockKind::Attention) {
      if (s.fused_qkv) {
        add_linear(b, LmLinearKind::Qkv, qd + 2 * kvd, d);
      } else {
        add_linear(b, LmLinearKind::Q, qd, d);
        add_linear(b, LmLinearKind::K, kvd, d);
        add_linear(b, LmLinearKind::V, kvd, d);
      }
      add_linear(b, LmLinearKind::AttnOut, d, qd);
    } else if (blocks[bi] == LmBlockKind::Ffn) {
      add_linear(b, LmLinearKind::FfnGateUp, 2 * s.ffn, d);
      add_linear(b, LmLinearKind::FfnDown, d, s.ffn);
    } else {
      const std::int64_t di = lm_mamba_d_inner(s), hm = lm_mamba_heads(s), gn = s.mamba.groups * s.mamba.state;
      const std::int64_t conv_dim = di + 2 * gn;
      add_linear(b, LmLinearKind::MambaIn, 2 * di + 2 * gn + hm, d);
      const std::string pre = "blocks." + std::to_string(b) + ".";
      const auto add_mixer = [&](const char* name, LmMixerParam which, std::int64_t rows, std::int64_t cols) {
        p.push_back({pre + name, LmParamKind::Mixer, b, -1, rows, cols, false, which});
      };
      add_mixer("conv_w", LmMixerParam::ConvW, conv_dim, s.mamba.conv_width);
      add_mixer("conv_b", LmMixerParam::ConvB, 1, conv_dim);
      add_mixer("dt_bias", LmMixerParam::DtBias, 1, hm);
      add_mixer("a_log", LmMixerParam::ALog, 1, hm);
      add_mixer("d_skip", LmMixerParam::DSkip, 1, hm);
      add_mixer("mixer_norm", LmMixerParam::Norm, 1, di);
      add_linear(b, LmLinearKind::MambaOut, d, di);
    }
  }
  p.push_back({"final_norm", LmParamKind::NormGain, -1, -1, 1, d, false});
  if (s.tied_embeddings) {
    lin.push_back({-1, LmLinearKind::Head, s.vocab, d, 0});  // E
  } else {
    add_linear(-1, LmLinearKind::Head, s.vocab, d);
    p.back().name = "head";
  }
}
}  // namespace

std::vector<LmParam> lm_params(const LmSpec& s) {
  std::vector<LmParam> p;
  std::vector<LmLinear> lin;
  layout(s, p, lin);
  return p;
}

std::vector<LmLinear> lm_linears(const LmSpec& s) {
  std::vector<LmParam> p;
  std::vector<LmLinear> lin;
  layout(s, p, lin);
  return lin;
}

std::vector<int> lm_high_precision_linears(const LmSpec& s, int first_blocks, int last_blocks) {
  if (first_blocks < 0) throw std::invalid_argument("lm: the number of first high-precision blocks must be >= 0");
  if (last_blocks < 0) throw std::invalid_argument("lm: the number of last high-precision blocks must be >= 0");
  const auto n = static_cast<int>(lm_blocks(s).size());
  const std::vector<LmLinear> linears = lm_linears(s);
  std::vector<int> out;
  for (std::size_t l = 0; l < linears.size(); ++l) {
    const int b = linears[l].block;
    if (b < 0 || b < first_blocks || b >= n - last_blocks) out.push_back(static_cast<int>(l));
  }
  return out;
}

std::string lm_tiling_problem(const LmSpec& s) {
  const std::int64_t hd = lm_head_dim(s);
  const struct {
    const char* what;
    std::int64_t value;
  } dims[] = {{"d_model", s.d_model},
              {"ffn", s.ffn},
              {"kv_heads * head_dim", s.kv_heads * hd},
              {"vocab", s.vocab},
              {"batch * seq_len", s.batch * s.seq_len}};
  std::string out;
  for (const auto& d : dims)
    if (d.value % 16 != 0) out += (out.empty() ? "" : ", ") + std::string(d.what) + " = " + std::to_string(d.value);
  if (s.pattern.find('M') != std::string::npos) {
    const std::int64_t di = lm_mamba_d_inner(s), gn = s.mamba.groups * s.mamba.state;
    const struct {
      const char* what;
      std::int64_t value;
    } mixer[] = {{"mamba d_inner", di}, {"mamba in-projection rows 2 d_inner + 2 groups state + heads",
                                         2 * di + 2 * gn + lm_mamba_heads(s)}};
    for (const auto& d : mixer)
      if (d.value % 16 != 0) out += (out.empty() ? "" : ", ") + std::string(d.what) + " = " + std::to_string(d.value);
  }
  if (out.empty()) return out;
  return out + ": not a multiple of 16 (an NVFP4 GEMM scales blocks of 16 along each of its dimensions)";
}

LrSchedule lm_lr_schedule(const LmSpec& s) {
  const LmOptimizer& o = s.optimizer;
  return LrSchedule{o.schedule, o.lr, o.warmup_steps, o.total_steps, o.decay_fraction};
}

}  // namespace fp4d
