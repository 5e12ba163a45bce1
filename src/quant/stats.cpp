#include "quant/stats.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "format/fp8.hpp"
#include "quant/rht.hpp"
#include "util/parallel_worth.hpp"

namespace fp4d {

namespace {
struct Partial {
  std::int64_t n = 0, nonfinite = 0, nonzero = 0, underflow = 0;
  double err2 = 0, ref2 = 0, err = 0, absref = 0, maxerr = 0;
};
}  // namespace

QuantStats compute_stats(const std::function<double(std::int64_t)>& target, const QuantizedTensor& q) {
  const std::int64_t n = q.dequantized.size();
  constexpr std::int64_t chunk = 4096;
  const std::int64_t nchunks = (n + chunk - 1) / chunk;
  std::vector<Partial> parts(static_cast<std::size_t>(nchunks));
#pragma omp parallel for schedule(static) if (parallel_worth(n))
  for (std::int64_t k = 0; k < nchunks; ++k) {
    Partial p;
    for (std::int64_t i = k * chunk; i < std::min(n, (k + 1) * chunk); ++i) {
      const double x = target(i);
      const double xh = q.dequantized.data[static_cast<std::size_t>(i)];
      if (!std::isfinite(x)) {
        ++p.nonfinite;
        continue;
      }
      const double e = xh - x;
      ++p.n;
      p.err2 += e * e;
      p.ref2 += x * x;
      p.err += e;
      p.absref += std::fabs(x);
      p.maxerr = std::max(p.maxerr, std::fabs(e));
      if (x != 0.0) {
        ++p.nonzero;
        p.underflow += (xh == 0.0);
      }
    }
    parts[static_cast<std::size_t>(k)] = p;
  }
  Partial t;
  for (const Partial& p : parts) {
    t.n += p.n;
    t.nonfinite += p.nonfinite;
    t.nonzero += p.nonzero;
    t.underflow += p.underflow;
    t.err2 += p.err2;
    t.ref2 += p.ref2;
    t.err += p.err;
    t.absref += p.absref;
    t.maxerr = std::max(t.maxerr, p.maxerr);
  }
  QuantStats s;
  s.elements = t.n;
  s.nonfinite = t.nonfinite;
  s.nmse = t.ref2 > 0 ? t.err2 / t.ref2 : (t.err2 > 0 ? INFINITY : 0.0);
  s.bias = t.n > 0 ? t.err / static_cast<double>(t.n) : 0.0;
  s.relative_bias = t.absref > 0 ? t.err / t.absref : 0.0;
  s.max_abs_error = t.maxerr;
  s.clipped_fraction = t.n > 0 ? static_cast<double>(q.clipped) / static_cast<double>(t.n) : 0.0;
  s.underflow_fraction = t.nonzero > 0 ? static_cast<double>(t.underflow) / static_cast<double>(t.nonzero) : 0.0;
  s.blocks = static_cast<std::int64_t>(q.scale_values.size());
  if (q.spec.scheme == Scheme::Nvfp4) {
    for (std::uint8_t c : q.scale_codes) {
      s.zero_scale_blocks += (c & 0x7fu) == 0;
      s.subnormal_scale_blocks += e4m3_is_subnormal(c);
    }
  } else {
    for (float v : q.scale_values) s.zero_scale_blocks += v == 0.0f;
  }
  return s;
}

std::vector<double> inverse_rht_double(const std::vector<double>& y, std::int64_t rows, std::int64_t cols,
                                       const RhtSpec& spec, int axis) {
  const int d = spec.size;
  const std::int64_t len = axis == 0 ? rows : cols, other = axis == 0 ? cols : rows;
  if (d < 2 || len % d != 0)
    throw std::invalid_argument("inverse RHT: size " + std::to_string(d) + " does not divide the axis length " +
                                std::to_string(len));
  if (static_cast<std::int64_t>(y.size()) != rows * cols) throw std::invalid_argument("inverse RHT: wrong element count");
  const std::vector<float> s = rht_signs(spec);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> x(y.size());
  const std::int64_t runs = len / d;
  // Element t of run (o, k): axis 1 -> row o, column k d + t; axis 0 -> row k d + t, column o.
  const auto at = [&](std::int64_t o, std::int64_t k, int t) {
    return static_cast<std::size_t>(axis == 0 ? (k * d + t) * cols + o : o * cols + k * d + t);
  };
#pragma omp parallel for schedule(static) if (parallel_worth(static_cast<std::int64_t>(y.size())))
  for (std::int64_t o = 0; o < other; ++o) {
    std::vector<double> v(static_cast<std::size_t>(d));
    for (std::int64_t k = 0; k < runs; ++k) {
      for (int t = 0; t < d; ++t) v[static_cast<std::size_t>(t)] = y[at(o, k, t)];
      fwht_inplace(v.data(), d);  // H_d is symmetric: y H_d^T = y H_d
      for (int t = 0; t < d; ++t) x[at(o, k, t)] = v[static_cast<std::size_t>(t)] * scale * s[static_cast<std::size_t>(t)];
    }
  }
  return x;
}

namespace {

// Per-row and per-column sums of (xhat - x)^2 and x^2 over the elements with a finite target.
// Rows sum their columns ascending, columns their rows ascending (tiles of 64 columns per
// thread), so no sum depends on how the work is split.
template <class Target, class Value>
void line_sums(std::int64_t R, std::int64_t C, const Target& x, const Value& xh, std::vector<double>& col_err2,
               std::vector<double>& col_ref2, std::vector<double>& row_err2, std::vector<double>& row_ref2) {
  col_err2.assign(static_cast<std::size_t>(C), 0.0);
  col_ref2.assign(static_cast<std::size_t>(C), 0.0);
  row_err2.assign(static_cast<std::size_t>(R), 0.0);
  row_ref2.assign(static_cast<std::size_t>(R), 0.0);
#pragma omp parallel for schedule(static) if (parallel_worth(R * C))
  for (std::int64_t r = 0; r < R; ++r) {
    double e2 = 0, r2 = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      const std::size_t i = static_cast<std::size_t>(r * C + c);
      const double t = x(i);
      if (!std::isfinite(t)) continue;
      const double e = xh(i) - t;
      e2 += e * e;
      r2 += t * t;
    }
    row_err2[static_cast<std::size_t>(r)] = e2;
    row_ref2[static_cast<std::size_t>(r)] = r2;
  }
  constexpr std::int64_t tile = 64;
  const std::int64_t tiles = (C + tile - 1) / tile;
#pragma omp parallel for schedule(static) if (parallel_worth(R * C))
  for (std::int64_t k = 0; k < tiles; ++k) {
    const std::int64_t c0 = k * tile, c1 = std::min(C, c0 + tile);
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = c0; c < c1; ++c) {
        const std::size_t i = static_cast<std::size_t>(r * C + c);
        const double t = x(i);
        if (!std::isfinite(t)) continue;
        const double e = xh(i) - t;
        col_err2[static_cast<std::size_t>(c)] += e * e;
        col_ref2[static_cast<std::size_t>(c)] += t * t;
      }
  }
}

