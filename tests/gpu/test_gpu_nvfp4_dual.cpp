// The one-pass rowwise + columnwise (+ RHT) NVFP4 kernel equals two CPU quantizations bit for
// bit: quantize_cpu(x, rowwise spec) and quantize_cpu(x, columnwise spec), codes, scale codes
// and both global scales (the columnwise one from the RHT output's amax), for RNE, RZ, exact and
// 8-bit SR (separate Philox streams per direction), TE and legacy scale rules, BF16 RHT output,
// random signs, widths that are and are not multiples of the 64-column warp tile, float32 and
// BF16 input, and inputs with zero rows, Inf and NaN. The BF16 decodes the same pass writes
// (the emulated GEMM's operands) equal E2M1 value x E4M3 scale of the CPU's codes, worked out
// here from the formats' definitions, and asking for them changes no code. Its benchmark and
// the streamed floors beside it run and count the bytes the pass moves.
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/cuda/bench.hpp"
#include "backend/cuda/nvfp4_dual.hpp"
#include "format/bf16.hpp"
#include "quant/quantize.hpp"
#include "quant/presets.hpp"
#include "sim/generators.hpp"
#include "support/catch.hpp"
#include "support/float_bits.hpp"

using namespace fp4d;
using namespace fp4d_test;

namespace fp4d::cuda {
// nvfp4_dual.cu's test hook: mismatches of its fast SR conversions against e2m1_sr, and how many
// random words fell in the FMA-pipe form's undecided band.
std::uint64_t dual_sr_fast_exhaustive_check(int sr_bits, std::uint32_t* first_bad, std::uint64_t* undecided);
// ... and of the hardware E4M3 conversion against e4m3_rne_satfinite (non-NaN; NaN counted apart).
std::uint64_t dual_e4m3_hw_exhaustive_check(std::uint32_t* first_bad, std::uint64_t* nan_mismatches);
// ... and of the table decode of the BF16 operands against nvfp4_unscaled_bf16.
std::uint64_t dual_unscaled_decode_exhaustive_check(std::uint32_t* first_bad);
// ... and of the hardware E4M3 decode of the block scales against e4m3_decode (all 256 codes).
std::uint64_t dual_e4m3_hw_decode_check(std::uint32_t* first_bad);
// ... and of the packed BF16 block amax against block_amax_nan of the elements as floats.
std::uint64_t dual_bf16_amax_exhaustive_check(std::uint32_t* first_bad);
}  // namespace fp4d::cuda

