// Random Hadamard transform (nvfp4-spec.md section 3): H = diag(s) * H_d / sqrt(d), applied
// to every run of d consecutive elements along an axis, x -> x H. In float32 it is evaluated
// in one fixed order, shared by the backends: signs (exact), the fast Walsh-Hadamard
// butterflies below (stage h = 1, 2, 4, ...; (a, b) -> (a + b, a - b)), then one multiply by
// float32(1/sqrt(d)) (exact for d = 4^k), then optionally RNE to BF16.
#pragma once

#include <vector>

#include "format/hd.hpp"
#include "quant/matrix.hpp"
#include "quant/spec.hpp"

namespace fp4d {

// TE's default sign vector for d = 16: bit i set where s_i = -1.
constexpr std::uint32_t kTeRhtSignMask = 0xD7E8u;
constexpr std::uint64_t kRhtSignStream = 0x5248540000000000ull;  // "RHT" in the stream id space

// In-place unnormalised Walsh-Hadamard transform of v[0..d), d a power of two. The output
// is v H_d with H_d the Sylvester Hadamard matrix (H_2n = [[H_n, H_n], [H_n, -H_n]]).
template <class T>
FP4D_HD void fwht_inplace(T* v, int d) {
  for (int h = 1; h < d; h *= 2)
    for (int i = 0; i < d; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const T a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
}

std::vector<float> rht_signs(const RhtSpec& spec);  // +-1, length spec.size
float rht_scale_f32(int d);                          // float32(1 / sqrt(d)), correctly rounded
// The transform in float32, as the quantizers see it. Throws std::invalid_argument when the
// axis length is not a multiple of d.
Matrix apply_rht(const Matrix& x, const RhtSpec& spec, int axis);
// The same transform in double (no BF16 rounding): the exact target for error statistics.
std::vector<double> apply_rht_double(const Matrix& x, const RhtSpec& spec, int axis);
// The d x d matrix H = diag(s) H_d / sqrt(d) in double (tests, docs).
std::vector<double> rht_matrix(const RhtSpec& spec);

}  // namespace fp4d
