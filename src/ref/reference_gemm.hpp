// Reference GEMM C = A * B^T over a selectable scalar ("NT": A is M x K, B is N x K, both
// row-major with K contiguous - the quantizers' stored orientation), from double inputs.
// Every product and sum is evaluated in the scalar type in the order k = 0, 1, ..., K-1
// (acc = acc + a*b, two roundings per term in that type, no FMA); rows run in parallel
// (OpenMP), which does not change any result.
#pragma once

#include <cstdint>
#include <vector>

#include "ref/mp_scalar.hpp"

namespace fp4d::ref {

// The product in scalar T (rows of C, row-major M x N).
template <class T>
std::vector<T> gemm_nt(const double* A, const double* B, std::int64_t M, std::int64_t N, std::int64_t K);
// Only the listed rows of C (rows.size() x N, in the order given).
template <class T>
std::vector<T> gemm_nt_rows(const double* A, const double* B, std::int64_t M, std::int64_t N, std::int64_t K,
                            const std::vector<std::int64_t>& rows);

// Runtime precision; results correctly rounded to double from the scalar's result.
std::vector<double> gemm_nt(const double* A, const double* B, std::int64_t M, std::int64_t N, std::int64_t K,
                            Precision p);

// Reference certification: the product is recomputed at `check` (higher) precision and the
// difference to the `base` result measured in 1024-bit arithmetic (every scalar converts to
// it exactly), on the rows listed (all when empty).
struct Certification {
  Precision base = Precision::Double, check = Precision::Mp1024;
  std::int64_t compared = 0;        // elements compared
  double max_rel_diff = 0;          // max |base - check| / |check| over elements with check != 0
  double max_abs_diff = 0;          // max |base - check|
  double norm_rel_diff = 0;         // ||base - check||_F / ||check||_F (0 when check = 0)
  std::int64_t worst_index = -1;    // row-major index (in C) of the max relative difference
  std::int64_t zero_mismatches = 0; // elements where check == 0 but base != 0 (rel. diff infinite)
  // Decimal digits the base result agrees with the check: -log10(max_rel_diff), capped at
  // the check precision's digits (0 when a zero mismatch or max_rel_diff >= 1).
  double digits = 0;
};
Certification certify_gemm_nt(const double* A, const double* B, std::int64_t M, std::int64_t N, std::int64_t K,
                              Precision base, Precision check, const std::vector<std::int64_t>& rows = {});

}  // namespace fp4d::ref
