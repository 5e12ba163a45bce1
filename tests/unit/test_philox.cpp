// Philox4x32-10 (format/philox.hpp): known answers, fp4drift's stream layout, and a
// uniformity check of the primary words.
//
// Statistical checks use fixed seeds, so they are deterministic; the thresholds are set
// at a false-alarm probability of 1e-9 for an ideal generator, i.e. a correct Philox
// fails them for a given seed with probability at most 1e-9.
#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "format/philox.hpp"
#include "support/catch.hpp"

using namespace fp4d;

namespace {

Philox4x32 ctr(std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t d) { return Philox4x32{{a, b, c, d}}; }

// ---- statistics helpers (no external library: the values are cross-checked below) ----

// Regularised upper incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a): series for
// x < a + 1, Lentz's continued fraction otherwise (Numerical Recipes, 3rd ed., 6.2).
double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {
    double ap = a, sum = 1.0 / a, del = sum;
    for (int n = 0; n < 100000; ++n) {
      ap += 1.0;
      del *= x / ap;
      sum += del;
      if (std::fabs(del) < std::fabs(sum) * 1e-16) break;
    }
    return 1.0 - sum * std::exp(log_prefactor);
  }
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 100000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefactor) * h;
}

// Survival function of the chi-square distribution with k degrees of freedom.
double chi2_sf(double x, int k) { return gamma_q(0.5 * k, 0.5 * x); }

