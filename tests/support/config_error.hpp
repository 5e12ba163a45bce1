// Test helpers for code that refuses bad input with fp4d::ConfigError (util/config.hpp).
#pragma once

#include <string>
#include <utility>

#include "support/thrown.hpp"
#include "util/config.hpp"

namespace fp4d_test {

// The message of the ConfigError that f throws ("" if none).
template <class F>
std::string config_error_of(F&& f) {
  return message_of<fp4d::ConfigError>(std::forward<F>(f));
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace fp4d_test
