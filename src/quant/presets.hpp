// Named quantization presets ("recipes" of one tensor) and the parsing of the option strings
// the CLI and config files use. The list is the table of docs/numerics.md.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "quant/spec.hpp"

namespace fp4d {

struct NamedPreset {
  std::string name;
  QuantSpec spec;
  std::string description;
};

const std::vector<NamedPreset>& quantize_presets();
// Throws std::invalid_argument listing the known names.
const NamedPreset& preset(std::string_view name);
// Splits comma-separated names and expands "all"; keeps order, drops duplicates.
std::vector<std::string> expand_recipe_names(const std::vector<std::string>& names);
// The same for any list of names: "all" expands to `all`, every other name is passed to
// `validate` (which throws for an unknown one). Used by the quantize and GEMM recipe lists.
// std::invalid_argument when the lists name no recipe at all ("", ",").
std::vector<std::string> expand_names(const std::vector<std::string>& lists, const std::vector<std::string>& all,
                                      const std::function<void(const std::string&)>& validate);

// Option strings -> spec (each throws std::invalid_argument naming the accepted values).
struct CustomQuantOptions {
  std::string format = "nvfp4";  // nvfp4 | mxfp4 | fp8-e4m3 | fp8-e5m2 | bf16 | fp16
  std::string layout;            // default per format: 1x16 | 1x32 | tensor | element
  int axis = 1;
  std::string rounding = "rne";  // rne | rz | sr
  std::string sr_bits = "exact"; // exact | hw | 1..32
  std::string scale_rule;        // te | te-legacy (nvfp4); floor | ceil | rceil (mxfp4)
  int rht = 0;
  std::string rht_signs = "te";  // te | random | none
  int rht_axis = 0;
  bool rht_bf16 = false;
  std::uint64_t seed = 0;        // RNG seed (SR draws, random RHT signs)
  std::uint64_t stream = 0;      // RNG stream id of the SR draws
};
QuantSpec spec_from_options(const CustomQuantOptions& o);
int parse_sr_bits(const std::string& s);

}  // namespace fp4d