namespace {

Matrix input(std::int64_t rows, std::int64_t cols, bool nonfinite) {
  GeneratorSpec g;
  g.kind = "outliers";
  g.rows = rows, g.cols = cols, g.seed = 9;
  Matrix x = generate(g);
  for (std::int64_t c = 0; c < cols; ++c) x(0, c) = 0.0f;
  if (nonfinite) {
    x(rows - 1, 1) = std::numeric_limits<float>::infinity();
    x(rows / 2, cols - 1) = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

// x with every element rounded to BF16 (NaN stays a NaN), for the BF16-input kernels.
Matrix bf16_values(Matrix x) {
  for (float& v : x.data) v = bf16_round(v);
  return x;
}

// The BF16 bits of element i's E2M1 value times its block's E4M3 scale, from the formats'
// definitions (OCP MX v1.0: E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; E4M3 bias 7, subnormal
// m 2^-9, 0x7f NaN): the product has at most 6 significant bits, so the BF16 value is exact;
// *inexact counts the elements where it is not (a NaN scale code, or a wrong premise).
std::vector<std::uint16_t> expected_bf16(const QuantizedTensor& q, std::size_t* inexact) {
  static const double kE2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  std::vector<std::uint16_t> out(q.codes.size() * 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint32_t code = (q.codes[i / 2] >> (4 * (i & 1))) & 0xfu;
    const std::uint32_t sc = q.scale_codes[i / 16], e = (sc >> 3) & 15u, m = sc & 7u;
    const double scale = e == 0 ? std::ldexp(static_cast<double>(m), -9) : std::ldexp(1.0 + m / 8.0, static_cast<int>(e) - 7);
    const double v = (code & 8u ? -1.0 : 1.0) * kE2m1[code & 7u] * scale;
    const float f = static_cast<float>(v);
    const std::uint32_t bits = float_bits(f);
    if ((sc & 0x7fu) == 0x7fu || static_cast<double>(f) != v || (bits & 0xffffu) != 0u) ++*inexact;
    out[i] = static_cast<std::uint16_t>(bits >> 16);
  }
  return out;
}

void compare(const Matrix& x, const QuantSpec& row, const QuantSpec& col, bool bf16_input = false) {
  const cuda::DualHostResult g = cuda::nvfp4_quantize_dual_cuda(x, row, col, bf16_input);
  const QuantizedTensor r = quantize_cpu(x, row), c = quantize_cpu(x, col);
  std::size_t inexact = 0;
  CHECK(g.row_bf16 == expected_bf16(r, &inexact));
  CHECK(g.col_bf16 == expected_bf16(c, &inexact));
  CHECK(inexact == 0);
  const cuda::DualHostResult plain = cuda::nvfp4_quantize_dual_cuda(x, row, col, bf16_input, false);
  CHECK(plain.row_codes == g.row_codes);
  CHECK(plain.col_codes == g.col_codes);
  CHECK(plain.row_scales == g.row_scales);
  CHECK(plain.col_scales == g.col_scales);
  CHECK(same_bits(plain.row_global.decode, g.row_global.decode));
  CHECK(same_bits(plain.col_global.decode, g.col_global.decode));
  CHECK(plain.row_bf16.empty());
  CHECK(g.row_codes == r.codes);
  CHECK(g.row_scales == r.scale_codes);
  CHECK(same_bits(g.row_global.encode, r.global.encode));
  CHECK(same_bits(g.row_global.decode, r.global.decode));
  CHECK(g.col_codes == c.codes);
  CHECK(g.col_scales == c.scale_codes);
  CHECK(same_bits(g.col_global.encode, c.global.encode));
  CHECK(same_bits(g.col_global.decode, c.global.decode));
}

}  // namespace

TEST_CASE("Dual NVFP4 (rowwise + columnwise, RHT) equals two CPU quantizations bit for bit") {
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{256, 256}, {64, 80}, {16, 16}, {48, 1040}})
    for (const bool nonfinite : {false, true}) {
      const Matrix x = input(rows, cols, nonfinite);
      for (const char* col_name : {"nvfp4-col", "nvfp4-rht", "nvfp4-rht-sr", "nvfp4-rht-sr-hw"})
        for (const int mode : {0, 1, 2, 3, 4}) {  // RNE, RZ, exact SR, 8-bit SR, hw SR on the rowwise side
          QuantSpec row = preset("nvfp4").spec, col = preset(col_name).spec;
          row.rounding.mode = mode == 0 ? Rounding::NearestEven : mode == 1 ? Rounding::TowardZero : Rounding::Stochastic;
          row.rounding.sr_bits = mode == 3 ? 8 : mode == 4 ? kSrHw : 0;
          row.rounding.rng = RngStream{41, 1};
          col.rounding.rng = RngStream{41, 2};
          INFO(rows << " x " << cols << (nonfinite ? " with Inf/NaN" : "") << ", " << col_name << ", row mode " << mode);
          compare(x, row, col);
          INFO("BF16 input");
          compare(bf16_values(x), row, col, true);
        }
    }
}

TEST_CASE("Dual NVFP4: legacy rule, BF16 RHT output and random signs") {
  const Matrix x = input(128, 96, false);
  QuantSpec row = preset("nvfp4-legacy").spec, col = preset("nvfp4-rht-sr").spec;
  col.nv_scale_rule = NvScaleRule::TeLegacy;
  col.rht.bf16_output = true;
  col.rht.signs = RhtSigns::Random;
  col.rht.sign_seed = 1234;
  col.rounding.sr_bits = 8;
  col.rounding.rng = RngStream{5, 6};
  compare(x, row, col);
  compare(bf16_values(x), row, col, true);
  col.rounding.sr_bits = kSrHw;  // the same with hw SR on both sides
  row = preset("nvfp4-sr-hw").spec;
  row.nv_scale_rule = NvScaleRule::TeLegacy;  // the dual kernel takes one rule for both directions
  row.rounding.rng = RngStream{7, 8};
  compare(x, row, col);
  compare(bf16_values(x), row, col, true);
}

