// GCC 12 reports a false -Warray-bounds inside Boost 1.74's cpp_int shifts when it inlines
// cpp_bin_float<256> arithmetic; the accesses are guarded by Boost's own size checks.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif

#include "ref/mp_scalar.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>

#include "ref/reference_gemm.hpp"

namespace fp4d::ref {

namespace {
struct PrecisionName {
  Precision p;
  const char* name;
  int bits;
};
constexpr PrecisionName kNames[] = {
    {Precision::Double, "double", 53},   {Precision::Binary128, "binary128", 113},
    {Precision::Mp64, "mp64", 64},       {Precision::Mp113, "mp113", 113},
    {Precision::Mp256, "mp256", 256},    {Precision::Mp1024, "mp1024", 1024},
};
}  // namespace

Precision parse_precision(std::string_view name) {
  for (const auto& n : kNames)
    if (name == n.name) return n.p;
  std::string msg = "unknown reference precision '" + std::string(name) + "'; choose one of:";
  for (const auto& n : kNames) msg += std::string(" ") + n.name;
  throw std::invalid_argument(msg);
}

std::string to_string(Precision p) {
  for (const auto& n : kNames)
    if (n.p == p) return n.name;
  return "?";
}

const std::vector<Precision>& all_precisions() {
  static const std::vector<Precision> v = {Precision::Double, Precision::Binary128, Precision::Mp64,
                                           Precision::Mp113,  Precision::Mp256,     Precision::Mp1024};
  return v;
}

int precision_bits(Precision p) {
  for (const auto& n : kNames)
    if (n.p == p) return n.bits;
  return 0;
}

// ---- RNE of a big binary value to double ---------------------------------------------------
namespace {
inline bool bit_at(const std::uint32_t* mag, std::size_t n, std::int64_t i) {
  if (i < 0) return false;
  const auto d = static_cast<std::size_t>(i >> 5);
  return d < n && ((mag[d] >> (i & 31)) & 1u);
}
// Bits [lo, lo + count) as an integer, count <= 64, lo >= 0.
inline std::uint64_t bits_at(const std::uint32_t* mag, std::size_t n, std::int64_t lo, int count) {
  const auto d = static_cast<std::size_t>(lo >> 5);
  unsigned __int128 w = 0;
  for (std::size_t j = 0; j < 3; ++j)
    if (d + j < n) w |= static_cast<unsigned __int128>(mag[d + j]) << (32 * j);
  w >>= (lo & 31);
  const std::uint64_t r = static_cast<std::uint64_t>(w);
  return count >= 64 ? r : (r & ((std::uint64_t(1) << count) - 1));
}
// Any bit set in [0, hi) (hi may be <= 0).
inline bool any_below(const std::uint32_t* mag, std::size_t n, std::int64_t hi) {
  if (hi <= 0) return false;
  const auto full = static_cast<std::size_t>(hi >> 5);
  for (std::size_t d = 0; d < std::min(full, n); ++d)
    if (mag[d]) return true;
  const int rem = static_cast<int>(hi & 31);
  if (rem && full < n && (mag[full] & ((1u << rem) - 1u))) return true;
  return false;
}
}  // namespace

double round_to_double(const std::uint32_t* mag, std::size_t n, std::int64_t exp, bool negative) {
  std::int64_t top = -1;
  for (std::size_t d = n; d-- > 0;)
    if (mag[d]) {
      top = static_cast<std::int64_t>(d) * 32 + (31 - std::countl_zero(mag[d]));
      break;
    }
  if (top < 0) return 0.0;  // an exact zero is +0
  const double sign = negative ? -1.0 : 1.0;
  if (exp + top >= 1024) return sign * std::numeric_limits<double>::infinity();
  // Position (in mag's bits) of the result's last significand bit: 53 bits, or 2^-1074.
  const std::int64_t lsb = std::max(top - 52, -1074 - exp);
  if (lsb <= 0) {  // exact
    const double q = static_cast<double>(bits_at(mag, n, 0, static_cast<int>(top + 1)));
    return sign * std::ldexp(q, static_cast<int>(exp));
  }
  std::uint64_t q = lsb > top ? 0 : bits_at(mag, n, lsb, static_cast<int>(top - lsb + 1));
  const bool half = bit_at(mag, n, lsb - 1);
  const bool sticky = any_below(mag, n, lsb - 1);
  if (half && (sticky || (q & 1u))) ++q;  // q <= 2^53: exact as a double
  if (exp + lsb < -1100) return sign * 0.0;  // (cannot happen with q != 0)
  return sign * std::ldexp(static_cast<double>(q), static_cast<int>(exp + lsb));
}

double round_to_double(const bmp::cpp_int& significand, std::int64_t exp) {
  if (significand == 0) return 0.0;
  const bool neg = significand < 0;
  const bmp::cpp_int mag = neg ? bmp::cpp_int(-significand) : significand;
  std::vector<std::uint32_t> digits;
  bmp::export_bits(mag, std::back_inserter(digits), 32, false);  // least significant first
  return round_to_double(digits.data(), digits.size(), exp, neg);
}

double ExactValue::to_double() const { return round_to_double(significand, exponent); }

// ---- reference GEMM ---------------------------------------------------------------------------
namespace {
template <class T>
void gemm_rows_impl(const double* A, const double* B, std::int64_t N, std::int64_t K,
                    const std::vector<std::int64_t>& rows, T* out) {
  // B converted once (exact: every scalar holds a double).
  std::vector<T> Bt(static_cast<std::size_t>(N * K));
  for (std::int64_t i = 0; i < N * K; ++i) Bt[static_cast<std::size_t>(i)] = T(B[i]);
  const auto R = static_cast<std::int64_t>(rows.size());
#pragma omp parallel
  {
    std::vector<T> a(static_cast<std::size_t>(K));
    T acc, prod;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t ri = 0; ri < R; ++ri) {
      const double* arow = A + rows[static_cast<std::size_t>(ri)] * K;
      for (std::int64_t k = 0; k < K; ++k) a[static_cast<std::size_t>(k)] = T(arow[k]);
      for (std::int64_t j = 0; j < N; ++j) {
        const T* b = Bt.data() + j * K;
        acc = T(0);
        for (std::int64_t k = 0; k < K; ++k) {
          prod = a[static_cast<std::size_t>(k)];
          prod *= b[k];
          acc += prod;
        }
        out[ri * N + j] = acc;
      }
    }
  }
}
std::vector<std::int64_t> all_rows(std::int64_t M) {
  std::vector<std::int64_t> r(static_cast<std::size_t>(M));
  for (std::int64_t i = 0; i < M; ++i) r[static_cast<std::size_t>(i)] = i;
  return r;
}
void check_shape(std::int64_t M, std::int64_t N, std::int64_t K) {
  if (M < 0 || N < 0 || K < 0) throw std::invalid_argument("gemm_nt: negative dimension");
}
}  // namespace

