// The CUDA benchmarks (`fp4drift bench quantize-cuda | quantize-dual-cuda | gemm-cuda |
// mlp-cuda | lm-cuda`): their results and entry points. Plain C++ header (no CUDA types).
//
// Implemented above the kernels' public APIs, one file per benchmark (bench_quantize.cu,
// bench_dual.cu, bench_gemm.cu, bench_mlp.cpp, bench_lm.cpp); a build without CUDA links
// backend/no_cuda/bench.cpp instead, whose entries throw BackendUnavailable
// (backend/backend.hpp), so the commands need no #if. Every entry first checks for a usable
// device: std::runtime_error "no usable CUDA device: <why>" otherwise. Kernel timings are the
// best of `repeat` (CUDA events), each repetition from a cold L2 (bench_timer.cuh), on
// deterministic device data (bench_data.cuh). Bytes are decimal (GB = 1e9 B).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/lm_spec.hpp"
#include "model/mlp_spec.hpp"
#include "quant/training_recipe.hpp"

namespace fp4d::cuda {

// ---- bench quantize-cuda ----
enum class InputDtype { F32, Bf16 };

// Timings (seconds) of 1x16 RNE quantization (TE scale rule) of a rows x cols tensor on the
// device, with the byte counts that turn them into bandwidths.
struct Nvfp4BenchResult {
  std::int64_t rows = 0, cols = 0;
  double input_bytes_per_element = 4;
  double amax_and_quantize_s = 0;  // amax kernel + quantize kernel (global scale from the key)
  double quantize_only_s = 0;      // quantize kernel alone (amax key already on the device)
  double amax_only_s = 0;          // amax kernel alone
  double copy_s = 0;               // device-to-device cudaMemcpy of the input's size
  // A tuned read-only pass over the same bytes, for the amax pass (which only reads): CUB's
  // DeviceReduce::Max over the input's whole 32-bit words, its time and the bytes it read.
  double cub_read_s = 0, cub_read_bytes = 0;
  double l2_bytes = 0;             // the device's L2, flushed (read over) before every timed repetition
  // Quantize-only timings of other kernels and outputs, each with the bytes it reads once and
  // writes (its floor at the copy's rate): the 1x16 pass writing the BF16 decodes too and, for
  // float32 input, the 16x16 weight quantizer (the 2D scaling of a resident step's weights).
  struct Variant {
    std::string name;
    double seconds = 0, bytes = 0;
  };
  std::vector<Variant> variants;

  double elements() const { return static_cast<double>(rows) * static_cast<double>(cols); }
  double input_bytes() const { return elements() * input_bytes_per_element; }
  // (a) bytes counted once: input read + codes (0.5 B/elem) + scales (1/16 B/elem).
  double counted_bytes() const { return input_bytes() + elements() * (0.5 + 1.0 / 16.0); }
  // (b) bytes moved by amax + quantize: the amax pass reads the input a second time.
  double moved_bytes_amax_and_quantize() const { return counted_bytes() + input_bytes(); }
  // The roofline: the copy's bandwidth counting read + write.
  double copy_gbps() const { return 2.0 * input_bytes() / copy_s * 1e-9; }
};
Nvfp4BenchResult nvfp4_quantize_cuda_bench(std::int64_t rows, std::int64_t cols, int repeat, InputDtype dtype);

// ---- bench quantize-dual-cuda ----
// Rowwise + columnwise NVFP4 (nvfp4_dual.hpp) of a rows x cols BF16 (or float32) tensor;
// bytes counted = input once + both codes and scales.
struct DualBench {
  double seconds = 0;           // amax pass + quantize pass, back to back
  double amax_seconds = 0;      // the amax pass alone (its key memset and kernel, as the real pass)
  double quantize_seconds = 0;  // the quantize pass alone, from a cold L2
  double counted_bytes = 0;     // input once + both directions' codes and scales
  // The quantize pass alone writing both directions' BF16 decodes too (the resident training
  // step's form), from a cold L2; its counted bytes add 2 x 2 bytes per element.
  double decode_seconds = 0;
  double decode_counted_bytes = 0;
};
// sr: SR on both sides with sr_bits random bits (rounding.hpp: kSrExact, kSrHw or 1..32).
// bf16_input: the input as BF16 (else float32).
DualBench nvfp4_quantize_dual_bench(std::int64_t rows, std::int64_t cols, bool bf16_input, bool rht, bool sr, int sr_bits,
                                    int repeat);
// The floors of the dual pass's byte mixes on this device: a streaming kernel that reads the
// input once and writes as many bytes as the pass (codes and scales; and with both BF16
// decodes), every access a coalesced 16-byte one, nothing computed. Its 1:1 form (a copy) is
// timed beside cudaMemcpy's device-to-device copy of the input, which shows how close it comes
// to the device's own copy. Best of `repeat`, each from a cold L2.
struct DualStreamBench {
  double input_bytes = 0, pass_write_bytes = 0, decode_write_bytes = 0;
  double memcpy_s = 0;         // cudaMemcpyAsync(D2D) of the input
  double stream_copy_s = 0;    // the streaming kernel, writing input_bytes
  double stream_pass_s = 0;    // ... writing pass_write_bytes
  double stream_decode_s = 0;  // ... writing decode_write_bytes
  double memcpy_gbps() const { return 2.0 * input_bytes / memcpy_s * 1e-9; }  // read + write
};
DualStreamBench dual_stream_bench(std::int64_t rows, std::int64_t cols, bool bf16_input, int repeat);

// ---- bench gemm-cuda ----
// BF16 operands A (M x K) and B (N x K) live on the device.
struct GemmCudaBench {
  std::int64_t M = 0, N = 0, K = 0;
  double bf16_s = 0;             // cuBLASLt BF16 GEMM, BF16 inputs, FP32 output
  double nvfp4_s = 0;            // emulated NVFP4 GEMM incl. amax + quantize of both BF16 operands
  double nvfp4_gemm_only_s = 0;  // its GEMM alone (operands already decoded)
  double fp8_s = 0;              // cuBLASLt FP8 E4M3 per-tensor GEMM (operands already FP8)
  double flops() const { return 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K); }
};
GemmCudaBench gemm_cuda_bench(std::int64_t M, std::int64_t N, std::int64_t K, int repeat);

