#include "sim/token_source.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "format/philox.hpp"
#include "util/checked_size.hpp"

namespace fp4d {

namespace {

constexpr std::uint32_t kMapTag = 0x4d4150u;     // "MAP": the context maps (the language)
constexpr std::uint32_t kStreamTag = 0x544f4bu;  // "TOK": the samples
constexpr std::uint32_t kLmTag = 0x4c4d0000u;    // "LM": keeps these keys apart from other derivations

constexpr std::int64_t kMaxVocab = std::int64_t{1} << 31;    // ids stay int32
constexpr std::int64_t kMaxSupport = std::int64_t{1} << 24;  // the tail table: 128 MiB of doubles
constexpr int kMaxOrder = 64;                                // one Philox call per context token
constexpr std::int64_t kMaxCopyLength = std::int64_t{1} << 30;

[[noreturn]] void bad(const std::string& key, const std::string& why) {
  throw std::invalid_argument("lm: " + key + " " + why);
}

// A key of its own for each use of the seed, so that no counter of the token source can
// coincide with one drawn elsewhere from the same seed.
void derive_key(std::uint64_t seed, std::uint32_t tag, std::uint32_t key[2]) {
  const Philox4x32 c =
      philox4x32_10(Philox4x32{{tag, kLmTag, 0u, 0u}}, static_cast<std::uint32_t>(seed),
                    static_cast<std::uint32_t>(seed >> 32));
  key[0] = c.v[0];
  key[1] = c.v[1];
}

// (bits + 0.5) 2^-53 in (0, 1) from 53 of the 64 bits (hi, lo).
double uniform53(std::uint32_t hi, std::uint32_t lo) {
  const std::uint64_t bits = ((static_cast<std::uint64_t>(hi) << 32) | lo) >> 11;
  return (static_cast<double>(bits) + 0.5) * 0x1p-53;
}

struct Neumaier {
  double s = 0.0, c = 0.0;
  void add(double x) {
    const double t = s + x;
    c += std::fabs(s) >= std::fabs(x) ? (s - t) + x : (x - t) + s;
    s = t;
  }
  double value() const { return s + c; }
};

bool power_of_two(std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// p_t: no copy before L tokens exist.
double copy_prob_at(const TokenSourceSpec& s, std::int64_t t) { return t >= s.copy_length ? s.copy_prob : 0.0; }

}  // namespace

void TokenSourceSpec::validate() const {
  if (!power_of_two(vocab) || vocab < 8 || vocab > kMaxVocab)
    bad("vocab", "must be a power of two in [8, 2^31] (got " + std::to_string(vocab) + ")");
  if (order < 1 || order > kMaxOrder)
    bad("order", "must be in [1, " + std::to_string(kMaxOrder) + "] (got " + std::to_string(order) + ")");
  if (!(zipf_alpha > 0.0) || !std::isfinite(zipf_alpha)) bad("zipf_alpha", "must be > 0 and finite");
  if (zipf_support < 1 || zipf_support > std::min(vocab - 1, kMaxSupport))
    bad("zipf_support", "must be in [1, min(vocab - 1, 2^24)] = [1, " +
                            std::to_string(std::min(vocab - 1, kMaxSupport)) + "] (got " +
                            std::to_string(zipf_support) + ")");
  if (!(copy_prob >= 0.0 && copy_prob < 1.0)) bad("copy_prob", "must be in [0, 1)");
  if (copy_length < 1 || copy_length > kMaxCopyLength)
    bad("copy_length", "must be in [1, 2^30] (got " + std::to_string(copy_length) + ")");
}

double zipf_entropy_nats(double alpha, std::int64_t support) {
  if (!(alpha > 0.0) || !std::isfinite(alpha)) bad("zipf_alpha", "must be > 0 and finite");
  if (support < 1) bad("zipf_support", "must be >= 1");
  Neumaier z, zlog;
  for (std::int64_t r = support; r >= 1; --r) {
    const double lr = std::log(static_cast<double>(r));
    const double w = std::exp(-alpha * lr);
    z.add(w);
    zlog.add(w * lr);
  }
  return std::log(z.value()) + alpha * zlog.value() / z.value();
}

double binary_entropy_nats(double p) {
  if (p <= 0.0 || p >= 1.0) return 0.0;
  return -p * std::log(p) - (1.0 - p) * std::log1p(-p);
}

double entropy_rate_nats(const TokenSourceSpec& s) {
  s.validate();
  const double p = s.copy_prob;
  const double hk = zipf_entropy_nats(s.zipf_alpha, s.zipf_support);
  return (binary_entropy_nats(p) + (1.0 - p) * hk) / (1.0 + p * static_cast<double>(s.copy_length));
}

std::vector<double> loss_floor_per_position(const TokenSourceSpec& s, std::int64_t seq_len) {
  s.validate();
  if (seq_len < 1 || seq_len > (std::int64_t{1} << 32) - 2) bad("seq_len", "must be in [1, 2^32 - 2]");
  const double hk = zipf_entropy_nats(s.zipf_alpha, s.zipf_support);
  const double log_m = std::log(static_cast<double>(s.markov_size()));
  const std::int64_t k = s.order, len = s.copy_length;
  std::vector<double> u(static_cast<std::size_t>(seq_len) + 1, 0.0), floor(static_cast<std::size_t>(seq_len));
  for (std::int64_t t = 1; t <= seq_len; ++t) {
    const auto ti = static_cast<std::size_t>(t);
    if (t < k) {
      floor[ti - 1] = log_m;
      continue;
    }
    if (t == k) {
      u[ti] = 1.0;
    } else {
      u[ti] = (1.0 - copy_prob_at(s, t - 1)) * u[ti - 1];
      if (t - 1 - len >= k) u[ti] += copy_prob_at(s, t - 1 - len) * u[static_cast<std::size_t>(t - 1 - len)];
    }
    const double pt = copy_prob_at(s, t);
    floor[ti - 1] = u[ti] * (binary_entropy_nats(pt) + (1.0 - pt) * hk);
  }
  return floor;
}

double loss_floor_nats(const TokenSourceSpec& s, std::int64_t seq_len) {
  Neumaier sum;
  for (const double f : loss_floor_per_position(s, seq_len)) sum.add(f);
  return sum.value() / static_cast<double>(seq_len);
}

TokenSource::TokenSource(const TokenSourceSpec& spec) : spec_(spec) {
  spec_.validate();
  mask_ = static_cast<std::uint32_t>(spec_.vocab - 1);
  derive_key(spec_.seed, kMapTag, map_key_);
  derive_key(spec_.seed, kStreamTag, stream_key_);
  // Tail sums from the smallest term up, so that the rare ranks keep their relative accuracy.
  const auto k = static_cast<std::size_t>(spec_.zipf_support);
  tail_.assign(k, 0.0);
  Neumaier z;
  for (std::size_t r = k; r >= 1; --r) {
    z.add(std::exp(-spec_.zipf_alpha * std::log(static_cast<double>(r))));
    tail_[r - 1] = z.value();
  }
  const double zk = z.value();
  for (double& q : tail_) q /= zk;
  tail_[0] = 1.0;
  log_z_ = std::log(zk);
}

TokenSource::Map TokenSource::map_of(std::span<const std::int32_t> context) const {
  Philox4x32 s{{0u, 0u, 0u, 0u}};
  for (std::size_t i = 0; i < context.size(); ++i)
    s = philox4x32_10(Philox4x32{{static_cast<std::uint32_t>(context[i]), s.v[0], s.v[1], static_cast<std::uint32_t>(i)}},
                      map_key_[0], map_key_[1]);
  Map m{};
  m.a = (s.v[0] | 1u) & mask_;
  std::uint32_t inv = m.a;  // Newton's iteration for a^-1 mod 2^32: 3 -> 6 -> 12 -> 24 -> 48 bits
  for (int i = 0; i < 4; ++i) inv *= 2u - m.a * inv;
  m.a_inv = inv & mask_;
  m.b = s.v[1] & mask_;
  m.d = s.v[2] & mask_;
  return m;
}

std::int64_t TokenSource::zipf_rank(double u) const {
  // The largest r with tail_[r - 1] >= u: P(r) = tail_[r - 1] - tail_[r] = r^-alpha / Z_K.
  return std::partition_point(tail_.begin(), tail_.end(), [u](double q) { return q >= u; }) - tail_.begin();
}

namespace {
void check_context(const TokenSourceSpec& s, std::span<const std::int32_t> context) {
  if (static_cast<std::int64_t>(context.size()) != s.order)
    bad("order", "is " + std::to_string(s.order) + " but the context holds " + std::to_string(context.size()) + " ids");
  for (const std::int32_t c : context)
    if (c < 0 || c >= s.vocab) bad("vocab", "is " + std::to_string(s.vocab) + " but the context holds id " + std::to_string(c));
}
}  // namespace

std::int32_t TokenSource::markov_token(std::span<const std::int32_t> context, std::int64_t rank) const {
  check_context(spec_, context);
  if (rank < 1 || rank > spec_.markov_size())
    throw std::invalid_argument("lm: rank " + std::to_string(rank) + " is outside [1, vocab - 1]");
  const Map m = map_of(context);
  std::uint32_t y = static_cast<std::uint32_t>(rank - 1);
  do y = (m.a * (y ^ m.b) + m.d) & mask_;
  while (y >= mask_);  // cycle walking onto [0, M), M = V - 1 = mask_
  return static_cast<std::int32_t>(y + 1);
}

std::int64_t TokenSource::markov_rank(std::span<const std::int32_t> context, std::int32_t token) const {
  check_context(spec_, context);
  if (token < 1 || token >= spec_.vocab)
    throw std::invalid_argument("lm: token " + std::to_string(token) + " is not a Markov id (1 .. vocab - 1)");
  const Map m = map_of(context);
  std::uint32_t x = static_cast<std::uint32_t>(token - 1);
  do x = ((m.a_inv * (x - m.d)) & mask_) ^ m.b;
  while (x >= mask_);
  return static_cast<std::int64_t>(x) + 1;
}

double TokenSource::markov_log_prob(std::span<const std::int32_t> context, std::int32_t token) const {
  if (token == kCopyMarker) {
    check_context(spec_, context);
    return -std::numeric_limits<double>::infinity();
  }
  const std::int64_t r = markov_rank(context, token);
  if (r > spec_.zipf_support) return -std::numeric_limits<double>::infinity();
  return -spec_.zipf_alpha * std::log(static_cast<double>(r)) - log_z_;
}

void TokenSource::fill_row(std::int64_t batch_index, std::uint32_t row, std::int32_t* x, std::int64_t n) const {
  const auto bi = static_cast<std::uint64_t>(batch_index);
  auto draw = [&](std::int64_t t) {
    return philox4x32_10(Philox4x32{{static_cast<std::uint32_t>(t), row, static_cast<std::uint32_t>(bi),
                                     static_cast<std::uint32_t>(bi >> 32)}},
                         stream_key_[0], stream_key_[1]);
  };
  const std::int64_t k = spec_.order, len = spec_.copy_length;
  const auto m = static_cast<unsigned __int128>(spec_.markov_size());
  for (std::int64_t t = 0; t < std::min(k, n); ++t) {
    const Philox4x32 c = draw(t);
    const std::uint64_t w = (static_cast<std::uint64_t>(c.v[0]) << 32) | c.v[1];
    x[t] = 1 + static_cast<std::int32_t>((w * m) >> 64);
  }
  for (std::int64_t t = k; t < n;) {
    const Philox4x32 c = draw(t);
    if (t >= len && uniform53(c.v[0], c.v[1]) < spec_.copy_prob) {
      x[t] = kCopyMarker;
      for (std::int64_t i = 1; i <= len && t + i < n; ++i) x[t + i] = x[t + i - len - 1];
      t += 1 + len;
      continue;
    }
    const Map mp = map_of(std::span<const std::int32_t>(x + t - k, static_cast<std::size_t>(k)));
    std::uint32_t y = static_cast<std::uint32_t>(zipf_rank(uniform53(c.v[2], c.v[3])) - 1);
    do y = (mp.a * (y ^ mp.b) + mp.d) & mask_;
    while (y >= mask_);
    x[t] = static_cast<std::int32_t>(y + 1);
    ++t;
  }
}

TokenBatch TokenSource::batch(std::int64_t batch_index, std::int64_t batch, std::int64_t seq_len) const {
  if (batch_index < 0) bad("batch_index", "must be >= 0 (got " + std::to_string(batch_index) + ")");
  if (batch < 1 || batch > (std::int64_t{1} << 32)) bad("batch", "must be in [1, 2^32] (got " + std::to_string(batch) + ")");
  if (seq_len < 1 || seq_len > (std::int64_t{1} << 32) - 2)
    bad("seq_len", "must be in [1, 2^32 - 2] (got " + std::to_string(seq_len) + ")");
  const std::int64_t total = checked_mul(batch, seq_len + 1, "lm: batch x (seq_len + 1) token ids");
  if (total > kMaxTensorElements)
    throw SizeError("lm: batch x (seq_len + 1) = " + std::to_string(total) + " token ids, over the limit of " +
                    kMaxTensorElementsText);
  TokenBatch out;
  out.batch = batch;
  out.seq_len = seq_len;
  out.ids.assign(static_cast<std::size_t>(total), 0);
#pragma omp parallel for schedule(static) if (total > (1 << 14))
  for (std::int64_t r = 0; r < batch; ++r) fill_row(batch_index, static_cast<std::uint32_t>(r), out.row(r), seq_len + 1);
  return out;
}

std::vector<double> TokenSource::log_probs(std::span<const std::int32_t> x) const {
  const auto n = static_cast<std::int64_t>(x.size());
  for (std::int64_t t = 0; t < n; ++t)
    if (x[t] < 0 || x[t] >= spec_.vocab)
      throw std::invalid_argument("lm: token id " + std::to_string(x[t]) + " at position " + std::to_string(t) +
                                  " is outside [0, vocab = " + std::to_string(spec_.vocab) + ")");
  if (n < 2) return {};
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  std::vector<double> lp(static_cast<std::size_t>(n - 1));
  const std::int64_t k = spec_.order, len = spec_.copy_length;
  const double log_m = std::log(static_cast<double>(spec_.markov_size()));
  for (std::int64_t t = 1; t < std::min(k, n); ++t) lp[t - 1] = x[t] == kCopyMarker ? kNegInf : -log_m;
  // The generator's own parse: a COPY at a decision position is followed by L copied tokens.
  for (std::int64_t t = k; t < n;) {
    const double pt = copy_prob_at(spec_, t);
    if (x[t] == kCopyMarker) {
      lp[t - 1] = pt > 0.0 ? std::log(pt) : kNegInf;
      for (std::int64_t i = 1; i <= len && t + i < n; ++i)
        lp[t + i - 1] = x[t + i] == x[t + i - len - 1] ? 0.0 : kNegInf;
      t += 1 + len;
      continue;
    }
    lp[t - 1] = std::log1p(-pt) + markov_log_prob(x.subspan(static_cast<std::size_t>(t - k), static_cast<std::size_t>(k)), x[t]);
    ++t;
  }
  return lp;
}

std::vector<double> TokenSource::log_probs(const TokenBatch& b) const {
  std::vector<double> lp(static_cast<std::size_t>(b.batch * b.seq_len));
  // Validate every row before the parallel loop: an exception must not leave an OpenMP region.
  for (std::int64_t r = 0; r < b.batch; ++r)
    for (std::int64_t t = 0; t < b.width(); ++t)
      if (b.row(r)[t] < 0 || b.row(r)[t] >= spec_.vocab)
        throw std::invalid_argument("lm: token id " + std::to_string(b.row(r)[t]) + " at row " + std::to_string(r) +
                                    ", position " + std::to_string(t) + " is outside [0, vocab = " +
                                    std::to_string(spec_.vocab) + ")");
#pragma omp parallel for schedule(static) if (b.batch * b.seq_len > (1 << 14))
  for (std::int64_t r = 0; r < b.batch; ++r) {
    const std::vector<double> row =
        log_probs(std::span<const std::int32_t>(b.row(r), static_cast<std::size_t>(b.width())));
    std::copy(row.begin(), row.end(), lp.begin() + r * b.seq_len);
  }
  return lp;
}

TokenBatch make_token_batch(const TokenSourceSpec& spec, std::int64_t batch_index, std::int64_t batch,
                            std::int64_t seq_len) {
  return TokenSource(spec).batch(batch_index, batch, seq_len);
}

}  // namespace fp4d
