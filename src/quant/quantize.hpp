// One entry point for every quantization on the CPU backend: optional RHT, the scheme's
// quantizer in the stored orientation, dequantized values back in the input's orientation,
// and the error statistics against the exact target.
#pragma once

#include "quant/quantized.hpp"

namespace fp4d {

// The NVFP4 kernel a backend provides (same contract as nvfp4_quantize_cpu: the stored
// orientation in, codes/scales/global/clipped/dequantized out). The RHT, the transposition
// to the stored orientation and the statistics stay on the host, shared by every backend.
using Nvfp4QuantizeFn = void (*)(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize);

// Throws std::invalid_argument for an inconsistent spec or an RHT that does not fit.
QuantizedTensor quantize_cpu(const Matrix& input, const QuantSpec& spec);
// The kernels of another backend, one per scheme (same contract as the CPU's; the cast kernel
// always fills dequantized). A null kernel means the backend has none for that scheme:
// quantizing with it throws std::invalid_argument naming the backend.
struct QuantizeKernels {
  Nvfp4QuantizeFn nvfp4 = nullptr;
  Nvfp4QuantizeFn mxfp4 = nullptr;
  Nvfp4QuantizeFn fp8 = nullptr;
  Nvfp4QuantizeFn cast = nullptr;
};
QuantizedTensor quantize_with_kernels(const Matrix& input, const QuantSpec& spec, const QuantizeKernels& kernels,
                                      const char* backend_name);
// The same with only an NVFP4 kernel (other schemes throw std::invalid_argument).
QuantizedTensor quantize_with_nvfp4_kernel(const Matrix& input, const QuantSpec& spec, Nvfp4QuantizeFn nvfp4,
                                           const char* backend_name);

// Whether every element is finite; the position of the first that is not, for messages.
bool all_finite(const Matrix& m, std::int64_t* first_bad = nullptr);

}  // namespace fp4d
