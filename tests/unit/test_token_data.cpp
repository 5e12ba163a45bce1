// The lm workload's data layer: the synthetic token source (sim/token_source.hpp) against its
// closed-form entropy rate and loss floor, and user token files (trace/token_file.hpp).
//
// Statistical checks use fixed seeds (each outcome is fixed; the levels say how unlikely a
// failure would be were the code right):
//   Monte-Carlo losses: R independent rows; the estimate is the mean over rows of each row's
//     mean of -ln p(x_t | x_<t) under the source's own conditional (log_probs), its standard
//     error the sample standard deviation of the row means over sqrt(R) (rows are i.i.d.,
//     R >= 128: the CLT with an estimated variance). Tolerance: 5 standard errors, a
//     two-sided normal false-alarm probability of 5.7e-7.
//   Zipf frequencies after one context: N successors, count n_r of rank r; per rank
//     |n_r - N q_r| <= 5 sqrt(N q_r (1 - q_r)) (binomial, normal approximation with N q_r >=
//     100 for every rank checked): a false-alarm probability below 8 x 5.7e-7 for the K = 8
//     ranks together.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/token_source.hpp"
#include "support/catch.hpp"
#include "support/temp_dir.hpp"
#include "trace/h5.hpp"
#include "trace/token_file.hpp"

using namespace fp4d;
namespace fs = std::filesystem;

namespace {

constexpr double kSigmas = 5.0;

struct TempDir : fp4d_test::TempDir {
  TempDir() : fp4d_test::TempDir("fp4d_test_token_data") {}
};

// The message of the std::invalid_argument that f throws ("" and a failed check if none).
std::string invalid_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  INFO("expected std::invalid_argument, none was thrown");
  CHECK(false);
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TokenSourceSpec spec(std::int64_t vocab, int order, double alpha, std::int64_t support, double p, std::int64_t len,
                     std::uint64_t seed = 11) {
  TokenSourceSpec s;
  s.vocab = vocab;
  s.order = order;
  s.zipf_alpha = alpha;
  s.zipf_support = support;
  s.copy_prob = p;
  s.copy_length = len;
  s.seed = seed;
  return s;
}

struct MeanSe {
  double mean = 0.0, se = 0.0;
  std::int64_t rows = 0;
};

// Over rows of batches [0, batches): each row's mean of -ln p over targets t in [from, seq_len]
// (1-based target positions), then the mean and standard error over rows.
MeanSe monte_carlo_loss(const TokenSource& src, std::int64_t batches, std::int64_t batch, std::int64_t seq_len,
                        std::int64_t from) {
  std::vector<double> row_means;
  for (std::int64_t b = 0; b < batches; ++b) {
    const TokenBatch tb = src.batch(b, batch, seq_len);
    const std::vector<double> lp = src.log_probs(tb);
    for (std::int64_t r = 0; r < batch; ++r) {
      double s = 0.0;
      for (std::int64_t t = from; t <= seq_len; ++t) {
        const double v = lp[static_cast<std::size_t>(r * seq_len + t - 1)];
        REQUIRE(std::isfinite(v));  // the source produced it, so it has positive probability
        s -= v;
      }
      row_means.push_back(s / static_cast<double>(seq_len - from + 1));
    }
  }
  MeanSe m;
  m.rows = static_cast<std::int64_t>(row_means.size());
  m.mean = std::accumulate(row_means.begin(), row_means.end(), 0.0) / static_cast<double>(m.rows);
  double ss = 0.0;
  for (const double x : row_means) ss += (x - m.mean) * (x - m.mean);
  m.se = std::sqrt(ss / static_cast<double>(m.rows - 1) / static_cast<double>(m.rows));
  return m;
}

// E[H(x_t | x_<t)] for t = 1..seq_len by walking the source's whole tree of sequences: at
// each prefix, the conditional over all V ids comes from log_probs (prefix + candidate).
void enumerate(const TokenSource& src, std::vector<std::int32_t>& prefix, double prob, std::int64_t seq_len,
               std::vector<double>& expected) {
  const auto t = static_cast<std::int64_t>(prefix.size());
  if (t > seq_len) return;
  double total = 0.0, entropy = 0.0;
  std::vector<std::pair<std::int32_t, double>> next;
  for (std::int32_t id = 0; id < src.spec().vocab; ++id) {
    prefix.push_back(id);
    const double lp = src.log_probs(prefix).back();
    prefix.pop_back();
    if (lp == -INFINITY) continue;
    const double p = std::exp(lp);
    total += p;
    entropy -= p * lp;
    next.emplace_back(id, p);
  }
  INFO("prefix length " << t);
  REQUIRE(std::fabs(total - 1.0) < 1e-12);  // log_probs is a distribution at every prefix
  expected[static_cast<std::size_t>(t - 1)] += prob * entropy;
  for (const auto& [id, p] : next) {
    prefix.push_back(id);
    enumerate(src, prefix, prob * p, seq_len, expected);
    prefix.pop_back();
  }
}

}  // namespace

