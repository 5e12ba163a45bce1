// The optimised CPU NVFP4 path (flat vectorised row loops, branch-free scale and SR forms)
// against the reference written as the spec reads (nvfp4_quantize_reference): codes, scale
// bytes, scale values, global scale, dequantized values and clipped count, bit for bit,
// for every rounding mode, both layouts, partial blocks, zero/subnormal scales, Inf/NaN.
// Also the branch-free E4M3 helpers against e4m3_rne_satfinite / e4m3_decode.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "format/philox.hpp"
#include "quant/nvfp4.hpp"
#include "quant/presets.hpp"
#include "support/catch.hpp"
#include "support/float_bits.hpp"
#include "support/nvfp4_fixtures.hpp"
#include "util/parallel_worth.hpp"

using namespace fp4d;
using namespace fp4d_test;

TEST_CASE("optimised NVFP4 equals the reference bit for bit") {
  struct Mode {
    const char* name;
    Rounding r;
    int bits;
  };
  const Mode modes[] = {{"rne", Rounding::NearestEven, 0}, {"rz", Rounding::TowardZero, 0},
                        {"sr exact", Rounding::Stochastic, kSrExact}, {"sr 1", Rounding::Stochastic, 1},
                        {"sr 8", Rounding::Stochastic, 8}, {"sr 24", Rounding::Stochastic, 24},
                        {"sr 25", Rounding::Stochastic, 25}, {"sr 32", Rounding::Stochastic, 32},
                        {"sr hw", Rounding::Stochastic, kSrHw}};
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{64, 256}, {37, 50}, {1, 17}, {33, 16}};
  for (const bool two_d : {false, true})
    for (const bool legacy : {false, true})
      for (const Mode& m : modes)
        for (const auto& [rows, cols] : shapes)
          for (const bool specials : {false, true}) {
            QuantSpec s = preset(two_d ? "nvfp4-2d" : "nvfp4").spec;
            s.nv_scale_rule = legacy ? NvScaleRule::TeLegacy : NvScaleRule::Te;
            s.rounding = RoundingSpec{m.r, m.bits, RngStream{0x1234'5678'9abc'def0ull + rows, 7}};
            const Matrix x = random_matrix(rows, cols, 1000 + static_cast<std::uint64_t>(rows * cols), specials);
            QuantizedTensor fast, ref;
            fast.spec = ref.spec = s;
            nvfp4_quantize_cpu(x, s, fast);
            nvfp4_quantize_reference(x, s, ref);
            INFO("mode " << m.name << ", " << rows << "x" << cols << (two_d ? " 16x16" : " 1x16")
                         << (legacy ? " legacy" : "") << (specials ? " with Inf/NaN" : ""));
            require_identical(fast, ref);
          }
}

TEST_CASE("exact SR ties: the fast path hands them to the reference function") {
  // A tie of exact SR's first 32 bits needs floor(f * 2^32) == w with bits of f below 2^-32.
  // A float32 f has 24 significant bits, so this is only possible for w < 2^23: pick the
  // elements whose random word is that small (1 in 512) and give them f = (w + 0.5) / 2^32
  // (exact in float32), on the [0, 0.5) step of E2M1 (y = f / 2) with e_b = 1.
  const RngStream rng{42, 3};
  const std::int64_t cols = 16 * 1024;
  Matrix x(1, cols, 0.0f);
  int constructed = 0;
  for (std::int64_t c = 0; c < cols; ++c) {
    if (c % 16 == 0) {
      x(0, c) = 6.0f;  // each block's amax: s_enc = 448, S_b = 448, e_b = 1
      continue;
    }
    const std::uint32_t w = philox_word(rng, static_cast<std::uint64_t>(c));
    if (w >= (1u << 23)) continue;
    x(0, c) = static_cast<float>((static_cast<double>(w) + 0.5) * 0x1p-33);
    ++constructed;
  }
  QuantSpec s = preset("nvfp4-sr").spec;
  s.rounding.rng = rng;
  QuantizedTensor fast, ref;
  fast.spec = ref.spec = s;
  nvfp4_quantize_cpu(x, s, fast);
  nvfp4_quantize_reference(x, s, ref);
  REQUIRE(fast.scale_values[0] * fast.global.decode == 1.0f);  // e_b == 1: the construction holds
  int ties = 0;
  for (std::int64_t c = 0; c < cols; ++c) {
    if (c % 16 == 0 || x(0, c) == 0.0f) continue;
    float rem;
    const std::uint32_t f32 = sr_fraction_floor32(x(0, c) * 2.0f, &rem);
    ties += (f32 == philox_word(rng, static_cast<std::uint64_t>(c))) && rem != 0.0f;
  }
  CAPTURE(constructed, ties);
  CHECK(ties == constructed);
  CHECK(ties >= 10);  // expected 15/16 * 16384 / 512 = 30
  require_identical(fast, ref);
}

TEST_CASE("results do not depend on the number of threads") {
  const ParallelWorkThreshold every_loop_parallel(0);  // small tensors: the threads must take part
  const Matrix x = random_matrix(96, 160, 5, false);
  for (const char* name : {"nvfp4", "nvfp4-sr", "nvfp4-2d", "nvfp4-sr-hw"}) {
    QuantSpec s = preset(name).spec;
    s.rounding.rng = RngStream{9, 1};
    QuantizedTensor one, two;
    one.spec = two.spec = s;
    omp_set_num_threads(1);
    nvfp4_quantize_cpu(x, s, one);
    omp_set_num_threads(2);
    nvfp4_quantize_cpu(x, s, two);
    INFO(name);
    require_identical(one, two);
  }
}

namespace {
void check_e4m3_helpers(std::uint32_t first, std::uint32_t last, std::uint32_t stride) {
  std::uint64_t bad = 0, first_bad = 0;
  for (std::uint64_t u = first; u <= last; u += stride) {
    float v;
    const auto bits = static_cast<std::uint32_t>(u);
    std::memcpy(&v, &bits, 4);
    if (e4m3_encode_nonneg(v) != e4m3_rne_satfinite(v)) {
      if (!bad) first_bad = u;
      ++bad;
    }
  }
  INFO("first mismatch at float bits 0x" << std::hex << first_bad);
  REQUIRE(bad == 0);
}
}  // namespace

TEST_CASE("branch-free E4M3 helpers equal the reference conversions") {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN codes: never produced for scales
    const float a = e4m3_decode_finite(static_cast<std::uint32_t>(c)), b = e4m3_decode(static_cast<std::uint8_t>(c));
    REQUIRE(same_bits(a, b));
  }
  // Every non-negative float up to +Inf: a dense sample here, all of them in the long test.
  check_e4m3_helpers(0, 0x7f800000u, 977);
  for (std::uint32_t c = 0; c <= 0x7e; ++c) {  // around every E4M3 value and midpoint
    const float v = e4m3_decode(static_cast<std::uint8_t>(c));
    std::uint32_t b;
    std::memcpy(&b, &v, 4);
    check_e4m3_helpers(b > 64 ? b - 64 : 0, b + 64, 1);
    if (c == 0x7e) continue;  // 0x7f is NaN: no upper midpoint
    const float mid = static_cast<float>((static_cast<double>(v) + e4m3_decode(static_cast<std::uint8_t>(c + 1))) / 2);
    std::memcpy(&b, &mid, 4);
    check_e4m3_helpers(b - 64, b + 64, 1);
  }
}