TEST_CASE("Dual NVFP4 writes the GEMMs' alphas {fl(s_dec * partner s_dec), 0} of both sides") {
  // The partners' decode scales as an emulated GEMM's other operand would have them (any
  // floats; these make the products round), against the products of the CPU's global scales.
  const Matrix x = input(64, 80, false);
  const QuantSpec row = preset("nvfp4").spec, col = preset("nvfp4-rht").spec;
  const GlobalScale partners[2] = {{1.0f / 3.0f, 3.0f}, {7.0f, 1.0f / 7.0f}};
  const cuda::DualHostResult g = cuda::nvfp4_quantize_dual_cuda(x, row, col, false, true, partners);
  const QuantizedTensor r = quantize_cpu(x, row), c = quantize_cpu(x, col);
  const float want_row = r.global.decode * partners[0].decode, want_col = c.global.decode * partners[1].decode;
  CHECK(same_bits(g.row_alpha[0], want_row));
  CHECK(same_bits(g.col_alpha[0], want_col));
  CHECK(g.row_alpha[1] == 0.0f);
  CHECK(g.col_alpha[1] == 0.0f);
  CHECK(!same_bits(want_row, want_col));  // the two sides' factors are not mixed up unnoticed
}

TEST_CASE("Dual NVFP4: the kernel's fast SR conversions equal e2m1_sr on all 2^32 inputs") {
  // Per input: a random word, the tie word F = floor(f * 2^32), its neighbours, 0 and ~0, and
  // the edges of the FMA-pipe form's band (F & ~511, one below, +511, +512); exact SR (the tie
  // goes to e2m1_sr's 128-bit tie break) and k-bit SR. The band (512 words of 2^32) may only
  // be used with more than 23 random bits; a random word lands in it with probability 2^-23,
  // so about 2^32 * 2^-23 = 512 of the random words (non-NaN inputs) should: at least one and
  // fewer than 2048 (Poisson(512) beyond either has probability below 1e-100).
  // hw SR (kSrHw): random bytes, the carry's edges among them; nothing is ever undecided.
  for (const int sr_bits : {kSrExact, 8, 1, 23, 24, 31, 32, kSrHw}) {
    std::uint32_t first_bad = 0;
    std::uint64_t undecided = 0;
    const std::uint64_t bad = cuda::dual_sr_fast_exhaustive_check(sr_bits, &first_bad, &undecided);
    INFO("sr_bits " << sr_bits << ", first mismatching input bits 0x" << std::hex << first_bad << std::dec
                    << ", undecided random words " << undecided);
    CHECK(bad == 0);
    if (sr_bits == kSrExact || sr_bits > 23) {
      CHECK(undecided >= 1);
      CHECK(undecided < 2048);
    } else {
      CHECK(undecided == 0);
    }
  }
}

TEST_CASE("Dual NVFP4: the hardware E4M3 conversion equals e4m3_rne_satfinite on all non-NaN inputs") {
  // The fast path takes its block scale codes from cvt.rn.satfinite.e4m3x2.f32 (an independent
  // implementation of the same rounding); it never passes a NaN, so NaN inputs are reported,
  // not required to agree.
  std::uint32_t first_bad = 0;
  std::uint64_t nan_mismatches = 0;
  const std::uint64_t bad = cuda::dual_e4m3_hw_exhaustive_check(&first_bad, &nan_mismatches);
  INFO("first mismatching input bits 0x" << std::hex << first_bad << std::dec << "; NaN inputs that differ: "
                                         << nan_mismatches);
  CHECK(bad == 0);
}

