// The Mamba-2 mixer (sim/lm_mamba.hpp): the chunked and the plain scan against an independent
// naive evaluation of the recurrence's closed form in binary128, within bounds derived from
// the unit roundoff; chunked against plain; the mixer's backward against central finite
// differences in double; the gain and dt_bias gradients in model/sum_order.hpp's orders (the
// GPU's); BF16 operands only for float; shape refusals.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/lm_mamba.hpp"
#include "sim/mlp_precision.hpp"
#include "support/catch.hpp"
#include "util/parallel_worth.hpp"

using namespace fp4d;

namespace {

using Q = mlp_binary128;

struct ScanInputs {
  std::vector<double> x, dt, A, B, C, D;
};

// dt in [0.001, 0.3], A in [-16, -1] (Mamba-2's ranges: the decays exp(dt A) span 0.008 .. 1),
// x, B, C standard normal, D in [0.5, 1.5].
ScanInputs random_scan_inputs(const MambaShape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  ScanInputs in;
  const std::int64_t R = s.rows(), GN = s.groups * s.state;
  for (std::int64_t i = 0; i < R * s.d_inner(); ++i) in.x.push_back(static_cast<float>(nd(rng)));
  for (std::int64_t i = 0; i < R * s.heads; ++i) in.dt.push_back(static_cast<float>(0.001 + 0.299 * ud(rng)));
  for (std::int64_t h = 0; h < s.heads; ++h) {
    in.A.push_back(static_cast<float>(-1.0 - 15.0 * ud(rng)));
    in.D.push_back(static_cast<float>(0.5 + ud(rng)));
  }
  for (std::int64_t i = 0; i < R * GN; ++i) {
    in.B.push_back(static_cast<float>(nd(rng)));
    in.C.push_back(static_cast<float>(nd(rng)));
  }
  return in;  // float32 values, so that the float and double scans see the same inputs
}

// The closed form y_t = sum_(u <= t) (C_t . B_u) (prod_(tau = u+1 .. t) a_tau) dt_u x_u + D x_t,
// a_tau = exp(dt_tau A), in binary128, and beside it the sum of the terms' magnitudes (the
// scale of every rounding bound).
struct Exact {
  std::vector<double> y, mag;
};
Exact naive_scan(const MambaShape& s, const ScanInputs& in) {
  const std::int64_t S = s.seq, H = s.heads, P = s.head_dim, N = s.state, DI = s.d_inner(), GN = s.groups * N;
  Exact e;
  e.y.assign(static_cast<std::size_t>(s.rows() * DI), 0.0);
  e.mag = e.y;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / (H / s.groups);
      std::vector<Q> a(static_cast<std::size_t>(S));
      for (std::int64_t t = 0; t < S; ++t) a[static_cast<std::size_t>(t)] = exp(Q(in.dt[static_cast<std::size_t>((b * S + t) * H + h)]) * Q(in.A[static_cast<std::size_t>(h)]));
      for (std::int64_t t = 0; t < S; ++t)
        for (std::int64_t p = 0; p < P; ++p) {
          const std::size_t yi = static_cast<std::size_t>((b * S + t) * DI + h * P + p);
          Q acc = Q(in.D[static_cast<std::size_t>(h)]) * Q(in.x[yi]);
          Q mag = abs(acc);
          for (std::int64_t u = 0; u <= t; ++u) {
            Q cb = 0, cbabs = 0;
            for (std::int64_t n = 0; n < N; ++n) {
              const Q term = Q(in.C[static_cast<std::size_t>((b * S + t) * GN + g * N + n)]) *
                             Q(in.B[static_cast<std::size_t>((b * S + u) * GN + g * N + n)]);
              cb += term;
              cbabs += abs(term);
            }
            Q w = 1;
            for (std::int64_t tau = u + 1; tau <= t; ++tau) w *= a[static_cast<std::size_t>(tau)];
            const Q f = w * Q(in.dt[static_cast<std::size_t>((b * S + u) * H + h)]) *
                        Q(in.x[static_cast<std::size_t>((b * S + u) * DI + h * P + p)]);
            acc += cb * f;
            mag += cbabs * abs(f);
          }
          e.y[yi] = static_cast<double>(acc);
          e.mag[yi] = static_cast<double>(mag);
        }
    }
  return e;
}

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Largest ratio |y - exact| / bound over the outputs. The bound, first order in the unit
// roundoff u of T: every path from a product to y_t passes through at most k = N + 2 S + 16
// roundings (the C . B dot, the sums over positions within and across chunks, the products
// with dt, x and the decays, the skip term), and each decay carries the error of its exponent:
// the running sums of dt A (at most S terms, magnitude at most Lambda = max over heads of
// sum_t |dt_t A|) and the exp itself, a relative error of at most 2 (S + 1) u Lambda + 2 u.
// So |y - exact| <= (k + 2 (S + 1) Lambda + 2) u * sum of |terms|, with a factor 1.01 for the
// second-order terms.
template <class T>
double worst_ratio(const MambaShape& s, const ScanInputs& in, const Exact& e, const std::vector<T>& y) {
  const double u = std::ldexp(1.0, -std::numeric_limits<T>::digits);
  double lambda = 0;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      double sum = 0;
      for (std::int64_t t = 0; t < s.seq; ++t)
        sum += std::fabs(in.dt[static_cast<std::size_t>((b * s.seq + t) * s.heads + h)] * in.A[static_cast<std::size_t>(h)]);
      lambda = std::max(lambda, sum);
    }
  const double k = static_cast<double>(s.state + 2 * s.seq + 16) + 2.0 * static_cast<double>(s.seq + 1) * lambda + 2.0;
  double worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double bound = 1.01 * k * u * e.mag[i];
    worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - e.y[i]) / bound);
  }
  return worst;
}

