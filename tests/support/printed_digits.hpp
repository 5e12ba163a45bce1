// Whether two values agree to `digits` significant decimal digits as printed (%.*e): the
// printed forms differ by at most one unit in the last printed place of `wide` (the wider
// reference's value). What a reader comparing two printed loss columns sees; the tests that use
// it also check the derived relative bound itself.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/catch.hpp"

namespace fp4d::test {

inline void check_same_printed_digits(double narrow, double wide, int digits, const std::string& what) {
  char a[64], b[64];
  std::snprintf(a, sizeof a, "%.*e", digits - 1, narrow);
  std::snprintf(b, sizeof b, "%.*e", digits - 1, wide);
  const double unit = std::pow(10.0, std::floor(std::log10(std::abs(wide))) - (digits - 1));
  INFO(what << ": " << a << " against " << b);
  CHECK(std::abs(std::strtod(a, nullptr) - std::strtod(b, nullptr)) <= 1.001 * unit);
}

}  // namespace fp4d::test
