// Emulated low-precision GEMMs of the CPU backend: C = A * B^T in float32 with the
// block-scaled semantics of nvfp4-spec.md section 2 step 7 (NVFP4), the same structure for
// MXFP4 and FP8 scaled, and the "dequantize, then FP32 GEMM" model.
//
// Operands are in their *stored orientation* (docs/architecture.md): A is M x K
// (A.rows = M, A.cols = K), B is N x K, blocks run along K (1xL blocks of the stored rows, or
// LxL tiles), so C(i, j) = sum_k A(i, k) B(j, k). A Wgrad/Dgrad operand quantized with axis 0 is
// already stored transposed; the caller passes it as it is.
//
// Every float32 operation, in order (the build uses -ffp-contract=off: no FMA anywhere), for
// AccumulationOrder::Sequential. Per output element C(i, j), with L the K-block length,
// nb = ceil(K / L) blocks, block b covering k in [b L, min(K, (b+1) L)):
//
//   p_b   = 0;  for k ascending in block b:  p_b = p_b + (a_k * b_k)        element values
//   t_b   = block term (per scheme, below)
//   acc   = 0;  for b = 0 .. nb-1 ascending:  acc = acc + t_b               one FP32 accumulator
//   C     = acc * g      (NVFP4 only: g = s_dec^A * s_dec^B, one float32 product)
//
// NVFP4 (L = 16, E2M1 codes, E4M3 block scales S, float32 global decode scales s_dec):
//   t_b = p_b * (S_b^A * S_b^B)          - the scale product first, as the spec writes it
//                                         ("S_b^A S_b^B * sum q^A q^B") and as block-scaled MMA
//                                         hardware applies one combined scale factor per block.
//   All of p_b, S^A S^B and t_b are EXACT in float32: products of E2M1 values are multiples of
//   1/4 with |.| <= 36, so |p_b| <= 576 is an integer multiple of 1/4 below 2^12 units (12 bits);
//   S^A S^B has at most 4 + 4 = 8 significant bits and lies in [2^-18, 448^2]; t_b therefore
//   has at most 20 significant bits and stays normal. So (p_b * S^A) * S^B would give the same
//   bits: the choice only matters for formats whose block terms are not exact.
//   Roundings seen by any term: nb - 1 accumulation additions (the first addition 0 + t_0 is
//   exact) + 1 for g + 1 for acc * g. Hence, against the exact value E = sum_k q^A q^B S^A S^B
//   s_dec^A s_dec^B (the GEMM's own exact semantics):
//       |C - E| <= gamma_n * sum_k |q^A q^B S^A S^B s_dec^A s_dec^B|,  n = nb + 1,
//   gamma_n = n u / (1 - n u), u = 2^-24. Against the exact product R of the float32 dequantized
//   operands x_hat = fl((q S) s_dec) (each one more rounding), n = nb + 3 and sum |x_hat^A x_hat^B|
//   / (1 - u)^2 replaces the sum (gamma_a + gamma_b <= gamma_{a+b}).
//   Note for the GPU backend: TE/cuBLAS pass the global factor as an epilogue alpha that the
//   framework computes itself (e.g. from the two amaxes); fp4drift's g = fl(s_dec^A s_dec^B)
//   from the stored float32 decode scales is the definition here, and a kernel must use the
//   same g to agree bit for bit.
//
// MXFP4 (L = 32, E2M1 codes, UE8M0 scales 2^e):
//   t_b = p_b * 2^(e_b^A + e_b^B), rounded once (std::ldexp): exact unless the result leaves the
//   float32 normal range (p_b is exact as for NVFP4: |p_b| <= 1152, a multiple of 1/4). No global
//   scale. Roundings per term: nb - 1 (n = max(nb - 1, 0)), no under/overflow assumed.
//   The MXFP4 dequantized values e2m1 * 2^e are exact, so R = E here.
//
// FP8 scaled (E4M3/E5M2 codes, float32 decode scales d): per-tensor, 1x128 blocks or 128x128
// tiles. L = 128 for blocks/tiles; a per-tensor operand has one scale for every block; if both
// are per-tensor, L = K (one block: the FP32 GEMM with the scale product applied at the end).
//   t_b = p_b * (d_b^A * d_b^B)          - the scale product first, as for NVFP4.
//   Products of FP8 values are exact (<= 8 significant bits) but p_b is rounded: roundings per
//   term (min(L, K) - 1) additions in p_b + 2 (scale product, multiply) + (nb - 1) additions,
//   n = min(L, K) + nb. Against R: n + 2 as for NVFP4 (x_hat = fl(value * d)).
//   For a 128x128-tiled B the scale of B(j, k) is that of tile (j / 128, k / 128).
//   Accumulator sm90 (both operands per tensor; E4M3 or E5M2 elements, not both E5M2, which
//   cuBLASLt has no GEMM for): the GPU path's FP8 GEMM (backend/cuda/gemm.hpp: FP8 codes, the
//   decode scales as cuBLASLt's A/B scale factors, alpha 1). With x_k, y_k the decoded FP8 element
//   values (exact, without the scales) and m = sm90_tensor_core_model(A's format, B's format):
//     acc = tensor_core_dot_promoted(x, y, K, 0, 128, m)   without fast accumulation (partial
//                                                         sums added to FP32 every 128 products)
//     acc = tensor_core_dot(x, y, K, 0, m)                 with fp8_fast_accumulation
//     C   = fl(fl(d^A * d^B) * acc)                        float32, round to nearest even
//   The two accumulations are the H200's bit for bit (E4M3 x E4M3 and E5M2 x E4M3, decode scales
//   1, K up to 4096: quant/tensor_core_model.hpp). The epilogue's order is a hypothesis: cuBLASLt
//   documents D = alpha * scale_A * scale_B * (A B) without saying how it rounds that product.
//   The GPU path pads K with zeros to a multiple of 16; zero products change no model value.
//
// Dequantize-then-FP32 (gemm_dequantized_fp32 / gemm_fp32):
//   acc = 0; for k = 0 .. K-1: acc = acc + (a_k * b_k)   - each product rounded to float32, then
//   added. |C - R| <= gamma_K * sum_k |a_k b_k|. The f64 variant forms each product exactly in
//   double (24 + 24 <= 53 bits) and accumulates in double in the same order: an "accumulation
//   error free" comparison up to gamma_{K-1} with u = 2^-53.
//
// Threads: OpenMP over the rows of C; each element's operations and their order are fixed, so
// the result is bit-identical for any number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/matrix.hpp"
#include "quant/quantized.hpp"

