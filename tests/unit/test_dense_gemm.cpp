// quant/dense_gemm: the packed, threaded GEMM of the float32 run and the double reference
// computes every element by the documented scalar recurrence (c = 0, then
// c = dense_step(c, A(i, p), B(p, j)) for ascending p), bit for bit, for every operand layout,
// on shapes with partial register tiles and several k-blocks, for any thread count.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

#include "quant/dense_gemm.hpp"
#include "support/catch.hpp"

using namespace fp4d;

namespace {

// Values whose sums depend on their order: normal draws scaled by 2^e, e in [-24, 24], so
// that nearly every partial sum rounds.
template <class T>
std::vector<T> spread(std::size_t n, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> nd;
  std::uniform_int_distribution<int> ed(-24, 24);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(std::ldexp(nd(g), ed(g)));
  return v;
}

// The contract, written out: A(i, p) and B(p, j) through the layouts, p ascending (or
// descending, to show that the order matters for these operands).
template <class T>
std::vector<T> oracle(const std::vector<T>& a, bool a_t, const std::vector<T>& b, bool b_t, std::int64_t m,
                      std::int64_t k, std::int64_t n, bool reversed = false, bool unfused = false) {
  std::vector<T> c(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      T acc = T(0);
      for (std::int64_t q = 0; q < k; ++q) {
        const std::int64_t p = reversed ? k - 1 - q : q;
        const T aip = a_t ? a[static_cast<std::size_t>(p * m + i)] : a[static_cast<std::size_t>(i * k + p)];
        const T bpj = b_t ? b[static_cast<std::size_t>(j * k + p)] : b[static_cast<std::size_t>(p * n + j)];
        acc = unfused ? T(acc + aip * bpj) : dense_step(acc, aip, bpj);
      }
      c[static_cast<std::size_t>(i * n + j)] = acc;
    }
  return c;
}

template <class T>
bool bit_equal(const std::vector<T>& x, const std::vector<T>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

// unfused: dense_gemm_unfused (double only) against c + a b rounded twice.
template <class T>
void check_layouts_and_shapes(bool unfused = false) {
  struct Shape {
    std::int64_t m, k, n;
  };
  // m around the 6-row tile, n around the tile width (8 doubles, 16 floats), k around the
  // 256-long k-block (three blocks at 600), and a size large enough to go parallel.
  const Shape shapes[] = {{1, 1, 1},    {5, 3, 7},     {6, 256, 8},   {7, 257, 17},
                          {13, 600, 9}, {97, 300, 33}, {64, 512, 96}, {200, 260, 130}};
  std::uint32_t seed = 1;
  for (const Shape& s : shapes)
    for (const bool a_t : {false, true})
      for (const bool b_t : {false, true}) {
        INFO("m " << s.m << " k " << s.k << " n " << s.n << " a_t " << a_t << " b_t " << b_t);
        const auto a = spread<T>(static_cast<std::size_t>(s.m * s.k), seed++);
        const auto b = spread<T>(static_cast<std::size_t>(s.k * s.n), seed++);
        std::vector<T> c(static_cast<std::size_t>(s.m * s.n), T(7));  // overwritten, not accumulated into
        if constexpr (std::is_same_v<T, double>) {
          if (unfused) dense_gemm_unfused(a.data(), a_t, b.data(), b_t, c.data(), s.m, s.k, s.n);
          else dense_gemm(a.data(), a_t, b.data(), b_t, c.data(), s.m, s.k, s.n);
        } else {
          dense_gemm(a.data(), a_t, b.data(), b_t, c.data(), s.m, s.k, s.n);
        }
        const auto want = oracle(a, a_t, b, b_t, s.m, s.k, s.n, false, unfused);
        REQUIRE(bit_equal(c, want));
        if (s.k >= 256) {
          // The comparison can fail: the same sums in the other order differ in most elements.
          const auto rev = oracle(a, a_t, b, b_t, s.m, s.k, s.n, true, unfused);
          std::size_t differ = 0;
          for (std::size_t i = 0; i < rev.size(); ++i) differ += rev[i] != want[i];
          CHECK(differ * 2 > rev.size());
        }
      }
}

}  // namespace

TEST_CASE("dense_gemm: every element follows the scalar recurrence, all layouts, edge tiles, k-blocks",
          "[dense_gemm]") {
  SECTION("float") { check_layouts_and_shapes<float>(); }
  SECTION("double") { check_layouts_and_shapes<double>(); }
  SECTION("double, unfused") { check_layouts_and_shapes<double>(true); }
}

TEST_CASE("dense_gemm: the result does not depend on the thread count or on concurrent callers", "[dense_gemm]") {
  // 301 rows are 51 row panels; 64 threads leave some without rows (they still meet every
  // barrier). m k n is above the parallel threshold.
  const std::int64_t m = 301, k = 530, n = 77;
  const auto a = spread<double>(static_cast<std::size_t>(m * k), 11);
  const auto b = spread<double>(static_cast<std::size_t>(k * n), 12);
  const auto want = oracle(a, true, b, false, m, k, n);
  const int threads = omp_get_max_threads();
  for (const int t : {1, 2, 3, 5, 64}) {
    INFO("threads " << t);
    omp_set_num_threads(t);
    std::vector<double> c(static_cast<std::size_t>(m * n));
    dense_gemm(a.data(), true, b.data(), false, c.data(), m, k, n);
    CHECK(bit_equal(c, want));
  }
  omp_set_num_threads(threads);
  // Four host threads at once (as the batch prefetcher's workers and the runs' threads call
  // it): each has its own packing buffers.
  std::vector<std::vector<double>> got(4, std::vector<double>(static_cast<std::size_t>(m * n)));
  std::vector<std::thread> callers;
  for (auto& c : got) callers.emplace_back([&] { dense_gemm(a.data(), true, b.data(), false, c.data(), m, k, n); });
  for (auto& t : callers) t.join();
  for (const auto& c : got) CHECK(bit_equal(c, want));
}

TEST_CASE("dense_gemm: an output overlapping an operand is refused", "[dense_gemm]") {
  std::vector<double> buf(64, 1.0);
  CHECK_THROWS_AS(dense_gemm(buf.data(), false, buf.data() + 16, false, buf.data() + 8, 4, 4, 4), std::invalid_argument);
  CHECK_THROWS_AS(dense_gemm(buf.data(), false, buf.data() + 16, false, buf.data() + 20, 4, 4, 4), std::invalid_argument);
  CHECK_NOTHROW(dense_gemm(buf.data(), false, buf.data() + 16, false, buf.data() + 32, 4, 4, 4));
}

TEST_CASE("dense_gemm: double steps are fused on FMA hardware, float steps never (a hand-worked case)",
          "[dense_gemm]") {
  // C = [1, 1 + 2^-30] . [-1, 1 - 2^-30]: the second product is 1 - 2^-60 exactly.
  //   fused:   c = -1, then fma(1 + 2^-30, 1 - 2^-30, -1) = -2^-60 (one rounding, exact here);
  //   unfused: (1 + 2^-30)(1 - 2^-30) rounds to 1 in double, and -1 + 1 = 0.
  // The float analogue with 2^-13 rounds to 1 as well (1 - 2^-26 is below float's half-ulp
  // under 1), so the float path, always unfused, gives 0. The pair sits in an interior tile
  // element and in an edge element (m = 7, n = 9 have partial tiles) of an otherwise zero
  // product. dense_gemm_unfused gives 0 in double on any hardware.
  const std::int64_t m = 7, k = 2, n = 9;
  std::vector<double> a(static_cast<std::size_t>(m * k), 0.0), b(static_cast<std::size_t>(k * n), 0.0);
  std::vector<float> af(a.size(), 0.0f), bf(b.size(), 0.0f);
  for (const std::int64_t i : {2, 6}) {
    a[static_cast<std::size_t>(i * k)] = 1.0, a[static_cast<std::size_t>(i * k + 1)] = 1.0 + std::ldexp(1.0, -30);
    af[static_cast<std::size_t>(i * k)] = 1.0f, af[static_cast<std::size_t>(i * k + 1)] = 1.0f + std::ldexp(1.0f, -13);
  }
  for (const std::int64_t j : {3, 8}) {
    b[static_cast<std::size_t>(j)] = -1.0, b[static_cast<std::size_t>(n + j)] = 1.0 - std::ldexp(1.0, -30);
    bf[static_cast<std::size_t>(j)] = -1.0f, bf[static_cast<std::size_t>(n + j)] = 1.0f - std::ldexp(1.0f, -13);
  }
  std::vector<double> c(static_cast<std::size_t>(m * n));
  std::vector<float> cf(c.size());
  dense_gemm(a.data(), false, b.data(), false, c.data(), m, k, n);
  dense_gemm(af.data(), false, bf.data(), false, cf.data(), m, k, n);
  std::vector<double> cu(c.size());
  dense_gemm_unfused(a.data(), false, b.data(), false, cu.data(), m, k, n);
  const double expect = kDenseDoubleFused ? -std::ldexp(1.0, -60) : 0.0;
  for (const std::int64_t i : {2, 6})
    for (const std::int64_t j : {3, 8}) {
      INFO("i " << i << " j " << j);
      CHECK(c[static_cast<std::size_t>(i * n + j)] == expect);
      CHECK(cf[static_cast<std::size_t>(i * n + j)] == 0.0f);
      CHECK(cu[static_cast<std::size_t>(i * n + j)] == 0.0);
    }
#if defined(__FMA__)
  CHECK(kDenseDoubleFused);  // this build has FMA: the reference must use it
#endif
}

TEST_CASE("dense_gemm: k = 0 gives zeros, empty shapes touch nothing", "[dense_gemm]") {
  std::vector<double> c(6, 5.0);
  dense_gemm<double>(nullptr, false, nullptr, false, c.data(), 2, 0, 3);
  CHECK(c == std::vector<double>(6, 0.0));
  std::vector<float> d(1, 5.0f);
  dense_gemm<float>(nullptr, false, nullptr, false, d.data(), 0, 4, 3);
  dense_gemm<float>(nullptr, false, nullptr, false, d.data(), 3, 4, 0);
  CHECK(d[0] == 5.0f);
}
