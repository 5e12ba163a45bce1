#include "quant/spec.hpp"

#include <stdexcept>

namespace fp4d {

std::string to_string(Scheme s) {
  switch (s) {
    case Scheme::Nvfp4: return "nvfp4";
    case Scheme::Mxfp4: return "mxfp4";
    case Scheme::Fp8: return "fp8";
    case Scheme::Cast: return "cast";
  }
  return "?";
}
std::string to_string(ElementFormat f) {
  switch (f) {
    case ElementFormat::E2M1: return "e2m1";
    case ElementFormat::E4M3: return "e4m3";
    case ElementFormat::E5M2: return "e5m2";
    case ElementFormat::BF16: return "bf16";
    case ElementFormat::FP16: return "fp16";
  }
  return "?";
}
std::string to_string(Rounding r) {
  switch (r) {
    case Rounding::NearestEven: return "rne";
    case Rounding::TowardZero: return "rz";
    case Rounding::Stochastic: return "sr";
  }
  return "?";
}
std::string to_string(NvScaleRule r) { return r == NvScaleRule::Te ? "te" : "te-legacy"; }
std::string to_string(MxScaleRule r) {
  switch (r) {
    case MxScaleRule::Floor: return "floor";
    case MxScaleRule::Ceil: return "ceil";
    case MxScaleRule::Rceil: return "rceil";
  }
  return "?";
}
std::string to_string(RhtSigns s) {
  switch (s) {
    case RhtSigns::Te: return "te";
    case RhtSigns::Random: return "random";
    case RhtSigns::None: return "none";
  }
  return "?";
}

std::string layout_string(const QuantSpec& s) {
  if (s.scheme == Scheme::Cast) return "element";
  if (s.per_tensor()) return "tensor";
  return std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols);
}
std::string scale_rule_string(const QuantSpec& s) {
  switch (s.scheme) {
    case Scheme::Nvfp4: return to_string(s.nv_scale_rule);
    case Scheme::Mxfp4: return to_string(s.mx_scale_rule);
    case Scheme::Fp8: return "amax";
    case Scheme::Cast: return "none";
  }
  return "?";
}
std::string format_string(const QuantSpec& s) {
  switch (s.scheme) {
    case Scheme::Nvfp4: return "nvfp4";
    case Scheme::Mxfp4: return "mxfp4";
    case Scheme::Fp8: return "fp8-" + to_string(s.element);
    case Scheme::Cast: return to_string(s.element);
  }
  return "?";
}
std::string sr_bits_string(int bits) {
  return bits == kSrExact ? "exact" : bits == kSrHw ? "hw" : std::to_string(bits);
}

namespace {
void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}
}  // namespace

void validate(const QuantSpec& s) {
  const std::string layout = layout_string(s);
  switch (s.scheme) {
    case Scheme::Nvfp4:
      require(s.element == ElementFormat::E2M1, "nvfp4 elements are e2m1");
      require((s.block_rows == 1 || s.block_rows == 16) && s.block_cols == 16,
              "layout " + layout + " is not supported for nvfp4 (use 1x16 or 16x16)");
      break;
    case Scheme::Mxfp4:
      require(s.element == ElementFormat::E2M1, "mxfp4 elements are e2m1");
      require(s.block_rows == 1 && s.block_cols == 32, "layout " + layout + " is not supported for mxfp4 (use 1x32)");
      break;
    case Scheme::Fp8:
      require(s.element == ElementFormat::E4M3 || s.element == ElementFormat::E5M2, "fp8 elements are e4m3 or e5m2");
      require(s.per_tensor() || (s.block_rows == 1 && s.block_cols == 128) || (s.block_rows == 128 && s.block_cols == 128),
              "layout " + layout + " is not supported for fp8 (use tensor, 1x128 or 128x128)");
      require(s.rounding.mode == Rounding::NearestEven, "fp8 supports rounding rne only");
      break;
    case Scheme::Cast:
      require(s.element == ElementFormat::BF16 || s.element == ElementFormat::FP16, "casts are to bf16 or fp16");
      require(s.rounding.mode == Rounding::NearestEven, "bf16/fp16 casts support rounding rne only");
      break;
  }
  require(s.axis == 0 || s.axis == 1, "axis must be 0 or 1");
  require(s.rht_axis == 0 || s.rht_axis == 1, "rht axis must be 0 or 1");
  require(s.rounding.sr_bits == kSrExact || s.rounding.sr_bits == kSrHw ||
              (s.rounding.sr_bits >= 1 && s.rounding.sr_bits <= 32),
          "sr bits must be 'exact', 'hw' or 1..32");
  if (s.rht.enabled()) {
    const int d = s.rht.size;
    require(d >= 2 && d <= 256 && (d & (d - 1)) == 0, "RHT size must be a power of two in [2, 256], got " +
                                                           std::to_string(d));
    require(s.rht.signs != RhtSigns::Te || d == 16,
            "TE's RHT sign vector is defined for d = 16 only; use signs 'random' or 'none' for d = " +
                std::to_string(d));
  }
}

}  // namespace fp4d
