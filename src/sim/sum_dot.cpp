#include "sim/sum_dot.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "format/philox.hpp"
#include "ref/mp_scalar.hpp"

namespace fp4d {

namespace {

constexpr std::uint64_t kTermStream = 0x53554d0000000000ull;     // "SUM": term generation
constexpr std::uint64_t kProductStream = 0x8000000000000000ull;  // xor: SR of the products

// hi + lo = a + b exactly (Knuth's TwoSum; exact unless a + b overflows).
void two_sum(double a, double b, double& hi, double& lo) {
  hi = a + b;
  const double bb = hi - a;
  lo = (a - (hi - bb)) + (b - bb);
}

// The exact sum of doubles: 32-bit digits in int64 limbs from 2^-1088 (a multiple of 32
// below double's 2^-1074) to 2^1216 (headroom above 2^1024 for sums of many terms). Each
// add puts less than 2^32 into three limbs, so carries wait until 2^30 adds have been made.
class LongAccumulator {
 public:
  void add(double x) {
    if (x == 0.0) return;
    if (!std::isfinite(x)) throw std::invalid_argument("sum/dot terms must be finite");
    std::uint64_t b;
    std::memcpy(&b, &x, sizeof b);
    const int biased = static_cast<int>((b >> 52) & 0x7ffu);
    std::uint64_t m = b & ((std::uint64_t{1} << 52) - 1);
    int e = -1074;  // x = m * 2^e
    if (biased != 0) {
      m |= std::uint64_t{1} << 52;
      e = biased - 1075;
    }
    const int pos = e - kBase;
    const unsigned __int128 v = static_cast<unsigned __int128>(m) << (pos % 32);
    const auto q = static_cast<std::size_t>(pos / 32);
    const std::int64_t d[3] = {static_cast<std::int64_t>(v & 0xffffffffu),
                               static_cast<std::int64_t>((v >> 32) & 0xffffffffu),
                               static_cast<std::int64_t>(v >> 64)};
    for (int k = 0; k < 3; ++k) limb_[q + k] += (b >> 63) ? -d[k] : d[k];
    if (++pending_ == (1 << 30)) normalize();
  }
  // (this - y), RNE to double: the exact value (y = 0) or an exact difference rounded once.
  double minus_rounded(double y) const {
    LongAccumulator t = *this;
    t.add(-y);
    t.normalize();
    std::array<std::uint32_t, kLimbs> mag;
    for (int k = 0; k < kLimbs; ++k) mag[k] = static_cast<std::uint32_t>(t.limb_[k]);
    const bool neg = t.limb_[kLimbs - 1] < 0;
    if (neg) {  // two's complement over all digits
      std::uint64_t carry = 1;
      for (auto& g : mag) {
        const std::uint64_t s = static_cast<std::uint64_t>(~g) + carry;
        g = static_cast<std::uint32_t>(s);
        carry = s >> 32;
      }
    }
    return ref::round_to_double(mag.data(), mag.size(), kBase, neg);
  }

 private:
  static constexpr int kBase = -1088;
  static constexpr int kLimbs = 72;
  void normalize() {  // digits in [0, 2^32), the sign in the top limb
    std::int64_t carry = 0;
    for (int k = 0; k < kLimbs - 1; ++k) {
      const std::int64_t v = limb_[k] + carry;
      limb_[k] = v & 0xffffffff;
      carry = v >> 32;  // arithmetic: floor division
    }
    limb_[kLimbs - 1] += carry;
    pending_ = 0;
  }
  std::array<std::int64_t, kLimbs> limb_{};
  std::int64_t pending_ = 0;
};

// floor(f 2^32) of f = fh + fl in [0, 1); fh + fl becomes the remainder f 2^32 - floor.
std::uint32_t wide_floor32(double& fh, double& fl) {
  const double sh = fh * 0x1p32, sl = fl * 0x1p32;
  double d = std::floor(sh);
  if (d == sh && sl < 0.0) d -= 1.0;  // the exact value lies just below the integer sh
  two_sum(sh - d, sl, fh, fl);        // sh - d is exact (a fractional part, or 1)
  return static_cast<std::uint32_t>(d);
}

// The primary SR words of one stream, one Philox block per 4 consecutive elements.
class SrWords {
 public:
  explicit SrWords(RngStream s) : s_(s) {}
  std::uint32_t operator()(std::uint64_t i) {
    if ((i >> 2) != block_index_) {
      block_index_ = i >> 2;
      block_ = philox_block(s_, block_index_);
    }
    return block_.v[i & 3u];
  }
  RngStream stream() const { return s_; }