double in_order_sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

double ratio(double err2, double ref2) { return ref2 > 0 ? err2 / ref2 : (err2 > 0 ? INFINITY : NAN); }

}  // namespace

ChannelStats compute_channel_stats(const Matrix& input, const QuantizedTensor& q, int worst) {
  const std::int64_t R = input.rows, C = input.cols;
  if (q.dequantized.rows != R || q.dequantized.cols != C)
    throw std::invalid_argument("channel statistics: the dequantized tensor is not in the input's shape");
  ChannelStats cs;
  const bool rht = q.spec.rht.enabled();
  const auto deq = [&](std::size_t i) { return static_cast<double>(q.dequantized.data[i]); };
  const auto in = [&](std::size_t i) { return static_cast<double>(input.data[i]); };
  std::vector<double> target;  // the quantizer's target: the input, or its transform in double
  if (rht) {
    target = apply_rht_double(input, q.spec.rht, q.spec.rht_axis);
    const std::vector<double> y(q.dequantized.data.begin(), q.dequantized.data.end());
    const std::vector<double> back = inverse_rht_double(y, R, C, q.spec.rht, q.spec.rht_axis);
    line_sums(R, C, in, [&](std::size_t i) { return back[i]; }, cs.channel_err2, cs.channel_ref2, cs.row_err2,
              cs.row_ref2);
    line_sums(R, C, [&](std::size_t i) { return target[i]; }, deq, cs.channel_err2_transformed,
              cs.channel_ref2_transformed, cs.row_err2_transformed, cs.row_ref2_transformed);
  } else {
    line_sums(R, C, in, deq, cs.channel_err2, cs.channel_ref2, cs.row_err2, cs.row_ref2);
  }
  cs.nmse_original_basis = ratio(in_order_sum(cs.channel_err2), in_order_sum(cs.channel_ref2));
  if (!(cs.nmse_original_basis == cs.nmse_original_basis)) cs.nmse_original_basis = 0;  // x == 0 everywhere, as QuantStats

  // Blocks of the scale grid (casts have none). Element (i, j) of the input orientation is
  // (j, i) of the stored one when the codes are stored transposed.
  const std::int64_t nblocks = q.scale_rows * q.scale_cols;
  if (nblocks <= 0 || static_cast<std::size_t>(nblocks) != q.scale_values.size()) return cs;
  const bool tr = q.spec.stored_transposed();
  const std::int64_t SR = tr ? C : R, SC = tr ? R : C;  // stored rows, cols
  const std::int64_t br = q.spec.per_tensor() ? SR : q.spec.block_rows, bc = q.spec.per_tensor() ? SC : q.spec.block_cols;
  std::vector<double> berr2(static_cast<std::size_t>(nblocks), 0.0), bref2(static_cast<std::size_t>(nblocks), 0.0);
  // One band of block rows per iteration: a block's sum runs over its stored rows ascending,
  // then its columns ascending, in one thread.
#pragma omp parallel for schedule(static) if (parallel_worth(SR * SC))
  for (std::int64_t b = 0; b < q.scale_rows; ++b)
    for (std::int64_t r = b * br; r < std::min(SR, (b + 1) * br); ++r)
      for (std::int64_t c = 0; c < SC; ++c) {
        const std::size_t i = static_cast<std::size_t>(tr ? c * C + r : r * C + c);
        const double t = rht ? target[i] : in(i);
        if (!std::isfinite(t)) continue;
        const double e = deq(i) - t;
        const std::size_t k = static_cast<std::size_t>(b * q.scale_cols + c / bc);
        berr2[k] += e * e;
        bref2[k] += t * t;
      }
  cs.block_nmse.resize(static_cast<std::size_t>(nblocks));
  std::vector<double> with_energy;
  for (std::size_t k = 0; k < berr2.size(); ++k) {
    cs.block_nmse[k] = bref2[k] > 0 ? berr2[k] / bref2[k] : NAN;
    if (bref2[k] > 0) with_energy.push_back(cs.block_nmse[k]);
  }
  cs.blocks_with_energy = static_cast<std::int64_t>(with_energy.size());
  if (!with_energy.empty()) {
    std::sort(with_energy.begin(), with_energy.end());
    const auto at = [&](double p) {
      return with_energy[static_cast<std::size_t>(p * static_cast<double>(with_energy.size() - 1))];
    };
    cs.block_nmse_p50 = at(0.5);
    cs.block_nmse_p90 = at(0.9);
    cs.block_nmse_p99 = at(0.99);
    cs.block_nmse_max = with_energy.back();
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(nblocks));
  std::iota(order.begin(), order.end(), 0);
  const auto k = std::min<std::size_t>(static_cast<std::size_t>(std::max(0, worst)), order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](std::int64_t a, std::int64_t b) {
                      const double ea = berr2[static_cast<std::size_t>(a)], eb = berr2[static_cast<std::size_t>(b)];
                      return ea != eb ? ea > eb : a < b;
                    });
  const double total = in_order_sum(berr2);
  for (std::size_t j = 0; j < k; ++j) {
    const std::int64_t b = order[j];
    cs.worst_blocks.push_back(b);
    cs.worst_block_error_share.push_back(total > 0 ? berr2[static_cast<std::size_t>(b)] / total : 0.0);
  }
  return cs;
}