// ---- bench mlp-cuda ----
struct MlpCudaBench {
  std::string recipe;
  std::string launch_mode;  // MlpCudaTrainer::launch_mode
  double step_s = 0;        // mean seconds per step (steady state)
  double steps_per_s = 0;
  std::int64_t steps = 0;
};
// Times `steps` steps (after `warmup`) of the resident trainer (mlp.hpp) on one batch uploaded
// once, by the host's steady clock: the step alone (data generation and transfer excluded, as
// a data loader prefetches them), with its statistics (loss, lost updates) coming back to the
// host every step. graphs: MlpCudaTrainer::set_cuda_graphs.
MlpCudaBench mlp_cuda_bench(const MlpSpec& spec, const RecipeGemmOptions& opt, std::int64_t warmup, std::int64_t steps,
                            bool graphs = true);

// ---- bench lm-cuda ----
struct LmCudaBench {
  std::string recipe;
  std::string launch_mode;  // LmCudaTrainer::launch_mode
  std::int64_t parameters = 0;
  std::int64_t steps = 0;
  double step_s = 0;  // mean seconds per step (steady state)
  // FLOPs of one step counted as 2 M N K per product: the linear layers' three GEMMs, and the
  // attention products (QK^T, PV and their four backward products, causal: half of S^2).
  double linear_flops = 0, attention_flops = 0;
};
// Times `steps` steps (after `warmup`) of the resident lm trainer (lm.hpp) on tokens uploaded
// once, by the host's steady clock, each step's statistics coming back to the host.
LmCudaBench lm_cuda_bench(const LmSpec& spec, const RecipeGemmOptions& opt, std::int64_t warmup, std::int64_t steps);

// The Mamba-2 mixer's kernels of the resident step (lm_mamba_mixer.cuh) alone, on random
// operands of spec's shape, best of `repeat` from a cold L2: the chunked scan's forward kernel,
// the mixer's whole forward and whole backward, and the bytes each must move at the least
// (forward: x, B, C, dt in, y out; backward: the forward's cache and dout in, dzx out) beside
// the device's measured copy bandwidth (read + write). checkpoint_bytes: what the scan backward's
// state checkpoints (written once, read once) add to its traffic.
struct MambaScanBench {
  double forward_s = 0, mixer_forward_s = 0, backward_s = 0;
  double forward_bytes = 0, backward_bytes = 0, checkpoint_bytes = 0;
  double copy_gbps = 0;
  // One backward, kernel by kernel (events between the launches, warm L2): name, seconds.
  std::vector<std::pair<std::string, double>> backward_kernels;
};
MambaScanBench mamba_scan_bench(const LmSpec& spec, int repeat);

}  // namespace fp4d::cuda