TEST_CASE("The table decode of the BF16 operands equals nvfp4_unscaled_bf16 element by element") {
  // Every scale code 0 .. 0x7e with every 16-bit half of a code word, both halves of both
  // words of a block: all 2^32 words.
  std::uint32_t first_bad = 0;
  const std::uint64_t bad = cuda::dual_unscaled_decode_exhaustive_check(&first_bad);
  INFO("first mismatching code word 0x" << std::hex << first_bad);
  CHECK(bad == 0);
}

TEST_CASE("The hardware E4M3 decode of the block scales equals e4m3_decode on every code") {
  // The per-CTA encode and decode tables are filled from it; FP16 holds every E4M3 value, so
  // nothing may differ but the two NaN codes' payloads.
  std::uint32_t first_bad = 0;
  const std::uint64_t bad = cuda::dual_e4m3_hw_decode_check(&first_bad);
  INFO("first mismatching code 0x" << std::hex << first_bad);
  CHECK(bad == 0);
}

TEST_CASE("The BF16 rowwise block amax on packed pairs equals the float block amax") {
  // max.NaN.xorsign.abs.bf16x2 then one float max: every ordered pair of BF16 values (signed
  // zeros, subnormals, infinities and NaNs included) in the low halves, with sign flips deeper
  // in the tree; the keys and block scales come from it, so the bits must match (NaN: both).
  std::uint32_t first_bad = 0;
  const std::uint64_t bad = cuda::dual_bf16_amax_exhaustive_check(&first_bad);
  INFO("first mismatching word 0x" << std::hex << first_bad);
  CHECK(bad == 0);
}

TEST_CASE("Dual NVFP4 refuses what it does not compute") {
  const Matrix x(32, 32, 1.0f);
  CHECK_THROWS_AS(cuda::nvfp4_quantize_dual_cuda(x, preset("nvfp4-2d").spec, preset("nvfp4-col").spec), std::invalid_argument);
  CHECK_THROWS_AS(cuda::nvfp4_quantize_dual_cuda(x, preset("nvfp4").spec, preset("nvfp4").spec), std::invalid_argument);
  CHECK_THROWS_AS(cuda::nvfp4_quantize_dual_cuda(Matrix(24, 32, 1.0f), preset("nvfp4").spec, preset("nvfp4-col").spec),
                  std::invalid_argument);
  CHECK_THROWS_AS(cuda::nvfp4_quantize_dual_cuda(Matrix(32, 32, 1.0f + 0x1p-20f), preset("nvfp4").spec,
                                                 preset("nvfp4-col").spec, true),
                  std::invalid_argument);  // not a BF16 value
}

TEST_CASE("Dual NVFP4 benchmark and the floors of its byte mixes run, counting the pass's bytes") {
  constexpr std::int64_t rows = 256, cols = 1024, n = rows * cols;
  for (const bool bf16 : {true, false}) {
    INFO((bf16 ? "BF16" : "float32") << " input");
    const cuda::DualBench r = cuda::nvfp4_quantize_dual_bench(rows, cols, bf16, true, true, kSrHw, 2);
    CHECK(r.seconds > 0);
    CHECK(r.quantize_seconds > 0);
    CHECK(r.decode_seconds > 0);
    CHECK(r.counted_bytes == static_cast<double>(n) * ((bf16 ? 2.0 : 4.0) + 1.125));
    const cuda::DualStreamBench s = cuda::dual_stream_bench(rows, cols, bf16, 2);
    // Input once; both directions' codes (n / 2 bytes each) and scales (n / 16 each); with both
    // BF16 decodes 2 x 2 bytes per element more: the bytes the pass itself moves.
    CHECK(s.input_bytes == static_cast<double>(n) * (bf16 ? 2 : 4));
    CHECK(s.pass_write_bytes == static_cast<double>(n / 2 + n / 16) * 2);
    CHECK(s.decode_write_bytes == s.pass_write_bytes + static_cast<double>(n) * 4);
    CHECK(s.memcpy_s > 0);
    CHECK(s.stream_copy_s > 0);
    CHECK(s.stream_pass_s > 0);
    CHECK(s.stream_decode_s > 0);
  }
}
