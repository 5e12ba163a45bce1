// Tensors in and out of HDF5: reading an input dataset named "file.h5:/path", and writing
// a quantization result in the layout of docs/trace-format.md ("quantize").
#pragma once

#include <string>

#include "quant/quantized.hpp"
#include "trace/h5.hpp"

namespace fp4d {

struct TensorSource {
  std::string file;
  std::string dataset;
  std::string text() const { return file + ":" + dataset; }
};

// "file.h5:/path/to/x" (split at the last ':' followed by '/'). Throws std::invalid_argument.
TensorSource parse_tensor_source(const std::string& s);

// Reads a 1-D (-> 1 x n) or 2-D float32/float64 dataset. dims receives the dataset's own
// shape. Throws h5::Error or std::invalid_argument with a one-line message naming the
// file, the dataset and what is wrong (missing, rank, type, empty).
// The element limit kMaxTensorElements (util/checked_size.hpp) applies to the declared
// dims before anything is allocated (SizeError, naming the dataset and the limit).
Matrix read_matrix(const TensorSource& src, h5::Dims* dims = nullptr);

// What read_matrix would return, from the dataset's declaration alone (nothing is read),
// with the same checks and errors: for sizing a command's memory before the read.
struct MatrixShape {
  std::int64_t rows = 0, cols = 0;
  h5::Dims dims;  // the dataset's own shape
};
MatrixShape inspect_matrix(const TensorSource& src);

// One quantization under group g: attributes describing the spec, codes, scales,
// dequantized (with the input's dims), transformed (RHT), and a "stats" subgroup.
void write_quantized(h5::Group g, const QuantizedTensor& q, const h5::Dims& input_dims);

}  // namespace fp4d
