#include "backend/cuda/quantize.hpp"

#include "backend/cuda/block_quantize.hpp"
#include "backend/cuda/nvfp4.hpp"
#include "quant/quantize.hpp"

namespace fp4d::cuda {

namespace {
void nvfp4(const Matrix& x, const QuantSpec& s, QuantizedTensor& q, bool d) { nvfp4_quantize_cuda(x, s, q, d); }
void mxfp4(const Matrix& x, const QuantSpec& s, QuantizedTensor& q, bool d) { mxfp4_quantize_cuda(x, s, q, d); }
void fp8(const Matrix& x, const QuantSpec& s, QuantizedTensor& q, bool d) { fp8_quantize_cuda(x, s, q, d); }
void cast(const Matrix& x, const QuantSpec& s, QuantizedTensor& q, bool d) { cast_quantize_cuda(x, s, q, d); }
}  // namespace

QuantizedTensor quantize_cuda(const Matrix& input, const QuantSpec& spec) {
  return quantize_with_kernels(input, spec, QuantizeKernels{nvfp4, mxfp4, fp8, cast}, "cuda");
}

}  // namespace fp4d::cuda
