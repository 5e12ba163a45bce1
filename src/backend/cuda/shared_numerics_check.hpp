// Host entry points of the device-side check of the shared numerics (plain C++ header: no
// CUDA types, so CPU-compiled tests can include it).
#pragma once

#include <string>

#include "quant/nvfp4_math.hpp"

namespace fp4d::cuda {

// NVFP4 1x16 blocks of x[0 .. 16*blocks) (one row, element index = position) with the TE
// scale rule: codes (packed) and E4M3 scale bytes, computed on the device.
void nvfp4_blocks_on_device(const float* x, int blocks, GlobalScale g, RoundingSpec r, unsigned char* codes,
                            unsigned char* scales);
// Per input: E4M3, E5M2, UE8M0 (ceil rule exponent of |x|) and the BF16 high byte.
void formats_on_device(const float* x, int n, unsigned char* out4);

}  // namespace fp4d::cuda
