// Low-precision GEMMs on the tensor cores through cuBLASLt (see gemm.hpp for the
// semantics of each scheme) and the accumulator probes. The layout conventions and the
// cuBLASLt plan are in lt_gemm.cuh.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/lt_gemm.cuh"
#include "format/bf16.hpp"
#include "format/e2m1.hpp"
#include "format/fp8.hpp"

namespace fp4d::cuda {

namespace {

std::int64_t round_up(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }


void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("gemm --backend cuda: " + what);
}

// The element types and scales of the GPU path, validated.
struct PathInfo {
  enum Kind { Fp4ViaBf16, Cast, Fp8 } kind = Cast;
  cudaDataType_t ta = CUDA_R_16BF, tb = CUDA_R_16BF;
  std::string name;
};

bool is_fp8_1x128(const QuantSpec& s) { return s.block_rows == 1 && s.block_cols == 128; }

// The block-scaled FP8 GEMM's scale tensors, laid out as cuBLASLt's VEC128_32F and
// BLK128x128_32F modes read them (the layouts NVIDIA's Transformer Engine allocates for its
// 1D / 2D block scaling, confirmed on the H200 by tests/gpu/test_gpu_gemm.cpp):
//  1x128 (VEC128_32F): K-block major, [ceil(K/128)][round_up(rows, 4)] - the transpose of
//    fp4drift's row-major [rows][ceil(K/128)], with rows padded to a multiple of 4;
//  128x128 (BLK128x128_32F): tile-row major, [ceil(rows/128)][round_up(ceil(K/128), 4)] -
//    fp4drift's layout with each tile row padded to a multiple of 4 tiles.
// The padding entries are never applied to an element; they are set to 1.
std::int64_t round_up4(std::int64_t n) { return (n + 3) / 4 * 4; }
// q's [scale_rows][scale_cols] scales, transposed when k_major, with the inner dimension padded
// to a multiple of 4 (padding 1).
std::vector<float> padded_scales(const QuantizedTensor& q, bool k_major) {
  const std::int64_t outer = k_major ? q.scale_cols : q.scale_rows, ld = round_up4(k_major ? q.scale_rows : q.scale_cols);
  std::vector<float> t(static_cast<std::size_t>(outer * ld), 1.0f);
  for (std::int64_t r = 0; r < q.scale_rows; ++r)
    for (std::int64_t c = 0; c < q.scale_cols; ++c)
      t[static_cast<std::size_t>(k_major ? c * ld + r : r * ld + c)] =
          q.scale_values[static_cast<std::size_t>(r * q.scale_cols + c)];
  return t;
}
bool is_fp8_128x128(const QuantSpec& s) { return s.block_rows == 128 && s.block_cols == 128; }

cudaDataType_t fp8_type(const QuantizedTensor& q) { return q.spec.element == ElementFormat::E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; }

PathInfo path_of(const QuantizedTensor& A, const QuantizedTensor& B, const GpuGemmOptions& opt) {
  require(A.spec.scheme == B.spec.scheme, std::string("both operands must use the same scheme (got ") +
                                              to_string(A.spec.scheme) + " and " + to_string(B.spec.scheme) + ")");
  require(A.cols == B.cols, "K mismatch in the stored orientation (" + std::to_string(A.cols) + " vs " +
                                std::to_string(B.cols) + ")");
  PathInfo p;
  switch (A.spec.scheme) {
    case Scheme::Nvfp4:
    case Scheme::Mxfp4:
      p.kind = PathInfo::Fp4ViaBf16;
      p.name = std::string(to_string(A.spec.scheme)) + ": elements x block scales decoded to BF16 (exact), cuBLASLt BF16 GEMM, FP32 accumulation" +
               (A.spec.scheme == Scheme::Nvfp4 ? ", global scale as epilogue alpha" : "");
      return p;
    case Scheme::Cast:
      require(A.spec.element == B.spec.element, "both cast operands must have the same element format");
      require(A.spec.element == ElementFormat::BF16 || A.spec.element == ElementFormat::FP16,
              "casts run on the GPU for BF16 and FP16 only");
      p.ta = p.tb = A.spec.element == ElementFormat::BF16 ? CUDA_R_16BF : CUDA_R_16F;
      p.name = A.spec.element == ElementFormat::BF16 ? "bf16: cuBLASLt BF16 GEMM, FP32 accumulation"
                                                     : "fp16: cuBLASLt FP16 GEMM, FP32 accumulation";
      return p;
    case Scheme::Fp8:
      // Per tensor, or DeepSeek-style blocks through cuBLASLt's block scale modes: A (the
      // activation or gradient) in 1x128 blocks, B in 1x128 blocks or 128x128 tiles.
      require((A.spec.per_tensor() && B.spec.per_tensor()) ||
                  (is_fp8_1x128(A.spec) && (is_fp8_1x128(B.spec) || is_fp8_128x128(B.spec))),
              "FP8 operands must both be per-tensor, or A 1x128 and B 1x128 / 128x128 (cuBLASLt's block scale modes)");
      require(A.spec.per_tensor() || !opt.fp8_fast_accumulation,
              "cuBLASLt has no fast accumulation for block-scaled FP8");
      p.kind = PathInfo::Fp8;
      p.ta = fp8_type(A);
      p.tb = fp8_type(B);
      require(!(p.ta == CUDA_R_8F_E5M2 && p.tb == CUDA_R_8F_E5M2), "cuBLASLt has no E5M2 x E5M2 FP8 GEMM");
      p.name = A.spec.per_tensor()
                   ? std::string("fp8 per-tensor: cuBLASLt FP8 GEMM (FP8 tensor cores), decode scales as A/B scale factors") +
                         (opt.fp8_fast_accumulation ? ", fast accumulation" : "")
                   : std::string("fp8 blocked: cuBLASLt FP8 GEMM with block scales (A 1x128, B ") +
                         (is_fp8_128x128(B.spec) ? "128x128" : "1x128") + ", VEC128/BLK128x128 scale modes)";
      return p;
  }
  throw std::invalid_argument("gemm --backend cuda: unknown scheme");
}

// Row-major rows x ld copy of a cast operand's 16-bit codes (zero padding).
std::vector<std::uint16_t> padded_codes16(const QuantizedTensor& q, std::int64_t ld) {
  std::vector<std::uint16_t> v(static_cast<std::size_t>(q.rows * ld), 0);
  for (std::int64_t r = 0; r < q.rows; ++r)
    std::copy_n(q.codes16.begin() + r * q.cols, q.cols, v.begin() + r * ld);
  return v;
}

std::vector<std::uint8_t> padded_codes8(const QuantizedTensor& q, std::int64_t ld) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(q.rows * ld), 0);
  for (std::int64_t r = 0; r < q.rows; ++r)
    for (std::int64_t k = 0; k < q.cols; ++k) v[static_cast<std::size_t>(r * ld + k)] = q.code_at(r, k);
  return v;
}

}  // namespace

