// The BF16 operand policy of the lm's sequence mixers (LmPrecision::bf16_mixers): attention's
// products and the Mamba scan read their operands rounded to BF16 (RNE) in the float run; the
// reference (any wider T) has no rounding and refuses the flag. One definition for
// sim/lm_attention.cpp and sim/lm_mamba.cpp.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

#include "format/bf16.hpp"

namespace fp4d::mixer {

// Throws std::invalid_argument naming `what` when bf16 is asked of a T other than float.
template <class T>
void check_bf16(bool bf16, const char* what) {
  if constexpr (!std::is_same_v<T, float>) {
    if (bf16) throw std::invalid_argument(std::string("lm: BF16 ") + what + " need T = float (the reference has no rounding)");
  }
}

// x, or x rounded to BF16 (RNE) when bf16 (float only).
template <class T>
T operand(const T& x, bool bf16) {
  if constexpr (std::is_same_v<T, float>) return bf16 ? bf16_round(x) : x;
  else return x;
}

}  // namespace fp4d::mixer