ChannelSplit split_channels(const ChannelStats& c, const std::vector<std::uint8_t>& mask) {
  if (mask.size() != c.channel_err2.size())
    throw std::invalid_argument("the channel mask has " + std::to_string(mask.size()) + " entries for " +
                                std::to_string(c.channel_err2.size()) + " channels");
  ChannelSplit s;
  double oe = 0, orf = 0, ne = 0, nr = 0;
  for (std::size_t j = 0; j < mask.size(); ++j) {
    if (mask[j]) {
      ++s.outlier_channels;
      oe += c.channel_err2[j];
      orf += c.channel_ref2[j];
    } else {
      ++s.normal_channels;
      ne += c.channel_err2[j];
      nr += c.channel_ref2[j];
    }
  }
  s.outlier_nmse = s.outlier_channels > 0 ? ratio(oe, orf) : NAN;
  s.normal_nmse = s.normal_channels > 0 ? ratio(ne, nr) : NAN;
  s.outlier_energy_fraction = orf + nr > 0 ? orf / (orf + nr) : NAN;
  return s;
}

std::vector<std::uint8_t> parse_channel_list(const std::string& list, std::int64_t channels) {
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(std::max<std::int64_t>(0, channels)), 0);
  if (list.empty()) throw std::invalid_argument("the channel list is empty");
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t end = std::min(list.find(',', pos), list.size());
    const std::string item = list.substr(pos, end - pos);
    const auto number = [&](const std::string& t) {
      std::int64_t v = -1;
      const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (t.empty() || ec != std::errc() || p != t.data() + t.size() || v < 0)
        throw std::invalid_argument("channel list item '" + item + "' is not an index or a range A-B");
      if (v >= channels)
        throw std::invalid_argument("channel " + t + " is out of range: the input has " + std::to_string(channels) +
                                    " channels (columns), 0.." + std::to_string(channels - 1));
      return v;
    };
    const std::size_t dash = item.find('-');
    const std::int64_t a = number(item.substr(0, dash)),
                       b = dash == std::string::npos ? a : number(item.substr(dash + 1));
    if (b < a) throw std::invalid_argument("channel range '" + item + "' is empty (its end is below its start)");
    for (std::int64_t c = a; c <= b; ++c) {
      if (mask[static_cast<std::size_t>(c)])
        throw std::invalid_argument("channel " + std::to_string(c) + " is listed twice");
      mask[static_cast<std::size_t>(c)] = 1;
    }
    pos = end + 1;
  }
  return mask;
}

}  // namespace fp4d