TEST_CASE("token source: validation names the key", "[lm][tokens]") {
  auto msg = [](TokenSourceSpec s) { return invalid_of([&] { s.validate(); }); };
  const TokenSourceSpec ok = spec(64, 2, 1.0, 16, 0.1, 4);
  REQUIRE_NOTHROW(ok.validate());
  auto with = [&](auto edit) {
    TokenSourceSpec s = ok;
    edit(s);
    return msg(s);
  };
  CHECK(contains(with([](auto& s) { s.vocab = 48; }), "lm: vocab must be a power of two"));
  CHECK(contains(with([](auto& s) { s.vocab = 4; }), "lm: vocab"));
  CHECK(contains(with([](auto& s) { s.vocab = std::int64_t{1} << 32; }), "lm: vocab"));
  CHECK(contains(with([](auto& s) { s.order = 0; }), "lm: order"));
  CHECK(contains(with([](auto& s) { s.order = 65; }), "lm: order"));
  CHECK(contains(with([](auto& s) { s.zipf_alpha = 0.0; }), "lm: zipf_alpha"));
  CHECK(contains(with([](auto& s) { s.zipf_alpha = NAN; }), "lm: zipf_alpha"));
  CHECK(contains(with([](auto& s) { s.zipf_support = 0; }), "lm: zipf_support"));
  CHECK(contains(with([](auto& s) { s.zipf_support = 64; }), "lm: zipf_support"));  // > V - 1 Markov ids
  CHECK(contains(with([](auto& s) { s.copy_prob = 1.0; }), "lm: copy_prob"));
  CHECK(contains(with([](auto& s) { s.copy_prob = -0.1; }), "lm: copy_prob"));
  CHECK(contains(with([](auto& s) { s.copy_length = 0; }), "lm: copy_length"));
  const TokenSource src(ok);
  CHECK(contains(invalid_of([&] { (void)src.batch(-1, 2, 8); }), "lm: batch_index"));
  CHECK(contains(invalid_of([&] { (void)src.batch(0, 0, 8); }), "lm: batch "));
  CHECK(contains(invalid_of([&] { (void)src.batch(0, 2, 0); }), "lm: seq_len"));
  CHECK(contains(invalid_of([&] { (void)loss_floor_per_position(ok, 0); }), "lm: seq_len"));
  CHECK(contains(invalid_of([&] { (void)src.log_probs(std::vector<std::int32_t>{1, 2, 64}); }), "position 2"));
  CHECK(contains(invalid_of([&] { (void)src.markov_token(std::vector<std::int32_t>{1}, 1); }), "lm: order"));
}

