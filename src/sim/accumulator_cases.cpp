// Operands of the tensor-core model check (sim/accumulator_cases.hpp).
#include "sim/accumulator_cases.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/bf16.hpp"
#include "format/fp16.hpp"
#include "format/fp8.hpp"

namespace fp4d {

namespace {

// A format's normal exponent range, fraction bits and largest finite value.
struct Fmt {
  int emin, emax, frac;
  float max;
};

Fmt fmt_of(const std::string& f) {
  if (f == "bf16") return {-126, 127, 7, bf16_to_float(0x7f7f)};
  if (f == "fp16") return {-14, 15, 10, 65504.0f};
  if (f == "e4m3") return {-6, 8, 3, kE4M3Max};
  if (f == "e5m2") return {-14, 15, 2, kE5M2Max};
  throw std::invalid_argument("accumulator cases: unknown format '" + f + "' (bf16, fp16, e4m3, e5m2)");
}

enum class Format { Bf16, Fp16, E4m3, E5m2 };
Format format_of(const std::string& f) {
  fmt_of(f);  // throws for an unknown name
  return f == "bf16" ? Format::Bf16 : f == "fp16" ? Format::Fp16 : f == "e4m3" ? Format::E4m3 : Format::E5m2;
}

float round_to(float x, Format f) {
  switch (f) {
    case Format::Bf16:
      return bf16_to_float(bf16_rne_bits(x));
    case Format::Fp16:
      return fp16_to_float(fp16_rne_bits(x));
    case Format::E4m3:
      return e4m3_decode(e4m3_rne_satfinite(x));
    case Format::E5m2:
      break;
  }
  return e5m2_decode(e5m2_rne_satfinite(x));
}

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t text_hash(const std::string& s) {  // FNV-1a: stable across builds and platforms
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

using Rng = std::mt19937_64;

int uniform_int(Rng& r, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(r); }
double uniform(Rng& r, double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(r); }
double normal(Rng& r) { return std::normal_distribution<double>(0.0, 1.0)(r); }
double sign(Rng& r) { return (r() & 1) ? -1.0 : 1.0; }
// A significand in [1, 2) on the format's grid.
double significand(Rng& r, const Fmt& f) { return 1.0 + std::ldexp(static_cast<double>(r() >> (64 - f.frac)), -f.frac); }

// What one K position holds in every row of one operand (the structured distributions).
enum class Kind : std::uint8_t { Random, One, OneHalf, Subnormal, Zero };
struct Slot {
  int e = 0;  // exponent (ignored for Subnormal and Zero)
  Kind kind = Kind::Random;
  bool positive = false;  // else a random sign per row
};

float slot_value(const Slot& s, const Fmt& f, Rng& r) {
  const double sg = s.positive ? 1.0 : sign(r);
  switch (s.kind) {
    case Kind::Zero:
      return 0.0f;
    case Kind::One:
      return static_cast<float>(sg * std::ldexp(1.0, s.e));
    case Kind::OneHalf:
      return static_cast<float>(sg * std::ldexp(1.5, s.e));
    case Kind::Subnormal:  // m 2^(emin - frac), m in [1, 2^frac - 1]
      return static_cast<float>(sg * std::ldexp(static_cast<double>(uniform_int(r, 1, (1 << f.frac) - 1)), f.emin - f.frac));
    case Kind::Random:
      break;
  }
  // At the top binade of a format without the full significand range there (E4M3: 448 =
  // 1.75 2^8), the largest finite value.
  return static_cast<float>(sg * std::min(std::ldexp(significand(r, f), s.e), static_cast<double>(f.max)));
}

// Exponents (a_e, b_e) of a product 2^target, each in its format's normal range, near half each.
std::pair<int, int> split(int target, const Fmt& fa, const Fmt& fb, Rng& r) {
  const int lo = std::max(fa.emin, target - fb.emax), hi = std::min(fa.emax, target - fb.emin);
  if (lo > hi) throw std::logic_error("accumulator cases: product exponent " + std::to_string(target) + " out of reach");
  const int mid = static_cast<int>(std::floor(target / 2.0)) + uniform_int(r, -3, 3);
  const int ea = std::clamp(mid, lo, hi);
  return {ea, target - ea};
}

struct Layout {
  std::vector<Slot> a, b;
};

struct Ctx {
  std::string input, distribution;
  Fmt fa, fb;
  AccumulatorModelBits bits;
  std::int64_t K;
  std::uint64_t seed;
  Rng structure() const {
    return Rng(splitmix(seed ^ splitmix(text_hash(input) ^ splitmix(text_hash(distribution) ^ splitmix(static_cast<std::uint64_t>(K))))));
  }
  Rng row(int operand, std::int64_t r) const {
    return Rng(splitmix(seed ^ splitmix(text_hash(input) ^ splitmix(text_hash(distribution) ^
               splitmix(static_cast<std::uint64_t>(K) ^ splitmix((static_cast<std::uint64_t>(operand) << 40) ^ static_cast<std::uint64_t>(r)))))));
  }
};

// The leading product's exponent of the structured layouts: 2^0 for BF16 and FP16 (products
// 2^-27 below it stay in range), 2^8 (2^4 x 2^4) for FP8, whose small products would underflow
// beneath 2^0.
int lead_exponent(const Ctx& c) { return c.fa.frac <= 3 ? 8 : 0; }

Layout exp_gap(const Ctx& c) {
  Rng r = c.structure();
  Layout l;
  l.a.resize(static_cast<std::size_t>(c.K)), l.b.resize(l.a.size());
  const int L = lead_exponent(c), F = c.bits.kept, G = c.bits.group;
  for (std::int64_t k0 = 0; k0 < c.K; k0 += G) {
    const std::int64_t k1 = std::min(c.K, k0 + G);
    const std::int64_t lead = k0 + uniform_int(r, 0, static_cast<int>(k1 - k0 - 1));
    for (std::int64_t k = k0; k < k1; ++k) {
      const int d = k == lead ? 0 : (r() % 4 == 0 ? uniform_int(r, 0, 8) : uniform_int(r, F - 2, F + 1));
      const auto [ea, eb] = k == lead ? std::pair{L / 2, L - L / 2} : split(L - d, c.fa, c.fb, r);
      l.a[static_cast<std::size_t>(k)] = {ea, Kind::Random, false};
      l.b[static_cast<std::size_t>(k)] = {eb, Kind::Random, false};
    }
  }
  return l;
}

Layout ties(const Ctx& c) {
  Rng r = c.structure();
  Layout l;
  l.a.resize(static_cast<std::size_t>(c.K)), l.b.resize(l.a.size());
  const int L = lead_exponent(c), F = c.bits.kept, O = c.bits.output, G = c.bits.group;
  for (std::int64_t k0 = 0; k0 < c.K; k0 += G) {
    const std::int64_t k1 = std::min(c.K, k0 + G);
    const std::int64_t lead = k0 + uniform_int(r, 0, static_cast<int>(k1 - k0 - 1));
    for (std::int64_t k = k0; k < k1; ++k) {
      auto& sa = l.a[static_cast<std::size_t>(k)];
      auto& sb = l.b[static_cast<std::size_t>(k)];
      if (k == lead) {
        sa = {L / 2, Kind::One, false}, sb = {L - L / 2, Kind::One, false};
        continue;
      }
      // Half a unit of the alignment grid, half, three quarters and one unit of the output's
      // last place (relative to the leader), or nothing.
      const int pick = uniform_int(r, 0, 4);
      const int target = pick == 0 ? L - F - 1 : (pick == 3 ? L - O : L - O - 1);
      const auto [ea, eb] = split(target, c.fa, c.fb, r);
      sa = {ea, pick == 4 ? Kind::Zero : (pick == 2 ? Kind::OneHalf : Kind::One), false};  // 1.5 2^(L-O-1): 3/4 ulp
      sb = {eb, Kind::One, false};
    }
  }
  return l;
}

Layout subnormal(const Ctx& c) {
  Rng r = c.structure();
  Layout l;
  l.a.resize(static_cast<std::size_t>(c.K)), l.b.resize(l.a.size());
  const int G = c.bits.group;
  const bool bf16 = c.input == "bf16";
  for (std::int64_t k0 = 0; k0 < c.K; k0 += G) {
    const std::int64_t k1 = std::min(c.K, k0 + G);
    const bool ordinary = r() % 4 == 0;  // a block that also holds an ordinary product
    for (std::int64_t k = k0; k < k1; ++k) {
      auto& sa = l.a[static_cast<std::size_t>(k)];
      auto& sb = l.b[static_cast<std::size_t>(k)];
      const int cls = ordinary && k == k0 ? 4 : uniform_int(r, 0, 3);
      // A normal partner: the format's smallest binades or its ordinary ones.
      const auto partner = [&](const Fmt& f) {
        return Slot{r() % 2 ? uniform_int(r, f.emin, f.emin + 3) : uniform_int(r, -2, std::min(8, f.emax)), Kind::Random, false};
      };
      if (cls == 0) sa = {0, Kind::Subnormal, false}, sb = {0, Kind::Subnormal, false};
      if (cls == 1) sa = {0, Kind::Subnormal, false}, sb = partner(c.fb);
      if (cls == 2) sa = partner(c.fa), sb = {0, Kind::Subnormal, false};
      if (cls == 3) {
        // BF16: normal factors whose product is an FP32 subnormal, down past the model's
        // alignment floor 2^-133; other formats: their smallest normal binades.
        const int target = bf16 ? uniform_int(r, -141, -124) : c.fa.emin + c.fb.emin + uniform_int(r, 0, 3);
        const auto [ea, eb] = split(target, c.fa, c.fb, r);
        sa = {ea, Kind::Random, false}, sb = {eb, Kind::Random, false};
      }
      if (cls == 4) sa = {0, Kind::Random, false}, sb = {0, Kind::Random, false};
    }
  }
  return l;
}

Layout big_accumulator(const Ctx& c) {
  Rng r = c.structure();
  Layout l;
  l.a.resize(static_cast<std::size_t>(c.K)), l.b.resize(l.a.size());
  const int F = c.bits.kept, G = c.bits.group;
  // The first block's products are 2^base .. 2^(base + 5), all positive; the rest 2^-6 .. 2^-(F + 4)
  // of 2^base: a later block's sum of magnitudes is below 4 G 2^(base - 6), a sixteenth of the first's.
  const int base = c.fa.frac <= 3 ? 6 : (c.input == "fp16" ? 10 : 16);
  for (std::int64_t k = 0; k < c.K; ++k) {
    const bool first = k < G;
    const int target = first ? base + uniform_int(r, 0, 4) : base - uniform_int(r, 6, F + 4);
    const auto [ea, eb] = split(target, c.fa, c.fb, r);
    l.a[static_cast<std::size_t>(k)] = {ea, Kind::Random, first};
    l.b[static_cast<std::size_t>(k)] = {eb, Kind::Random, first};
  }
  return l;
}

void fill_layout(Matrix& X, int operand, const std::vector<Slot>& slots, const Fmt& f, const Ctx& c) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < X.rows; ++i) {
    Rng r = c.row(operand, i);
    for (std::int64_t k = 0; k < X.cols; ++k) X(i, k) = slot_value(slots[static_cast<std::size_t>(k)], f, r);
  }
}

// Random distributions: every element drawn on its own, then rounded to the format.
void fill_random(Matrix& X, int operand, const std::string& fname, const Fmt& f, const Ctx& c) {
  enum { Normal, Uniform, AbsNormal, Heavy, MixedExp, Cancelling } kind = Normal;
  const std::string& d = c.distribution;
  if (d == "uniform") kind = Uniform;
  if (d == "abs-normal") kind = AbsNormal;
  if (d == "heavy-tailed") kind = Heavy;
  if (d == "mixed-exp") kind = MixedExp;
  if (d == "cancelling") kind = Cancelling;
  const int spread = fname == "bf16" ? 20 : (fname == "e4m3" ? 3 : 6);
  const Format format = format_of(fname);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < X.rows; ++i) {
    Rng r = c.row(operand, i);
    for (std::int64_t k = 0; k < X.cols; ++k) {
      double v = 0;
      switch (kind) {
        case Normal:
          v = normal(r);
          break;
        case Uniform:
          v = uniform(r, -1.0, 1.0);
          break;
        case AbsNormal:
          v = std::fabs(normal(r));
          break;
        case Heavy: {  // Student t, 2 degrees of freedom: z / sqrt(chi2_2 / 2), chi2_2 = -2 ln u
          const double z = normal(r), u = uniform(r, 0x1p-60, 1.0);
          v = z / std::sqrt(std::max(-std::log(u), 0x1p-60));
          break;
        }
        case MixedExp:
          v = std::ldexp(normal(r), uniform_int(r, -spread, spread));
          break;
        case Cancelling:
          // Pairs (2q, 2q + 1): A's second is minus the first times 1 + delta (delta = 0 half the
          // time, else up to a few units of the last place), B's second equals its first.
          if (k % 2 == 0) {
            v = normal(r);
          } else {
            const double delta = (r() & 1) ? 0.0 : std::ldexp(uniform(r, -4.0, 4.0), -f.frac);
            v = operand == 0 ? -static_cast<double>(X(i, k - 1)) * (1.0 + delta) : static_cast<double>(X(i, k - 1));
          }
          break;
      }
      v = std::clamp(v, -static_cast<double>(f.max), static_cast<double>(f.max));
      X(i, k) = round_to(static_cast<float>(v), format);
    }
  }
}

