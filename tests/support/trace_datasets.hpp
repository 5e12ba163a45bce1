// Tests that compare whole traces: every numeric dataset of an HDF5 group, recursively.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trace/h5.hpp"

namespace fp4d::test {

// Every numeric dataset under g as doubles (float32 values and the traces' small integers
// convert exactly), keyed by path from g.
inline void numeric_datasets(const h5::Group& g, const std::string& prefix, std::map<std::string, std::vector<double>>& out) {
  for (const std::string& name : g.children()) {
    const std::string path = prefix + "/" + name;
    if (g.is_group(name)) {
      numeric_datasets(g.open_group(name), path, out);
    } else if (g.is_dataset(name)) {
      const h5::TypeClass c = g.info(name).type_class;
      if (c == h5::TypeClass::Float) out[path] = g.read<double>(name);
      if (c == h5::TypeClass::Integer) {
        const auto v = g.read<std::int64_t>(name);
        out[path].assign(v.begin(), v.end());
      }
    }
  }
}

inline std::map<std::string, std::vector<double>> numeric_datasets(const h5::Group& g) {
  std::map<std::string, std::vector<double>> out;
  numeric_datasets(g, "", out);
  return out;
}

}  // namespace fp4d::test
