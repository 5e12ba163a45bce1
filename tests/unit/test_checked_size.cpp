// Checked sizes (util/checked_size.hpp) at their exact boundaries, the places that form a
// size from input (Matrix, HDF5 dims), and the memory check's figures (util/memory.hpp).
#include "util/checked_size.hpp"

#include <stdlib.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "quant/matrix.hpp"
#include "support/catch.hpp"
#include "support/thrown.hpp"
#include "trace/h5.hpp"
#include "util/memory.hpp"

using namespace fp4d;

namespace {

constexpr std::int64_t p2(int e) { return std::int64_t{1} << e; }
constexpr std::uint64_t u2(int e) { return std::uint64_t{1} << e; }
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

// The message of the SizeError f throws ("" when it throws none).
template <class F>
std::string size_error(F&& f) {
  return fp4d_test::message_of<SizeError>(std::forward<F>(f));
}

}  // namespace

TEST_CASE("checked_mul: products up to INT64_MAX pass, one past it is refused") {
  CHECK(checked_mul(p2(31), p2(31), "n") == p2(62));
  CHECK(checked_mul(kMax, 1, "n") == kMax);
  CHECK(checked_mul(0, kMax, "n") == 0);
  CHECK(checked_mul(kMax, 0, "n") == 0);
  CHECK(checked_mul(7, 1317624576693539401, "n") == kMax);  // 7 * 1317624576693539401 = 2^63 - 1
  CHECK(size_error([] { (void)checked_mul(2, 4611686018427387904, "rows x cols"); }) ==
        "rows x cols: 2 x 4611686018427387904 overflows a 64-bit size");  // 2^63
  CHECK_FALSE(size_error([] { (void)checked_mul(p2(31), p2(32), "n"); }).empty());
  CHECK_FALSE(size_error([] { (void)checked_mul(8, 1317624576693539401, "n"); }).empty());
  CHECK(size_error([] { (void)checked_mul(-1, 4, "width"); }).find("width: negative size") == 0);
}

TEST_CASE("checked_add: sums up to INT64_MAX pass, one past it is refused") {
  CHECK(checked_add(kMax - 1, 1, "n") == kMax);
  CHECK_FALSE(size_error([] { (void)checked_add(kMax, 1, "bytes"); }).empty());
  CHECK_FALSE(size_error([] { (void)checked_add(-5, 1, "bytes"); }).empty());
}

TEST_CASE("unsigned forms: 2^31 * 2^32 fits 64 bits unsigned, 2^32 * 2^32 does not") {
  CHECK(checked_mul_u64(u2(31), u2(32), "bytes") == u2(63));
  CHECK(checked_mul_u64(std::numeric_limits<std::uint64_t>::max(), 1, "bytes") == std::numeric_limits<std::uint64_t>::max());
  CHECK(size_error([] { (void)checked_mul_u64(u2(32), u2(32), "bytes"); }) ==
        "bytes: 4294967296 x 4294967296 overflows a 64-bit size");
  CHECK(checked_add_u64(std::numeric_limits<std::uint64_t>::max() - 1, 1, "b") == std::numeric_limits<std::uint64_t>::max());
  CHECK_FALSE(size_error([] { (void)checked_add_u64(std::numeric_limits<std::uint64_t>::max(), 1, "b"); }).empty());
}

TEST_CASE("checked_elements: the per-tensor limit is 2^40 elements, inclusive, and the message names it") {
  CHECK(kMaxTensorElements == p2(40));
  CHECK(checked_elements(p2(20), p2(20), "--shape") == p2(40));
  CHECK(checked_elements(1, p2(40), "--shape") == p2(40));
  CHECK(size_error([] { (void)checked_elements(p2(20), p2(20) + 1, "--shape 1048576x1048577"); }) ==
        "--shape 1048576x1048577: 1048576 x 1048577 = 1099512676352 elements, over the limit of 2^40 elements per tensor");
  CHECK(size_error([] { (void)checked_elements(1, p2(40) + 1, "entry 2"); }) ==
        "entry 2: 1099511627777 elements, over the limit of 2^40 elements per tensor");
  // Overflow is reported as such, not as a (wrapped) count under the limit.
  CHECK(size_error([] { (void)checked_elements(p2(60), 16, "--m"); }) ==
        "--m: 1152921504606846976 x 16 = more than 2^63 elements, over the limit of 2^40 elements per tensor");
  CHECK_FALSE(size_error([] { (void)checked_elements(-1, 16, "--m"); }).empty());
}

TEST_CASE("Matrix refuses a shape whose element count overflows instead of wrapping it") {
  // 2^60 x 16 wraps to 0 elements in 64 bits: the unchecked constructor made an empty
  // matrix that claimed 2^60 rows, and the first write went wild.
  CHECK(size_error([] { Matrix m(p2(60), 16); }).find("matrix size") == 0);
  CHECK_FALSE(size_error([] { Matrix m(-1, 16); }).empty());
  const Matrix ok(3, 5, 1.5f);
  CHECK(ok.data.size() == 15);
  CHECK(ok.size() == 15);
}

TEST_CASE("h5::DatasetInfo::elements refuses dims whose product overflows (2^33 x 2^31 is not empty)") {
  fp4d::h5::DatasetInfo info;
  info.dims = {u2(33), u2(31)};
  CHECK(size_error([&] { (void)info.elements(); }).find("{8589934592, 2147483648}") != std::string::npos);
  info.dims = {u2(31), u2(32)};
  CHECK(info.elements() == u2(63));
  info.dims = {};
  CHECK(info.elements() == 1);  // a scalar
  info.dims = {0, u2(40)};
  CHECK(info.elements() == 0);
}

TEST_CASE("memory: the shortfall message gives both figures; FP4DRIFT_MEMORY_AVAILABLE overrides the system's") {
  CHECK(format_bytes(480e9) == "480 GB");
  CHECK(format_bytes(21.3e9) == "21.3 GB");
  CHECK(format_bytes(1.5e6) == "1.50 MB");
  CHECK(format_bytes(512) == "512 bytes");
  ::setenv("FP4DRIFT_MEMORY_AVAILABLE", "21300000000", 1);
  REQUIRE(available_memory() == std::uint64_t{21300000000});
  CHECK(memory_shortfall(480000000000) == "needs about 480 GB of memory, 21.3 GB available");
  CHECK(memory_shortfall(21300000000).empty());  // exactly what is available fits
  ::unsetenv("FP4DRIFT_MEMORY_AVAILABLE");
  // Linux has /proc/meminfo: some figure, and more than nothing.
  const auto sys = available_memory();
  REQUIRE(sys.has_value());
  CHECK(*sys > 0);
}