 private:
  RngStream s_;
  std::uint64_t block_index_ = ~std::uint64_t{0};
  Philox4x32 block_{};
};

// Every kStopCheck terms a run looks at its stop flag: often enough to stop within
// milliseconds, rarely enough to cost nothing beside the rounding of a term.
constexpr std::int64_t kStopCheck = 4096;
void check_stop(const std::atomic<bool>* stop, std::int64_t k) {
  if (stop && k % kStopCheck == 0 && stop->load(std::memory_order_relaxed)) throw SumDotInterrupted();
}

// Checkpoints: every power of two <= n, and n.
std::vector<std::int64_t> checkpoints(std::int64_t n) {
  std::vector<std::int64_t> c;
  for (std::int64_t p = 1; p <= n; p *= 2) c.push_back(p);
  if (n > 0 && c.back() != n) c.push_back(n);
  return c;
}

}  // namespace

bool sr_round_up_wide(double fh, double fl, std::uint32_t w, int sr_bits, RngStream s, std::uint64_t element) {
  if (fl == 0.0 && static_cast<double>(static_cast<float>(fh)) == fh)
    return sr_round_up(static_cast<float>(fh), w, sr_bits, s, element);
  const std::uint32_t f32 = wide_floor32(fh, fl);
  if (sr_bits != kSrExact) return (w >> (32 - sr_bits)) < (f32 >> (32 - sr_bits));
  if (w != f32) return w < f32;
  const Philox4x32 ext = philox_extension(s, element);
  for (int k = 0; k < 4; ++k) {
    if (fh == 0.0 && fl == 0.0) return false;  // U >= f on a tie with a zero remainder
    const std::uint32_t digit = wide_floor32(fh, fl);
    if (ext.v[k] != digit) return ext.v[k] < digit;
  }
  return false;
}

double round_exact(const FloatFormat& f, double hi, double lo, const RoundingSpec& r, RngStream s,
                   std::uint64_t element, std::uint32_t w, double* var) {
  const double a = std::fabs(hi);
  const double lo_rel = std::signbit(hi) ? -lo : lo;  // |x| = a + lo_rel
  switch (r.mode) {
    case Rounding::NearestEven: {
      const double rn = f.round_nearest_even(hi);
      if (lo == 0.0) return rn;
      const double top = f.largest();
      if (a > top) {  // RNE of hi is right unless hi is the overflow threshold itself
        const double threshold = top + std::ldexp(0.5, f.emax - f.precision + 1);
        return (a == threshold && lo_rel < 0.0) ? std::copysign(top, hi) : rn;
      }
      // Grid points and midpoints are doubles and hi is the double nearest x, so only a
      // midpoint hi can round differently from x: lo then breaks the tie.
      double L, H;
      f.neighbours(a, &L, &H);
      if (L < a && a < H && a - L == H - a) return f.round_nearest_even(std::copysign(lo_rel > 0.0 ? H : L, hi));
      return rn;
    }
    case Rounding::TowardZero: {
      const double rz = f.round_toward_zero(hi);
      if (lo_rel < 0.0 && std::fabs(rz) == a) {  // hi on the grid, x just below it
        double L, H;
        f.neighbours(std::nextafter(a, 0.0), &L, &H);
        return f.round_toward_zero(std::copysign(L, hi));
      }
      return rz;
    }
    case Rounding::Stochastic:
    default: break;
  }
  if (hi == 0.0) return f.round_nearest_even(hi);
  if (a > f.largest() || (a == f.largest() && lo_rel > 0.0))
    return f.round_nearest_even(std::copysign(std::numeric_limits<double>::infinity(), hi));
  double L, H;
  f.neighbours(a, &L, &H);
  if (L == H) {  // hi on the grid: x is exact, or lies in the interval on lo's side of it
    if (lo_rel == 0.0) return f.round_nearest_even(hi);
    f.neighbours(lo_rel > 0.0 ? std::nextafter(a, std::numeric_limits<double>::infinity()) : std::nextafter(a, 0.0),
                 &L, &H);
    if (L == H) return f.round_nearest_even(hi);  // no neighbour there (a format without zero)
  }
  const double step = H - L;  // a power of two
  double fh, fl;
  two_sum(a - L, lo_rel, fh, fl);  // a - L is exact: both are multiples of ulp(L), < step
  fh /= step;
  fl /= step;
  if (var) {
    var[0] += fh * (1.0 - fh) * step * step;
    var[1] += 0.25 * step * step;
  }
  const bool up = sr_round_up_wide(fh, fl, w, r.sr_bits, s, element);
  return f.round_nearest_even(std::copysign(up ? H : L, hi));  // a grid value: sign/format checks only
}

std::vector<double> make_terms(const TermSpec& t, std::int64_t n, std::uint64_t stream, const std::atomic<bool>* stop) {
  if (n < 0) throw std::invalid_argument("number of terms must be >= 0");
  if (!std::isfinite(t.c)) throw std::invalid_argument("term constant c must be finite");
  enum { Uniform, Normal, Constant, Harmonic, Alternating, AltHarmonic } kind;
  if (t.kind == "uniform") kind = Uniform;
  else if (t.kind == "normal") kind = Normal;
  else if (t.kind == "constant") kind = Constant;
  else if (t.kind == "harmonic") kind = Harmonic;
  else if (t.kind == "alternating") kind = Alternating;
  else if (t.kind == "alternating-harmonic") kind = AltHarmonic;
  else
    throw std::invalid_argument("unknown term kind '" + t.kind +
                                "' (known: uniform, normal, constant, harmonic, alternating, alternating-harmonic)");
  const RngStream rs{t.seed, kTermStream ^ stream};
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) {
    check_stop(stop, k);
    const double i = static_cast<double>(k + 1);
    const double sign = (k % 2 == 0) ? 1.0 : -1.0;
    double x = 0.0;
    if (kind == Uniform || kind == Normal) {
      const Philox4x32 w = philox_block(rs, static_cast<std::uint64_t>(k));
      auto u53 = [&](int j) {  // in (0, 1), 53 random bits
        const std::uint64_t bits = (static_cast<std::uint64_t>(w.v[2 * j]) << 21) ^ (w.v[2 * j + 1] >> 11);
        return (static_cast<double>(bits & ((std::uint64_t{1} << 53) - 1)) + 0.5) * 0x1p-53;
      };
      if (kind == Uniform)  // float32 terms: 24 bits, so rounding cannot reach 1
        x = t.c * (t.float32 ? static_cast<double>(w.v[0] >> 8) * 0x1p-24 : u53(0) - 0x1p-54);
      else
        x = t.c * std::sqrt(-2.0 * std::log(u53(0))) * std::cos(6.283185307179586476925286766559 * u53(1));
    } else if (kind == Constant) {
      x = t.c;
    } else if (kind == Harmonic) {
      x = t.c / i;
    } else if (kind == Alternating) {
      x = sign * t.c;
    } else {
      x = sign * t.c / i;
    }
    v[static_cast<std::size_t>(k)] = t.float32 ? static_cast<double>(static_cast<float>(x)) : x;
  }
  return v;
}

