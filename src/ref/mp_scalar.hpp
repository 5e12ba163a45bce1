// Reference scalars: the precision a reference computation runs in, selectable at run time.
//   double     IEEE binary64
//   binary128  IEEE binary128 as GCC's __float128 (arithmetic and conversions from libgcc's
//              soft-fp, correctly rounded; Boost's float128 wrapper is not used because it needs
//              GNU extensions (-fext-numeric-literals) and libquadmath, which the strict C++20
//              build does not enable)
//   mpN        boost::multiprecision::cpp_bin_float<N> (binary significand of N bits, RNE)
// This is the bottom layer: nothing from src/quant, src/format or src/trace is included.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <boost/multiprecision/cpp_int.hpp>

namespace fp4d::ref {

namespace bmp = boost::multiprecision;

template <unsigned Bits>
using mp_float = bmp::number<bmp::cpp_bin_float<Bits, bmp::digit_base_2>, bmp::et_off>;
using mp64 = mp_float<64>;
using mp113 = mp_float<113>;
using mp256 = mp_float<256>;
using mp512 = mp_float<512>;
using mp1024 = mp_float<1024>;
using binary128 = __float128;

enum class Precision { Double, Binary128, Mp64, Mp113, Mp256, Mp1024 };

// "double|binary128|mp64|mp113|mp256|mp1024"; throws std::invalid_argument listing them.
Precision parse_precision(std::string_view name);
std::string to_string(Precision p);
const std::vector<Precision>& all_precisions();
int precision_bits(Precision p);  // significand bits: 53, 113, 64, 113, 256, 1024

template <Precision P> struct scalar_of;
template <> struct scalar_of<Precision::Double> { using type = double; };
template <> struct scalar_of<Precision::Binary128> { using type = binary128; };
template <> struct scalar_of<Precision::Mp64> { using type = mp64; };
template <> struct scalar_of<Precision::Mp113> { using type = mp113; };
template <> struct scalar_of<Precision::Mp256> { using type = mp256; };
template <> struct scalar_of<Precision::Mp1024> { using type = mp1024; };
template <Precision P> using scalar_t = typename scalar_of<P>::type;

// Calls f(T{}) - a tag value of the scalar type of p - and returns its result.
template <class F>
decltype(auto) dispatch(Precision p, F&& f) {
  switch (p) {
    case Precision::Double: return f(double{});
    case Precision::Binary128: return f(binary128{});
    case Precision::Mp64: return f(mp64{});
    case Precision::Mp113: return f(mp113{});
    case Precision::Mp256: return f(mp256{});
    case Precision::Mp1024: break;
  }
  return f(mp1024{});
}

// ---- conversions --------------------------------------------------------------------------
// To double: correctly rounded (RNE) for every scalar.
inline double to_double(double x) { return x; }
inline double to_double(binary128 x) { return static_cast<double>(x); }
template <unsigned B>
double to_double(const mp_float<B>& x) { return x.template convert_to<double>(); }

// 2^e as binary128 for e in the normal range [-16382, 16383] (clamped outside it).
inline binary128 pow2_binary128(int e) {
  e = std::clamp(e, -16382, 16383);
  const unsigned __int128 bits = static_cast<unsigned __int128>(e + 16383) << 112;
  binary128 r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}
// x * 2^e in steps of normal powers of two: exact whenever the result is representable
// (one RNE otherwise, as the last step is the only inexact one).
inline binary128 scale_binary128(binary128 x, int e) {
  while (e > 16383) { x *= pow2_binary128(16383); e -= 16383; }
  while (e < -16382) {
    if (x == 0) return x;
    x *= pow2_binary128(-16382);  // may go subnormal only in the last step when e >= -2*16382
    e += 16382;
  }
  return x * pow2_binary128(e);
}
// Unbiased exponent of a finite non-zero binary128 (x = m * 2^e, 1 <= |m| < 2), subnormals included.
inline int exponent_binary128(binary128 x) {
  unsigned __int128 bits;
  std::memcpy(&bits, &x, sizeof bits);
  const int biased = static_cast<int>((bits >> 112) & 0x7fff);
  if (biased != 0) return biased - 16383;
  return exponent_binary128(x * pow2_binary128(200)) - 200;  // subnormal: scaled up exactly
}

// binary128 <-> cpp_bin_float: scaled into [1, 2), split exactly into three doubles
// (hi + mid + lo, 53 + 53 + 53 >= 113 bits), scaled back: exact over binary128's whole range.
template <unsigned B>
mp_float<B> from_binary128(binary128 x) {
  if (x == 0) return mp_float<B>(0);
  const int e = exponent_binary128(x);
  const binary128 m = scale_binary128(x, -e);  // exact, in [1, 2)
  const double hi = static_cast<double>(m);
  const binary128 r = m - static_cast<binary128>(hi);
  const double mid = static_cast<double>(r);
  const double lo = static_cast<double>(r - static_cast<binary128>(mid));
  mp_float<B> y = hi;
  y += mid;
  y += lo;
  return ldexp(y, e);
}
// RNE to binary128 (113 bits, binary128's exponent range and subnormals), then exact.
template <unsigned B>
binary128 to_binary128(const mp_float<B>& x) {
  if (x == 0) return 0;
  int e = 0;
  (void)frexp(x, &e);                     // |x| = f * 2^e, 0.5 <= f < 1
  int p = 113;                            // significand bits available at this exponent
  if (e - 1 < -16382) p = std::max(0, 113 - (-16382 - (e - 1)));
  if (e - 1 > 16383) return x > 0 ? scale_binary128(1, 20000) : -scale_binary128(1, 20000);  // Inf
  // Round to p bits (RNE): scale so the last kept bit is the unit, round to an integer.
  const mp_float<B + 2> t = ldexp(mp_float<B + 2>(x), p - e);  // |t| < 2^p: exact
  mp_float<B + 2> q = floor(t);
  const mp_float<B + 2> frac = t - q;
  if (frac > 0.5 || (frac == 0.5 && floor(q / 2) * 2 != q)) q += 1;
  const mp113 y = static_cast<mp113>(q);  // an integer <= 2^p <= 2^113: exact
  const double hi = y.template convert_to<double>();
  const mp113 r = y - mp113(hi);
  const double mid = r.template convert_to<double>();
  const double lo = (r - mp113(mid)).template convert_to<double>();
  const binary128 z = (static_cast<binary128>(hi) + static_cast<binary128>(mid)) + static_cast<binary128>(lo);
  return scale_binary128(z, e - p);  // exact unless it overflows (-> Inf, the RNE result)
}

// Any scalar -> another scalar (RNE where the target is narrower).
template <class To, class From>
To convert(const From& x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, double>) {
    return to_double(x);
  } else if constexpr (std::is_same_v<From, double>) {
    return To(x);
  } else if constexpr (std::is_same_v<From, binary128>) {
    return static_cast<To>(from_binary128<1024>(x));  // exact, then one rounding
  } else if constexpr (std::is_same_v<To, binary128>) {
    return to_binary128(x);
  } else {
    return static_cast<To>(x);
  }
}