template <class T>
std::vector<T> gemm_nt_rows(const double* A, const double* B, std::int64_t M, std::int64_t N, std::int64_t K,
                            const std::vector<std::int64_t>& rows) {
  check_shape(M, N, K);
  for (auto r : rows)
    if (r < 0 || r >= M) throw std::invalid_argument("gemm_nt_rows: row " + std::to_string(r) + " out of range");
  std::vector<T> out(rows.size() * static_cast<std::size_t>(N));
  gemm_rows_impl<T>(A, B, N, K, rows, out.data());
  return out;
}

template <class T>
std::vector<T> gemm_nt(const double* A, const double* B, std::int64_t M, std::int64_t N, std::int64_t K) {
  return gemm_nt_rows<T>(A, B, M, N, K, all_rows(M));
}

#define FP4D_REF_INSTANTIATE(T)                                                                             \
  template std::vector<T> gemm_nt<T>(const double*, const double*, std::int64_t, std::int64_t, std::int64_t); \
  template std::vector<T> gemm_nt_rows<T>(const double*, const double*, std::int64_t, std::int64_t,          \
                                          std::int64_t, const std::vector<std::int64_t>&);
FP4D_REF_INSTANTIATE(double)
FP4D_REF_INSTANTIATE(binary128)
FP4D_REF_INSTANTIATE(mp64)
FP4D_REF_INSTANTIATE(mp113)
FP4D_REF_INSTANTIATE(mp256)
FP4D_REF_INSTANTIATE(mp512)
FP4D_REF_INSTANTIATE(mp1024)
#undef FP4D_REF_INSTANTIATE

std::vector<double> gemm_nt(const double* A, const double* B, std::int64_t M, std::int64_t N, std::int64_t K,
                            Precision p) {
  return dispatch(p, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> c = gemm_nt<T>(A, B, M, N, K);
    std::vector<double> out(c.size());
    for (std::size_t i = 0; i < c.size(); ++i) out[i] = to_double(c[i]);
    return out;
  });
}

Certification certify_gemm_nt(const double* A, const double* B, std::int64_t M, std::int64_t N, std::int64_t K,
                              Precision base, Precision check, const std::vector<std::int64_t>& rows_in) {
  const std::vector<std::int64_t> rows = rows_in.empty() ? all_rows(M) : rows_in;
  auto run = [&](Precision p) {
    return dispatch(p, [&](auto tag) {
      using T = decltype(tag);
      std::vector<T> c = gemm_nt_rows<T>(A, B, M, N, K, rows);
      std::vector<mp1024> w(c.size());
      for (std::size_t i = 0; i < c.size(); ++i) w[i] = convert<mp1024>(c[i]);
      return w;
    });
  };
  const std::vector<mp1024> cb = run(base), cc = run(check);
  Certification r;
  r.base = base;
  r.check = check;
  r.compared = static_cast<std::int64_t>(cc.size());
  mp1024 max_rel = 0, max_abs = 0, sum_d2 = 0, sum_c2 = 0;
  for (std::size_t i = 0; i < cc.size(); ++i) {
    const mp1024 d = abs(cb[i] - cc[i]);
    sum_d2 += d * d;
    sum_c2 += cc[i] * cc[i];
    if (d > max_abs) max_abs = d;
    if (cc[i] == 0) {
      if (d != 0) ++r.zero_mismatches;
      continue;
    }
    const mp1024 rel = d / abs(cc[i]);
    if (r.worst_index < 0 || rel > max_rel) {
      max_rel = rel;
      const std::int64_t n = std::max<std::int64_t>(N, 1), ii = static_cast<std::int64_t>(i);
      r.worst_index = rows[static_cast<std::size_t>(ii / n)] * N + ii % n;
    }
  }
  r.max_rel_diff = max_rel.convert_to<double>();
  r.max_abs_diff = max_abs.convert_to<double>();
  r.norm_rel_diff = sum_c2 == 0 ? 0.0 : sqrt(sum_d2 / sum_c2).convert_to<double>();
  const double cap = precision_bits(check) * std::log10(2.0);
  if (r.zero_mismatches > 0 || r.max_rel_diff >= 1.0)
    r.digits = 0;
  else if (r.max_rel_diff == 0)
    r.digits = cap;
  else
    r.digits = std::min(cap, -std::log10(r.max_rel_diff));
  return r;
}

}  // namespace fp4d::ref
