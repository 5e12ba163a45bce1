#include "quant/presets.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace fp4d {

namespace {
QuantSpec nv(int br, NvScaleRule rule = NvScaleRule::Te) {
  QuantSpec s;
  s.scheme = Scheme::Nvfp4;
  s.element = ElementFormat::E2M1;
  s.block_rows = br;
  s.block_cols = 16;
  s.nv_scale_rule = rule;
  return s;
}
QuantSpec sr(QuantSpec s) {
  s.rounding.mode = Rounding::Stochastic;
  s.rounding.sr_bits = kSrExact;
  return s;
}
// The paper's SR: the hardware conversion's 8-bit carry form (rounding.hpp, kSrHw).
QuantSpec sr_hw(QuantSpec s) {
  s.rounding.mode = Rounding::Stochastic;
  s.rounding.sr_bits = kSrHw;
  return s;
}
QuantSpec rht16(QuantSpec s) {
  // The Wgrad operands: transform and quantize along the token dimension (axis 0).
  s.rht.size = 16;
  s.rht.signs = RhtSigns::Te;
  s.rht_axis = 0;
  s.axis = 0;
  return s;
}
QuantSpec axis0(QuantSpec s) {
  s.axis = 0;
  return s;
}
QuantSpec mx(MxScaleRule rule) {
  QuantSpec s;
  s.scheme = Scheme::Mxfp4;
  s.element = ElementFormat::E2M1;
  s.block_rows = 1;
  s.block_cols = 32;
  s.mx_scale_rule = rule;
  return s;
}
QuantSpec fp8(ElementFormat e, int br, int bc) {
  QuantSpec s;
  s.scheme = Scheme::Fp8;
  s.element = e;
  s.block_rows = br;
  s.block_cols = bc;
  return s;
}
QuantSpec cast(ElementFormat e) {
  QuantSpec s;
  s.scheme = Scheme::Cast;
  s.element = e;
  s.block_rows = 1;
  s.block_cols = 1;
  return s;
}
}  // namespace

const std::vector<NamedPreset>& quantize_presets() {
  static const std::vector<NamedPreset> presets = {
      {"bf16", cast(ElementFormat::BF16), "BF16 cast (RNE)"},
      {"fp16", cast(ElementFormat::FP16), "FP16 cast (RNE)"},
      {"fp8-e4m3-tensor", fp8(ElementFormat::E4M3, 1, 0), "E4M3, per-tensor current scaling (amax/448)"},
      {"fp8-e5m2-tensor", fp8(ElementFormat::E5M2, 1, 0), "E5M2, per-tensor current scaling (amax/57344)"},
      {"fp8-e4m3-1x128", fp8(ElementFormat::E4M3, 1, 128), "E4M3, FP32 scale per 1x128 block (activations, gradients)"},
      {"fp8-e4m3-128x128", fp8(ElementFormat::E4M3, 128, 128), "E4M3, FP32 scale per 128x128 tile (weights)"},
      {"mxfp4", mx(MxScaleRule::Floor), "MXFP4, 1x32 UE8M0, OCP floor scale"},
      {"mxfp4-ceil", mx(MxScaleRule::Ceil), "MXFP4, 1x32 UE8M0, scale rounded up (paper/TE)"},
      {"mxfp4-rceil", mx(MxScaleRule::Rceil), "MXFP4, 1x32 UE8M0, float32 amax/6 rounded up"},
      {"nvfp4", nv(1), "NVFP4 1x16 rowwise, RNE, TE scale rule"},
      {"nvfp4-col", axis0(nv(1)), "NVFP4 1x16 columnwise (axis 0), RNE"},
      {"nvfp4-legacy", nv(1, NvScaleRule::TeLegacy), "NVFP4 1x16, TE <= 2.13 scale rule (a_b/6*s_enc)"},
      {"nvfp4-2d", nv(16), "NVFP4 16x16 tiles (weights)"},
      {"nvfp4-sr", sr(nv(1)), "NVFP4 1x16, exact stochastic rounding"},
      {"nvfp4-rht", rht16(nv(1)), "NVFP4 1x16 columnwise after RHT-16 along axis 0 (Wgrad operand)"},
      {"nvfp4-rht-sr", sr(rht16(nv(1))), "NVFP4 1x16 columnwise after RHT-16, exact SR (Wgrad dY, idealised)"},
      {"nvfp4-sr-hw", sr_hw(nv(1)), "NVFP4 1x16, hardware SR (cvt.rs: 8 random bits per element, carry form)"},
      {"nvfp4-rht-sr-hw", sr_hw(rht16(nv(1))), "NVFP4 1x16 columnwise after RHT-16, hardware SR (the paper's Wgrad dY)"},
  };
  return presets;
}

const NamedPreset& preset(std::string_view name) {
  for (const NamedPreset& r : quantize_presets())
    if (r.name == name) return r;
  std::string known;
  for (const NamedPreset& r : quantize_presets()) known += (known.empty() ? "" : ", ") + r.name;
  throw std::invalid_argument("unknown recipe '" + std::string(name) + "' (known: " + known + ", all)");
}

