// The scalars the mlp reference can run in ([reference] precision, sim/mlp_run.hpp):
//   double     IEEE binary64, the default (FMA GEMM on x86-64-v3, numerics.md 8d)
//   binary128  boost::multiprecision::cpp_bin_float_quad: binary128's 113-bit significand and
//              exponent range, RNE arithmetic and sqrt, but no subnormals (below 2^-16382
//              it flushes to 0 - far below anything the MLP computes). Not GCC's __float128:
//              its exp/erf need libquadmath, which the strict C++20 build does not link
//              (src/ref/mp_scalar.hpp makes the same choice for the GEMM reference).
//   mp256      boost::multiprecision::cpp_bin_float<256> (ref::mp256): 256-bit significand.
// exp and erf of the two Boost types come from Boost.Multiprecision/Math (accurate to a few
// ulps of the type, not correctly rounded). A run-time bit count is not offered:
// cpp_bin_float's precision is a template parameter, and each one is another instantiation
// of the whole model (mpfr_float could, at the price of a new dependency).
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/multiprecision/cpp_bin_float.hpp>

#include "ref/mp_scalar.hpp"

namespace fp4d {

using mlp_binary128 = boost::multiprecision::cpp_bin_float_quad;
using mlp_mp256 = ref::mp256;

enum class MlpPrecision { Double, Binary128, Mp256 };
// "double" | "binary128" | "mp256"; std::invalid_argument listing them otherwise.
MlpPrecision parse_mlp_precision(const std::string& s);
std::string to_string(MlpPrecision p);
int significand_bits(MlpPrecision p);  // 53, 113, 256

// Calls f(T{}) with a value of p's scalar type and returns its result.
template <class F>
decltype(auto) dispatch_mlp_precision(MlpPrecision p, F&& f) {
  switch (p) {
    case MlpPrecision::Double: return f(double{});
    case MlpPrecision::Binary128: return f(mlp_binary128{});
    case MlpPrecision::Mp256: break;
  }
  return f(mlp_mp256{});
}

template <class T>
double mlp_to_double(const T& x) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<double>(x);
  else return x.template convert_to<double>();
}

// Per tensor, the sum of its elements' squares, each rounded to double first (the reference's
// weight norms that the run summaries weight layer errors with).
template <class T>
std::vector<double> squared_norms(const std::vector<std::vector<T>>& tensors) {
  std::vector<double> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) {
    double n = 0;
    for (const T& v : t) {
      const double d = mlp_to_double(v);
      n += d * d;
    }
    out.push_back(n);
  }
  return out;
}

// Exact storage of T values as doubles (the trace's checkpoints): x = d_0 + d_1 + ... +
// d_{K-1}, d_i the double nearest to x - (d_0 + ... + d_{i-1}) (each remainder is exact in T,
// and each step takes >= 53 bits off), K = limbs<T>(). Throws std::runtime_error naming
// `what` when a value does not fit (a limb below double's subnormal range), so a checkpoint
// is never silently rounded.
template <class T>
constexpr int limbs() {
  if constexpr (std::is_floating_point_v<T>) return 1;
  else return (std::numeric_limits<T>::digits + 52) / 53;
}
template <class T>
std::vector<double> to_limbs(const std::vector<T>& v, const std::string& what) {
  constexpr int K = limbs<T>();
  std::vector<double> out(v.size() * K);
  for (std::size_t i = 0; i < v.size(); ++i) {
    T r = v[i];
    for (int k = 0; k < K; ++k) {
      const double d = mlp_to_double(r);
      out[i * K + static_cast<std::size_t>(k)] = d;
      r -= T(d);
    }
    if (r != 0 || !std::isfinite(out[i * K]))
      throw std::runtime_error("mlp: " + what + " element " + std::to_string(i) + " cannot be stored exactly in " +
                               std::to_string(K) + " doubles");
  }
  return out;
}
template <class T>
std::vector<T> from_limbs(const std::vector<double>& d, const std::string& what) {
  constexpr int K = limbs<T>();
  if (d.size() % K != 0)
    throw std::runtime_error("mlp: " + what + " has " + std::to_string(d.size()) + " values, not a multiple of " +
                             std::to_string(K) + " limbs");
  std::vector<T> v(d.size() / K);
  for (std::size_t i = 0; i < v.size(); ++i) {
    T x = T(d[i * K]);
    for (int k = 1; k < K; ++k) x += T(d[i * K + static_cast<std::size_t>(k)]);  // exact: the limbs do not overlap
    v[i] = x;
  }
  return v;
}

}  // namespace fp4d
