// The shared FP4D_HD numerics compiled by nvcc and run on the GPU give the same bits as the
// CPU: NVFP4 1x16 blocks (RNE, exact SR, 8-bit SR; normal, subnormal and zero scales, Inf,
// NaN) against nvfp4_quantize_reference, and the 8-bit conversions against the CPU's.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/shared_numerics_check.hpp"
#include "format/bf16.hpp"
#include "format/fp8.hpp"
#include "format/philox.hpp"
#include "quant/mxfp4_math.hpp"
#include "quant/nvfp4.hpp"
#include "quant/presets.hpp"
#include "support/catch.hpp"

using namespace fp4d;

namespace {
Matrix test_row(int blocks) {
  Matrix m(1, 16 * blocks);
  for (std::int64_t i = 0; i < m.cols; ++i) {
    const Philox4x32 b = philox_block(RngStream{77, 5}, static_cast<std::uint64_t>(i));
    const double mag = std::ldexp(1.0 + b.v[0] * 0x1p-32, static_cast<int>(b.v[1] % 48) - 40);
    m(0, i) = static_cast<float>((b.v[2] & 1) ? -mag : mag);
  }
  m(0, 3) = NAN;
  m(0, 100) = INFINITY;
  m(0, 200) = -0.0f;
  return m;
}
}  // namespace

TEST_CASE("NVFP4 blocks on the GPU equal the CPU reference bit for bit") {
  const int blocks = 4096;
  const Matrix x = test_row(blocks);
  constexpr int kRne = 1000;  // not an SR bit count
  for (const int bits : {kRne, kSrExact, 8, kSrHw}) {
    QuantSpec s = preset(bits == kRne ? "nvfp4" : "nvfp4-sr").spec;
    if (bits != kRne) s.rounding = RoundingSpec{Rounding::Stochastic, bits, RngStream{0xfeedull, 3}};
    QuantizedTensor ref;
    ref.spec = s;
    nvfp4_quantize_reference(x, s, ref);
    std::vector<unsigned char> codes(16 * blocks / 2), scales(blocks);
    cuda::nvfp4_blocks_on_device(x.data.data(), blocks, ref.global, s.rounding, codes.data(), scales.data());
    INFO("sr bits " << bits);
    CHECK(std::vector<std::uint8_t>(scales.begin(), scales.end()) == ref.scale_codes);
    CHECK(std::vector<std::uint8_t>(codes.begin(), codes.end()) == ref.codes);
  }
}

TEST_CASE("8-bit conversions on the GPU equal the CPU's on a dense sample") {
  std::vector<float> x;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 65537) {
    float v;
    const auto b = static_cast<std::uint32_t>(u);
    std::memcpy(&v, &b, 4);
    x.push_back(v);
  }
  std::vector<unsigned char> out(4 * x.size());
  cuda::formats_on_device(x.data(), static_cast<int>(x.size()), out.data());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float a = abs_f32(x[i]);
    const bool ok = out[4 * i] == e4m3_rne_satfinite(x[i]) && out[4 * i + 1] == e5m2_rne_satfinite(x[i]) &&
                    out[4 * i + 2] == ue8m0_from_exponent(mxfp4_scale_exponent(a, MxScaleRule::Ceil)) &&
                    out[4 * i + 3] == static_cast<unsigned char>(bf16_rne_bits(x[i]) >> 8);
    bad += !ok;
  }
  CHECK(bad == 0);
}
