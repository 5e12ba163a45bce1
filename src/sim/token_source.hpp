// The synthetic token source of the `lm` workload: a Zipfian k-th order Markov stream mixed
// with copy segments, whose entropy rate - the loss no model can beat - is known exactly.
// Every sequence is a pure function of (seed, batch index, row): there is no data state, so a
// run resumes bit-exactly and a batch is the same whichever thread or order makes it.
//
// Vocabulary (V = vocab, a power of two, 8 <= V <= 2^31)
//   id 0            COPY (kCopyMarker), the only reserved id
//   ids 1 .. V-1    the Markov alphabet, M = V - 1 symbols
//
// The stream: one sequence x_0 .. x_{n-1}, n = seq_len + 1
//   start    x_0 .. x_{k-1} i.i.d. uniform over the Markov alphabet (k = order): a start
//            without a BOS id keeps every position a prediction of real content.
//   then at each *decision position* t (the first is t = k), with p_t = p if t >= L else 0
//   (p = copy_prob, L = copy_length; a copy needs L tokens before its marker):
//     copy   with probability p_t: x_t = COPY and x_{t+i} = x_{t+i-L-1} for i = 1..L - the
//            L tokens before the marker, repeated (cut off at the end of the sequence); the
//            next decision position is t + 1 + L.
//     markov otherwise: x_t = phi_c(R) with R ~ Zipf_K(alpha) and c = (x_{t-k}, .., x_{t-1})
//            the previous k tokens, whatever they are (with L >= k, after a copy they are
//            the k tokens before its marker, so the chain resumes where it was; with L < k
//            c may hold COPY, which the context hash takes like any id); next decision t + 1.
//   Zipf_K(alpha): P(R = r) = r^-alpha / Z_K for r = 1..K, Z_K = sum_{r=1}^K r^-alpha.
//   The draws of different (seed, batch_index, row, t) are independent (Philox, below).
//
// The context map phi_c: a bijection of the Markov alphabet chosen by a hash of the context,
// so each context has its own K likely successors but every context the same law of ranks.
//   (a, b, d) = Philox words of (map key, c) with a odd; arithmetic mod V = 2^m:
//   pi_c(x)    = a (x xor b) + d mod V        a bijection of Z_V (odd a is a unit mod 2^m,
//                                             xor b and + d are bijections)
//   sigma_c(x) = pi_c^j(x) for the first j >= 1 with pi_c^j(x) < M   (cycle walking)
//   phi_c(r)   = 1 + sigma_c(r - 1)           for ranks r = 1..M
// Cycle walking (Black & Rogaway, "Ciphers with Arbitrary Finite Domains", CT-RSA 2002)
// restricts a permutation of Z_V to one of [0, M): the cycle of x under pi_c returns to x, so
// the walk ends, and the same walk under pi_c^-1 inverts it. One value of Z_V lies outside
// [0, M), so a walk takes at most two steps. phi_c is therefore a bijection of {1..M} onto the
// Markov ids for every context; ranks 1..K map to K distinct ids.
//
// Entropy rate, in nats per token
//   Whether t is a decision position is a function of x_<t: the parse that starts at k and
//   skips 1 + L after each COPY is the generator's own, COPY is never a Markov token, and no
//   copied span holds a COPY (one among the L tokens before a marker at t would have made t a
//   copy position). At a decision position, given the past, x_t = COPY with probability p_t,
//   else phi_c(r) with probability (1 - p_t) r^-alpha / Z_K; these outcomes are distinct ids,
//   and phi_c is a bijection, so for every past that makes t a decision position
//     H(x_t | x_<t = past) = h(p_t) + (1 - p_t) H_K,     h(p) = -p ln p - (1-p) ln(1-p),
//     H_K = H(Zipf_K(alpha)) = ln Z_K + (alpha / Z_K) sum_{r=1}^K r^-alpha ln r,
//   the same for every context, whatever the distribution of contexts; at a copy position it
//   is 0. Averaged over pasts: H(x_t | x_<t) = u_t (h(p_t) + (1 - p_t) H_K), u_t = P(t is a
//   decision position).
//   Decision positions are a renewal process (Feller, An Introduction to Probability Theory
//   and Its Applications, vol. I, 3rd ed., ch. XIII): gaps of 1 with probability 1 - p and of
//   1 + L with probability p (fresh draws, independent of the past), mean mu = 1 + p L,
//   aperiodic since a gap of 1 has probability 1 - p > 0, so u_t -> 1 / mu (the renewal
//   theorem for aperiodic recurrent events, Feller XIII.3). In a stationary stream (any
//   stationary law of the contexts) u_t = 1 / mu for every t, so H(x_t | x_<t) is constant and
//   the entropy rate lim (1/n) H(x_1..x_n) = lim H(x_n | x_<n) (Cover & Thomas, Elements of
//   Information Theory, 2nd ed., Theorem 4.2.1) is
//     entropy_rate = (h(p) + (1 - p) H_K) / (1 + p L)                  [entropy_rate_nats]
//   With p = 0 this is H_K: a Markov chain's rate is sum_i mu_i H(P_i.) (Cover & Thomas,
//   Theorem 4.2.4), and here every row has entropy H_K.
//   The rate is a limit; one sequence's boundary (its uniform start, no copy before t = L)
//   changes the mean of a finite sequence, which the loss floor below accounts for exactly
//   (and which tends to the rate as S grows: a Cesaro mean of u_t -> 1 / mu).
//
// Loss floor of finite sequences: the expected cross-entropy of the Bayes-optimal predictor
//   At target position t (1 <= t <= S = seq_len) no predictor q has an expected log loss
//   below H(x_t | x_<t) (it is H + E KL(p || q)), and the source's own conditional attains
//   it. Exactly:
//     t < k:    ln M                             (a start token, independent of the past)
//     t >= k:   u_t (h(p_t) + (1 - p_t) H_K)
//   with u_t the renewal sequence of this boundary: u_t = 0 for t < k, u_k = 1, and for t > k
//     u_t = (1 - p_{t-1}) u_{t-1} + p_{t-1-L} u_{t-1-L}      (the second term when t-1-L >= k)
//   (t is a decision position iff the previous one was t - 1 with a Markov step or t - 1 - L
//   with a copy; disjoint events, and each step's choice is a fresh draw).
//   [loss_floor_per_position; loss_floor_nats is its mean over t = 1..S, as a training loss
//   averages over the targets.] These are expectations; TokenSource::log_probs gives the
//   Bayes-optimal loss of one given sequence (the oracle's loss on the batch at hand).
//
// Sampling accuracy: the rank is drawn by inverse CDF from a 53-bit uniform against tail sums
// in double, the copy choice as u < p with such a uniform, a start token as floor(w M / 2^64)
// of a 64-bit word w: each law is realised to within about 1e-15 per outcome (start tokens:
// relative M / 2^64), far below any Monte-Carlo resolution.
//
// Random bits (format/philox.hpp): two keys derived from the seed, the map key (the
// language: which tokens follow which context) and the stream key (the samples). Position t
// of row `row` of batch `batch_index` uses the block at counter (t, row, batch_index lo, hi)
// under the stream key: words 0-1 give the copy uniform (or a start token), words 2-3 the rank
// uniform. A sequence is therefore a prefix of a longer one of the same row, rows do not
// depend on the batch size, and a held-out set is any range of batch indexes that training
// does not use.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "trace/token_batch.hpp"