template <class T>
std::vector<T> scan(const MambaShape& s, const ScanInputs& in, bool chunked) {
  const auto x = as<T>(in.x), dt = as<T>(in.dt), A = as<T>(in.A), B = as<T>(in.B), C = as<T>(in.C), D = as<T>(in.D);
  std::vector<T> y(x.size());
  if (chunked) ssd_scan_chunked(s, x.data(), dt.data(), A.data(), B.data(), C.data(), D.data(), y.data());
  else ssd_scan_sequential(s, x.data(), dt.data(), A.data(), B.data(), C.data(), D.data(), y.data());
  return y;
}

MambaShape test_shape() {
  MambaShape s;
  s.batch = 2, s.seq = 24, s.heads = 4, s.head_dim = 3, s.state = 5, s.groups = 2, s.conv_width = 4, s.chunk = 8;
  return s;
}

}  // namespace

TEST_CASE("the chunked and the plain scan match the recurrence's closed form within the rounding bound") {
  MambaShape s = test_shape();
  const ScanInputs in = random_scan_inputs(s, 7);
  const Exact e = naive_scan(s, in);
  INFO("plain recurrence");
  CHECK(worst_ratio(s, in, e, scan<double>(s, in, false)) <= 1.0);
  CHECK(worst_ratio(s, in, e, scan<float>(s, in, false)) <= 1.0);
  for (const std::int64_t chunk : {1, 3, 8, 24}) {
    s.chunk = chunk;
    INFO("chunk " << chunk);
    const std::vector<double> yd = scan<double>(s, in, true);
    CHECK(worst_ratio(s, in, e, yd) <= 1.0);
    CHECK(worst_ratio(s, in, e, scan<float>(s, in, true)) <= 1.0);
    // And so chunked and plain are within twice the bound of each other; in double they also
    // differ (different orders), which shows the two are separate computations.
    const std::vector<double> ys = scan<double>(s, in, false);
    double diff = 0;
    for (std::size_t i = 0; i < yd.size(); ++i) diff = std::max(diff, std::fabs(yd[i] - ys[i]));
    if (chunk > 1) CHECK(diff > 0.0);
  }
}

TEST_CASE("a scan with the wrong decay is far outside the bound (the check can fail)") {
  MambaShape s = test_shape();
  ScanInputs in = random_scan_inputs(s, 8);
  const Exact e = naive_scan(s, in);
  for (double& a : in.A) a *= 1.0 + 1e-6;  // a relative error of 1e-6 in every decay exponent
  CHECK(worst_ratio(s, in, e, scan<double>(s, in, true)) > 10.0);
}