std::vector<std::string> expand_names(const std::vector<std::string>& lists, const std::vector<std::string>& all,
                                      const std::function<void(const std::string&)>& validate) {
  std::vector<std::string> out;
  auto add = [&](const std::string& n) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  for (const std::string& list : lists) {
    std::stringstream ss(list);
    std::string n;
    while (std::getline(ss, n, ',')) {
      if (n.empty()) continue;
      if (n == "all") {
        for (const std::string& a : all) add(a);
      } else {
        validate(n);
        add(n);
      }
    }
  }
  // An empty or comma-only list ran no recipe at all: an empty table, exit 0 and an output
  // file marked complete that holds no result.
  if (out.empty()) {
    std::string given;
    for (const std::string& list : lists) given += (given.empty() ? "" : ",") + list;
    throw std::invalid_argument("the recipe list '" + given + "' names no recipe");
  }
  return out;
}

std::vector<std::string> expand_recipe_names(const std::vector<std::string>& names) {
  std::vector<std::string> all;
  for (const NamedPreset& r : quantize_presets()) all.push_back(r.name);
  return expand_names(names, all, [](const std::string& n) { (void)preset(n); });
}

int parse_sr_bits(const std::string& s) {
  if (s == "exact") return kSrExact;
  if (s == "hw") return kSrHw;
  try {
    std::size_t pos = 0;
    const int k = std::stoi(s, &pos);
    if (pos == s.size() && k >= 1 && k <= 32) return k;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument("sr bits must be 'exact', 'hw' or an integer in 1..32, got '" + s + "'");
}

namespace {
[[noreturn]] void bad(const std::string& what, const std::string& got, const std::string& accepted) {
  throw std::invalid_argument(what + " '" + got + "' is not supported (use " + accepted + ")");
}
void parse_layout(const std::string& l, QuantSpec& s) {
  if (l == "tensor") {
    s.block_rows = 1;
    s.block_cols = 0;
    return;
  }
  if (l == "element") {
    s.block_rows = s.block_cols = 1;
    return;
  }
  const auto x = l.find('x');
  try {
    if (x != std::string::npos) {
      std::size_t p1 = 0, p2 = 0;
      s.block_rows = std::stoi(l.substr(0, x), &p1);
      s.block_cols = std::stoi(l.substr(x + 1), &p2);
      if (p1 == x && p2 == l.size() - x - 1) return;
    }
  } catch (const std::exception&) {
  }
  bad("layout", l, "1x16, 16x16, 1x32, tensor, 1x128, 128x128");
}
}  // namespace

QuantSpec spec_from_options(const CustomQuantOptions& o) {
  QuantSpec s;
  std::string layout = o.layout;
  if (o.format == "nvfp4") {
    s.scheme = Scheme::Nvfp4;
    s.element = ElementFormat::E2M1;
    if (layout.empty()) layout = "1x16";
  } else if (o.format == "mxfp4") {
    s.scheme = Scheme::Mxfp4;
    s.element = ElementFormat::E2M1;
    if (layout.empty()) layout = "1x32";
  } else if (o.format == "fp8-e4m3" || o.format == "fp8-e5m2") {
    s.scheme = Scheme::Fp8;
    s.element = o.format == "fp8-e4m3" ? ElementFormat::E4M3 : ElementFormat::E5M2;
    if (layout.empty()) layout = "tensor";
  } else if (o.format == "bf16" || o.format == "fp16") {
    s.scheme = Scheme::Cast;
    s.element = o.format == "bf16" ? ElementFormat::BF16 : ElementFormat::FP16;
    if (layout.empty()) layout = "element";
  } else {
    bad("format", o.format, "nvfp4, mxfp4, fp8-e4m3, fp8-e5m2, bf16, fp16");
  }
  parse_layout(layout, s);
  s.axis = o.axis;
  if (o.rounding == "rne") s.rounding.mode = Rounding::NearestEven;
  else if (o.rounding == "rz") s.rounding.mode = Rounding::TowardZero;
  else if (o.rounding == "sr") s.rounding.mode = Rounding::Stochastic;
  else bad("rounding", o.rounding, "rne, rz, sr");
  s.rounding.sr_bits = parse_sr_bits(o.sr_bits);
  s.rounding.rng = RngStream{o.seed, o.stream};
  if (!o.scale_rule.empty()) {
    if (s.scheme == Scheme::Nvfp4) {
      if (o.scale_rule == "te") s.nv_scale_rule = NvScaleRule::Te;
      else if (o.scale_rule == "te-legacy") s.nv_scale_rule = NvScaleRule::TeLegacy;
      else bad("nvfp4 scale rule", o.scale_rule, "te, te-legacy");
    } else if (s.scheme == Scheme::Mxfp4) {
      if (o.scale_rule == "floor") s.mx_scale_rule = MxScaleRule::Floor;
      else if (o.scale_rule == "ceil") s.mx_scale_rule = MxScaleRule::Ceil;
      else if (o.scale_rule == "rceil") s.mx_scale_rule = MxScaleRule::Rceil;
      else bad("mxfp4 scale rule", o.scale_rule, "floor, ceil, rceil");
    } else {
      bad("scale rule", o.scale_rule, "no --scale-rule for " + o.format);
    }
  }
  s.rht.size = o.rht;
  if (o.rht_signs == "te") s.rht.signs = RhtSigns::Te;
  else if (o.rht_signs == "random") s.rht.signs = RhtSigns::Random;
  else if (o.rht_signs == "none") s.rht.signs = RhtSigns::None;
  else bad("RHT signs", o.rht_signs, "te, random, none");
  s.rht.sign_seed = o.seed;
  s.rht.bf16_output = o.rht_bf16;
  s.rht_axis = o.rht_axis;
  validate(s);
  return s;
}

}  // namespace fp4d