// The K positions in pairs (k, partner[k]) with a(k') = -a(k), b(k') = b(k): half the pairs inside
// one block, half across blocks; an odd K leaves one position zero in A.
void fill_zero_sum(AccumulatorOperands& o, const Ctx& c) {
  Rng r = c.structure();
  const std::int64_t G = c.bits.group;
  std::vector<std::int64_t> inside, rest;
  for (std::int64_t k0 = 0; k0 < c.K; k0 += G) {
    std::vector<std::int64_t> block(static_cast<std::size_t>(std::min(c.K, k0 + G) - k0));
    std::iota(block.begin(), block.end(), k0);
    std::shuffle(block.begin(), block.end(), r);
    const std::size_t half = block.size() / 2 / 2 * 2;  // an even count stays in the block
    inside.insert(inside.end(), block.begin(), block.begin() + static_cast<std::ptrdiff_t>(half));
    rest.insert(rest.end(), block.begin() + static_cast<std::ptrdiff_t>(half), block.end());
  }
  std::shuffle(rest.begin(), rest.end(), r);
  std::vector<std::int64_t> partner(static_cast<std::size_t>(c.K), -1);
  for (const auto* v : {&inside, &rest})
    for (std::size_t q = 0; q + 1 < v->size(); q += 2) {
      partner[static_cast<std::size_t>((*v)[q])] = (*v)[q + 1];
      partner[static_cast<std::size_t>((*v)[q + 1])] = (*v)[q];
    }
  const int spread = c.fa.frac <= 3 ? 3 : 4;
  for (int operand = 0; operand < 2; ++operand) {
    Matrix& X = operand == 0 ? o.a : o.b;
    const Fmt& f = operand == 0 ? c.fa : c.fb;
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < X.rows; ++i) {
      Rng rr = c.row(operand, i);
      for (std::int64_t k = 0; k < c.K; ++k) {
        const std::int64_t p = partner[static_cast<std::size_t>(k)];
        if (p < 0) {
          X(i, k) = operand == 0 ? 0.0f : 1.0f;
        } else if (p > k) {
          X(i, k) = static_cast<float>(sign(rr) * std::ldexp(significand(rr, f), uniform_int(rr, -spread, spread)));
          X(i, p) = operand == 0 ? -X(i, k) : X(i, k);
        }
      }
    }
  }
}

