// Small helpers shared by the tests: float32 bit patterns, readable hex output, and float32
// arithmetic computed independently of the code under test (exact in double, then one
// rounding to float: the IEEE result of the float operation).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

namespace fp4d_test {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kFMax = std::numeric_limits<float>::max();

inline std::uint32_t fbits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
inline bool same_bits(float a, float b) { return fbits(a) == fbits(b); }
inline std::string hexf(float x) {
  char b[48];
  std::snprintf(b, sizeof b, "%a (0x%08x)", static_cast<double>(x), fbits(x));
  return b;
}
// float32 product / quotient: the double result of two floats is exact (product) or
// correctly rounded with enough guard bits (quotient: 53 >= 2*24+2), so one rounding to
// float gives the IEEE float32 result.
inline float f32mul(float a, float b) { return static_cast<float>(static_cast<double>(a) * static_cast<double>(b)); }
inline float f32div(float a, float b) { return static_cast<float>(static_cast<double>(a) / static_cast<double>(b)); }

}  // namespace fp4d_test