// Critical value c with chi2_sf(c, k) = alpha (bisection; chi2_sf is decreasing).
double chi2_critical(int k, double alpha) {
  double lo = k, hi = 20.0 * k + 1000.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (chi2_sf(mid, k) > alpha ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

constexpr double kFalseAlarm = 1e-9;

}  // namespace

TEST_CASE("philox4x32_10 matches the Random123 known-answer vectors", "[philox]") {
  // Random123 1.14, examples/kat_vectors: "philox4x32 10 <ctr x4> <key x2> <expected x4>".
  struct Kat {
    Philox4x32 c;
    std::uint32_t k0, k1;
    std::array<std::uint32_t, 4> expect;
  };
  const Kat kats[] = {
      {ctr(0, 0, 0, 0), 0, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {ctr(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu), 0xffffffffu, 0xffffffffu,
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {ctr(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u), 0xa4093822u, 0x299f31d0u,
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& t : kats) {
    const Philox4x32 r = philox4x32_10(t.c, t.k0, t.k1);
    CAPTURE(t.c.v[0], t.c.v[1], t.c.v[2], t.c.v[3], t.k0, t.k1);
    for (int i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(r.v[i] == t.expect[i]);
    }
  }
}

TEST_CASE("philox stream layout: key = seed, counter = (i/4, stream), word i%4", "[philox]") {
  // Seeds, streams and indices with non-zero high halves, so every 32-bit lane is exercised.
  const RngStream streams[] = {{0, 0},
                               {0x0123456789abcdefull, 0},
                               {0, 0xfedcba9876543210ull},
                               {0xdeadbeefcafef00dull, 0x0000000100000002ull}};
  const std::uint64_t indices[] = {0, 1, 2, 3, 4, 5, 7, 1000003, (std::uint64_t{1} << 32) + 6,
                                   (std::uint64_t{0x123456789} << 2) + 3, kMaxRngElementIndex};
  for (const RngStream& s : streams) {
    for (std::uint64_t i : indices) {
      CAPTURE(s.seed, s.stream, i);
      const std::uint64_t j = i / 4;
      // The layout written out by hand from the header comment.
      const Philox4x32 expect =
          philox4x32_10(ctr(static_cast<std::uint32_t>(j), static_cast<std::uint32_t>(j >> 32),
                            static_cast<std::uint32_t>(s.stream), static_cast<std::uint32_t>(s.stream >> 32)),
                        static_cast<std::uint32_t>(s.seed), static_cast<std::uint32_t>(s.seed >> 32));
      const Philox4x32 block = philox_block(s, j);
      for (int k = 0; k < 4; ++k) CHECK(block.v[k] == expect.v[k]);
      CHECK(philox_word(s, i) == expect.v[i % 4]);

      const Philox4x32 ext_expect = philox4x32_10(
          ctr(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32) | 0x80000000u,
              static_cast<std::uint32_t>(s.stream), static_cast<std::uint32_t>(s.stream >> 32)),
          static_cast<std::uint32_t>(s.seed), static_cast<std::uint32_t>(s.seed >> 32));
      const Philox4x32 ext = philox_extension(s, i);
      for (int k = 0; k < 4; ++k) CHECK(ext.v[k] == ext_expect.v[k]);
    }
  }
  // Four consecutive elements share one block and take its words in order.
  const RngStream s{42, 7};
  for (std::uint64_t j : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{123456789}}) {
    const Philox4x32 b = philox_block(s, j);
    for (int k = 0; k < 4; ++k) CHECK(philox_word(s, 4 * j + k) == b.v[k]);
  }
}

TEST_CASE("philox: different seeds and streams give different words", "[philox]") {
  // For independent uniform 32-bit words, P(at least 2 of n=4096 positions agree) is about
  // C(4096,2) 2^-64 < 1e-12: allow at most one coincidence per pair.
  const RngStream streams[] = {{0, 0},           {1, 0}, {0, 1}, {std::uint64_t{1} << 32, 0}, {0, std::uint64_t{1} << 32},
                               {1, 1},           {0xffffffffffffffffull, 0}, {0, 0xffffffffffffffffull}};
  constexpr int n = 4096;
  std::vector<std::vector<std::uint32_t>> words;
  for (const RngStream& s : streams) {
    std::vector<std::uint32_t> w(n);
    for (int i = 0; i < n; ++i) w[i] = philox_word(s, static_cast<std::uint64_t>(i));
    words.push_back(std::move(w));
  }
  for (std::size_t a = 0; a < words.size(); ++a)
    for (std::size_t b = a + 1; b < words.size(); ++b) {
      int same = 0;
      for (int i = 0; i < n; ++i) same += words[a][i] == words[b][i];
      CAPTURE(a, b);
      CHECK(same <= 1);
    }
  // Within one stream, the words of consecutive elements are not a shifted copy of each other.
  int same = 0;
  for (int i = 0; i + 1 < n; ++i) same += words[0][i] == words[0][i + 1];
  CHECK(same <= 1);
}

TEST_CASE("philox: extension counters never coincide with primary counters", "[philox]") {
  // Structural: every primary counter has bit 31 of word 1 clear (j = i/4 < 2^62), every
  // extension counter has it set, so the two sets of Philox inputs are disjoint and (Philox
  // being a bijection of the counter for a fixed key) so are the outputs. Check the outputs.
  const RngStream s{0x9e3779b97f4a7c15ull, 3};
  std::set<std::array<std::uint32_t, 4>> blocks;
  constexpr std::uint64_t n = 8192;
  for (std::uint64_t i = 0; i < n; ++i) {
    const Philox4x32 p = philox_block(s, i), e = philox_extension(s, i);
    blocks.insert({p.v[0], p.v[1], p.v[2], p.v[3]});
    blocks.insert({e.v[0], e.v[1], e.v[2], e.v[3]});
  }
  CHECK(blocks.size() == 2 * n);
  // Indices at the top of the allowed range, and their primary blocks.
  for (std::uint64_t i : {kMaxRngElementIndex, kMaxRngElementIndex - 1, std::uint64_t{1} << 61}) {
    const Philox4x32 e = philox_extension(s, i), p = philox_block(s, i / 4);
    CHECK_FALSE((e.v[0] == p.v[0] && e.v[1] == p.v[1] && e.v[2] == p.v[2] && e.v[3] == p.v[3]));
  }
}

TEST_CASE("philox statistics helpers reproduce reference values", "[philox][stats]") {
  // Reference: Boost.Math 1.74, quantile(complement(chi_squared(255), 1e-9)) = 414.545040
  // and cdf(complement(chi_squared(255), 400)) = 1.660003e-08.
  const double c = chi2_critical(255, kFalseAlarm);
  CHECK(c > 414.5440);
  CHECK(c < 414.5461);
  const double p = chi2_sf(400.0, 255);
  CHECK(p > 1.6599e-8);
  CHECK(p < 1.6601e-8);
  // Small-x branch (series): Q(1, x) = exp(-x) for the exponential distribution.
  CHECK(std::fabs(gamma_q(1.0, 0.5) - std::exp(-0.5)) < 1e-14);
  CHECK(std::fabs(gamma_q(1.0, 5.0) - std::exp(-5.0)) < 1e-14);
}

TEST_CASE("philox_word is uniform: top-8-bit chi-square and per-bit frequencies", "[philox][stats]") {
  constexpr std::uint64_t n = std::uint64_t{1} << 20;
  const RngStream streams[] = {{0, 0}, {0x0123456789abcdefull, 0x5555aaaa5555aaaaull}};
  // Chi-square over 256 buckets (255 degrees of freedom); expected count n/256 = 4096 per
  // bucket, far in the regime where the chi-square approximation of the statistic holds.
  const double chi2_crit = chi2_critical(255, kFalseAlarm);
  // Per-bit frequency: K ~ Binomial(n, 1/2) for each of 32 bits. Hoeffding's inequality
  // P(|K - n/2| >= t) <= 2 exp(-2 t^2 / n) is rigorous; with a family-wise false alarm of
  // 1e-9 split over 32 bits (Bonferroni), t = sqrt(n ln(2 * 32 / 1e-9) / 2) ~= 3612.
  const double t_bit = std::sqrt(static_cast<double>(n) * std::log(2.0 * 32.0 / kFalseAlarm) / 2.0);
  for (const RngStream& s : streams) {
    CAPTURE(s.seed, s.stream);
    std::vector<std::uint64_t> bucket(256, 0), ones(32, 0);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint32_t w = philox_word(s, i);
      ++bucket[w >> 24];
      for (int b = 0; b < 32; ++b) ones[b] += (w >> b) & 1u;
    }
    const double expect = static_cast<double>(n) / 256.0;
    double chi2 = 0.0;
    for (std::uint64_t c : bucket) chi2 += (c - expect) * (c - expect) / expect;
    CAPTURE(chi2, chi2_crit);
    CHECK(chi2 < chi2_crit);
    for (int b = 0; b < 32; ++b) {
      const double dev = std::fabs(static_cast<double>(ones[b]) - static_cast<double>(n) / 2.0);
      CAPTURE(b, ones[b], dev, t_bit);
      CHECK(dev < t_bit);
    }
  }
}

TEST_CASE("philox hw layout: counter = (i/16, stream) with bit 30 of word 1, word (i/4)%4, byte {0,16,8,24}[i%4]",
          "[philox][hw]") {
  const RngStream streams[] = {{0, 0}, {0x0123456789abcdefull, 0}, {0, 0xfedcba9876543210ull},
                               {0xdeadbeefcafef00dull, 0x0000000100000002ull}};
  const std::uint64_t indices[] = {0,  1,  2,  3,  4,  5,  6,  7,  15, 16, 17, 1000003, (std::uint64_t{1} << 36) + 9,
                                   (std::uint64_t{0x123456789} << 4) + 14, kMaxRngElementIndex};
  const unsigned shift[4] = {0, 16, 8, 24};
  for (const RngStream& s : streams)
    for (std::uint64_t i : indices) {
      CAPTURE(s.seed, s.stream, i);
      const std::uint64_t g = i / 16;
      const Philox4x32 expect =
          philox4x32_10(ctr(static_cast<std::uint32_t>(g), static_cast<std::uint32_t>(g >> 32) | 0x40000000u,
                            static_cast<std::uint32_t>(s.stream), static_cast<std::uint32_t>(s.stream >> 32)),
                        static_cast<std::uint32_t>(s.seed), static_cast<std::uint32_t>(s.seed >> 32));
      const Philox4x32 block = philox_hw_block(s, g);
      for (int k = 0; k < 4; ++k) CHECK(block.v[k] == expect.v[k]);
      CHECK(philox_hw_byte(s, i) == ((expect.v[(i / 4) % 4] >> shift[i % 4]) & 0xffu));
      CHECK(hw_byte_shift(i) == static_cast<int>(shift[i % 4]));
    }
  // One call serves 16 consecutive elements, each byte of its 4 words used exactly once.
  const RngStream s{42, 7};
  for (std::uint64_t g : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{987654321}}) {
    const Philox4x32 b = philox_hw_block(s, g);
    std::set<std::pair<int, int>> used;  // (word, byte shift)
    for (std::uint64_t t = 0; t < 16; ++t) {
      const std::uint64_t i = 16 * g + t;
      used.insert({static_cast<int>(t / 4), hw_byte_shift(i)});
      CHECK(philox_hw_byte(s, i) == ((b.v[t / 4] >> hw_byte_shift(i)) & 0xffu));
    }
    CHECK(used.size() == 16);
  }
}