namespace fp4d {

// How the emulated GEMMs accumulate (`--accumulator`, the `accumulator` key of run configs).
//   fp32-sequential  the loops above: one FP32 accumulator, +0 to start, terms in ascending K,
//                    round to nearest (the CPU emulation's arithmetic since the first release).
//   sm90             the arithmetic of the GPU path on Hopper (backend/cuda/gemm.hpp): NVFP4 and
//                    MXFP4 elements times their block scales as BF16 values (exact), BF16 and FP16
//                    casts as they are, each output the tensor-core model's dot product
//                    (quant/tensor_core_model.hpp: blocks of 16 products aligned to the largest
//                    exponent with 2 extra bits, truncated, blocks in ascending K), then the
//                    global factor g (NVFP4) as cuBLASLt's epilogue alpha: C = fl(g * acc). The
//                    model is the H200's bit for bit for BF16 where cuBLASLt sums in k order
//                    (docs/findings.md). FP8 with both operands per-tensor scaled as cuBLASLt's
//                    FP8 GEMM computes it (below); FP8 with 1x128 blocks or 128x128 tiles is
//                    refused (std::invalid_argument): how cuBLASLt applies per-block scales on
//                    sm90 is not measured.
//   exact            every product times its block scale product, summed exactly (the
//                    fixed-point reference, scale products exact), rounded once to float32
//                    (RNE), then C = fl(g * acc) for NVFP4: the error that is left is the
//                    operands' and one rounding's.
enum class Accumulator {
  Fp32Sequential,
  Sm90,
  Exact,
};
std::string to_string(Accumulator);
// The names above; throws std::invalid_argument listing them for any other.
Accumulator parse_accumulator(const std::string& name);
const std::vector<std::string>& accumulator_names();

struct EmulatedGemmOptions {
  Accumulator accumulator = Accumulator::Fp32Sequential;
  // sm90, FP8 operands: cuBLASLt's fast-accumulation mode (CUBLASLT_MATMUL_DESC_FAST_ACCUM, no
  // promotion of partial sums to FP32). Off by default, as cuBLASLt's default and the GPU path's
  // unless asked (GemmProductOptions::fp8_fast_accumulation). Read by the sm90 accumulator only.
  bool fp8_fast_accumulation = false;
};

// A row-major double matrix (results of the f64 variants).
struct GemmMatrixF64 {
  std::int64_t rows = 0, cols = 0;
  std::vector<double> data;
  double operator()(std::int64_t r, std::int64_t c) const { return data[static_cast<std::size_t>(r * cols + c)]; }
};

// Block-scaled emulations. Each throws std::invalid_argument when an operand has the wrong
// scheme or layout, or when A.cols != B.cols (K, stored orientation).
//   NVFP4: both operands NVFP4 (1x16 blocks or 16x16 tiles, any mix).
Matrix gemm_nvfp4_emulated(const QuantizedTensor& A, const QuantizedTensor& B, const EmulatedGemmOptions& opt = {});
//   MXFP4: both operands MXFP4 (1x32 blocks).
Matrix gemm_mxfp4_emulated(const QuantizedTensor& A, const QuantizedTensor& B, const EmulatedGemmOptions& opt = {});
//   FP8 scaled: per-tensor, 1x128 or 128x128 (any mix; two blocked operands must share L);
//   accumulator sm90: both per-tensor.
Matrix gemm_fp8_emulated(const QuantizedTensor& A, const QuantizedTensor& B, const EmulatedGemmOptions& opt = {});
// Dispatch on A.spec.scheme (Cast operands are refused: use gemm_dequantized_fp32).
Matrix gemm_block_scaled_emulated(const QuantizedTensor& A, const QuantizedTensor& B,
                                  const EmulatedGemmOptions& opt = {});

// The n of the bound |C - E| <= gamma_n * sum |exact terms| for the block-scaled emulation of
// these operands (see above); validates like the GEMMs.
std::int64_t emulated_gemm_rounding_count(const QuantizedTensor& A, const QuantizedTensor& B);

// Dequantized values in the stored orientation (from QuantizedTensor::dequantized, which is in
// the input orientation). Throws if the tensor carries no dequantized values.
Matrix stored_dequantized(const QuantizedTensor& q);

// Dequantize-then-GEMM: C = deq(A) deq(B)^T (stored orientation), FP32 or double accumulation.
// For casts (BF16, FP16, ... operands) this is the GEMM itself and takes every accumulator (sm90:
// BF16 and FP16 only); for block-scaled operands only fp32-sequential (std::invalid_argument).
Matrix gemm_dequantized_fp32(const QuantizedTensor& A, const QuantizedTensor& B, const EmulatedGemmOptions& opt = {});
GemmMatrixF64 gemm_dequantized_f64(const QuantizedTensor& A, const QuantizedTensor& B);

// Plain matrices: C = A B^T with A M x K, B N x K (same orders as above).
Matrix gemm_fp32(const Matrix& A, const Matrix& B);
GemmMatrixF64 gemm_f64(const Matrix& A, const Matrix& B);

}  // namespace fp4d