namespace fp4d {

inline constexpr std::int32_t kCopyMarker = 0;

struct TokenSourceSpec {
  std::int64_t vocab = 256;         // V, a power of two in [8, 2^31], COPY included
  int order = 2;                    // k in [1, 64]: the Markov context is the previous k tokens
  double zipf_alpha = 1.0;          // alpha > 0
  std::int64_t zipf_support = 64;   // K in [1, min(V - 1, 2^24)]: ranks with non-zero probability
  double copy_prob = 0.05;          // p in [0, 1): a decision position starts a copy
  std::int64_t copy_length = 8;     // L in [1, 2^30]: tokens a copy repeats
  std::uint64_t seed = 1;           // the language (context maps) and the samples

  // std::invalid_argument "lm: <key> <why>" for the first out-of-range key.
  void validate() const;
  std::int64_t markov_size() const noexcept { return vocab - 1; }  // M
};

// H(Zipf_K(alpha)) in nats, both sums compensated (Neumaier) and taken from r = K down, the
// small terms first.
double zipf_entropy_nats(double alpha, std::int64_t support);
// h(p) = -p ln p - (1 - p) ln(1 - p), h(0) = 0.
double binary_entropy_nats(double p);
// (h(p) + (1 - p) H_K) / (1 + p L): the stationary stream's entropy rate (validates).
double entropy_rate_nats(const TokenSourceSpec& spec);
// H(x_t | x_<t) for targets t = 1..seq_len (entry t - 1), and their mean.
std::vector<double> loss_floor_per_position(const TokenSourceSpec& spec, std::int64_t seq_len);
double loss_floor_nats(const TokenSourceSpec& spec, std::int64_t seq_len);

// The source with its Zipf table (O(K) to build): build once, draw many batches.
class TokenSource {
 public:
  explicit TokenSource(const TokenSourceSpec& spec);  // validates
  const TokenSourceSpec& spec() const noexcept { return spec_; }