namespace {

// A mixer problem in double: the in-projection's output and the mixer's parameters.
struct Mixer {
  MambaShape s;
  std::vector<double> zxbcdt, conv_w, conv_b, dt_bias, a_log, d_skip, norm_g;
  MambaParams<double> params() const {
    return MambaParams<double>{conv_w.data(), conv_b.data(), dt_bias.data(), a_log.data(), d_skip.data(), norm_g.data()};
  }
};

// Random inputs and parameters for the mixer of shape s: the dt biases moved up by dt_shift
// from their initial values (dt near 0.1 .. 1 with 2: the decays matter within 8 positions).
Mixer random_mixer(const MambaShape& s, std::uint64_t seed, double dt_shift) {
  Mixer m;
  m.s = s;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  const auto fill = [&](std::vector<double>& v, std::int64_t n, double scale, double offset) {
    v.resize(static_cast<std::size_t>(n));
    for (double& e : v) e = offset + scale * nd(rng);
  };
  fill(m.zxbcdt, m.s.rows() * m.s.in_width(), 1.0, 0.0);
  fill(m.conv_w, m.s.conv_dim() * m.s.conv_width, 0.5, 0.0);
  fill(m.conv_b, m.s.conv_dim(), 0.1, 0.0);
  const auto a = mamba_initial_a_log(m.s.heads), dtb = mamba_initial_dt_bias(m.s.heads);
  m.a_log.assign(a.begin(), a.end());
  m.dt_bias.assign(dtb.begin(), dtb.end());
  for (double& v : m.dt_bias) v += dt_shift;
  fill(m.d_skip, m.s.heads, 0.3, 1.0);
  fill(m.norm_g, m.s.d_inner(), 0.3, 1.0);
  return m;
}
Mixer random_mixer(std::uint64_t seed) {
  MambaShape s = test_shape();
  s.batch = 2, s.seq = 8, s.chunk = 4, s.head_dim = 2, s.state = 3;
  return random_mixer(s, seed, 2.0);
}

// sum_i r_i out_i.
double mixer_loss(const Mixer& m, const std::vector<double>& r) {
  MambaCache<double> c;
  std::vector<double> out(static_cast<std::size_t>(m.s.rows() * m.s.d_inner()));
  mamba_mixer_forward(m.s, m.params(), m.zxbcdt.data(), 1e-6, false, c, out.data());
  double l = 0;
  for (std::size_t i = 0; i < out.size(); ++i) l += r[i] * out[i];
  return l;
}

}  // namespace

TEST_CASE("the mixer's backward matches central finite differences in double") {
  Mixer m = random_mixer(3);
  std::mt19937_64 rng(4);
  std::normal_distribution<double> nd;
  std::vector<double> r(static_cast<std::size_t>(m.s.rows() * m.s.d_inner()));
  for (double& v : r) v = nd(rng);
  MambaCache<double> c;
  std::vector<double> out(r.size()), dz(m.zxbcdt.size());
  mamba_mixer_forward(m.s, m.params(), m.zxbcdt.data(), 1e-6, false, c, out.data());
  MambaGrads<double> g;
  mamba_mixer_backward(m.s, m.params(), m.zxbcdt.data(), c, r.data(), 1e-6, false, dz.data(), g);
  // Central differences with h = 2^-17 (about u^(1/3)): truncation h^2 / 6 |f'''| and rounding
  // u |f| / h are both below 1e-9 for these O(1) smooth functions (softplus, exp, SiLU, the
  // norm), so 1e-7 of the largest gradient entry leaves two orders of margin, while a wrong or
  // missing term is off by O(1).
  const double h = std::ldexp(1.0, -17);
  const auto check = [&](const char* name, std::vector<double>& values, const std::vector<double>& analytic) {
    REQUIRE(analytic.size() == values.size());
    double scale = 0;
    for (double a : analytic) scale = std::max(scale, std::fabs(a));
    REQUIRE(scale > 0.0);
    double worst = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double v = values[i];
      values[i] = v + h;
      const double lp = mixer_loss(m, r);
      values[i] = v - h;
      const double lm = mixer_loss(m, r);
      values[i] = v;
      worst = std::max(worst, std::fabs((lp - lm) / (2 * h) - analytic[i]));
    }
    INFO(name << ": worst difference " << worst << ", largest gradient " << scale);
    CHECK(worst <= 1e-7 * scale);
  };
  check("zxbcdt", m.zxbcdt, dz);
  check("conv_w", m.conv_w, g.conv_w);
  check("conv_b", m.conv_b, g.conv_b);
  check("dt_bias", m.dt_bias, g.dt_bias);
  check("a_log", m.a_log, g.a_log);
  check("d_skip", m.d_skip, g.d_skip);
  check("norm_g", m.norm_g, g.norm_g);
}

