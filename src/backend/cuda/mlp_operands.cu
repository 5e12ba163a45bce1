// Device operands of the resident mlp step in quantize_cpu's layout (mlp_operands.hpp). Host
// code only: cudaMemcpy and index arithmetic.
#include "backend/cuda/mlp_operands.hpp"

#include <cuda_runtime.h>

#include <vector>

#include "backend/cuda/cuda_util.cuh"

namespace fp4d::cuda {

namespace {

template <class T>
std::vector<T> download_vec(const T* p, std::size_t n) {
  std::vector<T> v(n);
  if (n) check(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy (operand)");
  return v;
}

GlobalScale download_global(const GlobalScale* p) {
  GlobalScale g;
  check(cudaMemcpy(&g, p, sizeof g, cudaMemcpyDeviceToHost), "cudaMemcpy (global scale)");
  return g;
}

// A 1x16 or 16x16 NVFP4 operand as quantize_cpu lays it out (rows x cols, cols % 16 == 0).
QuantizedTensor nv_tensor(const DeviceOperand& d) {
  QuantizedTensor t;
  t.spec.scheme = Scheme::Nvfp4;
  t.spec.block_rows = d.tiles ? 16 : 1;
  t.rows = d.rows, t.cols = d.cols, t.padded_cols = d.cols;
  t.scale_rows = d.tiles ? d.rows / 16 : d.rows, t.scale_cols = d.cols / 16;
  t.codes = download_vec(d.codes, static_cast<std::size_t>(d.rows * d.cols / 2));
  t.scale_codes = download_vec(d.scales, static_cast<std::size_t>(t.scale_rows * t.scale_cols));
  t.global = download_global(d.global);
  return t;
}

// The transpose of a 16x16-tiled NVFP4 tensor (the same tiles, read the other way).
QuantizedTensor transpose_tiles(const QuantizedTensor& a) {
  QuantizedTensor t = a;
  t.rows = a.cols, t.cols = a.rows, t.padded_cols = a.rows;
  t.scale_rows = a.scale_cols, t.scale_cols = a.scale_rows;
  for (std::int64_t r = 0; r < t.rows; ++r)
    for (std::int64_t c = 0; c < t.cols; ++c) {
      const std::uint8_t q = a.code_at(c, r);
      auto& byte = t.codes[static_cast<std::size_t>((r * t.cols + c) / 2)];
      byte = static_cast<std::uint8_t>(c % 2 ? (byte & 0x0f) | (q << 4) : (byte & 0xf0) | q);
    }
  for (std::int64_t r = 0; r < t.scale_rows; ++r)
    for (std::int64_t c = 0; c < t.scale_cols; ++c)
      t.scale_codes[static_cast<std::size_t>(r * t.scale_cols + c)] = a.scale_codes[static_cast<std::size_t>(c * a.scale_cols + r)];
  return t;
}

QuantizedTensor bf16_tensor(const DeviceOperand& d) {
  const std::int64_t rows = d.rows, cols = d.cols;
  const bool transpose = d.transpose;
  QuantizedTensor t;
  t.spec.scheme = Scheme::Cast;
  t.spec.element = ElementFormat::BF16;
  const std::vector<std::uint16_t> v = download_vec(d.bf16, static_cast<std::size_t>(rows * cols));
  t.rows = transpose ? cols : rows, t.cols = transpose ? rows : cols, t.padded_cols = t.cols;
  t.codes16.resize(v.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      t.codes16[static_cast<std::size_t>(transpose ? c * rows + r : r * cols + c)] = v[static_cast<std::size_t>(r * cols + c)];
  return t;
}

}  // namespace

QuantizedTensor download_operand(const DeviceOperand& d) {
  switch (d.kind) {
    case DeviceOperand::Kind::None: return {};
    case DeviceOperand::Kind::Bf16: return bf16_tensor(d);
    case DeviceOperand::Kind::Nvfp4: return d.transpose ? transpose_tiles(nv_tensor(d)) : nv_tensor(d);
  }
  return {};
}

}  // namespace fp4d::cuda
