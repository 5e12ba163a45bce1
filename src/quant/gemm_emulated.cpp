// Emulated low-precision GEMMs (CPU backend). The operation order is documented in
// gemm_emulated.hpp; keep the two in step.
#include "quant/gemm_emulated.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "quant/dense_gemm.hpp"

namespace fp4d {

std::string to_string(AccumulationOrder o) {
  switch (o) {
    case AccumulationOrder::Sequential:
    default: return "sequential";
  }
}

namespace {

// One operand decoded for the GEMM: element values (rows x K, stored orientation) and, per
// row and K-block, the block scale (float) or UE8M0 exponent. Decoding first keeps the inner
// loop to the documented float32 operations only.
struct Operand {
  std::int64_t rows = 0, K = 0, nb = 0;
  std::vector<float> vals;
  std::vector<float> scale;  // rows x nb
  std::vector<int> exps;     // rows x nb (MXFP4)
};


void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("emulated gemm: " + what);
}

void check_pair(const QuantizedTensor& A, const QuantizedTensor& B, Scheme s) {
  require(A.spec.scheme == s && B.spec.scheme == s,
          std::string("both operands must be ") + to_string(s) + " (got " + to_string(A.spec.scheme) + " and " +
              to_string(B.spec.scheme) + ")");
  require(A.cols == B.cols, "K mismatch in the stored orientation: A is " + std::to_string(A.rows) + " x " +
                                std::to_string(A.cols) + ", B is " + std::to_string(B.rows) + " x " +
                                std::to_string(B.cols) + " (C = A B^T needs equal column counts)");
}

// Block length along K of one operand (0 = one scale for the whole tensor).
std::int64_t k_block(const QuantizedTensor& q) { return q.spec.per_tensor() ? 0 : q.spec.block_cols; }

// The common K-block length L of a pair (documented in the header).
std::int64_t common_block(const QuantizedTensor& A, const QuantizedTensor& B) {
  const std::int64_t la = k_block(A), lb = k_block(B);
  if (la != 0 && lb != 0) {
    require(la == lb, "operands have different K-block lengths (" + std::to_string(la) + " and " + std::to_string(lb) + ")");
    return la;
  }
  if (la != 0) return la;
  if (lb != 0) return lb;
  return std::max<std::int64_t>(A.cols, 1);  // both per tensor: one block spanning K
}

// Decodes q's elements with `decode` and its per-(row, K-block) scales for block length L.
template <class Decode>
Operand decode_operand(const QuantizedTensor& q, std::int64_t L, bool exponents, Decode decode) {
  Operand o;
  o.rows = q.rows;
  o.K = q.cols;
  o.nb = (q.cols + L - 1) / L;
  o.vals.resize(static_cast<std::size_t>(o.rows * o.K));
  for (std::int64_t r = 0; r < o.rows; ++r)
    for (std::int64_t k = 0; k < o.K; ++k) o.vals[static_cast<std::size_t>(r * o.K + k)] = decode(q.code_at(r, k));
  const bool whole = q.spec.per_tensor();
  const std::int64_t br = q.spec.is_2d() ? q.spec.block_rows : 1;
  const std::size_t expected = static_cast<std::size_t>(q.scale_rows * q.scale_cols);
  require(whole ? !q.scale_values.empty() : q.scale_values.size() == expected && q.scale_cols >= o.nb,
          "scale grid does not match the tensor's shape");
  if (exponents) require(q.scale_codes.size() == expected, "MXFP4 operand without scale codes");
  o.scale.resize(static_cast<std::size_t>(o.rows * o.nb));
  if (exponents) o.exps.resize(o.scale.size());
  for (std::int64_t r = 0; r < o.rows; ++r)
    for (std::int64_t b = 0; b < o.nb; ++b) {
      const std::size_t src = whole ? 0 : static_cast<std::size_t>((r / br) * q.scale_cols + b);
      const std::size_t dst = static_cast<std::size_t>(r * o.nb + b);
      o.scale[dst] = q.scale_values[src];
      if (exponents) o.exps[dst] = ue8m0_exponent(q.scale_codes[src]);
    }
  return o;
}

// The documented loop. term(p, i, j, b) gives t_b; with_global multiplies acc by g at the end.
// Register tiles of kTileRows x kTileCols output elements: B is transposed once (K x N) so
// that the inner loops run across output columns, each lane one element's own p and acc,
// which the compiler vectorises without reassociating anything (element by element the
// operations and their order are exactly the header's; tests/unit/test_gemm_emulated.cpp
// compares with a scalar transcription bit for bit). Before: one (i, j) at a time, a
// latency-bound chain of dependent additions.
template <class Term>
Matrix blocked_gemm(const Operand& a, const Operand& b, std::int64_t L, Term term, bool with_global, float g) {
  constexpr std::int64_t kTileRows = 4, kTileCols = 16;
  const std::int64_t M = a.rows, N = b.rows, K = a.K, nb = a.nb;
  Matrix C(M, N);
  if (M == 0 || N == 0) return C;
  // bt: K x Np (Np = N rounded up to the tile; the padding columns are zero and discarded).
  const std::int64_t Np = (N + kTileCols - 1) / kTileCols * kTileCols;
  std::vector<float> bt(static_cast<std::size_t>(K * Np), 0.0f);
  for (std::int64_t j = 0; j < N; ++j)
    for (std::int64_t k = 0; k < K; ++k) bt[static_cast<std::size_t>(k * Np + j)] = b.vals[static_cast<std::size_t>(j * K + k)];
  const std::int64_t row_tiles = (M + kTileRows - 1) / kTileRows, col_tiles = Np / kTileCols;
#pragma omp parallel for schedule(static) collapse(2)
  for (std::int64_t it = 0; it < row_tiles; ++it)
    for (std::int64_t jt = 0; jt < col_tiles; ++jt) {
      const std::int64_t i0 = it * kTileRows, j0 = jt * kTileCols;
      // Rows and columns past the edge compute on clamped indices (valid memory, valid scale
      // lookups) and are not stored.
      std::int64_t ri[kTileRows], cj[kTileCols];
      for (std::int64_t r = 0; r < kTileRows; ++r) ri[r] = std::min(i0 + r, M - 1);
      for (std::int64_t c = 0; c < kTileCols; ++c) cj[c] = std::min(j0 + c, N - 1);
      float acc[kTileRows][kTileCols] = {};
      for (std::int64_t blk = 0; blk < nb; ++blk) {
        const std::int64_t k0 = blk * L, k1 = std::min(K, k0 + L);
        float p[kTileRows][kTileCols] = {};
        for (std::int64_t k = k0; k < k1; ++k) {
          const float* bk = bt.data() + k * Np + j0;
          for (std::int64_t r = 0; r < kTileRows; ++r) {
            const float av = a.vals[static_cast<std::size_t>(ri[r] * K + k)];
            for (std::int64_t c = 0; c < kTileCols; ++c) {
              const float prod = av * bk[c];
              p[r][c] = p[r][c] + prod;
            }
          }
        }
        for (std::int64_t r = 0; r < kTileRows; ++r)
          for (std::int64_t c = 0; c < kTileCols; ++c) acc[r][c] = acc[r][c] + term(p[r][c], ri[r], cj[c], blk);
      }
      for (std::int64_t r = 0; r < kTileRows && i0 + r < M; ++r)
        for (std::int64_t c = 0; c < kTileCols && j0 + c < N; ++c) C(i0 + r, j0 + c) = with_global ? acc[r][c] * g : acc[r][c];
    }
  return C;
}

void check_nvfp4(const QuantizedTensor& A, const QuantizedTensor& B) {
  check_pair(A, B, Scheme::Nvfp4);
  for (const QuantizedTensor* q : {&A, &B})
    require(q->spec.block_cols == 16 && (q->spec.block_rows == 1 || q->spec.block_rows == 16),
            "NVFP4 operands need 1x16 blocks or 16x16 tiles");
}
void check_mxfp4(const QuantizedTensor& A, const QuantizedTensor& B) {
  check_pair(A, B, Scheme::Mxfp4);
  for (const QuantizedTensor* q : {&A, &B})
    require(q->spec.block_cols == 32 && q->spec.block_rows == 1, "MXFP4 operands need 1x32 blocks");
}
void check_fp8(const QuantizedTensor& A, const QuantizedTensor& B) {
  check_pair(A, B, Scheme::Fp8);
  for (const QuantizedTensor* q : {&A, &B}) {
    require(q->spec.element == ElementFormat::E4M3 || q->spec.element == ElementFormat::E5M2,
            "FP8 operands need E4M3 or E5M2 elements");
    require(q->spec.per_tensor() || (q->spec.block_cols == 128 && (q->spec.block_rows == 1 || q->spec.block_rows == 128)),
            "FP8 operands need per-tensor scaling, 1x128 blocks or 128x128 tiles");
  }
  (void)common_block(A, B);
}

float fp8_value(const QuantizedTensor& q, std::uint8_t c) {
  return q.spec.element == ElementFormat::E5M2 ? e5m2_decode(c) : e4m3_decode(c);
}

std::int64_t blocks_of(std::int64_t K, std::int64_t L) { return (K + L - 1) / L; }

}  // namespace

