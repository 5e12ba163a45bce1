// The measures both training runners (sim/mlp_run, sim/lm_run) take of a low-precision run
// against its reference: relative errors of a tensor, and the local-error probe's comparison of
// a recipe's gradient with the exact one. One definition, so that the mlp's and the lm's traces
// mean the same by the same names.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "model/mlp_spec.hpp"  // GemmFn, GemmCall

namespace fp4d {

// ||a - ref|| / ||ref|| (||a - ref|| when ref = 0), summed in double in ascending order; the sums
// are kept so that several tensors can be measured as one vector too.
struct RelError {
  double num = 0, den = 0;
  static double of(double num, double den) { return den > 0 ? std::sqrt(num / den) : std::sqrt(num); }
  // Adds one tensor's sums and returns that tensor's own relative error.
  double add(const std::vector<float>& a, const std::vector<double>& ref) {
    double n = 0, d = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const double e = static_cast<double>(a[i]) - ref[i];
      n += e * e;
      d += ref[i] * ref[i];
    }
    num += n, den += d;
    return of(n, d);
  }
  double value() const { return of(num, den); }
};

inline double rel_error(const std::vector<float>& a, const std::vector<double>& ref) { return RelError{}.add(a, ref); }

// The recipe's GEMMs with the SR draws of draw d moved off the training's: only the SR seed
// depends on GemmCall::step, so step + d 2^40 is another independent draw of the same step.
inline GemmFn sr_draw(const GemmFn& gemm, int d) {
  return [gemm, d](const GemmCall& c, const Matrix& a, const Matrix& b) {
    GemmCall moved = c;
    moved.step = c.step + (static_cast<std::int64_t>(d) << 40);
    return gemm(moved, a, b);
  };
}

// One tensor of the local-error probe: the recipe's gradient gq against the exact g, and the
// sum of `draws` SR draws of gq (sum = gq when draws = 1).
struct GradientError {
  double cosine = 0;       // cos(gq, g); 0 when either is 0
  double rel = 0;          // ||gq - g|| / ||g||
  double sr_mean_rel = 0;  // ||sum / draws - g|| / ||g||: what SR leaves after averaging
};
inline GradientError gradient_error(const std::vector<double>& g, const std::vector<float>& gq, const std::vector<double>& sum,
                                    int draws) {
  double dot = 0, nq = 0, ne = 0, nd = 0, nb = 0;
  for (std::size_t j = 0; j < g.size(); ++j) {
    const double q = gq[j], e = g[j], m = sum[j] / draws - e;
    dot += q * e, nq += q * q, ne += e * e, nd += (q - e) * (q - e), nb += m * m;
  }
  return {nq > 0 && ne > 0 ? dot / std::sqrt(nq * ne) : 0.0, RelError::of(nd, ne), RelError::of(nb, ne)};
}

}  // namespace fp4d
