#include "quant/training_recipe.hpp"

#include <stdexcept>

#include "quant/presets.hpp"

namespace fp4d {

namespace {

// splitmix64: decorrelates (seed, step) into an SR seed.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

GemmRole parse_gemm_role(const std::string& s) {
  if (s == "fprop") return GemmRole::Fprop;
  if (s == "dgrad") return GemmRole::Dgrad;
  if (s == "wgrad") return GemmRole::Wgrad;
  throw std::invalid_argument("unknown GEMM role '" + s + "' (known: fprop, dgrad, wgrad)");
}
std::string to_string(GemmRole r) {
  switch (r) {
    case GemmRole::Fprop: return "fprop";
    case GemmRole::Dgrad: return "dgrad";
    case GemmRole::Wgrad: return "wgrad";
  }
  return "?";
}

const std::vector<GemmRecipe>& gemm_recipes() {
  using K = GemmRecipe::Kind;
  static const std::vector<GemmRecipe> r = {
      {"bf16", "BF16 operands, FP32 accumulation", K::Bf16, false, false, false, 0},
      {"fp8", "E4M3, 1x128 activations/gradients, 128x128 weights", K::Fp8, true, false, false, 0},
      {"fp8-tensor", "E4M3, per-tensor current scaling (amax/448)", K::Fp8, false, false, false, 0, true},
      {"mxfp4", "MXFP4 1x32 (OCP floor scale) on every operand", K::Mxfp4, false, false, false, 0},
      {"mxfp4-ceil", "MXFP4 1x32, scale rounded up (paper/TE)", K::Mxfp4, false, false, false, 0, false,
       MxScaleRule::Ceil},
      {"mxfp4-rceil", "MXFP4 1x32, float32 amax/6 rounded up", K::Mxfp4, false, false, false, 0, false,
       MxScaleRule::Rceil},
      {"nvfp4", "paper recipe: 16x16 weights, RHT-16 on Wgrad operands, hardware SR (cvt.rs) on gradients", K::Nvfp4,
       true, true, true, kSrHw},
      {"nvfp4-no-sr", "nvfp4 without stochastic rounding", K::Nvfp4, true, true, false, kSrHw},
      {"nvfp4-no-rht", "nvfp4 without the RHT", K::Nvfp4, true, false, true, kSrHw},
      {"nvfp4-no-2d", "nvfp4 with 1x16 weight blocks", K::Nvfp4, false, true, true, kSrHw},
      {"nvfp4-sr8", "nvfp4 with 8-bit SR (top 8 bits of a 32-bit word per element)", K::Nvfp4, true, true, true, 8},
      {"nvfp4-sr-exact", "nvfp4 with exact SR (the idealised reference)", K::Nvfp4, true, true, true, kSrExact},
      {"nvfp4-plain", "NVFP4 1x16 RNE everywhere, no RHT", K::Nvfp4, false, false, false, 0},
  };
  return r;
}

GemmRecipe gemm_recipe(const std::string& name) {
  for (const GemmRecipe& g : gemm_recipes())
    if (g.name == name) return g;
  // Composable: nvfp4 followed by modifiers, each at most once.
  if (name.rfind("nvfp4", 0) == 0) {
    GemmRecipe r = gemm_recipe("nvfp4");
    r.name = name;
    std::string rest = name.substr(5), description;
    bool ok = true, sr_kind = false;
    while (ok && !rest.empty()) {
      ok = false;
      // "-sr-exact" before "-sr8": no modifier is a prefix of a later one in this list.
      for (const char* m : {"-no-sr", "-no-rht", "-no-2d", "-sr-exact", "-sr8"}) {
        const std::string mod = m;
        if (rest.rfind(mod, 0) != 0 || description.find(mod) != std::string::npos) continue;
        const bool kind = mod == "-sr8" || mod == "-sr-exact";
        if (kind && sr_kind) continue;  // one SR kind at most: -sr8-sr-exact names no recipe
        sr_kind = sr_kind || kind;
        if (mod == "-no-sr") r.sr_gradients = false;
        if (mod == "-no-rht") r.rht_wgrad = false;
        if (mod == "-no-2d") r.two_d_weights = false;
        if (mod == "-sr8") r.sr_bits = 8;
        if (mod == "-sr-exact") r.sr_bits = kSrExact;
        description += mod;
        rest = rest.substr(mod.size());
        ok = true;
        break;
      }
    }
    if (ok) {
      r.description = "nvfp4 recipe with" + description;
      return r;
    }
  }
  std::string known;
  for (const GemmRecipe& g : gemm_recipes()) known += (known.empty() ? "" : ", ") + g.name;
  throw std::invalid_argument("unknown GEMM recipe '" + name + "' (known: " + known +
                              ", all, or nvfp4 with any of -no-sr -no-rht -no-2d and one of -sr8 -sr-exact)");
}

std::vector<std::string> expand_gemm_recipe_names(const std::vector<std::string>& names) {
  std::vector<std::string> all;
  for (const GemmRecipe& g : gemm_recipes()) all.push_back(g.name);
  return expand_names(names, all, [](const std::string& n) { (void)gemm_recipe(n); });
}

// The spec of one operand given in NT form (reduction along its rows, axis 1).
QuantSpec gemm_operand_spec(const GemmRecipe& g, OperandKind kind, bool wgrad, std::uint64_t seed, std::uint64_t stream) {
  QuantSpec s;
  switch (g.kind) {
    case GemmRecipe::Kind::Bf16: s = preset("bf16").spec; break;
    case GemmRecipe::Kind::Fp8:
      s = preset(g.fp8_per_tensor ? "fp8-e4m3-tensor"
                 : kind == OperandKind::Weight && g.two_d_weights ? "fp8-e4m3-128x128"
                                                                   : "fp8-e4m3-1x128")
              .spec;
      break;
    case GemmRecipe::Kind::Mxfp4:
      s = preset("mxfp4").spec;
      s.mx_scale_rule = g.mx_rule;
      break;
    case GemmRecipe::Kind::Nvfp4:
      s = preset(kind == OperandKind::Weight && g.two_d_weights ? "nvfp4-2d" : "nvfp4").spec;
      if (kind == OperandKind::Gradient && g.sr_gradients) {
        s.rounding.mode = Rounding::Stochastic;
        s.rounding.sr_bits = g.sr_bits;
      }
      if (wgrad && g.rht_wgrad) {
        s.rht.size = 16;
        s.rht.signs = RhtSigns::Te;
        s.rht_axis = 1;  // NT form: the reduction (token) dimension is axis 1
      }
      break;
  }
  s.axis = 1;
  s.rounding.rng = RngStream{seed, stream};
  s.rht.sign_seed = seed;
  return s;
}

std::uint64_t recipe_step_seed(std::uint64_t seed, std::int64_t step) {
  return mix(seed ^ mix(static_cast<std::uint64_t>(step)));
}

std::string fp8_block_layouts(const GemmRecipe& g) {
  std::string layouts;
  for (const OperandKind kind : {OperandKind::Activation, OperandKind::Weight, OperandKind::Gradient})
    for (const bool wgrad : {false, true}) {
      const QuantSpec s = gemm_operand_spec(g, kind, wgrad, 0, 0);
      const std::string l = layout_string(s);
      if (s.scheme == Scheme::Fp8 && !s.per_tensor() && layouts.find(l) == std::string::npos)
        layouts += (layouts.empty() ? "" : " and ") + l;
    }
  return layouts;
}


}  // namespace fp4d