std::vector<std::uint16_t> unscaled_bf16_operand(const QuantizedTensor& q, std::int64_t ld) {
  require(q.spec.scheme == Scheme::Nvfp4 || q.spec.scheme == Scheme::Mxfp4, "unscaled BF16 decode needs an FP4 operand");
  require(ld >= q.cols, "leading dimension below the column count");
  const std::int64_t bc = q.spec.block_cols, br = q.spec.is_2d() ? q.spec.block_rows : 1;
  require(bc > 0 && q.scale_values.size() == static_cast<std::size_t>(q.scale_rows * q.scale_cols),
          "FP4 operand without its block scales");
  std::vector<std::uint16_t> out(static_cast<std::size_t>(q.rows * ld), 0);
  for (std::int64_t r = 0; r < q.rows; ++r)
    for (std::int64_t k = 0; k < q.cols; ++k) {
      const double s = q.scale_values[static_cast<std::size_t>((r / br) * q.scale_cols + k / bc)];
      const double v = static_cast<double>(e2m1_decode(q.code_at(r, k))) * s;  // exact in double
      const float f = static_cast<float>(v);
      const std::uint32_t bits = float_bits(f);
      if (static_cast<double>(f) != v || (bits & 0xffffu) != 0 || !std::isfinite(f))
        throw std::domain_error("element (" + std::to_string(r) + ", " + std::to_string(k) + ") = " + std::to_string(v) +
                                " of the " + to_string(q.spec.scheme) +
                                " operand is not exactly representable in BF16: no exact GPU path");
      out[static_cast<std::size_t>(r * ld + k)] = static_cast<std::uint16_t>(bits >> 16);
    }
  return out;
}

