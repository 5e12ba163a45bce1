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
//  Auto:       Lanes where it applies (1x16 blocks, cols % 16 == 0), Simple otherwise.
//  Simple:     one thread per 1x16 block; 16x16 tiles by the strip kernel (a warp per 16 x 64
//              strip) where cols % 16 == 0, the outputs are aligned and SR is not hw, else a
//              half-warp per tile (a lane per row); every layout and shape.
//  Lanes:      1x16 with cols % 16 == 0 only (throws std::invalid_argument otherwise): 4
//              lanes per block (2 for BF16 input), each one 16-byte load, block amax by warp
//              shuffles, one owner lane per block computing its scales, no shared memory; the
//              device-pointer API's fast path. Every rounding mode.
enum class Nvfp4Kernel { Auto, Simple, Lanes };

// Same contract as fp4d::nvfp4_quantize_cpu: x in the stored orientation (blocks along its
// rows), spec.scheme Nvfp4 with 1x16 blocks or 16x16 tiles; fills out.rows/cols/padded_cols/
// scale_rows/scale_cols, codes (rows x padded_cols/2, element 2i in the low nibble, padding
// codes 0), scale_codes, scale_values, global, clipped and (unless dequantize is false)
// dequantized. Throws std::invalid_argument for an unsupported spec and std::runtime_error
// (naming the CUDA call) for a CUDA failure.
void nvfp4_quantize_cuda(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize = true);
void nvfp4_quantize_cuda(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize,
                         Nvfp4Kernel kernel);

// ---- Device-pointer API (benchmarks, fused pipelines). Asynchronous on `stream`. ----
// Input: float32 (d_x) or BF16 given as its raw bits (d_x_bf16, uint16; BF16 -> float32 is
// exact: bits << 16). The BF16 overloads give exactly what the float ones (and the CPU
// backend) give on the float32 values of those BF16 numbers.

// Global amax as its key: *d_amax_key = max over i of (|x_i| bits, NaN -> 0), i.e.
// float_bits(amax) with NaN ignored (as amax_cpu). Zeroes *d_amax_key first (on the stream).
void nvfp4_amax_device(const float* d_x, std::int64_t n, std::uint32_t* d_amax_key, void* stream = nullptr);
void nvfp4_amax_device(const std::uint16_t* d_x_bf16, std::int64_t n, std::uint32_t* d_amax_key,
                       void* stream = nullptr);

// 1x16 quantization of the row-major rows x cols matrix d_x with a given global scale g:
// d_codes (rows * padded_cols / 2 bytes), d_scales (rows * padded_cols / 16 E4M3 codes).
// legacy selects the TE <= 2.13 scale rule. d_bf16_unscaled (optional, nullptr = not written):
// rows x cols row-major BF16 bits of E2M1value(q) * S_b, the dequantized value WITHOUT the
// global decode scale, exact in BF16 (nvfp4-spec.md section 2 step 6: the operand of an
// emulated NVFP4 GEMM). Uses the lanes kernel when cols % 16 == 0, d_x is 16-byte aligned,
// d_codes 2-byte (float) / 4-byte (BF16) aligned and d_bf16_unscaled 8-byte (float) /
// 16-byte (BF16) aligned; the simple kernel otherwise (same results).
void nvfp4_quantize_1x16_device(const float* d_x, std::int64_t rows, std::int64_t cols, GlobalScale g, RoundingSpec r,
                                bool legacy, std::uint8_t* d_codes, std::uint8_t* d_scales, void* stream = nullptr,
                                std::uint16_t* d_bf16_unscaled = nullptr);
void nvfp4_quantize_1x16_device(const std::uint16_t* d_x_bf16, std::int64_t rows, std::int64_t cols, GlobalScale g,
                                RoundingSpec r, bool legacy, std::uint8_t* d_codes, std::uint8_t* d_scales,
                                void* stream = nullptr, std::uint16_t* d_bf16_unscaled = nullptr);
// The same with the global scale computed on the device from the key left by
// nvfp4_amax_device (nvfp4_global_scale(bits_float(*d_amax_key))): amax + quantize with no
// host round trip. The host gets the same GlobalScale from the key with nvfp4_global_scale.
void nvfp4_quantize_1x16_device_from_amax(const float* d_x, std::int64_t rows, std::int64_t cols,
                                          const std::uint32_t* d_amax_key, RoundingSpec r, bool legacy,
                                          std::uint8_t* d_codes, std::uint8_t* d_scales, void* stream = nullptr,
                                          std::uint16_t* d_bf16_unscaled = nullptr);
void nvfp4_quantize_1x16_device_from_amax(const std::uint16_t* d_x_bf16, std::int64_t rows, std::int64_t cols,
                                          const std::uint32_t* d_amax_key, RoundingSpec r, bool legacy,
                                          std::uint8_t* d_codes, std::uint8_t* d_scales, void* stream = nullptr,
                                          std::uint16_t* d_bf16_unscaled = nullptr);

// 16x16 tiles (the 2D weight layout) of the row-major rows x cols d_x, global scale from the
// amax key as above: d_codes (rows x padded_cols / 2 bytes), d_scales (ceil(rows/16) x
// padded_cols/16), optional d_bf16_unscaled (rows x cols) and d_global_out (the GlobalScale
// the kernel used). The 16x16 kernels as Nvfp4Kernel::Simple picks them.
void nvfp4_quantize_16x16_device_from_amax(const float* d_x, std::int64_t rows, std::int64_t cols,
                                           const std::uint32_t* d_amax_key, RoundingSpec r, bool legacy,
                                           std::uint8_t* d_codes, std::uint8_t* d_scales, void* stream = nullptr,
                                           std::uint16_t* d_bf16_unscaled = nullptr,
                                           GlobalScale* d_global_out = nullptr);

}  // namespace fp4d::cuda
