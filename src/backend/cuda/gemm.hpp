// Low-precision GEMMs on the GPU's tensor cores, C = A B^T in the stored orientation
// (A: M x K, B: N x K, blocks along K), for the operands the CPU quantizers produce (the GPU
// quantizers produce the same bits). Plain C++ header: no CUDA types.
//
// How each scheme runs on an sm_90 GPU, which has no FP4 instructions (nvfp4-spec.md 2, 7):
//  NVFP4  the elements are decoded to BF16 *without* the global scale, q * S (E2M1 value times
//         the E4M3 block scale): exact in BF16 (at most 6 significant bits, magnitudes in
//         [2^-10, 2688]); one cuBLASLt BF16 GEMM with FP32 accumulation; the global factor
//         g = fl(s_dec^A s_dec^B) (the CPU emulation's g) is the epilogue alpha.
//  MXFP4  q * 2^e decoded to BF16 (exact while it stays inside BF16's range, checked), BF16 GEMM,
//         alpha 1.
//  FP8    per-tensor scaled E4M3/E5M2 operands go to cuBLASLt's FP8 GEMM (FP8 tensor cores) with
//         the two decode scales as its A/B scale factors; `fp8_fast_accumulation` selects
//         cuBLASLt's fast-accumulation mode (no periodic promotion of the partial sums to FP32).
//         Blocked FP8 (A in 1x128 blocks, B in 1x128 blocks or 128x128 tiles: the fp8 recipe's
//         operands) uses cuBLASLt's VEC128_32F / BLK128x128_32F scale modes: every block's decode
//         scale applied to its partial sum by the GEMM (no fast accumulation there).
//  Casts  BF16 / FP16 operands: one cuBLASLt GEMM in that type with FP32 accumulation.
// The tensor cores' summation order and accumulator width are the hardware's: this is what
// `fp4drift gemm --backend cuda` measures against the exact product (docs/numerics.md). Only
// cuBLASLt algorithms without split-K are taken (LtGemm::k_order), so every output is summed in
// ascending k as the CPU's sm90 model (quant/tensor_core_model.hpp) assumes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/accumulator_probe.hpp"
#include "quant/matrix.hpp"
#include "quant/quantized.hpp"

namespace fp4d::cuda {

struct GpuGemmOptions {
  bool fp8_fast_accumulation = false;  // FP8 only: CUBLASLT_MATMUL_DESC_FAST_ACCUM
  bool free_algorithm = false;         // any cuBLASLt algorithm (split-K too); default: k order only
};

// C (M x N, float32) computed on the GPU. Throws std::invalid_argument for operand pairs without
// a GPU path (the message says which), std::runtime_error naming the CUDA/cuBLAS call on failure.
Matrix gemm_quantized_cuda(const QuantizedTensor& A, const QuantizedTensor& B, const GpuGemmOptions& opt = {});
// One line naming the GPU path gemm_quantized_cuda takes for these operands (for traces).
std::string gemm_quantized_cuda_path(const QuantizedTensor& A, const QuantizedTensor& B, const GpuGemmOptions& opt = {});

// The unscaled BF16 decode of an NVFP4 or MXFP4 operand that the GPU GEMM multiplies (stored
// orientation, rows x ld, columns >= cols zero): bits of q * S (NVFP4) or q * 2^e (MXFP4).
// Throws std::domain_error if a value is not exactly representable in BF16.
std::vector<std::uint16_t> unscaled_bf16_operand(const QuantizedTensor& q, std::int64_t ld);

// ---- Accumulator probes (docs/numerics.md, "Tensor-core accumulation") ----
// Each probe is one GEMM whose rows are dot products 1 * 1 + (2^-t) * 1 placed in chosen K
// positions (all other products zero), for t = 1 .. max_t; `kept_bits` is the largest t for
// which the GPU returned 1 + 2^-t exactly: the number of bits below the leading bit of the
// running sum that survive an addition. FP32 with round-to-nearest keeps 23.
// One result per (path, placement, K): the seam's type (backend/accumulator_probe.hpp), which the
// CUDA backend hands on as measured.
using fp4d::AccumulatorProbe;
std::vector<AccumulatorProbe> probe_accumulators(const std::vector<std::int64_t>& ks);

}  // namespace fp4d::cuda
