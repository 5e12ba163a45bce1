// The --backend option shared by the subcommands.
#include "commands.hpp"

namespace fp4d::cli {

const Backend& select_backend(const std::string& name) {
  if (!is_backend_name(name)) throw UsageError("--backend must be cpu or cuda, got '" + name + "'");
  const Backend& b = backend_named(name);
  try {
    b.require_available();
  } catch (const BackendUnavailable& e) {
    throw UsageError("--backend " + name + ": " + e.what());
  }
  return b;
}

}  // namespace fp4d::cli
