// Every NVFP4 preset of `fp4drift quantize` through the CUDA kernel (quantize_with_nvfp4_kernel,
// as --backend cuda runs it: RHT, transposition and statistics on the host) gives exactly
// the CPU backend's result: codes, scales, global scale, dequantized values, statistics.
#include <cmath>
#include <cstring>

#include "backend/cuda/nvfp4.hpp"
#include "quant/quantize.hpp"
#include "quant/presets.hpp"
#include "sim/generators.hpp"
#include "support/catch.hpp"
#include "support/float_bits.hpp"

using namespace fp4d;
using namespace fp4d_test;

TEST_CASE("NVFP4 presets: --backend cuda equals the CPU backend bit for bit") {
  GeneratorSpec g;
  g.kind = "outliers";
  g.rows = 96;
  g.cols = 80;
  g.seed = 3;
  const Matrix x = generate(g);
  for (const char* name : {"nvfp4", "nvfp4-col", "nvfp4-legacy", "nvfp4-2d", "nvfp4-sr", "nvfp4-rht", "nvfp4-rht-sr"}) {
    QuantSpec s = preset(name).spec;
    s.rounding.rng = RngStream{17, 4};
    const QuantizedTensor cpu = quantize_cpu(x, s);
    const QuantizedTensor gpu = quantize_with_nvfp4_kernel(
        x, s, [](const Matrix& m, const QuantSpec& sp, QuantizedTensor& q, bool d) { cuda::nvfp4_quantize_cuda(m, sp, q, d); },
        "cuda");
    INFO(name);
    CHECK(gpu.codes == cpu.codes);
    CHECK(gpu.scale_codes == cpu.scale_codes);
    CHECK(same_bits(gpu.global.decode, cpu.global.decode));
    CHECK(gpu.clipped == cpu.clipped);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < cpu.dequantized.data.size(); ++i)
      bad += !same_bits(gpu.dequantized.data[i], cpu.dequantized.data[i]);
    CHECK(bad == 0);
    CHECK(gpu.stats.nmse == cpu.stats.nmse);
    CHECK(gpu.stats.underflow_fraction == cpu.stats.underflow_fraction);
  }
}

TEST_CASE("non-NVFP4 schemes are refused on the CUDA path, not silently run on the CPU") {
  const Matrix x(16, 32, 1.0f);
  REQUIRE_THROWS(quantize_with_nvfp4_kernel(
      x, preset("mxfp4").spec,
      [](const Matrix& m, const QuantSpec& sp, QuantizedTensor& q, bool d) { cuda::nvfp4_quantize_cuda(m, sp, q, d); },
      "cuda"));
}