TEST_CASE("token source: every context's map is a bijection of the Markov ids", "[lm][tokens]") {
  // Exhaustive over all V^k contexts, COPY (id 0) included: with L < k contexts can hold it.
  for (const auto& [vocab, order] : {std::pair<std::int64_t, int>{16, 2}, {8, 3}, {32, 1}}) {
    const TokenSource src(spec(vocab, order, 1.0, 4, 0.1, 1));
    const std::int64_t m = vocab - 1;
    std::int64_t contexts = 1;
    for (int i = 0; i < order; ++i) contexts *= vocab;
    std::set<std::int32_t> top1;
    for (std::int64_t ci = 0; ci < contexts; ++ci) {
      std::vector<std::int32_t> ctx;
      for (std::int64_t c = ci, i = 0; i < order; ++i, c /= vocab) ctx.push_back(static_cast<std::int32_t>(c % vocab));
      std::vector<std::int32_t> image;
      for (std::int64_t r = 1; r <= m; ++r) {
        const std::int32_t id = src.markov_token(ctx, r);
        image.push_back(id);
        REQUIRE(src.markov_rank(ctx, id) == r);
      }
      std::sort(image.begin(), image.end());
      std::vector<std::int32_t> markov_ids(static_cast<std::size_t>(m));
      std::iota(markov_ids.begin(), markov_ids.end(), 1);
      INFO("vocab " << vocab << " order " << order << " context " << ci);
      REQUIRE(image == markov_ids);
      top1.insert(src.markov_token(ctx, 1));
    }
    // Contexts get their own maps: the most likely successor varies over (nearly) all ids.
    CHECK(static_cast<std::int64_t>(top1.size()) >= m / 2);
  }
}

TEST_CASE("token source: the Zipf entropy and the rate's closed form", "[lm][tokens]") {
  for (const auto& [alpha, k] : {std::pair<double, std::int64_t>{1.0, 64}, {0.7, 1000}, {1.3, 3}, {2.5, 100000}}) {
    long double z = 0, zl = 0;
    for (std::int64_t r = 1; r <= k; ++r) {
      const long double w = std::pow(static_cast<long double>(r), -static_cast<long double>(alpha));
      z += w;
      zl += w * std::log(static_cast<long double>(r));
    }
    const long double direct = std::log(z) + static_cast<long double>(alpha) * zl / z;
    INFO("alpha " << alpha << " K " << k);
    CHECK(std::fabs(zipf_entropy_nats(alpha, k) - static_cast<double>(direct)) < 1e-13 * static_cast<double>(direct));
  }
  CHECK(zipf_entropy_nats(1.0, 1) == 0.0);
  CHECK(std::fabs(zipf_entropy_nats(1e-9, 100) - std::log(100.0)) < 1e-7);  // alpha -> 0: uniform
  CHECK(std::fabs(binary_entropy_nats(0.5) - std::log(2.0)) < 1e-15);
  CHECK(binary_entropy_nats(0.0) == 0.0);

  const TokenSourceSpec markov = spec(64, 2, 1.2, 32, 0.0, 5);
  CHECK(entropy_rate_nats(markov) == zipf_entropy_nats(1.2, 32));
  const TokenSourceSpec mixed = spec(64, 2, 1.2, 32, 0.1, 5);
  const double expect = (binary_entropy_nats(0.1) + 0.9 * zipf_entropy_nats(1.2, 32)) / 1.5;
  CHECK(std::fabs(entropy_rate_nats(mixed) - expect) < 1e-15);
}

TEST_CASE("token source: the loss floor equals an exhaustive enumeration of the source", "[lm][tokens]") {
  // Small enough to walk every sequence: a copy source with k <= L and one with k > L (COPY in
  // contexts), each against loss_floor_per_position to rounding.
  for (const TokenSourceSpec& s : {spec(8, 1, 1.0, 2, 0.3, 2), spec(8, 2, 0.8, 3, 0.4, 1)}) {
    const TokenSource src(s);
    const std::int64_t seq_len = 6;
    std::vector<double> expected(static_cast<std::size_t>(seq_len), 0.0);
    std::vector<std::int32_t> prefix;
    const double p_start = 1.0 / static_cast<double>(s.markov_size());
    for (std::int32_t x0 = 1; x0 < s.vocab; ++x0) {  // x_0 uniform over the Markov ids; not a target
      prefix = {x0};
      enumerate(src, prefix, p_start, seq_len, expected);
    }
    const std::vector<double> floor = loss_floor_per_position(s, seq_len);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      INFO("order " << s.order << " target position " << i + 1);
      CHECK(std::fabs(expected[i] - floor[i]) < 1e-12);
    }
  }
}

