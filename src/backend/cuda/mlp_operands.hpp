// The resident mlp step's quantized GEMM operands read back from the device in quantize_cpu's
// stored orientation and layout, so that tests can compare the GPU's quantization with the
// CPU's bit for bit. mlp.cu knows which device buffer holds which operand; this knows how such
// a buffer maps onto a QuantizedTensor. Plain C++ header: the pointers are device addresses.
#pragma once

#include <cstdint>

#include "quant/nvfp4_math.hpp"
#include "quant/quantized.hpp"

namespace fp4d::cuda {

// Where one operand lies on the device, as the step stored it.
struct DeviceOperand {
  enum class Kind { None, Bf16, Nvfp4 };
  Kind kind = Kind::None;                // None: an fp32 layer (nothing quantized)
  const std::uint16_t* bf16 = nullptr;   // Bf16: rows x cols bit patterns
  const std::uint8_t* codes = nullptr;   // Nvfp4: rows x cols / 2 packed E2M1 codes
  const std::uint8_t* scales = nullptr;  // Nvfp4: the E4M3 block scales
  const GlobalScale* global = nullptr;   // Nvfp4: the tensor's global scale
  std::int64_t rows = 0, cols = 0;       // as stored (cols % 16 == 0)
  bool tiles = false;                    // Nvfp4: 16x16 tiles rather than 1x16 blocks along rows
  // The operand is the stored tensor's transpose (Bf16; Nvfp4 with tiles only: a 1x16 side
  // is its own orientation, the columnwise side already stored transposed).
  bool transpose = false;
};

// Downloads (synchronously) and lays out as quantize_cpu does; an empty tensor for Kind::None.
QuantizedTensor download_operand(const DeviceOperand& d);

}  // namespace fp4d::cuda
