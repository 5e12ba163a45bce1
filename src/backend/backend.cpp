#include "backend/backend.hpp"

namespace fp4d {

const std::vector<std::string>& backend_names() {
  static const std::vector<std::string> names{"cpu", "cuda"};
  return names;
}

bool is_backend_name(std::string_view name) {
  for (const std::string& n : backend_names())
    if (n == name) return true;
  return false;
}

const Backend& backend_named(std::string_view name) {
  if (name == "cpu") return cpu_backend();
  if (name == "cuda") return cuda_backend();
  throw std::invalid_argument("must be cpu or cuda, got '" + std::string(name) + "'");
}

}  // namespace fp4d