// Non-negative integers a, b around sqrt(2^B / K), scaled per row by 0.9 .. 1.12, so that each
// output's sum ends near 2^B, on either side. (Zeros are allowed: with K = 2^B, as FP8's K = 16384,
// sums of integers of at least 1 could not end below 2^B.)
void fill_near_boundary(AccumulatorOperands& o, const Ctx& c) {
  const double alpha = std::sqrt(std::ldexp(1.0, accumulator_boundary_exponent(c.input)) / static_cast<double>(c.K));
  for (int operand = 0; operand < 2; ++operand) {
    Matrix& X = operand == 0 ? o.a : o.b;
    const Format format = format_of(operand == 0 ? o.a_format : o.b_format);
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < X.rows; ++i) {
      Rng r = c.row(operand, i);
      const double row_scale = uniform(r, 0.9, 1.12);
      for (std::int64_t k = 0; k < c.K; ++k) {
        const double v = std::round(alpha * row_scale * uniform(r, 0.5, 1.5));
        X(i, k) = round_to(static_cast<float>(v), format);  // an integer stays one
      }
    }
  }
}

}  // namespace

void refuse_all_zero(const Matrix& X, const std::string& what) {
  if (std::none_of(X.data.begin(), X.data.end(), [](float v) { return v != 0.0f; }))
    throw std::logic_error("accumulator cases: " + what + " is all zero (every output would agree trivially)");
}