TEST_CASE("token source: the loss floor converges to the entropy rate", "[lm][tokens]") {
  for (const TokenSourceSpec& s :
       {spec(64, 2, 1.2, 32, 0.1, 6), spec(256, 1, 0.8, 200, 0.25, 3), spec(32, 3, 1.5, 16, 0.2, 2)}) {
    const double rate = entropy_rate_nats(s);
    const std::vector<double> floor = loss_floor_per_position(s, 20000);
    CHECK(std::fabs(floor.back() - rate) < 1e-12);
    // The boundary's excess shrinks like 1 / S.
    const double d256 = std::fabs(loss_floor_nats(s, 256) - rate), d4096 = std::fabs(loss_floor_nats(s, 4096) - rate);
    CHECK(d4096 < d256 / 8.0);
  }
}

TEST_CASE("token source: Monte-Carlo loss of generated batches equals the exact floor", "[lm][tokens]") {
  // Finite sequences, boundary included: the estimate of mean_t H(x_t | x_<t) over targets
  // 1..S against loss_floor_nats(S), within 5 standard errors (file comment).
  for (const TokenSourceSpec& s :
       {spec(64, 2, 1.2, 32, 0.1, 6), spec(256, 1, 0.8, 200, 0.25, 3), spec(32, 3, 1.5, 16, 0.2, 2)}) {
    const TokenSource src(s);
    const std::int64_t seq_len = 128;
    const MeanSe mc = monte_carlo_loss(src, 4, 256, seq_len, 1);
    const double exact = loss_floor_nats(s, seq_len);
    INFO("order " << s.order << ": MC " << mc.mean << " +- " << mc.se << ", exact " << exact);
    CHECK(std::fabs(mc.mean - exact) <= kSigmas * mc.se);
    CHECK(mc.se < 0.01 * exact);  // the check has power
  }
}

TEST_CASE("token source: Monte-Carlo loss per position equals the exact floor per position", "[lm][tokens]") {
  // The boundary positions one by one (the start tokens, the first possible copy at t = L, the
  // renewal's transient), so that the generator and the floor cannot disagree about one
  // position unnoticed in a mean. 4096 rows; per position 5 standard errors over the rows, for
  // 24 positions together a false-alarm probability below 24 x 5.7e-7.
  for (const TokenSourceSpec& s : {spec(32, 2, 1.0, 12, 0.3, 5), spec(32, 3, 1.5, 16, 0.2, 2)}) {
    const TokenSource src(s);
    const std::int64_t seq_len = 24, batch = 1024, batches = 4;
    std::vector<double> sum(static_cast<std::size_t>(seq_len), 0.0), sum2 = sum;
    for (std::int64_t b = 0; b < batches; ++b) {
      const std::vector<double> lp = src.log_probs(src.batch(b, batch, seq_len));
      for (std::size_t i = 0; i < lp.size(); ++i) {
        const auto t = i % static_cast<std::size_t>(seq_len);
        sum[t] -= lp[i];
        sum2[t] += lp[i] * lp[i];
      }
    }
    const std::vector<double> floor = loss_floor_per_position(s, seq_len);
    const double rows = static_cast<double>(batch * batches);
    for (std::size_t t = 0; t < floor.size(); ++t) {
      const double mean = sum[t] / rows;
      const double se = std::sqrt(std::max(0.0, sum2[t] / rows - mean * mean) / (rows - 1.0));
      INFO("order " << s.order << " target " << t + 1 << ": MC " << mean << " +- " << se << ", exact " << floor[t]);
      CHECK(std::fabs(mean - floor[t]) <= kSigmas * se + 1e-12);
    }
  }
}