std::string gemm_quantized_cuda_path(const QuantizedTensor& A, const QuantizedTensor& B, const GpuGemmOptions& opt) {
  return path_of(A, B, opt).name;
}

Matrix gemm_quantized_cuda(const QuantizedTensor& A, const QuantizedTensor& B, const GpuGemmOptions& opt) {
  const PathInfo p = path_of(A, B, opt);
  const std::int64_t M = A.rows, N = B.rows, K = A.cols;
  Matrix C(M, N);
  if (M == 0 || N == 0) return C;
  if (K == 0) return C;  // empty sum: zeros, as the CPU emulation
  // K padded with zeros to a multiple of 16 elements, and the GEMM run over the padded K: rows
  // 16-byte aligned for every type (FP8 kernels require it), and every kernel's MMA blocks start
  // at multiples of 16 whatever its k-tile. Given K = 100, cuBLASLt's BF16/FP16 kernel on the
  // H200 takes the partial k-tile first (64-wide tiles: blocks [0,16) [16,32) [32,36) [36,52) ..),
  // which rounds differently from blocks [0,16) .. [96,100); over the padded K a partial tile is
  // a multiple of 16 long, its blocks are the model's, and the all-zero blocks change nothing
  // (docs/numerics.md 8b).
  const std::int64_t ld = round_up(K, 16);
  DeviceBuffer<float> d_c(static_cast<std::size_t>(M * N), "cudaMalloc (C)");
  LtGemm g;
  g.M = M, g.N = N, g.K = ld, g.ld_k = ld, g.d = d_c.p, g.ta = p.ta, g.tb = p.tb;
  // A known summation order: the CPU's sm90 model is compared with these products.
  g.k_order = !opt.free_algorithm;
  float alpha = 1.0f;
  g.alpha = &alpha;
  if (p.kind == PathInfo::Fp4ViaBf16) {
    if (A.spec.scheme == Scheme::Nvfp4) alpha = A.global.decode * B.global.decode;  // the emulation's g
    DeviceBuffer<std::uint16_t> a(unscaled_bf16_operand(A, ld), "cudaMemcpy (A)"), b(unscaled_bf16_operand(B, ld), "cudaMemcpy (B)");
    g.a = a.p, g.b = b.p;
    lt_matmul(g, nullptr);
    check(cudaMemcpy(C.data.data(), d_c.p, C.data.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (C)");
  } else if (p.kind == PathInfo::Cast) {
    DeviceBuffer<std::uint16_t> a(padded_codes16(A, ld), "cudaMemcpy (A)"), b(padded_codes16(B, ld), "cudaMemcpy (B)");
    g.a = a.p, g.b = b.p;
    lt_matmul(g, nullptr);
    check(cudaMemcpy(C.data.data(), d_c.p, C.data.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (C)");
  } else {
    require(!A.scale_values.empty() && !B.scale_values.empty(), "FP8 operand without its scale");
    DeviceBuffer<std::uint8_t> a(padded_codes8(A, ld), "cudaMemcpy (A)"), b(padded_codes8(B, ld), "cudaMemcpy (B)");
    // One allocation per scale tensor (aligned as cuBLASLt requires): the per-tensor decode
    // scale, or every block's, in the layouts cuBLASLt's block modes read (lt_gemm.cuh).
    const bool blocked = !A.spec.per_tensor();
    const auto scales = [&](const QuantizedTensor& q) {
      if (!blocked) return std::vector<float>{q.scale_values[0]};
      return padded_scales(q, is_fp8_1x128(q.spec));
    };
    DeviceBuffer<float> sa(scales(A), "cudaMemcpy (scale A)"), sb(scales(B), "cudaMemcpy (scale B)");
    g.a = a.p, g.b = b.p, g.scale_a = sa.p, g.scale_b = sb.p;
    if (blocked) {
      g.scale_mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      g.scale_mode_b = is_fp8_128x128(B.spec) ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                              : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    }
    g.fast_accumulation = opt.fp8_fast_accumulation;
    lt_matmul(g, nullptr);
    check(cudaMemcpy(C.data.data(), d_c.p, C.data.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (C)");
  }
  return C;
}

// ---------------------------------------------------------------------------------------------
// Accumulator probes.

namespace {

struct ProbeFormat {
  const char* path;
  cudaDataType_t type;
  int emin, emax;  // exponents of the powers of two the input format represents (subnormals included)
  bool fast = false;
  std::uint16_t (*encode16)(float) = nullptr;  // BF16 / FP16 bits of a power of two
  bool fp8 = false;
};

std::uint16_t bf16_bits_of(float x) { return bf16_rne_bits(x); }
std::uint16_t fp16_bits_of(float x) {
  const __half h = __float2half_rn(x);
  std::uint16_t b;
  std::memcpy(&b, &h, sizeof b);
  return b;
}
std::uint8_t e4m3_bits_of(float x) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// C = A B^T of a probe's operands (row-major M x ld and N x ld floats, exact in the format) on
// the GPU in format f, float32 out; k_order: only algorithms that sum in k order (LtGemm).
std::vector<float> probe_product(const ProbeFormat& f, const std::vector<float>& a, const std::vector<float>& b,
                                 std::int64_t M, std::int64_t N, std::int64_t K, std::int64_t ld, bool k_order) {
  DeviceBuffer<float> d_c(static_cast<std::size_t>(M * N), "cudaMalloc (probe C)");
  LtGemm g;
  g.M = M, g.N = N, g.K = K, g.ld_k = ld, g.d = d_c.p, g.ta = g.tb = f.type;
  g.k_order = k_order;
  float one = 1.0f;
  g.alpha = &one;
  std::vector<float> c(static_cast<std::size_t>(M * N));
  if (f.fp8) {
    std::vector<std::uint8_t> a8(a.size()), b8(b.size());
    std::transform(a.begin(), a.end(), a8.begin(), e4m3_bits_of);
    std::transform(b.begin(), b.end(), b8.begin(), e4m3_bits_of);
    DeviceBuffer<std::uint8_t> da(a8, "cudaMemcpy (probe A)"), db(b8, "cudaMemcpy (probe B)");
    DeviceBuffer<float> sa(std::vector<float>{1.0f}, "cudaMemcpy (probe scale)"), sb(std::vector<float>{1.0f}, "cudaMemcpy");
    g.a = da.p, g.b = db.p, g.scale_a = sa.p, g.scale_b = sb.p, g.fast_accumulation = f.fast;
    lt_matmul(g, nullptr);
    check(cudaMemcpy(c.data(), d_c.p, c.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (probe C)");
  } else {
    std::vector<std::uint16_t> a16(a.size()), b16(b.size());
    std::transform(a.begin(), a.end(), a16.begin(), f.encode16);
    std::transform(b.begin(), b.end(), b16.begin(), f.encode16);
    DeviceBuffer<std::uint16_t> da(a16, "cudaMemcpy (probe A)"), db(b16, "cudaMemcpy (probe B)");
    g.a = da.p, g.b = db.p;
    lt_matmul(g, nullptr);
    check(cudaMemcpy(c.data(), d_c.p, c.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy (probe C)");
  }
  return c;
}

// Row t - 1 probes 1 + 2^-t (times a power of two): big product at k_big, small one at k_small.
// Two B rows give two scalings: j = 0: B = 1 at both positions; j = 1: B = 2^emax at k_big and
// 2^emin at k_small, which stretches the representable ratio for narrow formats (FP8).
AccumulatorProbe run_probe(const ProbeFormat& f, std::int64_t K, const char* placement, std::int64_t k_big,
                           std::int64_t k_small) {
  constexpr int kMaxT = 40;
  const std::int64_t M = 48, N = 16, ld = round_up(K, 16);
  std::vector<float> a(static_cast<std::size_t>(M * ld), 0.0f), b(static_cast<std::size_t>(N * ld), 0.0f);
  std::vector<int> column(kMaxT + 1, -1);
  std::vector<float> expected(kMaxT + 1, 0.0f);
  const int a_big = std::min(f.emax, 8);  // moderate magnitudes: the products stay far from overflow
  for (std::int64_t j = 0; j < N; ++j) {
    const bool stretched = j == 1;
    b[static_cast<std::size_t>(j * ld + k_big)] = std::ldexp(1.0f, stretched ? f.emax : 0);
    b[static_cast<std::size_t>(j * ld + k_small)] = std::ldexp(1.0f, stretched ? f.emin : 0);
  }
  int max_t = 0;
  for (int t = 1; t <= kMaxT; ++t) {
    for (int j = 0; j < 2 && column[t] < 0; ++j) {
      const int bb = j ? f.emax : 0, bs = j ? f.emin : 0;
      const int a_small = a_big + bb - bs - t;
      if (a_small < f.emin || a_small > f.emax) continue;
      column[t] = j;
      a[static_cast<std::size_t>((t - 1) * ld + k_big)] = std::ldexp(1.0f, a_big);
      a[static_cast<std::size_t>((t - 1) * ld + k_small)] = std::ldexp(1.0f, a_small);
      expected[t] = std::ldexp(1.0f, a_big + bb) + std::ldexp(1.0f, a_big + bb - t);  // exact in float for t <= 23
    }
    if (column[t] < 0) break;
    max_t = t;
  }
  const std::vector<float> c = probe_product(f, a, b, M, N, K, ld, false);
  AccumulatorProbe p;
  p.path = f.path;
  p.placement = placement;
  p.K = K;
  p.max_t = std::min(max_t, 23);  // 1 + 2^-t is a float32 only up to t = 23
  for (int t = 1; t <= p.max_t; ++t) {
    if (c[static_cast<std::size_t>((t - 1) * N + column[t])] != expected[t]) break;
    p.kept_bits = t;
  }
  return p;
}

// The promotion probe (accumulator_probe.hpp): row 0 of A and B hold 1 at k = 0 and 2^-9 at
// every other k (2^-9 is exact in every probed format, E4M3's smallest subnormal), so the
// products are 1 and K - 1 times 2^-18; the result is 1 + (small products kept) 2^-18, exact in
// float32 for K <= 2^23.
AccumulatorProbe run_promotion_probe(const ProbeFormat& f, std::int64_t K) {
  const std::int64_t M = 16, N = 16, ld = round_up(K, 16);
  std::vector<float> a(static_cast<std::size_t>(M * ld), 0.0f), b(static_cast<std::size_t>(N * ld), 0.0f);
  for (std::int64_t k = 0; k < K; ++k) a[static_cast<std::size_t>(k)] = b[static_cast<std::size_t>(k)] = k == 0 ? 1.0f : 0x1p-9f;
  const std::vector<float> c = probe_product(f, a, b, M, N, K, ld, true);
  AccumulatorProbe p;
  p.path = f.path;
  p.placement = "promotion";
  p.K = K;
  const double kept = (static_cast<double>(c[0]) - 1.0) * 0x1p18;
  p.promoted_small_terms = kept == std::floor(kept) && kept >= 0 ? static_cast<std::int64_t>(kept) : -2;  // -2: not 1 + m 2^-18
  return p;
}

}  // namespace

std::vector<AccumulatorProbe> probe_accumulators(const std::vector<std::int64_t>& ks) {
  const ProbeFormat formats[] = {
      {"bf16", CUDA_R_16BF, -133, 127, false, bf16_bits_of, false},
      {"fp16", CUDA_R_16F, -24, 15, false, fp16_bits_of, false},
      {"fp8-e4m3", CUDA_R_8F_E4M3, -9, 8, false, nullptr, true},
      {"fp8-e4m3-fast-accum", CUDA_R_8F_E4M3, -9, 8, true, nullptr, true},
  };
  std::vector<AccumulatorProbe> out;
  for (const std::int64_t K : ks) {
    if (K < 32 || K % 16 != 0) throw std::invalid_argument("accumulator probe: K must be a multiple of 16 and >= 32");
    for (const ProbeFormat& f : formats) {
      out.push_back(run_probe(f, K, "adjacent", 0, 1));
      out.push_back(run_probe(f, K, "far", 0, K - 1));
      out.push_back(run_probe(f, K, "small-first", K - 1, 0));
      out.push_back(run_promotion_probe(f, K));
    }
  }
  return out;
}

}  // namespace fp4d::cuda
