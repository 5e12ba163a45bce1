// Rowwise + columnwise NVFP4 quantization of one tensor in one pass over it, the way a
// training step needs an activation or a gradient: rowwise 1x16 blocks along the rows (the
// Fprop / Dgrad operand) and columnwise 1x16 blocks along the columns, optionally after the
// 16-point RHT along the columns (the Wgrad operand, stored transposed). Plain C++ header.
//
// Semantics: exactly quantize_cpu(x, row_spec) and quantize_cpu(x, col_spec) with
//   row_spec: NVFP4 1x16, axis 1, no RHT;
//   col_spec: NVFP4 1x16, axis 0 (stored transposed), RHT off or size 16 along axis 0;
// each with its own rounding (RNE/RZ/exact or k-bit SR, its own Philox stream) and its own
// global scale (the columnwise one from the amax of the RHT output, as the spec says).
// Two kernels: one reads x to find both amaxes (recomputing the RHT), one reads x again and
// writes both quantizations (and, if asked, their BF16 decodes), so x is read twice in all and
// never written back transformed.
// rows and cols must be multiples of 16.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/matrix.hpp"
#include "quant/nvfp4_math.hpp"
#include "quant/quantized.hpp"
#include "quant/spec.hpp"

namespace fp4d::cuda {

struct DualSpec {
  RoundingSpec row_rounding{}, col_rounding{};
  bool legacy = false;           // TE <= 2.13 block-scale rule (both directions)
  bool col_rht = false;          // RHT-16 along the columns before the columnwise quantization
  std::uint32_t rht_sign_mask = 0;  // bit i set: sign -1 on element i of each 16-run
  bool rht_bf16_output = false;  // the RHT output rounded to BF16 (RhtSpec::bf16_output)
  // Set: both directions' SR seed is read from this device word when the kernel runs (the
  // resident training step replays one captured CUDA graph with a new seed each step).
  const std::uint64_t* device_seed = nullptr;
};
// The spec pair as a DualSpec; throws std::invalid_argument if the pair is not of that form.
DualSpec dual_spec(const QuantSpec& row_spec, const QuantSpec& col_spec);

// Device buffers (all sizes in bytes): row codes rows*cols/2, row scales rows*cols/16, col codes
// cols*rows/2 (stored transposed: row c of the transpose holds column c), col scales
// cols*rows/16; globals[0] = rowwise, globals[1] = columnwise global scale (written);
// d_keys: 2 words of scratch. Optional: row_bf16 (rows x cols) and col_bf16 (cols x rows,
// transposed like the column codes), the emulated GEMM's BF16 operands (nvfp4_unscaled_bf16
// of every code with its block scale, exact), written by the same pass so that no decode pass
// re-reads the codes; and the alphas below. Alignment (cudaMalloc's 256 bytes satisfy all):
// the input, the column codes and the BF16 outputs 16 bytes, the row codes and column scales
// 8, the row scales and alphas 4; a null (but for the optional ones; an alpha needs its
// partner) or misaligned buffer throws std::invalid_argument naming it, before anything is
// launched. Asynchronous on `stream`.
struct DualOutputs {
  std::uint8_t* row_codes = nullptr;
  std::uint8_t* row_scales = nullptr;
  std::uint8_t* col_codes = nullptr;
  std::uint8_t* col_scales = nullptr;
  GlobalScale* globals = nullptr;
  std::uint16_t* row_bf16 = nullptr;
  std::uint16_t* col_bf16 = nullptr;
  // Optional, each with its partner: the epilogue factors {alpha, beta} of the emulated GEMMs
  // that read a side of this quantization with an operand whose global scale is already
  // final (partner, device memory): {fl(s_dec * partner->decode), 0}, s_dec this side's
  // global decode scale. Written by the same pass, so that no kernel of its own waits to
  // make them.
  const GlobalScale* row_alpha_partner = nullptr;
  float* row_alpha = nullptr;
  const GlobalScale* col_alpha_partner = nullptr;
  float* col_alpha = nullptr;
};
void nvfp4_quantize_dual_device(const float* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                                const DualOutputs& out, std::uint32_t* d_keys, void* stream = nullptr);
// The same for BF16 input (raw bits; BF16 -> float32 is exact).
void nvfp4_quantize_dual_device(const std::uint16_t* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                                const DualOutputs& out, std::uint32_t* d_keys, void* stream = nullptr);
// The shapes every dual entry point takes (rows and cols positive multiples of 16, at most
// 2^30); throws std::invalid_argument otherwise. For callers that check before allocating.
void nvfp4_quantize_dual_check_shape(std::int64_t rows, std::int64_t cols);
// Its two passes one at a time (the benchmark times each): the amax pass (zeroes d_keys and
// leaves both amax keys there) and the quantize pass (reads d_keys, writes `out`). Same shape
// and buffer checks (the amax pass: the input and d_keys only).
void nvfp4_quantize_dual_amax_pass(const float* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                                   std::uint32_t* d_keys, void* stream = nullptr);
void nvfp4_quantize_dual_amax_pass(const std::uint16_t* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                                   std::uint32_t* d_keys, void* stream = nullptr);
void nvfp4_quantize_dual_quantize_pass(const float* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                                       const DualOutputs& out, const std::uint32_t* d_keys, void* stream = nullptr);
void nvfp4_quantize_dual_quantize_pass(const std::uint16_t* d_x, std::int64_t rows, std::int64_t cols,
                                       const DualSpec& spec, const DualOutputs& out, const std::uint32_t* d_keys,
                                       void* stream = nullptr);

// Host convenience (tests): codes, scale codes and global scales of both quantizations, and
// with bf16_outputs their BF16 decodes (row_bf16 rows x cols, col_bf16 cols x rows; empty
// otherwise); with alpha_partners (two: the row side's, the column side's) the alphas
// DualOutputs describes (else left at 0). bf16_input: x goes to the device as BF16 (the BF16 kernels); every element must
// then be a BF16 value (throws std::invalid_argument otherwise), so the CPU's float
// quantization of x is the reference for both.
struct DualHostResult {
  std::vector<std::uint8_t> row_codes, row_scales, col_codes, col_scales;
  GlobalScale row_global{}, col_global{};
  std::vector<std::uint16_t> row_bf16, col_bf16;
  float row_alpha[2] = {0, 0}, col_alpha[2] = {0, 0};
};
DualHostResult nvfp4_quantize_dual_cuda(const Matrix& x, const QuantSpec& row_spec, const QuantSpec& col_spec,
                                        bool bf16_input = false, bool bf16_outputs = true,
                                        const GlobalScale* alpha_partners = nullptr);

}  // namespace fp4d::cuda
