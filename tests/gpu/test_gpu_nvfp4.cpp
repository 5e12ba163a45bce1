// NVFP4 quantization on the GPU (src/backend/cuda/nvfp4.cu) against the spec-literal
// CPU reference nvfp4_quantize_reference, bit for bit: codes, scale codes, scale values,
// global scale, clipped count and dequantized values (NaN == NaN), for RNE, RZ and SR (exact,
// 1, 8, 32 bits), 1x16 and 16x16, the te and te-legacy scale rules, shapes that are and are
// not multiples of the block, zero/subnormal block scales, NaN, +-Inf and -0. Also: the
// simple and the lanes kernel give identical bytes, the device-pointer API for float32 and
// BF16 input (BF16: bit-identical to the CPU backend on the float values of the BF16 numbers)
// with its optional BF16 q * S_b output, exact-SR ties, empty and all-zero tensors, and
// benchmark smoke runs.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/bench.hpp"
#include "backend/cuda/nvfp4.hpp"
#include "format/bf16.hpp"
#include "format/philox.hpp"
#include "quant/nvfp4.hpp"
#include "quant/presets.hpp"
#include "support/catch.hpp"
#include "support/float_bits.hpp"
#include "support/nvfp4_fixtures.hpp"

using namespace fp4d;
using namespace fp4d_test;

