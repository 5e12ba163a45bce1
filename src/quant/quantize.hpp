// One entry point for every quantization on the CPU backend: optional RHT, the scheme's
// quantizer in the stored orientation, dequantized values back in the input's orientation,
// and the error statistics against the exact target.
#pragma once

#include "quant/quantized.hpp"

namespace fp4d {

// A scheme's kernel as a backend provides it (the contract of nvfp4_quantize_cpu: the stored
// orientation in, codes/scales/global/clipped/dequantized out). The RHT, the transposition
// to the stored orientation and the statistics stay on the host, shared by every backend.
using QuantizeKernelFn = void (*)(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize);

// Throws std::invalid_argument for an inconsistent spec or an RHT that does not fit.
QuantizedTensor quantize_cpu(const Matrix& input, const QuantSpec& spec);
// The kernels of another backend, one per scheme (same contract as the CPU's; the cast kernel
// always fills dequantized). A null kernel means the backend has none for that scheme:
// quantizing with it throws std::invalid_argument naming the backend.
struct QuantizeKernels {
  QuantizeKernelFn nvfp4 = nullptr;
  QuantizeKernelFn mxfp4 = nullptr;
  QuantizeKernelFn fp8 = nullptr;
  QuantizeKernelFn cast = nullptr;
};
QuantizedTensor quantize_with_kernels(const Matrix& input, const QuantSpec& spec, const QuantizeKernels& kernels,
                                      const char* backend_name);

// Whether every element is finite; the position of the first that is not, for messages.
bool all_finite(const Matrix& m, std::int64_t* first_bad = nullptr);

}  // namespace fp4d