TEST_CASE("the mixer's float run with BF16 scan operands differs from the plain float run, a wider T refuses it") {
  const Mixer m = random_mixer(5);
  const auto f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  const auto z = f(m.zxbcdt), cw = f(m.conv_w), cb = f(m.conv_b), dtb = f(m.dt_bias), al = f(m.a_log), ds = f(m.d_skip),
             ng = f(m.norm_g);
  const MambaParams<float> p{cw.data(), cb.data(), dtb.data(), al.data(), ds.data(), ng.data()};
  std::vector<float> plain(static_cast<std::size_t>(m.s.rows() * m.s.d_inner())), bf(plain.size());
  MambaCache<float> c;
  mamba_mixer_forward(m.s, p, z.data(), 1e-6f, false, c, plain.data());
  mamba_mixer_forward(m.s, p, z.data(), 1e-6f, true, c, bf.data());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(plain[i]) - bf[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(plain[i])));
  }
  CHECK(worst > 0.0);
  CHECK(worst < 0.05 * scale);  // BF16's 2^-9 relative on the operands, not a different function
  MambaCache<double> cd;
  std::vector<double> out(plain.size());
  CHECK_THROWS_AS(mamba_mixer_forward(m.s, m.params(), m.zxbcdt.data(), 1e-6, true, cd, out.data()),
                  std::invalid_argument);
}

