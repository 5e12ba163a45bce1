#include "quant/ref_operand.hpp"

#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>

#include "format/e2m1.hpp"
#include "format/fp8.hpp"

namespace fp4d {

void float_to_sig_exp(float f, std::int64_t& sig, std::int32_t& exp) {
  if (!std::isfinite(f)) throw std::invalid_argument("block_operand: non-finite scale or element");
  if (f == 0.0f) {
    sig = 0;
    exp = 0;
    return;
  }
  int e = 0;
  const double m = std::frexp(static_cast<double>(f), &e);  // |m| in [0.5, 1), 24 bits at most
  std::int64_t s = static_cast<std::int64_t>(std::ldexp(m, 24));
  int x = e - 24;
  const int tz = std::countr_zero(static_cast<std::uint64_t>(s < 0 ? -s : s));
  s >>= tz;  // exact: the low tz bits are zero (arithmetic shift keeps the sign)
  x += tz;
  sig = s;
  exp = x;
}

ref::BlockOperand block_operand(const QuantizedTensor& q) {
  const QuantSpec& sp = q.spec;
  if (sp.scheme == Scheme::Cast)
    throw std::invalid_argument("block_operand: plain casts (" + format_string(sp) + ") have no block scales");
  ref::BlockOperand op;
  op.rows = q.rows;
  op.cols = q.cols;
  const bool whole = sp.per_tensor();
  op.block = whole ? static_cast<int>(std::max<std::int64_t>(q.cols, 1)) : sp.block_cols;
  const std::int64_t br = whole ? std::max<std::int64_t>(q.rows, 1) : std::max(sp.block_rows, 1);
  const std::int64_t nb = op.blocks_per_row();
  const std::int64_t n = q.rows * q.cols;
  op.sig.assign(static_cast<std::size_t>(n), 0);
  const bool fp4 = sp.scheme == Scheme::Nvfp4 || sp.scheme == Scheme::Mxfp4;
  if (fp4) {
    // 2 * E2M1 value: codes 0-7 -> 0, 1, 2, 3, 4, 6, 8, 12; bit 3 the sign.
    static constexpr std::int32_t kTwice[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    op.exp_base = -1;
    for (std::int64_t r = 0; r < q.rows; ++r)
      for (std::int64_t c = 0; c < q.cols; ++c) {
        const std::uint8_t code = q.code_at(r, c);
        const std::int32_t v = kTwice[code & 7];
        op.sig[static_cast<std::size_t>(r * q.cols + c)] = (code & 8) ? -v : v;
      }
  } else {  // FP8 elements: odd significand * 2^exp each
    op.exp.assign(static_cast<std::size_t>(n), 0);
    const bool e5m2 = sp.element == ElementFormat::E5M2;
    for (std::int64_t r = 0; r < q.rows; ++r)
      for (std::int64_t c = 0; c < q.cols; ++c) {
        const std::uint8_t code = q.code_at(r, c);
        const float v = e5m2 ? e5m2_decode(code) : e4m3_decode(code);
        if (!std::isfinite(v))
          throw std::invalid_argument("block_operand: element (" + std::to_string(r) + ", " + std::to_string(c) +
                                      ") is NaN/Inf");
        std::int64_t s = 0;
        std::int32_t e = 0;
        float_to_sig_exp(v, s, e);
        op.sig[static_cast<std::size_t>(r * q.cols + c)] = static_cast<std::int32_t>(s);
        op.exp[static_cast<std::size_t>(r * q.cols + c)] = static_cast<std::int16_t>(e);
      }
  }
  // Block scales from their float32 values (exact decodes of the E4M3 / UE8M0 codes).
  op.scale_sig.assign(static_cast<std::size_t>(q.rows * nb), 0);
  op.scale_exp.assign(static_cast<std::size_t>(q.rows * nb), 0);
  if (q.scale_values.size() != static_cast<std::size_t>(q.scale_rows * q.scale_cols))
    throw std::invalid_argument("block_operand: scale grid size mismatch");
  for (std::int64_t r = 0; r < q.rows; ++r)
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t tr = r / br, tc = whole ? 0 : b;
      if (tr >= q.scale_rows || tc >= q.scale_cols) throw std::invalid_argument("block_operand: scale grid too small");
      const float sv = q.scale_values[static_cast<std::size_t>(tr * q.scale_cols + tc)];
      if (!std::isfinite(sv))
        throw std::invalid_argument("block_operand: block scale (" + std::to_string(tr) + ", " + std::to_string(tc) +
                                    ") is NaN/Inf");
      float_to_sig_exp(sv, op.scale_sig[static_cast<std::size_t>(r * nb + b)],
                       op.scale_exp[static_cast<std::size_t>(r * nb + b)]);
    }
  // Global (tensor) decode scale: NVFP4's s_dec; 1 elsewhere.
  float_to_sig_exp(sp.scheme == Scheme::Nvfp4 ? q.global.decode : 1.0f, op.global_sig, op.global_exp);
  return op;
}

}  // namespace fp4d
