// Every quantize preset with a GPU kernel, through cuda::quantize_cuda (what `fp4drift quantize
// --backend cuda` runs), equals the CPU backend bit for bit: codes (or BF16 bits), scale codes,
// scale values, global scale, dequantized values, clip count and statistics. Shapes that are
// and are not multiples of the block (1x32, 1x128, 128x128 tiles cut by the edge), a zero
// block, a block with subnormal-range values, and Inf/NaN elements; the MXFP4 presets also
// with exact and 8-bit SR and RZ (same Philox counters as the CPU).
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cuda/quantize.hpp"
#include "quant/quantize.hpp"
#include "quant/presets.hpp"
#include "sim/generators.hpp"
#include "support/catch.hpp"
#include "support/float_bits.hpp"

using namespace fp4d;
using namespace fp4d_test;

namespace {

Matrix test_matrix(std::int64_t rows, std::int64_t cols, bool nonfinite) {
  GeneratorSpec g;
  g.kind = "outliers";
  g.rows = rows, g.cols = cols, g.seed = 5;
  Matrix x = generate(g);
  for (std::int64_t c = 0; c < std::min<std::int64_t>(cols, 40); ++c) x(0, c) = 0.0f;  // zero blocks
  for (std::int64_t c = 0; c < std::min<std::int64_t>(cols, 40); ++c)
    x(1 % rows, c) = std::ldexp(static_cast<float>(c % 7) - 3.0f, -140);  // float32 subnormals
  if (nonfinite && rows > 3 && cols > 70) {
    x(2, 3) = std::numeric_limits<float>::infinity();
    x(3, 70) = -std::numeric_limits<float>::infinity();
    x(2, 50) = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

void check_same(const QuantizedTensor& gpu, const QuantizedTensor& cpu) {
  CHECK(gpu.rows == cpu.rows);
  CHECK(gpu.padded_cols == cpu.padded_cols);
  CHECK(gpu.scale_rows == cpu.scale_rows);
  CHECK(gpu.scale_cols == cpu.scale_cols);
  CHECK(gpu.codes == cpu.codes);
  CHECK(gpu.codes16 == cpu.codes16);
  CHECK(gpu.scale_codes == cpu.scale_codes);
  REQUIRE(gpu.scale_values.size() == cpu.scale_values.size());
  std::size_t bad_scales = 0;
  for (std::size_t i = 0; i < cpu.scale_values.size(); ++i) bad_scales += !same_bits(gpu.scale_values[i], cpu.scale_values[i]);
  CHECK(bad_scales == 0);
  CHECK(same_bits(gpu.global.decode, cpu.global.decode));
  CHECK(gpu.clipped == cpu.clipped);
  REQUIRE(gpu.dequantized.data.size() == cpu.dequantized.data.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < cpu.dequantized.data.size(); ++i) bad += !same_bits(gpu.dequantized.data[i], cpu.dequantized.data[i]);
  CHECK(bad == 0);
  CHECK(std::memcmp(&gpu.stats.nmse, &cpu.stats.nmse, sizeof(double)) == 0);  // NaN-safe, bit for bit
  CHECK(std::memcmp(&gpu.stats.underflow_fraction, &cpu.stats.underflow_fraction, sizeof(double)) == 0);
  CHECK(gpu.stats.zero_scale_blocks == cpu.stats.zero_scale_blocks);
}

}  // namespace

TEST_CASE("Every preset equals the CPU backend bit for bit on the GPU") {
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{256, 256}, {200, 333}, {130, 96}, {5, 7}})
    for (const bool nonfinite : {false, true}) {
      const Matrix x = test_matrix(rows, cols, nonfinite);
      for (const NamedPreset& p : quantize_presets()) {
        if (p.spec.rht.enabled() && rows % p.spec.rht.size != 0) continue;  // RHT needs whole groups
        INFO(p.name << " on " << rows << " x " << cols << (nonfinite ? " with Inf/NaN" : ""));
        QuantSpec s = p.spec;
        s.rounding.rng = RngStream{23, 9};
        check_same(cuda::quantize_cuda(x, s), quantize_cpu(x, s));
      }
    }
}

TEST_CASE("MXFP4 on the GPU: RZ, exact SR and 8-bit SR give the CPU's codes") {
  const Matrix x = test_matrix(96, 200, false);
  for (const char* name : {"mxfp4", "mxfp4-ceil", "mxfp4-rceil"})
    for (const int mode : {0, 1, 2}) {
      QuantSpec s = preset(name).spec;
      s.rounding.mode = mode == 0 ? Rounding::TowardZero : Rounding::Stochastic;
      s.rounding.sr_bits = mode == 2 ? 8 : 0;
      s.rounding.rng = RngStream{77, 3};
      INFO(name << " mode " << mode);
      check_same(cuda::quantize_cuda(x, s), quantize_cpu(x, s));
    }
}

TEST_CASE("FP16 and BF16 casts on the GPU at the formats' edges equal the CPU backend") {
  // Around FP16's overflow threshold (65520 rounds to Inf, 65519.996 to 65504), its smallest
  // normal and subnormal, the tie at 2^-25, odd/even ties, BF16's largest finite value and its
  // overflow (FLT_MAX rounds to Inf), zeros, NaN, Inf.
  const float edges[] = {65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e30f, std::ldexp(1.0f, -14), std::ldexp(1.0f, -24),
                         std::ldexp(1.0f, -25), std::ldexp(3.0f, -26), std::ldexp(1.5f, -25), 1.0f + std::ldexp(1.0f, -11),
                         1.0f + std::ldexp(3.0f, -11), 3.3895314e38f, std::numeric_limits<float>::max(), 0.0f, -0.0f,
                         std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                         std::ldexp(1.0f, -149)};
  Matrix x(4, 64);
  for (std::int64_t i = 0; i < x.size(); ++i) {
    const float e = edges[static_cast<std::size_t>(i) % (sizeof edges / sizeof edges[0])];
    x.data[static_cast<std::size_t>(i)] = (i / 19) % 2 ? -e : e;
  }
  for (const char* name : {"fp16", "bf16"}) {
    INFO(name);
    const QuantizedTensor gpu = cuda::quantize_cuda(x, preset(name).spec), cpu = quantize_cpu(x, preset(name).spec);
    check_same(gpu, cpu);
    CHECK(cpu.clipped > 0);  // the overflow cases are there
  }
}