TEST_CASE("token source: Monte-Carlo entropy rate of long streams", "[lm][tokens]") {
  // Targets from t0 = 2048 on, where u_t has converged: the exact expectation of that window
  // (from the floor) equals the rate to 1e-9, and the plug-in estimate from the source's own
  // conditional must match the rate within 5 standard errors (file comment).
  for (const TokenSourceSpec& s : {spec(64, 2, 1.2, 32, 0.1, 6), spec(128, 1, 0.9, 100, 0.3, 12)}) {
    const TokenSource src(s);
    const std::int64_t seq_len = 8192, t0 = 2048;
    const double rate = entropy_rate_nats(s);
    const std::vector<double> floor = loss_floor_per_position(s, seq_len);
    const double window = std::accumulate(floor.begin() + (t0 - 1), floor.end(), 0.0) /
                          static_cast<double>(seq_len - t0 + 1);
    REQUIRE(std::fabs(window - rate) < 1e-9);
    const MeanSe mc = monte_carlo_loss(src, 2, 64, seq_len, t0);
    INFO("copy_length " << s.copy_length << ": MC " << mc.mean << " +- " << mc.se << ", rate " << rate);
    CHECK(std::fabs(mc.mean - rate) <= kSigmas * mc.se);
    CHECK(mc.se < 0.005 * rate);
  }
}

TEST_CASE("token source: successors of one context follow Zipf over its top K", "[lm][tokens]") {
  // k = 1, V = 16: every context is frequent. Markov steps only (decision positions whose
  // token is not COPY), parsed as the generator does; copies in the stream must not bias them.
  const TokenSourceSpec s = spec(16, 1, 1.1, 8, 0.15, 4, 23);
  const TokenSource src(s);
  const std::vector<std::int32_t> ctx{5};
  std::vector<std::int64_t> count(static_cast<std::size_t>(s.vocab), 0);
  std::int64_t n = 0;
  for (std::int64_t b = 0; b < 4; ++b) {
    const TokenBatch tb = src.batch(b, 128, 512);
    for (std::int64_t r = 0; r < tb.batch; ++r) {
      const std::int32_t* x = tb.row(r);
      for (std::int64_t t = s.order; t < tb.width();) {
        if (x[t] == kCopyMarker) {
          t += 1 + s.copy_length;
          continue;
        }
        if (x[t - 1] == ctx[0]) {
          ++count[static_cast<std::size_t>(x[t])];
          ++n;
        }
        ++t;
      }
    }
  }
  double z = 0.0;
  for (std::int64_t r = 1; r <= s.zipf_support; ++r) z += std::pow(static_cast<double>(r), -s.zipf_alpha);
  std::int64_t in_support = 0;
  for (std::int64_t r = 1; r <= s.zipf_support; ++r) {
    const double q = std::pow(static_cast<double>(r), -s.zipf_alpha) / z;
    const auto nr = count[static_cast<std::size_t>(src.markov_token(ctx, r))];
    in_support += nr;
    const double mean = static_cast<double>(n) * q, sd = std::sqrt(mean * (1.0 - q));
    INFO("rank " << r << ": " << nr << " of " << n << ", expected " << mean << " +- " << sd);
    REQUIRE(mean >= 100.0);
    CHECK(std::fabs(static_cast<double>(nr) - mean) <= kSigmas * sd);
    CHECK(std::fabs(std::log(q) - src.markov_log_prob(ctx, src.markov_token(ctx, r))) < 1e-14);
  }
  CHECK(in_support == n);  // nothing outside the top K, no COPY
  CHECK(count[0] == 0);
  CHECK(src.markov_log_prob(ctx, src.markov_token(ctx, s.zipf_support + 1)) == -INFINITY);
}

