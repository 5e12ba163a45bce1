// The one-pass rowwise + columnwise (+ RHT) NVFP4 kernel equals two CPU quantizations bit for
// bit: quantize_cpu(x, rowwise spec) and quantize_cpu(x, columnwise spec), codes, scale codes
// and both global scales (the columnwise one from the RHT output's amax), for RNE, RZ, exact and
// 8-bit SR (separate Philox streams per direction), TE and legacy scale rules, BF16 RHT output,
// random signs, widths that are and are not multiples of the 64-column warp tile, and inputs
// with zero rows, Inf and NaN.
#include <limits>

#include "backend/cuda/nvfp4_dual.hpp"
#include "quant/quantize.hpp"
#include "quant/recipes.hpp"
#include "sim/generators.hpp"
#include "support/catch.hpp"
#include "support/float_bits.hpp"

using namespace fp4d;
using namespace fp4d_test;

namespace fp4d::cuda {
// nvfp4_dual.cu's test hook: mismatches of its branch-free SR conversion against e2m1_sr.
std::uint64_t dual_sr_fast_exhaustive_check(int sr_bits, std::uint32_t* first_bad);
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

void compare(const Matrix& x, const QuantSpec& row, const QuantSpec& col) {
  const cuda::DualHostResult g = cuda::nvfp4_quantize_dual_cuda(x, row, col);
  const QuantizedTensor r = quantize_cpu(x, row), c = quantize_cpu(x, col);
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
      for (const char* col_name : {"nvfp4-col", "nvfp4-rht", "nvfp4-rht-sr"})
        for (const int mode : {0, 1, 2, 3}) {  // RNE, RZ, exact SR, 8-bit SR on the rowwise side
          QuantSpec row = preset("nvfp4").spec, col = preset(col_name).spec;
          row.rounding.mode = mode == 0 ? Rounding::NearestEven : mode == 1 ? Rounding::TowardZero : Rounding::Stochastic;
          row.rounding.sr_bits = mode == 3 ? 8 : 0;
          row.rounding.rng = RngStream{41, 1};
          col.rounding.rng = RngStream{41, 2};
          INFO(rows << " x " << cols << (nonfinite ? " with Inf/NaN" : "") << ", " << col_name << ", row mode " << mode);
          compare(x, row, col);
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
}

TEST_CASE("Dual NVFP4: the kernel's fast SR conversion equals e2m1_sr on all 2^32 inputs") {
  // Per input: a random word, the tie word floor(f * 2^32), its neighbours, 0 and ~0; exact SR
  // (the tie goes to e2m1_sr's 128-bit tie break) and k-bit SR.
  for (const int sr_bits : {kSrExact, 8, 1, 31, 32}) {
    std::uint32_t first_bad = 0;
    const std::uint64_t bad = cuda::dual_sr_fast_exhaustive_check(sr_bits, &first_bad);
    INFO("sr_bits " << sr_bits << ", first mismatching input bits 0x" << std::hex << first_bad);
    CHECK(bad == 0);
  }
}

TEST_CASE("Dual NVFP4 refuses what it does not compute") {
  const Matrix x(32, 32, 1.0f);
  CHECK_THROWS_AS(cuda::nvfp4_quantize_dual_cuda(x, preset("nvfp4-2d").spec, preset("nvfp4-col").spec), std::invalid_argument);
  CHECK_THROWS_AS(cuda::nvfp4_quantize_dual_cuda(x, preset("nvfp4").spec, preset("nvfp4").spec), std::invalid_argument);
  CHECK_THROWS_AS(cuda::nvfp4_quantize_dual_cuda(Matrix(24, 32, 1.0f), preset("nvfp4").spec, preset("nvfp4-col").spec),
                  std::invalid_argument);
}