namespace {
std::string refusal(const MambaShape& s) {
  try {
    check_mamba_shape(s);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("the mixer refuses shapes it cannot run, naming the key") {
  MambaShape s = test_shape();
  CHECK(refusal(s).empty());
  s.chunk = 5;
  CHECK(refusal(s).find("mamba.chunk") != std::string::npos);
  s = test_shape();
  s.groups = 3;
  CHECK(refusal(s).find("mamba.groups") != std::string::npos);
  s = test_shape();
  s.state = 0;
  CHECK(refusal(s).find("mamba.state") != std::string::npos);
}

TEST_CASE("the mixer's initial decays and steps span Mamba-2's ranges") {
  // float32 values: within a few float ulps (2^-24 relative) of the stated ones.
  const auto a = mamba_initial_a_log(8), d = mamba_initial_dt_bias(8);
  const auto near = [](double got, double want) { return std::fabs(got - want) <= 1e-6 * want; };
  CHECK(near(std::exp(static_cast<double>(a.front())), 1.0));
  CHECK(near(std::exp(static_cast<double>(a.back())), 16.0));
  const auto softplus = [](double v) { return std::log1p(std::exp(v)); };
  CHECK(near(softplus(d.front()), 0.001));
  CHECK(near(softplus(d.back()), 0.1));
}

TEST_CASE("the mixer's results do not depend on the thread count") {
  const ParallelWorkThreshold every_loop_parallel(0);  // small tensors: the threads must take part
  // Every parallel loop runs in parallel (the guard above), on a shape of several chunks.
  MambaShape s = test_shape();
  s.batch = 4, s.seq = 64, s.heads = 8, s.head_dim = 8, s.state = 16, s.groups = 2, s.chunk = 16;
  const Mixer m = random_mixer(s, 9, 0.0);
  std::mt19937_64 rng(10);
  std::normal_distribution<double> nd;
  std::vector<double> r(static_cast<std::size_t>(m.s.rows() * m.s.d_inner()));
  for (double& v : r) v = nd(rng);
  const auto run = [&](int threads) {
    omp_set_num_threads(threads);
    MambaCache<double> c;
    std::vector<double> out(r.size()), dz(m.zxbcdt.size());
    mamba_mixer_forward(m.s, m.params(), m.zxbcdt.data(), 1e-6, false, c, out.data());
    MambaGrads<double> g;
    mamba_mixer_backward(m.s, m.params(), m.zxbcdt.data(), c, r.data(), 1e-6, false, dz.data(), g);
    out.insert(out.end(), dz.begin(), dz.end());
    for (const auto* v : {&g.conv_w, &g.conv_b, &g.dt_bias, &g.a_log, &g.d_skip, &g.norm_g})
      out.insert(out.end(), v->begin(), v->end());
    return out;
  };
  const int saved = omp_get_max_threads();
  const std::vector<double> one = run(1), two = run(2), three = run(3);
  omp_set_num_threads(saved);
  CHECK(one == two);
  CHECK(one == three);
}

TEST_CASE("the mixer's gated-norm gain and dt_bias gradients are summed in model/sum_order.hpp's orders") {
  // The GPU's kernels sum these in the orders below (lm_mamba_kernels.cuh), so the float mixer
  // must: the gain over the rows in chunks of 64 (each chunk ascending, then the chunks), dt_bias
  // per sequence over its positions ascending, then the sequences. Both are recomputed here
  // from the mixer's own outputs (the forward's normalised values, the dt_raw column of the
  // input gradient), written out without the helpers. 4 sequences of 40 positions: 160 rows,
  // 3 row chunks (the last partial) that cut across the sequences. A plain ascending sum over
  // the rows differs from both in some element for these values, so the checks see the order.
  MambaShape s = test_shape();
  s.batch = 4, s.seq = 40, s.heads = 4, s.head_dim = 4, s.state = 8, s.groups = 2, s.chunk = 8;
  const Mixer m = random_mixer(s, 21, 0.0);
  const auto f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  const auto z = f(m.zxbcdt), cw = f(m.conv_w), cb = f(m.conv_b), dtb = f(m.dt_bias), al = f(m.a_log), ds = f(m.d_skip),
             ng = f(m.norm_g);
  const MambaParams<float> p{cw.data(), cb.data(), dtb.data(), al.data(), ds.data(), ng.data()};
  const std::int64_t R = s.rows(), DI = s.d_inner(), W = s.in_width(), col = DI + s.conv_dim();
  std::mt19937_64 rng(22);
  std::normal_distribution<double> nd;
  std::vector<float> dout(static_cast<std::size_t>(R * DI)), out(dout.size()), dz(z.size());
  for (float& v : dout) v = static_cast<float>(nd(rng));
  MambaCache<float> c;
  mamba_mixer_forward(s, p, z.data(), 1e-6f, true, c, out.data());
  MambaGrads<float> g;
  mamba_mixer_backward(s, p, z.data(), c, dout.data(), 1e-6f, true, dz.data(), g);
  const auto bits = [](float x) {
    std::uint32_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
  };
  int gain_differs = 0, dt_differs = 0;
  for (std::int64_t j = 0; j < DI; ++j) {
    float chunked = 0.0f, ascending = 0.0f;
    for (std::int64_t c0 = 0; c0 < R; c0 += 64) {
      float part = 0.0f;
      for (std::int64_t i = c0; i < std::min<std::int64_t>(c0 + 64, R); ++i) {
        const auto k = static_cast<std::size_t>(i * DI + j);
        part = part + dout[k] * c.n[k];
      }
      chunked = chunked + part;
    }
    for (std::int64_t i = 0; i < R; ++i) {
      const auto k = static_cast<std::size_t>(i * DI + j);
      ascending = ascending + dout[k] * c.n[k];
    }
    INFO("gain gradient " << j);
    CHECK(bits(g.norm_g[static_cast<std::size_t>(j)]) == bits(chunked));
    gain_differs += chunked != ascending ? 1 : 0;
  }
  for (std::int64_t h = 0; h < s.heads; ++h) {
    float per_sequence = 0.0f, ascending = 0.0f;
    for (std::int64_t b = 0; b < s.batch; ++b) {
      float part = 0.0f;
      for (std::int64_t t = 0; t < s.seq; ++t) part = part + dz[static_cast<std::size_t>((b * s.seq + t) * W + col + h)];
      per_sequence = per_sequence + part;
    }
    for (std::int64_t i = 0; i < R; ++i) ascending = ascending + dz[static_cast<std::size_t>(i * W + col + h)];
    INFO("dt_bias gradient " << h);
    CHECK(bits(g.dt_bias[static_cast<std::size_t>(h)]) == bits(per_sequence));
    dt_differs += per_sequence != ascending ? 1 : 0;
  }
  CHECK(gain_differs > 0);
  CHECK(dt_differs > 0);
}
