#include "sim/generators.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "format/philox.hpp"

namespace fp4d {

namespace {
constexpr std::uint64_t kGeneratorStream = 0x47454e0000000000ull;  // "GEN"

// Sequential uniforms for one element: counter (i, draw k, stream tag).
class ElementRng {
 public:
  ElementRng(std::uint64_t seed, std::uint64_t index, std::uint32_t tag) : seed_(seed), index_(index), tag_(tag) {}
  // Uniform double in (0, 1) with 53 random bits.
  double uniform() {
    if (have_ == 0) {
      const Philox4x32 c{{static_cast<std::uint32_t>(index_), static_cast<std::uint32_t>(index_ >> 32), draw_++,
                          static_cast<std::uint32_t>(kGeneratorStream >> 32) ^ tag_}};
      block_ = philox4x32_10(c, static_cast<std::uint32_t>(seed_), static_cast<std::uint32_t>(seed_ >> 32));
      have_ = 2;
    }
    const int k = 2 - have_--;
    const std::uint64_t bits = (static_cast<std::uint64_t>(block_.v[2 * k]) << 21) ^ (block_.v[2 * k + 1] >> 11);
    return (static_cast<double>(bits & ((1ull << 53) - 1)) + 0.5) * 0x1p-53;
  }
  double normal() {  // Box-Muller, one of the pair
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925286766559 * u2);
  }
  double gamma(double shape) {  // Marsaglia-Tsang (2000), shape < 1 via the u^(1/shape) boost
    if (shape < 1.0) return gamma(shape + 1.0) * std::pow(uniform(), 1.0 / shape);
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double z, v;
      do {
        z = normal();
        v = 1.0 + c * z;
      } while (v <= 0.0);
      v = v * v * v;
      const double u = uniform();
      if (std::log(u) < 0.5 * z * z + d - d * v + d * std::log(v)) return d * v;
    }
  }

 private:
  std::uint64_t seed_, index_;
  std::uint32_t tag_, draw_ = 0;
  Philox4x32 block_{};
  int have_ = 0;
};
}  // namespace

Matrix generate(const GeneratorSpec& g) {
  if (g.rows <= 0 || g.cols <= 0) throw std::invalid_argument("generator shape must be positive");
  if (!(g.scale > 0.0) || !std::isfinite(g.scale)) throw std::invalid_argument("generator scale must be > 0");
  Matrix m(g.rows, g.cols);
  const std::int64_t n = m.size();
  if (g.kind == "normal" || g.kind == "outliers") {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i)
      m.data[static_cast<std::size_t>(i)] = static_cast<float>(g.scale * ElementRng(g.seed, i, 1).normal());
    if (g.kind == "outliers") {
      const std::vector<std::uint8_t> mask = outlier_channel_mask(g);
      for (std::int64_t c = 0; c < g.cols; ++c)
        if (mask[static_cast<std::size_t>(c)])
          for (std::int64_t r = 0; r < g.rows; ++r) m(r, c) = static_cast<float>(m(r, c) * g.outlier_scale);
    }
  } else if (g.kind == "student-t") {
    if (!(g.nu > 0.0) || !std::isfinite(g.nu)) throw std::invalid_argument("student-t nu must be > 0");
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      ElementRng rng(g.seed, i, 3);
      const double z = rng.normal();
      const double v = 2.0 * rng.gamma(g.nu / 2.0);  // chi-square with nu degrees of freedom
      m.data[static_cast<std::size_t>(i)] = static_cast<float>(g.scale * z / std::sqrt(v / g.nu));
    }
  } else {
    throw std::invalid_argument("unknown generator '" + g.kind + "' (known: normal, student-t, outliers)");
  }
  return m;
}

std::vector<std::uint8_t> outlier_channel_mask(const GeneratorSpec& g) {
  if (g.kind != "outliers") return {};
  if (g.cols <= 0) throw std::invalid_argument("generator shape must be positive");
  if (!(g.outlier_fraction > 0.0 && g.outlier_fraction <= 1.0)) throw std::invalid_argument("outlier fraction must be in (0, 1]");
  if (!(g.outlier_scale > 0.0) || !std::isfinite(g.outlier_scale)) throw std::invalid_argument("outlier scale must be > 0");
  // round(fraction * cols) channels (at least one), chosen by sorting random keys.
  const auto k = std::max<std::int64_t>(1, std::llround(g.outlier_fraction * static_cast<double>(g.cols)));
  std::vector<std::int64_t> order(static_cast<std::size_t>(g.cols));
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> key(order.size());
  for (std::int64_t c = 0; c < g.cols; ++c) key[static_cast<std::size_t>(c)] = ElementRng(g.seed, c, 2).uniform();
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return key[a] < key[b]; });
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(g.cols), 0);
  for (std::int64_t j = 0; j < k; ++j) mask[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])] = 1;
  return mask;
}

bool generator_uses(const std::string& kind, const std::string& parameter) {
  if (kind != "normal" && kind != "student-t" && kind != "outliers")
    throw std::invalid_argument("unknown generator '" + kind + "' (known: normal, student-t, outliers)");
  if (parameter == "scale") return true;
  if (parameter == "nu") return kind == "student-t";
  if (parameter == "outlier_fraction" || parameter == "outlier_scale") return kind == "outliers";
  throw std::invalid_argument("unknown generator parameter '" + parameter + "'");
}

std::string describe(const GeneratorSpec& g) {
  std::ostringstream s;
  s << g.kind << "(rows=" << g.rows << ", cols=" << g.cols << ", seed=" << g.seed << ", scale=" << g.scale;
  if (g.kind == "student-t") s << ", nu=" << g.nu;
  if (g.kind == "outliers") s << ", fraction=" << g.outlier_fraction << ", outlier_scale=" << g.outlier_scale;
  s << ")";
  return s.str();
}

}  // namespace fp4d