  // batch x (seq_len + 1) ids: row r is the sequence of (seed, batch_index, r). Rows are made
  // in parallel (OpenMP); the result does not depend on the thread count.
  // std::invalid_argument for batch_index < 0, batch outside [1, 2^32], seq_len outside
  // [1, 2^32 - 2], or more than 2^40 ids.
  TokenBatch batch(std::int64_t batch_index, std::int64_t batch, std::int64_t seq_len) const;

  // phi_c(rank) for rank in 1..M, and its inverse for a Markov id (1..V-1); context holds
  // spec().order ids in [0, V). std::invalid_argument otherwise.
  std::int32_t markov_token(std::span<const std::int32_t> context, std::int64_t rank) const;
  std::int64_t markov_rank(std::span<const std::int32_t> context, std::int32_t token) const;
  // ln P(x_t = token | context) at a Markov step: ln(r^-alpha / Z_K) for the token's rank r
  // <= K, -inf for other Markov ids and COPY.
  double markov_log_prob(std::span<const std::int32_t> context, std::int32_t token) const;

  // ln P(x_t | x_<t) of the source for t = 1 .. n-1 of one sequence (n - 1 values; any ids in
  // [0, V), -inf where the source cannot produce the token), and for a batch (batch x seq_len,
  // row-major). -mean is the Bayes-optimal loss on those sequences.
  std::vector<double> log_probs(std::span<const std::int32_t> seq) const;
  std::vector<double> log_probs(const TokenBatch& b) const;

 private:
  struct Map {
    std::uint32_t a, a_inv, b, d;
  };
  Map map_of(std::span<const std::int32_t> context) const;
  std::int64_t zipf_rank(double u) const;
  void fill_row(std::int64_t batch_index, std::uint32_t row, std::int32_t* out, std::int64_t n) const;

  TokenSourceSpec spec_;
  std::uint32_t mask_ = 0;                 // V - 1
  std::uint32_t map_key_[2]{}, stream_key_[2]{};
  std::vector<double> tail_;               // tail_[r - 1] = sum_{j >= r} j^-alpha / Z_K, tail_[0] = 1
  double log_z_ = 0.0;                     // ln Z_K
};

// TokenSource(spec).batch(batch_index, batch, seq_len).
TokenBatch make_token_batch(const TokenSourceSpec& spec, std::int64_t batch_index, std::int64_t batch,
                            std::int64_t seq_len);

}  // namespace fp4d
