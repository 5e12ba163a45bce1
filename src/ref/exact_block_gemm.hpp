// Exact GEMM of block-scaled operands, C = A * B^T ("NT": A is M x K, B is N x K, blocks
// along K), with a fixed-point (Kulisch-style) accumulator: every block product
//   (sum_{k in block} a_k b_k) * sA * sB
// is an integer times a power of two, so the whole dot product is accumulated exactly and
// rounded once at the end (RNE to double), or returned exactly.
//
// Operand encoding (BlockOperand), element (r, k) in block b = k / block:
//   value = sig[r,k] * 2^(exp_base + exp[r,k])                      (exp empty: all 0)
//         * scale_sig[r,b] * 2^scale_exp[r,b]
//         * global_sig * 2^global_exp
// e.g. NVFP4: sig = 2 * E2M1 value in [-12, 12], exp_base = -1, scale = E4M3 significand
// (<= 15) * 2^e, global = float32 significand (24 bits) * 2^e.
//
// Accumulator: 32-bit digits held in int64 limbs ("lazy carries": every term adds less than
// 2^32 to a limb, so no carry propagates until the end); its width is sized from the exponent
// range actually present and the number of blocks. Where that would exceed
// ExactGemmOptions::max_accumulator_bits, or a block product would not fit 126 bits, the
// call throws std::overflow_error - it never wraps.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ref/mp_scalar.hpp"

namespace fp4d::ref {

struct BlockOperand {
  std::int64_t rows = 0, cols = 0;  // M x K (K = the reduction dimension)
  int block = 16;                   // block length along K (the last block may be partial)
  std::vector<std::int32_t> sig;    // rows * cols, row-major
  std::vector<std::int16_t> exp;    // empty, or rows * cols per-element exponent shifts
  std::int32_t exp_base = 0;        // exponent common to every element
  std::vector<std::int64_t> scale_sig;  // rows * blocks_per_row()
  std::vector<std::int32_t> scale_exp;  // rows * blocks_per_row()
  std::int64_t global_sig = 1;
  std::int32_t global_exp = 0;

  std::int64_t blocks_per_row() const { return block > 0 ? (cols + block - 1) / block : 0; }
  // Throws std::invalid_argument when sizes are inconsistent.
  void validate() const;
  // The exact value of element (r, k), scales and global included.
  ExactValue value(std::int64_t r, std::int64_t k) const;
  // value(r, k) correctly rounded to double.
  double value_double(std::int64_t r, std::int64_t k) const { return value(r, k).to_double(); }
};

struct ExactGemmOptions {
  bool keep_exact = false;              // also return every element exactly
  int max_accumulator_bits = 1 << 14;   // refuse (std::overflow_error) beyond this width
  // Called now and then (never concurrently, at most every `progress_every_s` seconds, from
  // whichever worker finds a report due) with the rows of C done so far and M: a product of
  // hours is then seen to move.
  std::function<void(std::int64_t rows_done, std::int64_t rows)> progress;
  double progress_every_s = 10;
};

struct ExactGemmResult {
  std::int64_t rows = 0, cols = 0;      // M x N
  std::vector<double> rounded;          // RNE to double, row-major
  std::vector<ExactValue> exact;        // when keep_exact
  int accumulator_bits = 0;             // width of the fixed-point accumulator used
  bool fast_path = false;               // small-integer elements summed in int32 per block
};

// C = A * B^T. A.cols must equal B.cols; the block lengths must be equal or one must divide
// the other (the longer blocks are split, each part keeping its scale).
ExactGemmResult exact_block_gemm_nt(const BlockOperand& A, const BlockOperand& B,
                                    const ExactGemmOptions& opt = {});

// Exact product of one row of A with one row of B (no parallelism): for tests and sampling.
ExactValue exact_block_dot(const BlockOperand& A, std::int64_t i, const BlockOperand& B, std::int64_t j);

// A plain dense operand of doubles (block = K, all scales 1, each element as its own
// significand * 2^exponent): the exact product of arbitrary double matrices.
BlockOperand block_operand_from_doubles(const double* x, std::int64_t rows, std::int64_t cols);

}  // namespace fp4d::ref