// An exact binary value significand * 2^exponent, as the exact GEMM returns it.
struct ExactValue {
  bmp::cpp_int significand = 0;
  std::int64_t exponent = 0;

  bool is_zero() const { return significand == 0; }
  // Correctly rounded (RNE, with subnormals and overflow to +-Inf).
  double to_double() const;
  // To any reference scalar (RNE where it does not fit).
  template <class T>
  T to() const {
    if constexpr (std::is_same_v<T, double>) {
      return to_double();
    } else if constexpr (std::is_same_v<T, binary128>) {
      return to_binary128(to<mp113>());
    } else {
      // Rounded here (RNE) rather than by Boost: Boost 1.74's cpp_int -> cpp_bin_float
      // conversion is not correctly rounded for some inputs (seen with 258 -> 113 bits).
      constexpr unsigned P = std::numeric_limits<T>::digits;
      if (significand == 0) return T(0);
      const bool neg = significand < 0;
      bmp::cpp_int mag = neg ? bmp::cpp_int(-significand) : significand;
      const std::int64_t len = static_cast<std::int64_t>(bmp::msb(mag)) + 1;
      std::int64_t e = exponent;
      if (len > static_cast<std::int64_t>(P)) {
        const auto sh = static_cast<unsigned>(len - P);
        const bmp::cpp_int rem = mag & ((bmp::cpp_int(1) << sh) - 1);
        const bmp::cpp_int half = bmp::cpp_int(1) << (sh - 1);
        mag >>= sh;
        if (rem > half || (rem == half && bmp::bit_test(mag, 0))) ++mag;
        e += sh;
      }
      T r(mag);  // <= P bits (or 2^P): exact
      r = ldexp(r, static_cast<int>(e));
      return neg ? T(-r) : r;
    }
  }
};

// RNE of (-1)^negative * mag * 2^exp to double, mag as little-endian 32-bit digits.
double round_to_double(const std::uint32_t* mag, std::size_t ndigits, std::int64_t exp, bool negative);
double round_to_double(const bmp::cpp_int& significand, std::int64_t exp);

}  // namespace fp4d::ref