const std::vector<std::string>& accumulator_input_types() {
  static const std::vector<std::string> v{"bf16", "fp16", "e4m3", "e5m2"};
  return v;
}

const std::vector<std::string>& accumulator_distributions() {
  static const std::vector<std::string> v{"normal", "uniform", "abs-normal", "heavy-tailed", "mixed-exp", "cancelling",
                                          "exp-gap", "zero-sum", "near-2^B", "ties", "subnormal", "big-accumulator"};
  return v;
}

bool is_adversarial_distribution(const std::string& d) {
  return d == "exp-gap" || d == "zero-sum" || d == "near-2^B" || d == "ties" || d == "subnormal" || d == "big-accumulator";
}

std::string accumulator_a_format(const std::string& input) {
  fmt_of(input);
  return input;
}

std::string accumulator_b_format(const std::string& input) {
  fmt_of(input);
  return input == "e5m2" ? "e4m3" : input;
}

float round_to_format(float x, const std::string& f) {
  const Fmt m = fmt_of(f);
  if (std::isfinite(x)) x = std::clamp(x, -m.max, m.max);
  return round_to(x, format_of(f));
}

bool representable_in(float x, const std::string& f) {
  return std::isfinite(x) && std::bit_cast<std::uint32_t>(round_to_format(x, f)) == std::bit_cast<std::uint32_t>(x);
}

