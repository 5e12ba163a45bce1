// NVFP4 quantization on the GPU (src/backend/cuda/nvfp4_quantize) against the spec-literal
// CPU reference nvfp4_quantize_reference, bit for bit: codes, scale codes, scale values,
// global scale, clipped count and dequantized values (NaN == NaN), for RNE, RZ and SR (exact,
// 1, 8, 32 bits), 1x16 and 16x16, the te and te-legacy scale rules, shapes that are and are
// not multiples of the block, zero/subnormal block scales, NaN, +-Inf and -0. Also: the
// vectorised and the simple kernel give identical bytes, the device-pointer API, exact-SR
// ties, empty and all-zero tensors, and a benchmark smoke run.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/nvfp4_quantize.hpp"
#include "format/philox.hpp"
#include "quant/nvfp4.hpp"
#include "quant/recipes.hpp"
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
                       {"sr 1", Rounding::Stochastic, 1},           {"sr 32", Rounding::Stochastic, 32}};

QuantSpec make_spec(bool two_d, bool legacy, const Mode& m, std::uint64_t seed) {
  QuantSpec s = preset(two_d ? "nvfp4-2d" : "nvfp4").spec;
  s.nv_scale_rule = legacy ? NvScaleRule::TeLegacy : NvScaleRule::Te;
  s.rounding = RoundingSpec{m.r, m.bits, RngStream{0x1234'5678'9abc'def0ull + seed, 7}};
  return s;
}

void check_cuda(cudaError_t e) { REQUIRE(e == cudaSuccess); }

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
              QuantizedTensor simple, vec;
              cuda::nvfp4_quantize_cuda(x, s, simple, true, cuda::Nvfp4Kernel::Simple);
              cuda::nvfp4_quantize_cuda(x, s, vec, true, cuda::Nvfp4Kernel::Vectorized);
              INFO("simple vs vectorised kernel");
              require_identical(simple, ref);
              require_identical(vec, ref);
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
  for (const auto k : {cuda::Nvfp4Kernel::Simple, cuda::Nvfp4Kernel::Vectorized}) {
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

TEST_CASE("NVFP4 device-pointer API equals the CPU reference") {
  const std::int64_t rows = 48, cols = 160;
  const Matrix x = random_matrix(rows, cols, 31, true);
  for (const Mode& m : kModes) {
    const QuantSpec s = make_spec(false, false, m, 3);
    QuantizedTensor ref;
    nvfp4_quantize_reference(x, s, ref);
    const std::size_t n = static_cast<std::size_t>(x.size());
    float* dx = nullptr;
    std::uint8_t *dcodes = nullptr, *dscales = nullptr;
    std::uint32_t* dkey = nullptr;
    check_cuda(cudaMalloc(&dx, (n + 4) * sizeof(float)));
    check_cuda(cudaMalloc(&dcodes, ref.codes.size() + 16));
    check_cuda(cudaMalloc(&dscales, ref.scale_codes.size() + 16));
    check_cuda(cudaMalloc(&dkey, sizeof(std::uint32_t)));
    // offset 0: the vectorised kernel; offset 1 float (not 16-byte aligned): the simple one.
    for (const int offset : {0, 1}) {
      INFO("mode " << m.name << ", x offset " << offset);
      check_cuda(cudaMemcpy(dx + offset, x.data.data(), n * sizeof(float), cudaMemcpyHostToDevice));
      for (const bool from_amax : {false, true}) {
        check_cuda(cudaMemset(dcodes, 0xff, ref.codes.size()));
        check_cuda(cudaMemset(dscales, 0xff, ref.scale_codes.size()));
        if (from_amax) {
          cuda::nvfp4_amax_device(dx + offset, static_cast<std::int64_t>(n), dkey);
          cuda::nvfp4_quantize_1x16_device_from_amax(dx + offset, rows, cols, dkey, s.rounding, false, dcodes, dscales);
          std::uint32_t key = 0;
          check_cuda(cudaMemcpy(&key, dkey, sizeof key, cudaMemcpyDeviceToHost));
          CHECK(key == float_bits(amax_cpu(x)));
        } else {
          cuda::nvfp4_quantize_1x16_device(dx + offset, rows, cols, ref.global, s.rounding, false, dcodes, dscales);
        }
        check_cuda(cudaDeviceSynchronize());
        std::vector<std::uint8_t> codes(ref.codes.size()), scales(ref.scale_codes.size());
        check_cuda(cudaMemcpy(codes.data(), dcodes, codes.size(), cudaMemcpyDeviceToHost));
        check_cuda(cudaMemcpy(scales.data(), dscales, scales.size(), cudaMemcpyDeviceToHost));
        CHECK(codes == ref.codes);
        CHECK(scales == ref.scale_codes);
      }
    }
    cudaFree(dx);
    cudaFree(dcodes);
    cudaFree(dscales);
    cudaFree(dkey);
  }
}

TEST_CASE("NVFP4 GPU benchmark runs") {
  double copy_gbps = 0, quantize_only = 0;
  const double t = cuda::nvfp4_quantize_cuda_bench(512, 1024, 2, &copy_gbps, &quantize_only);
  CHECK(t > 0);
  CHECK(quantize_only > 0);
  CHECK(copy_gbps > 0);
}