Matrix gemm_nvfp4_emulated(const QuantizedTensor& A, const QuantizedTensor& B, const EmulatedGemmOptions& opt) {
  (void)opt;  // only AccumulationOrder::Sequential exists
  check_nvfp4(A, B);
  const std::int64_t L = 16;
  const Operand a = decode_operand(A, L, false, e2m1_decode);
  const Operand b = decode_operand(B, L, false, e2m1_decode);
  const float g = A.global.decode * B.global.decode;  // one float32 product
  return blocked_gemm(
      a, b, L,
      [&](float p, std::int64_t i, std::int64_t j, std::int64_t blk) {
        const float s = a.scale[static_cast<std::size_t>(i * a.nb + blk)] * b.scale[static_cast<std::size_t>(j * b.nb + blk)];
        return p * s;  // t_b = p_b * (S^A S^B), exact (see the header)
      },
      true, g);
}

Matrix gemm_mxfp4_emulated(const QuantizedTensor& A, const QuantizedTensor& B, const EmulatedGemmOptions& opt) {
  (void)opt;
  check_mxfp4(A, B);
  const std::int64_t L = 32;
  const Operand a = decode_operand(A, L, true, e2m1_decode);
  const Operand b = decode_operand(B, L, true, e2m1_decode);
  return blocked_gemm(
      a, b, L,
      [&](float p, std::int64_t i, std::int64_t j, std::int64_t blk) {
        const int e = a.exps[static_cast<std::size_t>(i * a.nb + blk)] + b.exps[static_cast<std::size_t>(j * b.nb + blk)];
        return std::ldexp(p, e);  // p_b * 2^(e^A + e^B), one rounding at most
      },
      false, 1.0f);
}