TEST_CASE("philox: hw counters never coincide with primary or extension counters", "[philox][hw]") {
  // Structural: word 1 of a counter is (j_hi) for primary counters (j = i/4 < 2^60: bits 28-31
  // clear), (i_hi | 2^31) for extension ones and (g_hi | 2^30) for hw ones (g = i/16 < 2^58:
  // bits 26-31 of g_hi clear), for every i <= kMaxRngElementIndex: the bit pairs (31, 30) are
  // 00, 1x and 01. Checked at the range's edges, then on the outputs of a run of indices.
  for (std::uint64_t i : {std::uint64_t{0}, kMaxRngElementIndex, kMaxRngElementIndex - 15, std::uint64_t{1} << 61}) {
    const std::uint32_t primary = static_cast<std::uint32_t>((i / 4) >> 32);
    const std::uint32_t hw = static_cast<std::uint32_t>((i / 16) >> 32) | 0x40000000u;
    CHECK((primary >> 30) == 0u);
    CHECK((hw >> 30) == 1u);
  }
  const RngStream s{0x9e3779b97f4a7c15ull, 3};
  std::set<std::array<std::uint32_t, 4>> blocks;
  constexpr std::uint64_t n = 4096;
  for (std::uint64_t i = 0; i < n; ++i) {
    const Philox4x32 p = philox_block(s, i), e = philox_extension(s, i), h = philox_hw_block(s, i);
    blocks.insert({p.v[0], p.v[1], p.v[2], p.v[3]});
    blocks.insert({e.v[0], e.v[1], e.v[2], e.v[3]});
    blocks.insert({h.v[0], h.v[1], h.v[2], h.v[3]});
  }
  CHECK(blocks.size() == 3 * n);
}