SumDotResult sum_dot(const SumDotOptions& opt, std::span<const double> a, std::span<const double> b) {
  const bool dot = !b.empty();
  if (dot && b.size() != a.size()) throw std::invalid_argument("dot: a and b must have the same length");
  const bool sr = opt.rounding.mode == Rounding::Stochastic;
  if (sr && opt.rounding.sr_bits != kSrExact && (opt.rounding.sr_bits < 1 || opt.rounding.sr_bits > 32))
    throw std::invalid_argument("sr_bits must be 1..32 or exact");
  if (sr && opt.runs < 1) throw std::invalid_argument("runs must be >= 1");
  if (opt.format.precision < 1 || opt.format.precision > 53) throw std::invalid_argument("format precision must be 1..53");
  const auto n = static_cast<std::int64_t>(a.size());
  if (n > static_cast<std::int64_t>(kMaxRngElementIndex)) throw std::invalid_argument("too many terms");
  const int runs = sr ? opt.runs : 1;
  const std::vector<std::int64_t> cps = checkpoints(n);

  // Pass 1: the exact value at each checkpoint (the accumulator itself is the snapshot).
  std::vector<LongAccumulator> exact;
  exact.reserve(cps.size());
  {
    LongAccumulator acc;
    std::size_t next = 0;
    for (std::int64_t k = 0; k < n; ++k) {
      check_stop(opt.stop, k);
      const double x = a[static_cast<std::size_t>(k)];
      if (!dot) {
        acc.add(x);
      } else {
        const double y = b[static_cast<std::size_t>(k)];
        const double p = x * y;
        const double e = std::fma(x, y, -p);  // TwoProd: x y = p + e exactly
        if (!opt.round_products && e != 0.0)
          throw std::invalid_argument("dot with exact products: a_i b_i must be exact in double (float32 terms are)");
        acc.add(p);
        acc.add(e);
      }
      if (k + 1 == cps[next]) {
        exact.push_back(acc);
        ++next;
      }
    }
  }

  SumDotResult res;
  res.points.resize(cps.size());
  for (std::size_t j = 0; j < cps.size(); ++j) {
    SumDotPoint& pt = res.points[j];
    pt.n = cps[j];
    pt.exact = exact[j].minus_rounded(0.0);
    pt.computed.resize(static_cast<std::size_t>(runs));
    pt.error.resize(static_cast<std::size_t>(runs));
  }
  res.first_stagnation.assign(static_cast<std::size_t>(runs), -1);

  // Pass 2: the recursion, once per run.
  const RoundingSpec& rs = opt.rounding;
  for (int run = 0; run < runs; ++run) {
    const RngStream sum_stream{rs.rng.seed + static_cast<std::uint64_t>(run), rs.rng.stream};
    const RngStream prod_stream{sum_stream.seed, sum_stream.stream ^ kProductStream};
    SrWords sum_words(sum_stream), prod_words(prod_stream);
    double var[2] = {0.0, 0.0};
    double* pv = sr ? var : nullptr;
    double s = 0.0;
    std::size_t next = 0;
    std::int64_t& stagnation = res.first_stagnation[static_cast<std::size_t>(run)];
    for (std::int64_t k = 0; k < n; ++k) {
      check_stop(opt.stop, k);
      const auto ku = static_cast<std::uint64_t>(k);
      double t = a[static_cast<std::size_t>(k)];
      if (dot) {
        const double y = b[static_cast<std::size_t>(k)];
        const double p = t * y;
        t = opt.round_products ? round_exact(opt.format, p, std::fma(t, y, -p), rs, prod_stream, ku,
                                             sr ? prod_words(ku) : 0u, pv)
                               : p;
      }
      double hi, lo;
      two_sum(s, t, hi, lo);
      const double s_new = round_exact(opt.format, hi, lo, rs, sum_stream, ku, sr ? sum_words(ku) : 0u, pv);
      if (stagnation < 0 && t != 0.0 && s_new == s) stagnation = k + 1;
      s = s_new;
      if (k + 1 == cps[next]) {
        SumDotPoint& pt = res.points[next];
        pt.computed[static_cast<std::size_t>(run)] = s;
        pt.error[static_cast<std::size_t>(run)] = std::isfinite(s) ? -exact[next].minus_rounded(s) : s - pt.exact;
        pt.sr_variance += var[0] / runs;
        pt.sr_half_step_sq += var[1] / runs;
        ++next;
      }
    }
  }

  for (SumDotPoint& pt : res.points) {
    double sum = 0.0, sq = 0.0;
    for (const double e : pt.error) {
      sum += e;
      sq += e * e;
    }
    pt.mean_error = sum / runs;
    pt.rms_error = std::sqrt(sq / runs);
    pt.abs_error = std::fabs(pt.error[0]);
    pt.rel_error = pt.abs_error == 0.0 ? 0.0 : pt.abs_error / std::fabs(pt.exact);
  }
  return res;
}

}  // namespace fp4d