Matrix gemm_fp8_emulated(const QuantizedTensor& A, const QuantizedTensor& B, const EmulatedGemmOptions& opt) {
  (void)opt;
  check_fp8(A, B);
  const std::int64_t L = common_block(A, B);
  const Operand a = decode_operand(A, L, false, [&](std::uint8_t c) { return fp8_value(A, c); });
  const Operand b = decode_operand(B, L, false, [&](std::uint8_t c) { return fp8_value(B, c); });
  return blocked_gemm(
      a, b, L,
      [&](float p, std::int64_t i, std::int64_t j, std::int64_t blk) {
        const float s = a.scale[static_cast<std::size_t>(i * a.nb + blk)] * b.scale[static_cast<std::size_t>(j * b.nb + blk)];
        return p * s;  // t_b = p_b * (d^A d^B)
      },
      false, 1.0f);
}

Matrix gemm_block_scaled_emulated(const QuantizedTensor& A, const QuantizedTensor& B, const EmulatedGemmOptions& opt) {
  switch (A.spec.scheme) {
    case Scheme::Nvfp4: return gemm_nvfp4_emulated(A, B, opt);
    case Scheme::Mxfp4: return gemm_mxfp4_emulated(A, B, opt);
    case Scheme::Fp8: return gemm_fp8_emulated(A, B, opt);
    case Scheme::Cast:
    default:
      throw std::invalid_argument("emulated gemm: plain casts have no block scales; use gemm_dequantized_fp32");
  }
}

