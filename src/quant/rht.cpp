#include "quant/rht.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "format/bf16.hpp"
#include "format/philox.hpp"
#include "util/parallel_worth.hpp"

namespace fp4d {

std::vector<float> rht_signs(const RhtSpec& spec) {
  std::vector<float> s(static_cast<std::size_t>(spec.size), 1.0f);
  for (int i = 0; i < spec.size; ++i) {
    bool negative = false;
    if (spec.signs == RhtSigns::Te) negative = (kTeRhtSignMask >> i) & 1u;
    else if (spec.signs == RhtSigns::Random)
      negative = (philox_word(RngStream{spec.sign_seed, kRhtSignStream}, static_cast<std::uint64_t>(i / 32)) >>
                  (i % 32)) & 1u;
    s[static_cast<std::size_t>(i)] = negative ? -1.0f : 1.0f;
  }
  return s;
}

float rht_scale_f32(int d) {
  // 1/sqrt(d) = 2^-(log2 d)/2: exact for even log2 d; otherwise 2^-(k+1)/2 * sqrt(2) rounded
  // once from the exactly known sqrt(0.5) (long double has enough bits for a correct RN here).
  int k = 0;
  while ((1 << k) < d) ++k;
  if (k % 2 == 0) return std::ldexp(1.0f, -k / 2);
  return static_cast<float>(std::ldexp(0.70710678118654752440084436210484903L, -(k - 1) / 2));
}

namespace {
void check(const Matrix& x, const RhtSpec& spec, int axis) {
  const std::int64_t n = axis == 0 ? x.rows : x.cols;
  if (n % spec.size != 0)
    throw std::invalid_argument("RHT size " + std::to_string(spec.size) + " does not divide the length " +
                                std::to_string(n) + " of axis " + std::to_string(axis));
}

template <class T, class Store>
void transform(const Matrix& x, const RhtSpec& spec, int axis, Store&& store) {
  check(x, spec, axis);
  const int d = spec.size;
  const std::vector<float> s = rht_signs(spec);
  const std::int64_t runs_per_line = (axis == 0 ? x.rows : x.cols) / d;
  const std::int64_t lines = axis == 0 ? x.cols : x.rows;
#pragma omp parallel for schedule(static) if (parallel_worth(x.size()))
  for (std::int64_t line = 0; line < lines; ++line) {
    std::vector<T> v(static_cast<std::size_t>(d));
    for (std::int64_t run = 0; run < runs_per_line; ++run) {
      for (int i = 0; i < d; ++i) {
        const std::int64_t k = run * d + i;
        v[i] = static_cast<T>(axis == 0 ? x(k, line) : x(line, k)) * static_cast<T>(s[i]);
      }
      fwht_inplace(v.data(), d);
      for (int i = 0; i < d; ++i) {
        const std::int64_t k = run * d + i;
        store(axis == 0 ? k : line, axis == 0 ? line : k, v[i]);
      }
    }
  }
}
}  // namespace

Matrix apply_rht(const Matrix& x, const RhtSpec& spec, int axis) {
  Matrix y(x.rows, x.cols);
  const float scale = rht_scale_f32(spec.size);
  transform<float>(x, spec, axis, [&](std::int64_t r, std::int64_t c, float v) {
    const float t = v * scale;
    y(r, c) = spec.bf16_output ? bf16_round(t) : t;
  });
  return y;
}

std::vector<double> apply_rht_double(const Matrix& x, const RhtSpec& spec, int axis) {
  std::vector<double> y(static_cast<std::size_t>(x.size()));
  const double scale = 1.0 / std::sqrt(static_cast<double>(spec.size));
  transform<double>(x, spec, axis,
                    [&](std::int64_t r, std::int64_t c, double v) { y[static_cast<std::size_t>(r * x.cols + c)] = v * scale; });
  return y;
}

std::vector<double> rht_matrix(const RhtSpec& spec) {
  const int d = spec.size;
  const std::vector<float> s = rht_signs(spec);
  std::vector<double> h(static_cast<std::size_t>(d * d));
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) {
      // Sylvester: H_d[i][j] = (-1)^popcount(i & j)
      const double hij = (__builtin_popcount(static_cast<unsigned>(i & j)) & 1) ? -1.0 : 1.0;
      h[static_cast<std::size_t>(i * d + j)] = s[static_cast<std::size_t>(i)] * hij * scale;
    }
  return h;
}

}  // namespace fp4d
