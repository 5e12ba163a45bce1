// Tests that compare whole traces: every numeric dataset of an HDF5 group, recursively, and
// the trace of one run_mlp call.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "sim/mlp_run.hpp"
#include "support/catch.hpp"
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

using Datasets = std::map<std::string, std::vector<double>>;

// run_mlp(spec, ctl) into a temporary file `name`.h5; its numeric datasets (the file removed).
inline Datasets run_mlp_datasets(const MlpRunSpec& spec, MlpRunControl ctl, const std::string& name) {
  ctl.path = (std::filesystem::temp_directory_path() / (name + ".h5")).string();
  std::filesystem::remove(ctl.path);
  REQUIRE(run_mlp(spec, ctl) == MlpRunOutcome::Complete);
  Datasets d;
  {
    const h5::File f = h5::File::open_read(ctl.path);
    d = numeric_datasets(f.root());
  }
  std::filesystem::remove(ctl.path);
  return d;
}

// The same datasets, element for element, bit for bit (NaN payloads included).
inline void check_same_datasets(const Datasets& a, const Datasets& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [path, x] : a) {
    INFO(path);
    REQUIRE(b.count(path) == 1);
    const auto& y = b.at(path);
    REQUIRE(x.size() == y.size());
    CHECK(std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
  }
}

}  // namespace fp4d::test