TEST_CASE("token source: batches are pure functions of (seed, batch index, row)", "[lm][tokens]") {
  const TokenSourceSpec s = spec(128, 2, 1.0, 40, 0.1, 5);
  const TokenSource src(s);
  std::vector<TokenBatch> forward, backward(6);
  for (std::int64_t b = 0; b < 6; ++b) forward.push_back(src.batch(b, 8, 100));
  for (std::int64_t b = 5; b >= 0; --b) backward[static_cast<std::size_t>(b)] = src.batch(b, 8, 100);
  for (std::size_t b = 0; b < 6; ++b) CHECK(forward[b].ids == backward[b].ids);
  CHECK(make_token_batch(s, 3, 8, 100).ids == forward[3].ids);

  // A row does not depend on the batch size, and a shorter sequence is a prefix of a longer one.
  const TokenBatch narrow = src.batch(3, 3, 100), longer = src.batch(3, 8, 300);
  for (std::int64_t r = 0; r < 3; ++r)
    CHECK(std::equal(narrow.row(r), narrow.row(r) + narrow.width(), forward[3].row(r)));
  for (std::int64_t r = 0; r < 8; ++r)
    CHECK(std::equal(forward[3].row(r), forward[3].row(r) + forward[3].width(), longer.row(r)));

  auto agreement = [](const TokenBatch& a, const TokenBatch& b) {
    std::int64_t same = 0;
    for (std::size_t i = 0; i < a.ids.size(); ++i) same += a.ids[i] == b.ids[i];
    return static_cast<double>(same) / static_cast<double>(a.ids.size());
  };
  TokenSourceSpec other = s;
  other.seed = s.seed + 1;
  CHECK(agreement(make_token_batch(other, 3, 8, 100), forward[3]) < 0.1);
  CHECK(agreement(forward[2], forward[3]) < 0.1);
  // Rows of one batch differ from each other.
  CHECK(!std::equal(forward[0].row(0), forward[0].row(0) + forward[0].width(), forward[0].row(1)));
}

TEST_CASE("token source: copies copy, ids stay in range, COPY only at decision positions", "[lm][tokens]") {
  for (const TokenSourceSpec& s : {spec(32, 2, 1.0, 12, 0.3, 5), spec(32, 3, 1.0, 12, 0.3, 2)}) {
    const TokenSource src(s);
    const TokenBatch tb = src.batch(7, 64, 300);
    std::int64_t copies = 0, markov = 0;
    for (std::int64_t r = 0; r < tb.batch; ++r) {
      const std::int32_t* x = tb.row(r);
      for (std::int64_t t = 0; t < tb.width(); ++t) REQUIRE((x[t] >= 0 && x[t] < s.vocab));
      for (std::int64_t t = 0; t < s.order; ++t) REQUIRE(x[t] != kCopyMarker);  // start tokens are Markov ids
      for (std::int64_t t = s.order; t < tb.width();) {
        if (x[t] == kCopyMarker) {
          REQUIRE(t >= s.copy_length);  // enough tokens to copy
          for (std::int64_t i = 1; i <= s.copy_length && t + i < tb.width(); ++i) {
            REQUIRE(x[t + i] == x[t + i - s.copy_length - 1]);
            REQUIRE(x[t + i] != kCopyMarker);
          }
          ++copies;
          t += 1 + s.copy_length;
        } else {
          const std::span<const std::int32_t> ctx(x + t - s.order, static_cast<std::size_t>(s.order));
          REQUIRE(src.markov_rank(ctx, x[t]) <= s.zipf_support);
          ++markov;
          ++t;
        }
      }
    }
    // A decision is a copy with probability p = 0.3 (after the first L tokens).
    const double frac = static_cast<double>(copies) / static_cast<double>(copies + markov);
    const double sd = std::sqrt(0.3 * 0.7 / static_cast<double>(copies + markov));
    CHECK(std::fabs(frac - 0.3) < kSigmas * sd + 0.01);  // + the first L positions, which cannot copy

    // The oracle: finite on the source's own rows; a broken copy or a token outside the top K
    // has probability 0.
    std::vector<std::int32_t> row(tb.row(0), tb.row(0) + tb.width());
    for (const double v : src.log_probs(row)) REQUIRE(std::isfinite(v));
    const auto marker = std::find(row.begin() + s.order, row.end() - s.copy_length - 1, kCopyMarker);
    REQUIRE(marker != row.end() - s.copy_length - 1);
    const auto pos = marker - row.begin() + 1;  // first copied token
    row[static_cast<std::size_t>(pos)] = row[static_cast<std::size_t>(pos)] == 1 ? 2 : 1;
    CHECK(src.log_probs(row)[static_cast<std::size_t>(pos - 1)] == -INFINITY);
  }
  // copy_prob 0: a pure Markov stream, no COPY at all.
  const TokenBatch plain = make_token_batch(spec(32, 1, 1.0, 12, 0.0, 3), 0, 16, 200);
  CHECK(std::count(plain.ids.begin(), plain.ids.end(), kCopyMarker) == 0);
}

