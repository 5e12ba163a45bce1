#include "quant/stats.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "format/fp8.hpp"

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
#pragma omp parallel for schedule(static)
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

}  // namespace fp4d