AccumulatorModelBits accumulator_model_bits(const std::string& input) {
  fmt_of(input);
  if (input == "e4m3" || input == "e5m2") return {13, 32, 13};
  return {25, 16, 23};
}

int accumulator_boundary_exponent(const std::string& input) {
  return accumulator_model_bits(input).output == 13 ? 14 : 24;
}

AccumulatorOperands accumulator_operands(const std::string& input, const std::string& distribution, std::int64_t M,
                                         std::int64_t N, std::int64_t K, std::uint64_t seed) {
  const auto& ds = accumulator_distributions();
  if (std::find(ds.begin(), ds.end(), distribution) == ds.end())
    throw std::invalid_argument("accumulator cases: unknown distribution '" + distribution + "'");
  if (M < 1 || N < 1 || K < 1) throw std::invalid_argument("accumulator cases: M, N and K must be at least 1");
  AccumulatorOperands o;
  o.a_format = accumulator_a_format(input);
  o.b_format = accumulator_b_format(input);
  o.a = Matrix(M, K);
  o.b = Matrix(N, K);
  const Ctx c{input, distribution, fmt_of(o.a_format), fmt_of(o.b_format), accumulator_model_bits(input), K, seed};
  Layout l;
  if (distribution == "exp-gap") l = exp_gap(c);
  if (distribution == "ties") l = ties(c);
  if (distribution == "subnormal") l = subnormal(c);
  if (distribution == "big-accumulator") l = big_accumulator(c);
  if (!l.a.empty()) {
    fill_layout(o.a, 0, l.a, c.fa, c);
    fill_layout(o.b, 1, l.b, c.fb, c);
  } else if (distribution == "zero-sum") {
    fill_zero_sum(o, c);
  } else if (distribution == "near-2^B") {
    fill_near_boundary(o, c);
  } else {
    fill_random(o.a, 0, o.a_format, c.fa, c);
    fill_random(o.b, 1, o.b_format, c.fb, c);
  }
  const std::string what = input + " " + distribution + " K=" + std::to_string(K) + ": operand ";
  refuse_all_zero(o.a, what + "A");
  refuse_all_zero(o.b, what + "B");
  return o;
}

}  // namespace fp4d
