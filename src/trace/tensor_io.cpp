#include "trace/tensor_io.hpp"

#include <stdexcept>

#include "util/checked_size.hpp"

namespace fp4d {

TensorSource parse_tensor_source(const std::string& s) {
  const auto pos = s.rfind(":/");
  if (pos == std::string::npos || pos == 0 || pos + 2 > s.size())
    throw std::invalid_argument("input '" + s + "' is not of the form FILE.h5:/dataset");
  return TensorSource{s.substr(0, pos), s.substr(pos + 1)};
}

namespace {

h5::Dataset open_input(const h5::File& f, const TensorSource& src) {
  const h5::Group root = f.root();
  if (!root.is_dataset(src.dataset))
    throw std::invalid_argument("dataset '" + src.dataset + "' not found in '" + src.file + "'");
  return root.open_dataset(src.dataset);
}

MatrixShape checked_shape(const h5::Dataset& d, const TensorSource& src) {
  const h5::DatasetInfo info = d.info();
  if (info.type_class != h5::TypeClass::Float)
    throw std::invalid_argument("dataset '" + src.text() + "' is " + info.type_name +
                                ", expected float32 or float64");
  if (info.dims.size() != 1 && info.dims.size() != 2)
    throw std::invalid_argument("dataset '" + src.text() + "' has rank " + std::to_string(info.dims.size()) +
                                ", expected a 1-D or 2-D tensor");
  const std::string what = "dataset '" + src.text() + "'";
  for (const std::uint64_t d : info.dims) {
    if (d == 0) throw std::invalid_argument(what + " is empty");
    // A single dim over the limit would turn negative as int64 below; the product's
    // message is the same either way.
    if (d > static_cast<std::uint64_t>(kMaxTensorElements))
      throw SizeError(what + " declares dims " + std::to_string(info.dims.front()) +
                      (info.dims.size() == 2 ? " x " + std::to_string(info.dims.back()) : std::string()) +
                      ", over the limit of " + kMaxTensorElementsText + " elements per tensor");
  }
  MatrixShape s;
  s.dims = info.dims;
  s.rows = info.dims.size() == 1 ? 1 : static_cast<std::int64_t>(info.dims[0]);
  s.cols = static_cast<std::int64_t>(info.dims.back());
  (void)checked_elements(s.rows, s.cols, what);
  return s;
}

}  // namespace

MatrixShape inspect_matrix(const TensorSource& src) {
  h5::File f = h5::File::open_read(src.file);
  return checked_shape(open_input(f, src), src);
}

Matrix read_matrix(const TensorSource& src, h5::Dims* dims_out) {
  h5::File f = h5::File::open_read(src.file);
  const h5::Dataset d = open_input(f, src);
  const MatrixShape shape = checked_shape(d, src);
  h5::Dims dims;
  Matrix m;
  m.data = d.read<float>(&dims);  // float64 is rounded to float32 (RNE) by HDF5
  m.rows = shape.rows;
  m.cols = shape.cols;
  if (dims_out) *dims_out = dims;
  return m;
}

}  // namespace fp4d