TEST_CASE("token file: uint16 and uint32 round trips", "[lm][tokens][h5]") {
  TempDir tmp;
  const std::string path = tmp.file("tokens.h5");
  std::vector<std::int32_t> small(5000), large(3000);
  for (std::size_t i = 0; i < small.size(); ++i) small[i] = static_cast<std::int32_t>((i * 7919) % 65536);
  for (std::size_t i = 0; i < large.size(); ++i) large[i] = static_cast<std::int32_t>(65536 + (i * 104729) % 1000000);
  write_token_file(path, "/train", small, 16);
  write_token_file(path, "/val", large, 32);  // beside /train in the same file

  const TensorSource train = parse_token_source(path);
  CHECK(train.dataset == "/train");
  const TokenData a = read_token_file(train, 65536);
  CHECK(a.bits == 16);
  CHECK(a.source == path + ":/train");
  CHECK(std::equal(a.ids.begin(), a.ids.end(), small.begin(), small.end(),
                   [](std::uint32_t u, std::int32_t v) { return u == static_cast<std::uint32_t>(v); }));
  const TokenData b = read_token_file(parse_token_source(path + ":/val"), 1 << 21);
  CHECK(b.bits == 32);
  CHECK(std::equal(b.ids.begin(), b.ids.end(), large.begin(), large.end(),
                   [](std::uint32_t u, std::int32_t v) { return u == static_cast<std::uint32_t>(v); }));
  {
    h5::File f = h5::File::open_read(path);
    CHECK(f.root().info("/train").type_name == "uint16");
    CHECK(f.root().info("/val").type_name == "uint32");
  }
  // A synthetic batch written and read back is the same batch.
  const TokenBatch syn = make_token_batch(spec(256, 2, 1.0, 64, 0.1, 4), 0, 1, 999);
  write_token_file(path, "/synthetic", syn.ids, 16);
  const TokenData c = read_token_file(TensorSource{path, "/synthetic"}, 256);
  const TokenBatch again = make_file_batch(c, 0, 1, 999, 1);  // the only window: offset 0
  CHECK(again.ids == syn.ids);
}

