// Emulated low-precision GEMMs (CPU backend). The operation order is documented in
// gemm_emulated.hpp; keep the two in step.
#include "quant/gemm_emulated.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "quant/dense_gemm.hpp"
#include "quant/ref_operand.hpp"
#include "quant/tensor_core_gemm.hpp"
#include "quant/tensor_core_hypotheses.hpp"
#include "ref/exact_block_gemm.hpp"
#include "util/parallel_worth.hpp"

namespace fp4d {

std::string to_string(Accumulator a) {
  switch (a) {
    case Accumulator::Sm90: return "sm90";
    case Accumulator::Exact: return "exact";
    case Accumulator::Fp32Sequential:
    default: return "fp32-sequential";
  }
}

const std::vector<std::string>& accumulator_names() {
  static const std::vector<std::string> names = {"fp32-sequential", "sm90", "exact"};
  return names;
}

Accumulator parse_accumulator(const std::string& name) {
  if (name == "fp32-sequential") return Accumulator::Fp32Sequential;
  if (name == "sm90") return Accumulator::Sm90;
  if (name == "exact") return Accumulator::Exact;
  throw std::invalid_argument("unknown accumulator '" + name + "' (fp32-sequential, sm90, exact)");
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
#pragma omp parallel for schedule(static) collapse(2) if (parallel_worth(M * Np * K))
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

// RNE of an exact value to float32, subnormals and overflow (to +-inf) included.
float round_to_float(const ref::ExactValue& v) {
  if (v.significand == 0) return 0.0f;
  const bool neg = v.significand < 0;
  ref::bmp::cpp_int mag = neg ? ref::bmp::cpp_int(-v.significand) : v.significand;
  const std::int64_t lead = v.exponent + static_cast<std::int64_t>(ref::bmp::msb(mag));
  std::int64_t e = v.exponent;
  const std::int64_t quantum = std::max<std::int64_t>(lead, -126) - 23;  // the result's last bit
  if (quantum > e) {
    const auto sh = static_cast<unsigned>(quantum - e);
    const ref::bmp::cpp_int rem = mag & ((ref::bmp::cpp_int(1) << sh) - 1), half = ref::bmp::cpp_int(1) << (sh - 1);
    mag >>= sh;
    if (rem > half || (rem == half && ref::bmp::bit_test(mag, 0))) ++mag;
    e = quantum;
  }
  if (mag != 0 && e + static_cast<std::int64_t>(ref::bmp::msb(mag)) > 127) return neg ? -INFINITY : INFINITY;
  // mag <= 2^24 and e >= -149, below 2^128: exact in float.
  const float r = std::ldexp(static_cast<float>(mag.convert_to<std::uint32_t>()), static_cast<int>(e));
  return neg ? -r : r;
}

// acc = the exact sum of A's and B's products (block scales exact, no global factor), rounded
// once; C = fl(g * acc) when with_global.
Matrix exact_accumulation(ref::BlockOperand a, ref::BlockOperand b, bool with_global, float g) {
  a.global_sig = b.global_sig = 1;
  a.global_exp = b.global_exp = 0;
  ref::ExactGemmOptions o;
  o.keep_exact = true;
  const ref::ExactGemmResult r = ref::exact_block_gemm_nt(a, b, o);
  Matrix C(r.rows, r.cols);
  for (std::size_t i = 0; i < C.data.size(); ++i) {
    const float acc = round_to_float(r.exact[i]);
    C.data[i] = with_global ? acc * g : acc;
  }
  return C;
}

// Elements times their block scales (stored orientation), for the sm90 model: exact in float,
// and in BF16 for the GPU path's operands; throws where the product leaves float's range (the
// GPU path refuses such operands too).
Matrix scaled_elements(const Operand& o, std::int64_t L, bool exponents) {
  Matrix X(o.rows, o.K);
  for (std::int64_t r = 0; r < o.rows; ++r)
    for (std::int64_t k = 0; k < o.K; ++k) {
      const std::size_t blk = static_cast<std::size_t>(r * o.nb + k / L);
      const float v = o.vals[static_cast<std::size_t>(r * o.K + k)];
      const float x = exponents ? std::ldexp(v, o.exps[blk]) : v * o.scale[blk];
      if (!std::isfinite(x))
        require(false, "element (" + std::to_string(r) + ", " + std::to_string(k) +
                           ") times its block scale is not a finite float: the sm90 path has no exact BF16 operand for it");
      X(r, k) = x;
    }
  return X;
}

// The GPU path's per-tensor FP8 GEMM under the tensor-core model (the header's FP8 sm90 rule):
// the model over the decoded element values, then the decode scales in the epilogue.
Matrix gemm_fp8_sm90(const QuantizedTensor& A, const QuantizedTensor& B, bool fast_accumulation) {
  if (!A.spec.per_tensor() || !B.spec.per_tensor())
    throw std::invalid_argument("accumulator sm90: FP8 operands with block scales (A " + layout_string(A.spec) +
                                ", B " + layout_string(B.spec) +
                                ") are not modelled: cuBLASLt's per-block scale application on sm90 is not "
                                "measured, so sm90 models FP8 with per-tensor scaling only");
  if (A.spec.element == ElementFormat::E5M2 && B.spec.element == ElementFormat::E5M2)
    throw std::invalid_argument(
        "accumulator sm90: FP8 E5M2 x E5M2 is not modelled: cuBLASLt has no such GEMM, so the GPU path has none");
  require(!A.scale_values.empty() && !B.scale_values.empty(), "FP8 operand without its decode scale");
  const auto decoded = [](const QuantizedTensor& q) {
    Matrix x(q.rows, q.cols);
    for (std::int64_t r = 0; r < q.rows; ++r)
      for (std::int64_t k = 0; k < q.cols; ++k) x(r, k) = fp8_value(q, q.code_at(r, k));
    return x;
  };
  const TensorCoreModel m = sm90_tensor_core_model(to_string(A.spec.element), to_string(B.spec.element));
  // Interval 0: no promotion (tensor_core_dot over all of K). Infinities and NaN (E5M2 codes, a
  // NaN input's code) take the model's own rule through the per-output path.
  const std::int64_t interval = fast_accumulation ? 0 : kSm90Fp8PromotionInterval;
  Matrix C = std::move(tensor_core_gemm_hypotheses(decoded(A), decoded(B), m, {interval}).front());
  // The epilogue: one float32 product of the decode scales, then one of that and acc (a
  // hypothesis about cuBLASLt's rounding order; see the header).
  const float s = A.scale_values[0] * B.scale_values[0];
  for (float& c : C.data) c = s * c;
  return C;
}

}  // namespace

Matrix gemm_nvfp4_emulated(const QuantizedTensor& A, const QuantizedTensor& B, const EmulatedGemmOptions& opt) {
  check_nvfp4(A, B);
  const std::int64_t L = 16;
  const float g = A.global.decode * B.global.decode;  // one float32 product
  if (opt.accumulator == Accumulator::Exact) return exact_accumulation(block_operand(A), block_operand(B), true, g);
  const Operand a = decode_operand(A, L, false, e2m1_decode);
  const Operand b = decode_operand(B, L, false, e2m1_decode);
  if (opt.accumulator == Accumulator::Sm90)
    return tensor_core_gemm(scaled_elements(a, L, false), scaled_elements(b, L, false), sm90_tensor_core_model("bf16"), g);
  return blocked_gemm(
      a, b, L,
      [&](float p, std::int64_t i, std::int64_t j, std::int64_t blk) {
        const float s = a.scale[static_cast<std::size_t>(i * a.nb + blk)] * b.scale[static_cast<std::size_t>(j * b.nb + blk)];
        return p * s;  // t_b = p_b * (S^A S^B), exact (see the header)
      },
      true, g);
}

Matrix gemm_mxfp4_emulated(const QuantizedTensor& A, const QuantizedTensor& B, const EmulatedGemmOptions& opt) {
  check_mxfp4(A, B);
  const std::int64_t L = 32;
  if (opt.accumulator == Accumulator::Exact) return exact_accumulation(block_operand(A), block_operand(B), false, 1.0f);
  const Operand a = decode_operand(A, L, true, e2m1_decode);
  const Operand b = decode_operand(B, L, true, e2m1_decode);
  if (opt.accumulator == Accumulator::Sm90)
    return tensor_core_gemm(scaled_elements(a, L, true), scaled_elements(b, L, true), sm90_tensor_core_model("bf16"));
  return blocked_gemm(
      a, b, L,
      [&](float p, std::int64_t i, std::int64_t j, std::int64_t blk) {
        const int e = a.exps[static_cast<std::size_t>(i * a.nb + blk)] + b.exps[static_cast<std::size_t>(j * b.nb + blk)];
        return std::ldexp(p, e);  // p_b * 2^(e^A + e^B), one rounding at most
      },
      false, 1.0f);
}

Matrix gemm_fp8_emulated(const QuantizedTensor& A, const QuantizedTensor& B, const EmulatedGemmOptions& opt) {
  check_fp8(A, B);
  if (opt.accumulator == Accumulator::Sm90) return gemm_fp8_sm90(A, B, opt.fp8_fast_accumulation);
  const std::int64_t L = common_block(A, B);
  if (opt.accumulator == Accumulator::Exact) return exact_accumulation(block_operand(A), block_operand(B), false, 1.0f);
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

Matrix gemm_fp32(const Matrix& A, const Matrix& B) {
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
#pragma omp parallel for schedule(static) if (parallel_worth(M * N * K))
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
  if (opt.accumulator == Accumulator::Fp32Sequential) return gemm_fp32(stored_dequantized(A), stored_dequantized(B));
  require(A.spec.scheme == Scheme::Cast && B.spec.scheme == Scheme::Cast,
          "accumulator " + to_string(opt.accumulator) +
              ": the dequantize-then-FP32 model of block-scaled operands accumulates in sequential FP32 only");
  const Matrix a = stored_dequantized(A), b = stored_dequantized(B);
  if (opt.accumulator == Accumulator::Exact) {
    require(a.cols == b.cols, "K mismatch: A has " + std::to_string(a.cols) + " columns, B " + std::to_string(b.cols));
    const std::vector<double> ad(a.data.begin(), a.data.end()), bd(b.data.begin(), b.data.end());
    return exact_accumulation(ref::block_operand_from_doubles(ad.data(), a.rows, a.cols),
                              ref::block_operand_from_doubles(bd.data(), b.rows, b.cols), false, 1.0f);
  }
  require(A.spec.element == B.spec.element &&
              (A.spec.element == ElementFormat::BF16 || A.spec.element == ElementFormat::FP16),
          "accumulator sm90: casts are modelled for BF16 x BF16 and FP16 x FP16 (got " + to_string(A.spec.element) +
              " x " + to_string(B.spec.element) + ")");
  return tensor_core_gemm(a, b, sm90_tensor_core_model(A.spec.element == ElementFormat::BF16 ? "bf16" : "fp16"));
}

GemmMatrixF64 gemm_dequantized_f64(const QuantizedTensor& A, const QuantizedTensor& B) {
  return gemm_f64(stored_dequantized(A), stored_dequantized(B));
}

}  // namespace fp4d
