// NVFP4 quantization on the GPU (nvfp4-spec.md section 2), bit-identical to the CPU
// backend's nvfp4_quantize_cpu / nvfp4_quantize_reference. Plain C++ header (no CUDA types):
// CPU-compiled tests and the CLI include it; streams are passed as void* (a cudaStream_t,
// nullptr = the legacy default stream).
//
// Every rounding decision goes through the shared FP4D_HD functions (nvfp4_block_scale_code,
// nvfp4_block_encode_scale, clamp_e2m1_range, e2m1_rne/rz/round with the element index
// r * padded_cols + c as the Philox counter, e4m3_decode, nvfp4_dequantize), compiled with
// --fmad=false, so that the two backends agree by construction.
#pragma once

#include <cstdint>

#include "format/rounding.hpp"
#include "quant/matrix.hpp"
#include "quant/nvfp4_math.hpp"
#include "quant/quantized.hpp"
#include "quant/spec.hpp"

namespace fp4d::cuda {

// Which quantize kernel the host wrapper launches.
//  Auto:       Vectorized where it applies (1x16 blocks, cols % 16 == 0), Simple otherwise.
//  Simple:     one thread per 1x16 block or 16x16 tile; every layout and shape.
//  Vectorized: 1x16 with cols % 16 == 0 only (throws std::invalid_argument otherwise): one
//              float4 per thread, 4 adjacent lanes per block (block amax by warp shuffles),
//              coalesced loads and stores. Every rounding mode.
enum class Nvfp4Kernel { Auto, Simple, Vectorized };

// Same contract as fp4d::nvfp4_quantize_cpu: x in the stored orientation (blocks along its
// rows), spec.scheme Nvfp4 with 1x16 blocks or 16x16 tiles; fills out.rows/cols/padded_cols/
// scale_rows/scale_cols, codes (rows x padded_cols/2, element 2i in the low nibble, padding
// codes 0), scale_codes, scale_values, global, clipped and (unless dequantize is false)
// dequantized. Throws std::invalid_argument for an unsupported spec and std::runtime_error
// (naming the CUDA call) for a CUDA failure.
void nvfp4_quantize_cuda(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize = true);
void nvfp4_quantize_cuda(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize,
                         Nvfp4Kernel kernel);

// ---- Device-pointer API (benchmarks, later fused pipelines). Asynchronous on `stream`. ----

// Global amax as its key: *d_amax_key = max over i of (|x_i| bits, NaN -> 0), i.e.
// float_bits(amax) with NaN ignored (as amax_cpu). Zeroes *d_amax_key first (on the stream).
void nvfp4_amax_device(const float* d_x, std::int64_t n, std::uint32_t* d_amax_key, void* stream = nullptr);

// 1x16 quantization of the row-major rows x cols matrix d_x with a given global scale g:
// d_codes (rows * padded_cols / 2 bytes), d_scales (rows * padded_cols / 16 E4M3 codes).
// legacy selects the TE <= 2.13 scale rule. Uses the vectorised kernel when cols % 16 == 0
// and d_x is 16-byte aligned, the simple one otherwise.
void nvfp4_quantize_1x16_device(const float* d_x, std::int64_t rows, std::int64_t cols, GlobalScale g, RoundingSpec r,
                                bool legacy, std::uint8_t* d_codes, std::uint8_t* d_scales, void* stream = nullptr);
// The same with the global scale computed on the device from the key left by
// nvfp4_amax_device (nvfp4_global_scale(bits_float(*d_amax_key))): amax + quantize with no
// host round trip.
void nvfp4_quantize_1x16_device_from_amax(const float* d_x, std::int64_t rows, std::int64_t cols,
                                          const std::uint32_t* d_amax_key, RoundingSpec r, bool legacy,
                                          std::uint8_t* d_codes, std::uint8_t* d_scales, void* stream = nullptr);

// Benchmark: a rows x cols float32 tensor on the device (deterministic values), timed with
// CUDA events, best of `repeat`: amax + 1x16 RNE quantize (TE scale rule), and a
// device-to-device cudaMemcpy of the input's size. Returns the quantize time in seconds;
// *copy_gbps (if not null) gets the copy bandwidth in GB/s (1e9 B/s) counting bytes read +
// written (2 * 4 B/elem). Effective quantize bandwidth: nvfp4_quantize_bench_bytes / time.
// *quantize_only_s (if not null) gets the quantize kernel alone (global scale read from the
// amax key left on the device), best of `repeat`.
double nvfp4_quantize_cuda_bench(std::int64_t rows, std::int64_t cols, int repeat, double* copy_gbps,
                                 double* quantize_only_s = nullptr);
// Bytes counted for the quantize benchmark: input read (4 B/elem) + codes (0.5 B/elem) +
// scales (1/16 B/elem).
inline double nvfp4_quantize_bench_bytes(std::int64_t rows, std::int64_t cols) {
  const double n = static_cast<double>(rows) * static_cast<double>(cols);
  return n * 4.0 + n * 0.5 + n / 16.0;
}

}  // namespace fp4d::cuda