std::int64_t emulated_gemm_rounding_count(const QuantizedTensor& A, const QuantizedTensor& B) {
  const std::int64_t K = A.cols;
  switch (A.spec.scheme) {
    case Scheme::Nvfp4: check_nvfp4(A, B); return K == 0 ? 0 : blocks_of(K, 16) + 1;
    case Scheme::Mxfp4: check_mxfp4(A, B); return K == 0 ? 0 : blocks_of(K, 32) - 1;
    case Scheme::Fp8: {
      check_fp8(A, B);
      if (K == 0) return 0;
      const std::int64_t L = common_block(A, B);
      return std::min(L, K) + blocks_of(K, L);
    }
    case Scheme::Cast:
    default: throw std::invalid_argument("emulated gemm: plain casts have no block scales");
  }
}

Matrix stored_dequantized(const QuantizedTensor& q) {
  if (q.dequantized.size() != q.rows * q.cols || (q.rows * q.cols > 0 && q.dequantized.data.empty()))
    throw std::invalid_argument("emulated gemm: the quantized tensor carries no dequantized values");
  if (q.spec.stored_transposed()) return transpose(q.dequantized);
  return q.dequantized;
}

Matrix gemm_fp32(const Matrix& A, const Matrix& B, const EmulatedGemmOptions& opt) {
  (void)opt;
  require(A.cols == B.cols, "K mismatch: A has " + std::to_string(A.cols) + " columns, B " + std::to_string(B.cols));
  const std::int64_t M = A.rows, N = B.rows, K = A.cols;
  Matrix C(M, N);
  // acc = 0; acc = acc + (a_k * b_k) for k ascending, in float32 without FMA: dense_gemm's
  // float recurrence, with B stored N x K (its transposed layout).
  dense_gemm(A.data.data(), false, B.data.data(), true, C.data.data(), M, K, N);
  return C;
}

GemmMatrixF64 gemm_f64(const Matrix& A, const Matrix& B) {
  require(A.cols == B.cols, "K mismatch: A has " + std::to_string(A.cols) + " columns, B " + std::to_string(B.cols));
  const std::int64_t M = A.rows, N = B.rows, K = A.cols;
  GemmMatrixF64 C;
  C.rows = M;
  C.cols = N;
  C.data.assign(static_cast<std::size_t>(M * N), 0.0);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < M; ++i) {
    const float* ai = A.data.data() + i * K;
    for (std::int64_t j = 0; j < N; ++j) {
      const float* bj = B.data.data() + j * K;
      double acc = 0.0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double prod = static_cast<double>(ai[k]) * static_cast<double>(bj[k]);  // exact
        acc = acc + prod;
      }
      C.data[static_cast<std::size_t>(i * N + j)] = acc;
    }
  }
  return C;
}

Matrix gemm_dequantized_fp32(const QuantizedTensor& A, const QuantizedTensor& B, const EmulatedGemmOptions& opt) {
  return gemm_fp32(stored_dequantized(A), stored_dequantized(B), opt);
}

GemmMatrixF64 gemm_dequantized_f64(const QuantizedTensor& A, const QuantizedTensor& B) {
  return gemm_f64(stored_dequantized(A), stored_dequantized(B));
}

}  // namespace fp4d
