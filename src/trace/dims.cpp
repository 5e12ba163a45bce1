#include "trace/dims.hpp"

namespace fp4d::dims {

void coordinate(h5::Dataset ds, const std::string& long_name) {
  ds.make_scale();
  ds.set_attr("long_name", long_name);
}

h5::Dataset index(h5::Group g, const std::string& name, std::uint64_t n, const std::string& long_name) {
  std::vector<std::int64_t> v(n);
  for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<std::int64_t>(i);
  g.write(name, v);
  h5::Dataset ds = g.open_dataset(name);
  coordinate(ds, long_name);
  return ds;
}

void name_axes(h5::Dataset ds, const std::vector<h5::Dataset>& axes, const std::string& units) {
  const std::size_t rank = ds.info().dims.size();
  if (axes.size() != rank)
    throw h5::Error("cannot name the axes of dataset '" + ds.path() + "': " + std::to_string(axes.size()) +
                    " dimensions for " + std::to_string(rank) + " axes");
  for (std::size_t i = 0; i < axes.size(); ++i) ds.attach_scale(axes[i], static_cast<unsigned>(i));
  if (!units.empty()) ds.set_attr("units", units);
}

}  // namespace fp4d::dims
