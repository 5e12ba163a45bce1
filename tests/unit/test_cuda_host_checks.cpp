// What the CUDA backend refuses on the host, before any CUDA call: these run on every machine
// that builds the backend (CI included, no GPU needed), since a refused call never reaches the
// runtime. The device addresses are made up; each case has exactly one bad buffer, so a check
// that let it through would reach the runtime and fail differently (runtime_error, not
// invalid_argument), or on a GPU launch on made-up addresses.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "backend/cuda/nvfp4_dual.hpp"
#include "support/catch.hpp"

using namespace fp4d;

namespace {

template <class T>
T* fake(std::uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

// Well-aligned made-up buffers, one per role, 1 MiB apart.
struct Buffers {
  const float* x = fake<const float>(1u << 20);
  cuda::DualOutputs out{fake<std::uint8_t>(2u << 20), fake<std::uint8_t>(3u << 20), fake<std::uint8_t>(4u << 20),
                        fake<std::uint8_t>(5u << 20), fake<GlobalScale>(6u << 20)};
  std::uint32_t* keys = fake<std::uint32_t>(7u << 20);
};

std::string refusal(const Buffers& b) {
  try {
    cuda::nvfp4_quantize_dual_device(b.x, 64, 64, cuda::DualSpec{}, b.out, b.keys);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(not refused as invalid_argument)";
}

}  // namespace

TEST_CASE("Dual NVFP4 refuses a misaligned or missing buffer, naming it, before any CUDA call") {
  Buffers b;
  SECTION("input 4 bytes past 16") {
    b.x = fake<const float>((1u << 20) + 4);
    CHECK(refusal(b) == "dual NVFP4 quantization: the input buffer must be 16-byte aligned (its address is 4 bytes "
                        "past a multiple)");
  }
  SECTION("an output buffer past its alignment (the column codes are stored as 16-byte words)") {
    const struct {
      std::uint8_t* cuda::DualOutputs::*buffer;
      std::uintptr_t past;
      const char* want;
    } cases[] = {{&cuda::DualOutputs::col_codes, 8, "the column codes buffer must be 16-byte aligned"},
                 {&cuda::DualOutputs::row_codes, 4, "the row codes buffer must be 8-byte aligned"},
                 {&cuda::DualOutputs::row_scales, 2, "the row scales buffer must be 4-byte aligned"},
                 {&cuda::DualOutputs::col_scales, 4, "the column scales buffer must be 8-byte aligned"}};
    for (const auto& c : cases) {
      Buffers bad;
      bad.out.*c.buffer += c.past;
      CAPTURE(c.want);
      CHECK(refusal(bad).find(c.want) != std::string::npos);
    }
  }
  SECTION("the optional BF16 decode buffers, where given, 16-byte aligned") {
    Buffers row;
    row.out.row_bf16 = fake<std::uint16_t>((8u << 20) + 8);
    CHECK(refusal(row) == "dual NVFP4 quantization: the row BF16 decode buffer must be 16-byte aligned (its address is 8 "
                          "bytes past a multiple)");
    Buffers col;
    col.out.row_bf16 = fake<std::uint16_t>(8u << 20);
    col.out.col_bf16 = fake<std::uint16_t>((9u << 20) + 2);
    CHECK(refusal(col) == "dual NVFP4 quantization: the column BF16 decode buffer must be 16-byte aligned (its address is "
                          "2 bytes past a multiple)");
  }
  SECTION("an alpha without its partner's global scale, or misaligned") {
    Buffers row;
    row.out.row_alpha = fake<float>(10u << 20);
    CHECK(refusal(row) == "dual NVFP4 quantization: no row alpha's partner global scale buffer (null)");
    Buffers col;
    col.out.col_alpha = fake<float>((10u << 20) + 2);
    col.out.col_alpha_partner = fake<GlobalScale>(11u << 20);
    CHECK(refusal(col) == "dual NVFP4 quantization: the column alpha buffer must be 4-byte aligned (its address is 2 "
                          "bytes past a multiple)");
  }
  SECTION("no amax keys") {
    b.keys = nullptr;
    CHECK(refusal(b) == "dual NVFP4 quantization: no amax keys buffer (null)");
  }
  SECTION("a shape that is not whole blocks is refused first") {
    try {
      cuda::nvfp4_quantize_dual_device(b.x, 24, 64, cuda::DualSpec{}, b.out, b.keys);
      FAIL("not refused");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find("multiples of 16 (got 24 x 64)") != std::string::npos);
    }
  }
  SECTION("a side beyond 2^30 (the kernel's 32-bit tile coordinates) is refused") {
    const std::int64_t big = (std::int64_t{1} << 30) + 16;
    for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{big, 16}, {16, big}}) {
      try {
        cuda::nvfp4_quantize_dual_device(b.x, rows, cols, cuda::DualSpec{}, b.out, b.keys);
        FAIL("not refused");
      } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()) == "dual NVFP4 quantization takes rows and cols up to 2^30 (got " +
                                           std::to_string(rows) + " x " + std::to_string(cols) + ")");
      }
    }
  }
  SECTION("the shape check alone (what the benchmarks ask before allocating) is the entry points' own") {
    const std::int64_t max = std::int64_t{1} << 30;
    CHECK_NOTHROW(cuda::nvfp4_quantize_dual_check_shape(16, max));
    CHECK_THROWS_WITH(cuda::nvfp4_quantize_dual_check_shape(24, 64),
                      "dual NVFP4 quantization needs rows and cols that are positive multiples of 16 (got 24 x 64)");
    CHECK_THROWS_WITH(cuda::nvfp4_quantize_dual_check_shape(0, 64),
                      "dual NVFP4 quantization needs rows and cols that are positive multiples of 16 (got 0 x 64)");
    CHECK_THROWS_WITH(cuda::nvfp4_quantize_dual_check_shape(max + 16, 16),
                      "dual NVFP4 quantization takes rows and cols up to 2^30 (got 1073741840 x 16)");
  }
}
