// Tensors into a command from HDF5: an input dataset named "file.h5:/path", read or only
// inspected. Reading only: what a command writes belongs to its trace module
// (trace/quantize_trace.hpp, trace/gemm_trace.hpp, ...).
#pragma once

#include <cstdint>
#include <string>

#include "quant/matrix.hpp"
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

}  // namespace fp4d
