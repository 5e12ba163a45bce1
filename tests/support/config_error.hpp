// Test helpers for code that refuses bad input with fp4d::ConfigError (util/config.hpp).
#pragma once

#include <string>

#include "util/config.hpp"

namespace fp4d_test {

// The message of the ConfigError that f throws ("" if none).
template <class F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const fp4d::ConfigError& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace fp4d_test
