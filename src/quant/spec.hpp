// What a quantization does: the scheme (NVFP4, MXFP4, FP8 scaled, plain cast), its block
// layout and axis, element rounding, scale rule and optional random Hadamard transform.
// Every choice of nvfp4-spec.md that a user could want differently is a field here, with
// the spec's choice as the default.
#pragma once

#include <cstdint>
#include <string>

#include "format/rounding.hpp"

namespace fp4d {

enum class Scheme { Nvfp4, Mxfp4, Fp8, Cast };
enum class ElementFormat { E2M1, E4M3, E5M2, BF16, FP16 };

// NVFP4 block-scale rule (spec section 2, step 3).
enum class NvScaleRule {
  Te,        // S_b = e4m3(a_b * (s_enc * (1/6)))   TE >= 2.14 (default)
  TeLegacy,  // S_b = e4m3((a_b / 6) * s_enc)        TE <= 2.13
};
// MXFP4 UE8M0 scale rule (spec section 5).
enum class MxScaleRule {
  Floor,  // OCP MX v1.0: X = 2^(floor(log2 a_b) - 2); block maxima in (6, 8) X clip to 6
  Ceil,   // NVFP4 paper / TE: X = 2^ceil(log2(a_b / 6)), exact; never clips
  Rceil,  // X = 2^ceil(log2(float32(a_b * float32(1/6)))): the float product, rounded up
};

enum class RhtSigns { Te, Random, None };

struct RhtSpec {
  int size = 0;                    // d: 0 = off, else a power of two in [2, 256]
  RhtSigns signs = RhtSigns::Te;   // TE's fixed vector (d = 16 only), seeded random, or all +1
  std::uint64_t sign_seed = 0;     // for RhtSigns::Random
  bool bf16_output = false;        // round the transform's output to BF16 (as TE does for BF16 inputs)
  bool enabled() const { return size > 0; }
};

// Non-finite inputs: the library implements the spec's semantics for Inf/NaN; front ends
// refuse them unless asked (a NaN in an experiment's input is almost always a bug).
struct QuantSpec {
  Scheme scheme = Scheme::Nvfp4;
  ElementFormat element = ElementFormat::E2M1;
  // Block shape in the stored orientation: 1 x block_cols blocks along the block axis, or
  // block_rows x block_cols tiles. block_cols == 0 means one scale for the whole tensor.
  int block_rows = 1;
  int block_cols = 16;
  // Axis the 1xN blocks run along, in the input's orientation: 1 = along each row (the last,
  // contiguous dimension; "rowwise"), 0 = along each column ("columnwise": stored transposed).
  int axis = 1;
  RoundingSpec rounding{};
  NvScaleRule nv_scale_rule = NvScaleRule::Te;
  MxScaleRule mx_scale_rule = MxScaleRule::Floor;
  RhtSpec rht{};
  // Axis the RHT runs along (blocks of rht.size consecutive elements), in the input's
  // orientation. For the Wgrad operands this is the token dimension (axis 0).
  int rht_axis = 0;

  bool is_2d() const { return block_rows > 1; }
  bool per_tensor() const { return block_cols == 0; }
  // Whether codes are stored for the transpose of the input (1xN blocks along axis 0).
  bool stored_transposed() const { return !is_2d() && !per_tensor() && axis == 0 && scheme != Scheme::Cast; }
};

// Text forms used by the CLI, the HDF5 attributes and the docs.
std::string to_string(Scheme);
std::string to_string(ElementFormat);
std::string to_string(Rounding);
std::string to_string(NvScaleRule);
std::string to_string(MxScaleRule);
std::string to_string(RhtSigns);
std::string layout_string(const QuantSpec&);   // "1x16", "16x16", "tensor", ...
std::string scale_rule_string(const QuantSpec&);
std::string format_string(const QuantSpec&);   // "nvfp4", "mxfp4", "fp8-e4m3", "bf16", ...
std::string sr_bits_string(int sr_bits);       // "exact", "hw" or the number
// Throws std::invalid_argument with the accepted values when the spec is inconsistent
// (layout not allowed for the scheme, RHT size not a power of two, TE signs with d != 16, ...).
void validate(const QuantSpec&);

}  // namespace fp4d