TEST_CASE("token file: refusals name the file, dataset and problem", "[lm][tokens][h5]") {
  TempDir tmp;
  const std::string path = tmp.file("bad.h5");
  {
    h5::File f = h5::File::create(path);
    h5::Group g = f.root();
    g.write("i32", std::vector<std::int32_t>{1, 2, 3});
    g.write("u8", std::vector<std::uint8_t>{1, 2, 3});
    g.write("u64", std::vector<std::uint64_t>{1, 2, 3});
    g.write("f32", std::vector<float>{1, 2, 3});
    g.write("two_d", std::vector<std::uint16_t>{1, 2, 3, 4, 5, 6}, h5::Dims{2, 3});
    g.write("empty", std::vector<std::uint16_t>{}, h5::Dims{0});
  }
  auto read_msg = [&](const std::string& ds, std::int64_t vocab = 1000) {
    return invalid_of([&] { (void)read_token_file(TensorSource{path, ds}, vocab); });
  };
  for (const auto& [ds, type] : {std::pair<std::string, std::string>{"/i32", "int32"}, {"/u8", "uint8"},
                                 {"/u64", "uint64"}, {"/f32", "float32"}}) {
    const std::string m = read_msg(ds);
    INFO(m);
    CHECK(contains(m, "token file '" + path + ":" + ds + "' is " + type + ", expected uint16 or uint32"));
  }
  CHECK(contains(read_msg("/two_d"), "'" + path + ":/two_d' has rank 2, expected a 1-D array"));
  CHECK(contains(read_msg("/empty"), "is empty"));
  CHECK(contains(read_msg("/train"), "dataset '/train' not found in '" + path + "'"));
  CHECK(contains(read_msg("/u8", 0), "lm: vocab"));

  std::vector<std::int32_t> ids(20000, 3);
  ids[12345] = 70000;
  ids[15000] = 80000;
  write_token_file(path, "/big", ids, 32);
  const std::string m = read_msg("/big", 65536);
  INFO(m);
  CHECK(contains(m, "'" + path + ":/big': id 70000 at position 12345 is >= vocab 65536"));

  write_token_file(path, "/short", std::vector<std::int32_t>(10, 1), 16);
  const TokenData shrt = read_token_file(TensorSource{path, "/short"}, 2);
  CHECK(contains(invalid_of([&] { (void)make_file_batch(shrt, 0, 2, 10, 1); }),
                 "token file '" + path + ":/short' has 10 tokens, fewer than seq_len + 1 = 11"));
  CHECK_NOTHROW(make_file_batch(shrt, 0, 2, 9, 1));

  CHECK(contains(invalid_of([&] { write_token_file(path, "/x", {1, 2}, 8); }), "bits must be 16 or 32"));
  CHECK(contains(invalid_of([&] { write_token_file(path, "/x", {1, 65536}, 16); }),
                 "id 65536 at position 1 does not fit uint16"));
  CHECK(contains(invalid_of([&] { write_token_file(path, "/x", {-1}, 32); }), "at position 0"));
  CHECK(contains(invalid_of([&] { (void)parse_token_source(""); }), "empty"));
}

TEST_CASE("token file: windows are pure functions of (seed, batch index, row)", "[lm][tokens][h5]") {
  TempDir tmp;
  const std::string path = tmp.file("ramp.h5");
  const std::int64_t size = 5000, seq_len = 63;
  std::vector<std::int32_t> ramp(static_cast<std::size_t>(size));
  std::iota(ramp.begin(), ramp.end(), 0);  // a row's first id is its offset
  write_token_file(path, "/train", ramp, 16);
  const TokenData data = read_token_file(parse_token_source(path), 8192);

  std::vector<TokenBatch> fwd, bwd(5);
  for (std::int64_t b = 0; b < 5; ++b) fwd.push_back(make_file_batch(data, b, 16, seq_len, 9));
  for (std::int64_t b = 4; b >= 0; --b) bwd[static_cast<std::size_t>(b)] = make_file_batch(data, b, 16, seq_len, 9);
  std::int64_t lo = size, hi = -1;
  for (std::size_t b = 0; b < 5; ++b) {
    CHECK(fwd[b].ids == bwd[b].ids);
    for (std::int64_t r = 0; r < 16; ++r) {
      const std::int32_t* x = fwd[b].row(r);
      for (std::int64_t t = 0; t <= seq_len; ++t) REQUIRE(x[t] == x[0] + t);  // a contiguous window
      lo = std::min<std::int64_t>(lo, x[0]);
      hi = std::max<std::int64_t>(hi, x[0]);
    }
  }
  CHECK(lo >= 0);
  CHECK(hi <= size - seq_len - 1);
  CHECK(hi - lo > size / 2);  // 80 offsets spread over the file
  // Rows do not depend on the batch size; other seeds and batches give other offsets.
  const TokenBatch few = make_file_batch(data, 2, 4, seq_len, 9);
  CHECK(std::equal(few.ids.begin(), few.ids.end(), fwd[2].ids.begin()));
  CHECK(make_file_batch(data, 2, 16, seq_len, 10).ids != fwd[2].ids);
  CHECK(fwd[1].ids != fwd[2].ids);

  // Both extreme offsets are drawn when there are only two.
  const TokenBatch two = make_file_batch(data, 0, 64, size - 2, 3);
  std::set<std::int32_t> firsts;
  for (std::int64_t r = 0; r < two.batch; ++r) firsts.insert(two.row(r)[0]);
  CHECK(firsts == std::set<std::int32_t>{0, 1});
}
