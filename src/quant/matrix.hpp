// A dense row-major float32 matrix: the unit of data the quantizers work on. A 1-D tensor
// is a 1 x n matrix. Kept deliberately plain (no Eigen) so the same layout is what the
// CUDA backend copies to the device.
#pragma once

#include <cstdint>
#include <vector>

#include "util/checked_size.hpp"

namespace fp4d {

struct Matrix {
  std::int64_t rows = 0, cols = 0;
  std::vector<float> data;

  Matrix() = default;
  // SizeError (not a wrapped size, then a wild write) when r * c is negative or overflows;
  // the per-tensor limit is the callers' to apply, where they can name the option.
  Matrix(std::int64_t r, std::int64_t c, float fill = 0.0f)
      : rows(r), cols(c), data(static_cast<std::size_t>(checked_mul(r, c, "matrix size")), fill) {}
  float& operator()(std::int64_t r, std::int64_t c) { return data[static_cast<std::size_t>(r * cols + c)]; }
  float operator()(std::int64_t r, std::int64_t c) const { return data[static_cast<std::size_t>(r * cols + c)]; }
  std::int64_t size() const { return rows * cols; }
};

Matrix transpose(const Matrix& m);

}  // namespace fp4d
