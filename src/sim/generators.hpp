// Synthetic tensors, deterministic from a seed: every element is a pure function of
// (seed, element index) through Philox, so a tensor is the same whatever the thread count
// (up to the platform's libm, which the transcendental functions use).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/matrix.hpp"

namespace fp4d {

struct GeneratorSpec {
  std::string kind = "normal";      // normal | student-t | outliers
  std::int64_t rows = 1024, cols = 1024;
  std::uint64_t seed = 1;
  double scale = 1.0;               // standard deviation (normal) / scale (student-t)
  double nu = 3.0;                  // student-t degrees of freedom (> 0)
  double outlier_fraction = 0.01;   // outliers: fraction of channels (columns), at least one
  double outlier_scale = 50.0;      // outliers: factor on those channels
};

// Whether generator `kind` reads `parameter` - "scale" (every kind), "nu" (student-t),
// "outlier_fraction" and "outlier_scale" (outliers) - so that front ends refuse a parameter
// of another generator instead of ignoring it. std::invalid_argument for an unknown kind.
bool generator_uses(const std::string& kind, const std::string& parameter);

// Throws std::invalid_argument for unknown kinds and out-of-range parameters.
Matrix generate(const GeneratorSpec& g);
std::string describe(const GeneratorSpec& g);

// The channels (columns) the `outliers` generator scales: one byte per column, 1 for an outlier
// channel - the mask generate() applies, so that statistics can split the error by it. Empty
// for the other kinds. Throws as generate() does for bad parameters.
std::vector<std::uint8_t> outlier_channel_mask(const GeneratorSpec& g);

}  // namespace fp4d