TEST_CASE("branch-free E4M3 encode: all non-negative float32 inputs", "[long]") {
  check_e4m3_helpers(0, 0x7f800000u, 1);
}

TEST_CASE("hw SR: the vectorised path equals the reference on many shapes, 1 and 2 threads", "[hw]") {
  const ParallelWorkThreshold every_loop_parallel(0);  // small tensors: the threads must take part
  // Row lengths around the AVX2 Philox batch (8 calls = 128 elements) and partial blocks.
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 1},   {1, 15},  {3, 16},   {2, 17},  {7, 127},
                                                          {5, 128}, {4, 129}, {9, 400},  {33, 48}, {17, 1000},
                                                          {64, 256}, {2, 2050}};
  for (const bool two_d : {false, true})
    for (const bool axis0 : {false, true})
      for (const auto& [rows, cols] : shapes) {
        if (two_d && axis0) continue;
        QuantSpec s = preset(two_d ? "nvfp4-2d" : "nvfp4").spec;
        s.axis = axis0 ? 0 : 1;
        s.rounding = RoundingSpec{Rounding::Stochastic, kSrHw, RngStream{0xabcdef0123456789ull + cols, 0x77ull << 40}};
        const Matrix x = random_matrix(rows, cols, 77 + static_cast<std::uint64_t>(rows * cols), rows % 2 == 1);
        QuantizedTensor fast, ref, two;
        fast.spec = ref.spec = two.spec = s;
        const Matrix stored = axis0 ? transpose(x) : x;  // the reference quantizes the stored orientation
        omp_set_num_threads(1);
        nvfp4_quantize_cpu(stored, s, fast);
        omp_set_num_threads(2);
        nvfp4_quantize_cpu(stored, s, two);
        nvfp4_quantize_reference(stored, s, ref);
        INFO(rows << "x" << cols << (two_d ? " 16x16" : " 1x16") << (axis0 ? " axis 0" : ""));
        require_identical(fast, ref);
        require_identical(two, ref);
      }
}

