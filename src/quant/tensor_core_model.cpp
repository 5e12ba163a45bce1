// The tensor-core accumulation model (quant/tensor_core_model.hpp).
#include "quant/tensor_core_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

namespace fp4d {

TensorCoreModel sm90_tensor_core_model(const std::string& f) {
  TensorCoreModel m;
  m.name = "sm90-" + f;
  if (f == "bf16") {
    m.input_min_exponent = -126, m.input_fraction_bits = 7;
  } else if (f == "fp16") {
    m.input_min_exponent = -14, m.input_fraction_bits = 10;
  } else if (f == "e4m3" || f == "e5m2") {
    m.group = 32;
    m.extra_bits = -10;
    m.input_min_exponent = f == "e4m3" ? -6 : -14;
    m.input_fraction_bits = f == "e4m3" ? 3 : 2;
  } else {
    throw std::invalid_argument("tensor-core model: input format '" + f +
                                "' is not modelled for sm90 (bf16, fp16, e4m3, e5m2 are)");
  }
  m.b_input_min_exponent = m.input_min_exponent;
  m.b_input_fraction_bits = m.input_fraction_bits;
  return m;
}

TensorCoreModel sm90_tensor_core_model(const std::string& a_format, const std::string& b_format) {
  if (a_format == b_format) return sm90_tensor_core_model(a_format);
  const auto fp8 = [](const std::string& f) { return f == "e4m3" || f == "e5m2"; };
  if (!fp8(a_format) || !fp8(b_format))
    throw std::invalid_argument("tensor-core model: operands '" + a_format + "' x '" + b_format +
                                "' are not modelled for sm90 (the same format, or two FP8 formats)");
  TensorCoreModel m = sm90_tensor_core_model(a_format);
  const TensorCoreModel mb = sm90_tensor_core_model(b_format);
  m.b_input_min_exponent = mb.input_min_exponent;
  m.b_input_fraction_bits = mb.input_fraction_bits;
  m.name = "sm90-" + a_format + "x" + b_format;
  return m;
}

namespace {

// |x| = sig 2^e with sig in [1, 2), or sig < 1 at e = min_exp for values below 2^min_exp.
struct Decomposed {
  double sig;
  int e;
};
Decomposed decompose(float x, int min_exp) {
  int e = 0;
  std::frexp(std::fabs(static_cast<double>(x)), &e);  // |x| = f 2^e, f in [0.5, 1)
  int ex = e - 1;
  if (ex < min_exp) ex = min_exp;
  return {std::ldexp(std::fabs(static_cast<double>(x)), -ex), ex};
}

// floor(v / 2^s) for v >= 0 (s >= 0), or v 2^-s for s < 0.
std::uint64_t shift_right(std::uint64_t v, int s) {
  if (s <= 0) return v << -s;
  return s >= 64 ? 0 : v >> s;
}

}  // namespace

float tensor_core_block(const float* a, const float* b, int n, float c, const TensorCoreModel& m) {
  if (n < 0 || n > 64) throw std::invalid_argument("tensor_core_block: n must be in [0, 64]");
  struct Term {
    std::uint64_t s;  // significand scaled by 2^23 (an integer for the modelled formats)
    int e;
    bool neg;
  };
  Term t[65];
  int count = 0;
  for (int i = 0; i < n; ++i) {
    if (a[i] == 0.0f || b[i] == 0.0f) continue;
    const Decomposed da = decompose(a[i], m.input_min_exponent), db = decompose(b[i], m.b_input_min_exponent);
    for (const auto& [sig, bits] : {std::pair{da.sig, m.input_fraction_bits}, std::pair{db.sig, m.b_input_fraction_bits}}) {
      const double scaled = std::ldexp(sig, bits);
      if (scaled != std::floor(scaled))
        throw std::invalid_argument("tensor_core_block: an operand with more significant bits than the " + m.name +
                                    " model's input format has");
    }
    const double s = std::ldexp(da.sig * db.sig, 23);  // exact: at most 2 + 22 significant bits
    t[count++] = {static_cast<std::uint64_t>(s), da.e + db.e, (a[i] < 0) != (b[i] < 0)};
  }
  if (c != 0.0f) {
    std::uint32_t bits;
    std::memcpy(&bits, &c, sizeof bits);
    const int biased = static_cast<int>((bits >> 23) & 0xff);
    const std::uint64_t frac = bits & 0x7fffff;
    t[count++] = {biased == 0 ? frac : (frac | 0x800000), biased == 0 ? -126 : biased - 127, c < 0};
  }
  if (count == 0) return 0.0f;
  int E = m.min_exponent;
  for (int i = 0; i < count; ++i) E = std::max(E, t[i].e);
  // Every term on the grid 2^(E - 23 - extra_bits), truncated; the sum is exact in 64 bits
  // (at most 65 terms below 2^(25 + extra_bits + 1)).
  std::int64_t sum = 0;
  for (int i = 0; i < count; ++i) {
    const std::uint64_t widened = shift_right(t[i].s, -m.extra_bits);
    const auto v = static_cast<std::int64_t>(shift_right(widened, E - t[i].e));
    sum += t[i].neg ? -v : v;
  }
  if (sum == 0) return 0.0f;
  const bool neg = sum < 0;
  std::uint64_t mag = static_cast<std::uint64_t>(neg ? -sum : sum);
  const int lsb = E - 23 - m.extra_bits;  // the weight of the sum's last bit
  int top = 63;
  while (!(mag >> top)) --top;  // the leading bit's position
  const int lead = lsb + top;   // its exponent
  const int out_frac = 23 + std::min(m.extra_bits, 0);
  const int quantum = std::max(lead, -126) - out_frac;  // the output's last kept bit
  if (quantum > lsb) mag = shift_right(mag, quantum - lsb) << (quantum - lsb);
  if (lead > 127) return neg ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  const double v = std::ldexp(static_cast<double>(mag), lsb);  // exact: at most 24 bits kept
  return static_cast<float>(neg ? -v : v);
}

float tensor_core_dot(const float* a, const float* b, std::int64_t K, float c, const TensorCoreModel& m) {
  bool nan = std::isnan(c), pos = std::isinf(c) && c > 0, negi = std::isinf(c) && c < 0;
  for (std::int64_t k = 0; k < K; ++k) {
    const double p = static_cast<double>(a[k]) * static_cast<double>(b[k]);
    nan = nan || std::isnan(p);
    pos = pos || (std::isinf(p) && p > 0);
    negi = negi || (std::isinf(p) && p < 0);
  }
  if (nan || (pos && negi)) return std::numeric_limits<float>::quiet_NaN();
  if (pos) return std::numeric_limits<float>::infinity();
  if (negi) return -std::numeric_limits<float>::infinity();
  float acc = c;
  for (std::int64_t k0 = 0; k0 < K; k0 += m.group)
    acc = tensor_core_block(a + k0, b + k0, static_cast<int>(std::min<std::int64_t>(m.group, K - k0)), acc, m);
  return acc;
}

float tensor_core_dot_promoted(const float* a, const float* b, std::int64_t K, float c, std::int64_t interval,
                               const TensorCoreModel& m) {
  if (interval < 1) throw std::invalid_argument("tensor_core_dot_promoted: the interval must be at least 1");
  float acc = c;
  for (std::int64_t k0 = 0; k0 < K; k0 += interval) {
    acc = acc + tensor_core_dot(a + k0, b + k0, std::min(interval, K - k0), 0.0f, m);
  }
  return acc;
}

}  // namespace fp4d