namespace {

struct Mode {
  const char* name;
  Rounding r;
  int bits;
};
const Mode kModes[] = {{"rne", Rounding::NearestEven, 0},         {"rz", Rounding::TowardZero, 0},
                       {"sr exact", Rounding::Stochastic, kSrExact}, {"sr 8", Rounding::Stochastic, 8},
                       {"sr 1", Rounding::Stochastic, 1},           {"sr 32", Rounding::Stochastic, 32},
                       {"sr hw", Rounding::Stochastic, kSrHw}};

QuantSpec make_spec(bool two_d, bool legacy, const Mode& m, std::uint64_t seed) {
  QuantSpec s = preset(two_d ? "nvfp4-2d" : "nvfp4").spec;
  s.nv_scale_rule = legacy ? NvScaleRule::TeLegacy : NvScaleRule::Te;
  s.rounding = RoundingSpec{m.r, m.bits, RngStream{0x1234'5678'9abc'def0ull + seed, 7}};
  return s;
}

void check_cuda(cudaError_t e) { REQUIRE(e == cudaSuccess); }

// Host expectation of the BF16 q * S_b output: E2M1value(code) * E4M3value(scale) of the
// reference's codes and scales, which must be exact in BF16 (low 16 float bits zero).
std::vector<std::uint16_t> expected_unscaled(const QuantizedTensor& ref) {
  std::vector<std::uint16_t> out(static_cast<std::size_t>(ref.rows * ref.cols));
  // One scale per row (1x16 blocks) or per 16 rows (16x16 tiles): read off the scale grid.
  const std::int64_t rows_per_scale = ref.scale_rows == ref.rows ? 1 : 16;
  REQUIRE(ref.scale_rows == (ref.rows + rows_per_scale - 1) / rows_per_scale);
  for (std::int64_t r = 0; r < ref.rows; ++r)
    for (std::int64_t c = 0; c < ref.cols; ++c) {
      const std::uint8_t byte = ref.codes[static_cast<std::size_t>(r * ref.padded_cols / 2 + c / 2)];
      const std::uint8_t code = (c & 1) ? byte >> 4 : byte & 0xfu;
      const std::uint8_t s = ref.scale_codes[static_cast<std::size_t>(r / rows_per_scale * ref.scale_cols + c / 16)];
      const std::uint32_t bits = float_bits(e2m1_decode(code) * e4m3_decode(s));
      REQUIRE((bits & 0xffffu) == 0u);
      out[static_cast<std::size_t>(r * ref.cols + c)] = static_cast<std::uint16_t>(bits >> 16);
    }
  return out;
}

// x rounded to BF16: the bits (device input) and their float values (the CPU's input).
struct Bf16Input {
  std::vector<std::uint16_t> bits;
  Matrix values;
};
Bf16Input to_bf16(const Matrix& x) {
  Bf16Input in{std::vector<std::uint16_t>(x.data.size()), Matrix(x.rows, x.cols)};
  for (std::size_t i = 0; i < x.data.size(); ++i) {
    in.bits[i] = bf16_rne_bits(x.data[i]);
    in.values.data[i] = bf16_to_float(in.bits[i]);
  }
  return in;
}

// Device buffers of one device-API run (input of element type In at an element offset).
template <class In>
struct DeviceRun {
  In* x = nullptr;
  std::uint8_t *codes = nullptr, *scales = nullptr;
  std::uint16_t* unscaled = nullptr;
  std::uint32_t* key = nullptr;
  std::size_t ncodes, nscales, n;
  DeviceRun(std::size_t n_, std::size_t ncodes_, std::size_t nscales_) : ncodes(ncodes_), nscales(nscales_), n(n_) {
    check_cuda(cudaMalloc(&x, (n + 8) * sizeof(In)));
    check_cuda(cudaMalloc(&codes, ncodes + 16));
    check_cuda(cudaMalloc(&scales, nscales + 16));
    check_cuda(cudaMalloc(&unscaled, (n + 8) * sizeof(std::uint16_t)));
    check_cuda(cudaMalloc(&key, sizeof(std::uint32_t)));
  }
  ~DeviceRun() {
    cudaFree(x);
    cudaFree(codes);
    cudaFree(scales);
    cudaFree(unscaled);
    cudaFree(key);
  }
  void poison() {
    check_cuda(cudaMemset(codes, 0xff, ncodes));
    check_cuda(cudaMemset(scales, 0xff, nscales));
    check_cuda(cudaMemset(unscaled, 0xff, n * sizeof(std::uint16_t)));
  }
  // Codes, scales and BF16 output against the reference (unscaled_at: element offset of the
  // BF16 output, 1 = misaligned: the simple kernel).
  void require_matches(const QuantizedTensor& ref, int unscaled_at) {
    check_cuda(cudaDeviceSynchronize());
    std::vector<std::uint8_t> c(ncodes), sc(nscales);
    std::vector<std::uint16_t> u(n);
    check_cuda(cudaMemcpy(c.data(), codes, ncodes, cudaMemcpyDeviceToHost));
    check_cuda(cudaMemcpy(sc.data(), scales, nscales, cudaMemcpyDeviceToHost));
    check_cuda(cudaMemcpy(u.data(), unscaled + unscaled_at, n * sizeof(std::uint16_t), cudaMemcpyDeviceToHost));
    CHECK(c == ref.codes);
    CHECK(sc == ref.scale_codes);
    CHECK(u == expected_unscaled(ref));
  }
};

}  // namespace

TEST_CASE("NVFP4 on the GPU equals the CPU reference bit for bit") {
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{64, 256}, {37, 50}, {1, 17}, {33, 16}, {1024, 1024}};
  for (const bool two_d : {false, true})
    for (const bool legacy : {false, true})
      for (const Mode& m : kModes)
        for (const auto& [rows, cols] : shapes)
          for (const bool specials : {false, true}) {
            const QuantSpec s = make_spec(two_d, legacy, m, static_cast<std::uint64_t>(rows));
            const Matrix x = random_matrix(rows, cols, 1000 + static_cast<std::uint64_t>(rows * cols), specials);
            QuantizedTensor gpu, ref;
            gpu.spec = ref.spec = s;
            nvfp4_quantize_reference(x, s, ref);
            INFO("mode " << m.name << ", " << rows << "x" << cols << (two_d ? " 16x16" : " 1x16")
                         << (legacy ? " legacy" : "") << (specials ? " with Inf/NaN" : ""));
            cuda::nvfp4_quantize_cuda(x, s, gpu);
            require_identical(gpu, ref);
            if (!two_d && cols % 16 == 0) {  // launch-configuration independence
              QuantizedTensor simple, lanes;
              cuda::nvfp4_quantize_cuda(x, s, simple, true, cuda::Nvfp4Kernel::Simple);
              cuda::nvfp4_quantize_cuda(x, s, lanes, true, cuda::Nvfp4Kernel::Lanes);
              INFO("simple vs lanes kernel");
              require_identical(simple, ref);
              require_identical(lanes, ref);
            }
            QuantizedTensor nodeq;
            cuda::nvfp4_quantize_cuda(x, s, nodeq, false);
            INFO("dequantize = false");
            CHECK(nodeq.dequantized.data.empty());
            require_identical(nodeq, ref, false);
          }
}

TEST_CASE("NVFP4 on the GPU: exact-SR ties resolved as on the CPU") {
  // As in test_nvfp4_reference.cpp: elements whose first 32 random bits tie with f * 2^32.
  const RngStream rng{42, 3};
  const std::int64_t cols = 16 * 1024;
  Matrix x(1, cols, 0.0f);
  for (std::int64_t c = 0; c < cols; ++c) {
    if (c % 16 == 0) {
      x(0, c) = 6.0f;
      continue;
    }
    const std::uint32_t w = philox_word(rng, static_cast<std::uint64_t>(c));
    if (w >= (1u << 23)) continue;
    x(0, c) = static_cast<float>((static_cast<double>(w) + 0.5) * 0x1p-33);
  }
  QuantSpec s = preset("nvfp4-sr").spec;
  s.rounding.rng = rng;
  QuantizedTensor ref;
  ref.spec = s;
  nvfp4_quantize_reference(x, s, ref);
  for (const auto k : {cuda::Nvfp4Kernel::Simple, cuda::Nvfp4Kernel::Lanes}) {
    QuantizedTensor gpu;
    cuda::nvfp4_quantize_cuda(x, s, gpu, true, k);
    require_identical(gpu, ref);
  }
}

TEST_CASE("NVFP4 on the GPU: empty, all-zero and Inf-amax tensors") {
  const Mode rne{"rne", Rounding::NearestEven, 0};
  std::vector<Matrix> xs = {Matrix(0, 32), Matrix(3, 0), Matrix(5, 40, 0.0f), Matrix(2, 32, -0.0f), Matrix(4, 48, 1.0f)};
  xs.back()(1, 7) = INFINITY;  // amax Inf: s_enc = 1
  for (const bool two_d : {false, true})
    for (std::size_t k = 0; k < xs.size(); ++k) {
      const QuantSpec s = make_spec(two_d, false, rne, 1);
      QuantizedTensor gpu, ref;
      nvfp4_quantize_reference(xs[k], s, ref);
      cuda::nvfp4_quantize_cuda(xs[k], s, gpu);
      INFO("case " << k << (two_d ? " 16x16" : " 1x16"));
      require_identical(gpu, ref);
    }
}

// One device-API case: amax + quantize from the key, and quantize with the host's global
// scale, for input x_dev (float or BF16 bits) at element offsets 0 (the lanes kernel where
// cols % 16 == 0) and 1 (not 16-byte aligned: the simple kernel), the BF16 output likewise.
template <class In>
void check_device_api(const std::vector<In>& x_host, const Matrix& values, const QuantSpec& s, bool legacy) {
  const std::int64_t rows = values.rows, cols = values.cols;
  QuantizedTensor ref;
  ref.spec = s;
  nvfp4_quantize_reference(values, s, ref);
  DeviceRun<In> run(x_host.size(), ref.codes.size(), ref.scale_codes.size());
  for (const int offset : {0, 1}) {
    INFO("x offset " << offset << " element(s), BF16 output offset " << offset);
    check_cuda(cudaMemcpy(run.x + offset, x_host.data(), x_host.size() * sizeof(In), cudaMemcpyHostToDevice));
    for (const bool from_amax : {false, true}) {
      INFO((from_amax ? "global scale from the device amax" : "global scale from the host"));
      run.poison();
      std::uint16_t* unscaled = run.unscaled + offset;
      if (from_amax) {
        cuda::nvfp4_amax_device(run.x + offset, static_cast<std::int64_t>(x_host.size()), run.key);
        cuda::nvfp4_quantize_1x16_device_from_amax(run.x + offset, rows, cols, run.key, s.rounding, legacy, run.codes,
                                                   run.scales, nullptr, unscaled);
        std::uint32_t key = 0;
        check_cuda(cudaMemcpy(&key, run.key, sizeof key, cudaMemcpyDeviceToHost));
        CHECK(key == float_bits(amax_cpu(values)));
        const GlobalScale g = nvfp4_global_scale(bits_float(key));
        CHECK(same_bits(g.encode, ref.global.encode));
        CHECK(same_bits(g.decode, ref.global.decode));
      } else {
        cuda::nvfp4_quantize_1x16_device(run.x + offset, rows, cols, ref.global, s.rounding, legacy, run.codes,
                                         run.scales, nullptr, unscaled);
      }
      run.require_matches(ref, offset);
    }
  }
  // Without the BF16 output (its own kernel instantiation path for the lanes kernel).
  check_cuda(cudaMemcpy(run.x, x_host.data(), x_host.size() * sizeof(In), cudaMemcpyHostToDevice));
  run.poison();
  cuda::nvfp4_quantize_1x16_device(run.x, rows, cols, ref.global, s.rounding, legacy, run.codes, run.scales);
  check_cuda(cudaDeviceSynchronize());
  std::vector<std::uint8_t> codes(ref.codes.size()), scales(ref.scale_codes.size());
  check_cuda(cudaMemcpy(codes.data(), run.codes, codes.size(), cudaMemcpyDeviceToHost));
  check_cuda(cudaMemcpy(scales.data(), run.scales, scales.size(), cudaMemcpyDeviceToHost));
  CHECK(codes == ref.codes);
  CHECK(scales == ref.scale_codes);
}

// The 16x16 device API (the resident steps' 2D weights): amax pass, then 16x16 tiles with the
// BF16 output, against the CPU reference, through both kernels: with the BF16 output at element
// offset 0 and cols % 16 == 0, the strip kernel (a warp per 16 x 64 strip, hw SR excepted);
// at offset 1 (the BF16 output misaligned) or with cols % 16 != 0, the half-warp-per-block
// kernel, whose whole aligned blocks leave by vector stores and the rest element by element.
// Shapes with partial tiles (37 rows) and partial strips (80, 48 columns) included.
TEST_CASE("NVFP4 16x16 device-pointer API with its BF16 output equals the CPU reference") {
  for (const Mode& m : kModes)
    for (const auto& [rows, cols] :
         {std::pair<std::int64_t, std::int64_t>{64, 256}, {48, 80}, {37, 48}, {37, 50}, {16, 16}}) {
      INFO("mode " << m.name << ", " << rows << "x" << cols);
      const QuantSpec s = make_spec(true, false, m, 5);
      const Matrix x = random_matrix(rows, cols, 71 + static_cast<std::uint64_t>(rows * cols), true);
      QuantizedTensor ref;
      ref.spec = s;
      nvfp4_quantize_reference(x, s, ref);
      DeviceRun<float> run(x.data.size(), ref.codes.size(), ref.scale_codes.size());
      for (const int offset : {0, 1}) {
        INFO("BF16 output offset " << offset);
        check_cuda(cudaMemcpy(run.x, x.data.data(), x.data.size() * sizeof(float), cudaMemcpyHostToDevice));
        run.poison();
        cuda::nvfp4_amax_device(run.x, static_cast<std::int64_t>(x.data.size()), run.key);
        cuda::nvfp4_quantize_16x16_device_from_amax(run.x, rows, cols, run.key, s.rounding, false, run.codes, run.scales,
                                                    nullptr, run.unscaled + offset);
        run.require_matches(ref, offset);
      }
    }
}

const std::pair<std::int64_t, std::int64_t> kApiShapes[] = {{48, 160}, {64, 256}, {37, 50}, {1, 17},
                                                            {33, 16},  {2, 8},   {128, 1024}};

TEST_CASE("NVFP4 device-pointer API (float32 input) equals the CPU reference") {
  for (const Mode& m : kModes)
    for (const bool legacy : {false, true})
      for (const auto& [rows, cols] : kApiShapes)
        for (const bool specials : {false, true}) {
          INFO("mode " << m.name << ", " << rows << "x" << cols << (legacy ? " legacy" : "")
                       << (specials ? " with Inf/NaN" : ""));
          const QuantSpec s = make_spec(false, legacy, m, 3);
          const Matrix x = random_matrix(rows, cols, 31 + static_cast<std::uint64_t>(rows * cols), specials);
          check_device_api<float>(x.data, x, s, legacy);
        }
}

TEST_CASE("NVFP4 device-pointer API (BF16 input) equals the CPU backend on the BF16 values") {
  for (const Mode& m : kModes)
    for (const bool legacy : {false, true})
      for (const auto& [rows, cols] : kApiShapes)
        for (const bool specials : {false, true}) {
          INFO("mode " << m.name << ", " << rows << "x" << cols << (legacy ? " legacy" : "")
                       << (specials ? " with Inf/NaN" : ""));
          const QuantSpec s = make_spec(false, legacy, m, 5);
          const Bf16Input in = to_bf16(random_matrix(rows, cols, 77 + static_cast<std::uint64_t>(rows * cols), specials));
          check_device_api<std::uint16_t>(in.bits, in.values, s, legacy);
          // The optimised CPU backend agrees with the reference on these values too.
          QuantizedTensor cpu, ref;
          cpu.spec = ref.spec = s;
          nvfp4_quantize_cpu(in.values, s, cpu, true);
          nvfp4_quantize_reference(in.values, s, ref);
          require_identical(cpu, ref);
        }
}

TEST_CASE("NVFP4 BF16 input: zero, subnormal-scale, Inf-amax and all-NaN blocks") {
  // Row 0: a zero block, a block of values so small against the tensor amax that its E4M3
  // scale is subnormal, one whose scale rounds to zero, an all-NaN block, and -0 / Inf.
  const std::int64_t rows = 4, cols = 96;
  for (const bool with_inf : {false, true}) {
    Matrix x(rows, cols, 0.0f);
    for (std::int64_t c = 0; c < cols; ++c)
      for (std::int64_t r = 1; r < rows; ++r) x(r, c) = static_cast<float>(std::ldexp(1.0 + (c % 7) / 8.0, (c % 9) - 4));
    for (std::int64_t c = 16; c < 32; ++c) x(0, c) = static_cast<float>(std::ldexp(1.5, -6 - (c % 3)));  // scale ~2^-8
    for (std::int64_t c = 32; c < 48; ++c) x(0, c) = static_cast<float>(std::ldexp(1.0, -40));
    for (std::int64_t c = 48; c < 64; ++c) x(0, c) = NAN;
    for (std::int64_t c = 64; c < 80; ++c) x(0, c) = -0.0f;
    x(2, 5) = 448.0f * 6.0f;  // the tensor amax: global scale 1
    if (with_inf) x(3, 90) = -INFINITY;
    const Bf16Input in = to_bf16(x);
    for (const Mode& m : kModes) {
      INFO("mode " << m.name << (with_inf ? ", amax Inf" : ""));
      check_device_api<std::uint16_t>(in.bits, in.values, make_spec(false, false, m, 9), false);
    }
  }
}

TEST_CASE("NVFP4 amax on the device: BF16 and float agree with amax_cpu, any length and offset") {
  for (const std::int64_t n : {1, 7, 8, 9, 1000, 4099, 1 << 20}) {
    const Bf16Input in = to_bf16(random_matrix(1, n, 5 + static_cast<std::uint64_t>(n), true));
    const std::uint32_t want = float_bits(amax_cpu(in.values));
    DeviceRun<std::uint16_t> b(static_cast<std::size_t>(n), 1, 1);
    DeviceRun<float> f(static_cast<std::size_t>(n), 1, 1);
    for (const int offset : {0, 1, 3}) {
      INFO("n " << n << ", offset " << offset);
      check_cuda(cudaMemcpy(b.x + offset, in.bits.data(), in.bits.size() * 2, cudaMemcpyHostToDevice));
      check_cuda(cudaMemcpy(f.x + offset, in.values.data.data(), in.bits.size() * 4, cudaMemcpyHostToDevice));
      cuda::nvfp4_amax_device(b.x + offset, n, b.key);
      cuda::nvfp4_amax_device(f.x + offset, n, f.key);
      std::uint32_t kb = 0, kf = 0;
      check_cuda(cudaMemcpy(&kb, b.key, 4, cudaMemcpyDeviceToHost));
      check_cuda(cudaMemcpy(&kf, f.key, 4, cudaMemcpyDeviceToHost));
      CHECK(kb == want);
      CHECK(kf == want);
    }
  }
}

TEST_CASE("NVFP4 GPU benchmark runs") {
  for (const auto dtype : {cuda::InputDtype::Bf16, cuda::InputDtype::F32})
    for (const std::int64_t cols : {1024, 1000}) {
      const cuda::Nvfp4BenchResult r = cuda::nvfp4_quantize_cuda_bench(256, cols, 2, dtype);
      CHECK(r.amax_and_quantize_s > 0);
      CHECK(r.quantize_only_s > 0);
      CHECK(r.amax_only_s > 0);
      CHECK(r.cub_read_s > 0);
      CHECK(r.cub_read_bytes == static_cast<double>(256 * cols) * (dtype == cuda::InputDtype::Bf16 ? 2 : 4));
      CHECK(r.copy_gbps() > 0);
      // The 1x16 pass with its BF16 decodes; with float32 input also the 16x16 weight quantizer
      // without and with them: each variant's bytes are its input, codes, scales (and decodes).
      const double elems = 256.0 * cols, in = elems * (dtype == cuda::InputDtype::Bf16 ? 2 : 4);
      const double tiles = 16.0 * static_cast<double>((cols + 15) / 16);
      REQUIRE(r.variants.size() == (dtype == cuda::InputDtype::Bf16 ? 1u : 3u));
      CHECK(r.variants[0].bytes == in + elems * (0.5 + 1.0 / 16.0) + 2 * elems);
      if (r.variants.size() == 3) {
        CHECK(r.variants[1].bytes == in + elems * 0.5 + tiles);
        CHECK(r.variants[2].bytes == in + elems * 0.5 + tiles + 2 * elems);
      }
      for (const auto& v : r.variants) CHECK(v.seconds > 0);
    }
}