TEST_CASE("hw SR: every element's decision is the carry of its documented byte", "[hw]") {
  // Blocks whose amax is 6 with the global amax 2688 (s_enc = 1, S_b = 1, e_b = 1 exactly), all
  // other values 1.25: f = 1/2, floor(256 f) = 128, so an element rounds up (code 3, 1.5) iff
  // its byte is >= 128, else down (code 2, 1.0). The byte is recomputed here from philox.hpp's
  // layout with the generator called on a counter built by hand; element (r, c) has index
  // r * padded_cols + c in the stored layout.
  for (const bool two_d : {false, true})
    for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{37, 50}, {16, 128}, {3, 2000}}) {
      Matrix x(rows, cols, 1.25f);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; c += 16) x(r, c) = 6.0f;
      x(0, 0) = 2688.0f;
      QuantSpec s = preset(two_d ? "nvfp4-2d" : "nvfp4").spec;
      s.rounding = RoundingSpec{Rounding::Stochastic, kSrHw, RngStream{0x5eed5eed5eed5eedull, 0xabcull}};
      QuantizedTensor q;
      q.spec = s;
      nvfp4_quantize_cpu(x, s, q);
      const std::int64_t pcols = q.padded_cols;
      std::int64_t checked = 0, wrong = 0, ups = 0;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) {
          if (c % 16 == 0 || (c < 16 && (r == 0 || (two_d && r < 16)))) continue;  // the 6s and 2688's block
          const auto i = static_cast<std::uint64_t>(r * pcols + c);
          const std::uint64_t g = i / 16;
          const Philox4x32 b = philox4x32_10(
              Philox4x32{{static_cast<std::uint32_t>(g), static_cast<std::uint32_t>(g >> 32) | 0x40000000u,
                          static_cast<std::uint32_t>(s.rounding.rng.stream),
                          static_cast<std::uint32_t>(s.rounding.rng.stream >> 32)}},
              static_cast<std::uint32_t>(s.rounding.rng.seed), static_cast<std::uint32_t>(s.rounding.rng.seed >> 32));
          const unsigned shift[4] = {0, 16, 8, 24};
          const std::uint32_t byte = (b.v[(i / 4) % 4] >> shift[i % 4]) & 0xffu;
          const std::uint8_t code = (q.codes[i / 2] >> (4 * (i % 2))) & 0xfu;
          wrong += code != (byte >= 128u ? 3u : 2u);
          ups += code == 3u;
          ++checked;
        }
      INFO(rows << "x" << cols << (two_d ? " 16x16" : " 1x16"));
      CHECK(checked > rows * cols / 2);
      CHECK(wrong == 0);
      CHECK(ups > 0);
      CHECK(ups < checked);
    }
}
