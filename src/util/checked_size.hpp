// Checked arithmetic for element counts and byte sizes. Every size fp4drift forms from
// user input (shapes, widths, HDF5 dims) goes through these, so that a product too large
// for its type is refused with a message naming the quantity instead of wrapping into a
// small or negative size (a segfault, or a huge input read as "empty").
//
// Header-only and free of compiler builtins: the CUDA front end parses the headers that
// include it (quant/matrix.hpp).
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace fp4d {

// A size that cannot be represented or is over a stated limit. Derived from
// std::invalid_argument: it is bad input, which the CLI reports on one line with exit 2.
struct SizeError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The most elements fp4drift accepts in one tensor (an operand, an input dataset, a
// product, a weight matrix): 2^40, i.e. 4 TiB as float32 and 8 TiB as double - more than
// any single host this runs on has, so nothing below the limit is refused for being too
// large a number, only (by the memory check) for not fitting the machine at hand. The
// limit also leaves headroom: an element count times a byte size or a small multiplier
// (2^40 * 2^20) stays far inside int64, and every index is exact as a double (< 2^53).
inline constexpr std::int64_t kMaxTensorElements = std::int64_t{1} << 40;
inline constexpr const char* kMaxTensorElementsText = "2^40";

// a * b for counts. SizeError naming `what` if either is negative or the product does not
// fit in int64.
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const std::string& what) {
  if (a < 0 || b < 0)
    throw SizeError(what + ": negative size (" + std::to_string(a) + " x " + std::to_string(b) + ")");
  if (a != 0 && b > std::numeric_limits<std::int64_t>::max() / a)
    throw SizeError(what + ": " + std::to_string(a) + " x " + std::to_string(b) + " overflows a 64-bit size");
  return a * b;
}

inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const std::string& what) {
  if (a < 0 || b < 0)
    throw SizeError(what + ": negative size (" + std::to_string(a) + " + " + std::to_string(b) + ")");
  if (b > std::numeric_limits<std::int64_t>::max() - a)
    throw SizeError(what + ": " + std::to_string(a) + " + " + std::to_string(b) + " overflows a 64-bit size");
  return a + b;
}

// The unsigned forms, for byte counts and HDF5 dims (hsize_t is 64-bit unsigned).
inline std::uint64_t checked_mul_u64(std::uint64_t a, std::uint64_t b, const std::string& what) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a)
    throw SizeError(what + ": " + std::to_string(a) + " x " + std::to_string(b) + " overflows a 64-bit size");
  return a * b;
}

inline std::uint64_t checked_add_u64(std::uint64_t a, std::uint64_t b, const std::string& what) {
  if (b > std::numeric_limits<std::uint64_t>::max() - a)
    throw SizeError(what + ": " + std::to_string(a) + " + " + std::to_string(b) + " overflows a 64-bit size");
  return a + b;
}

// rows * cols for a tensor that is about to exist; SizeError, naming `what` and the limit,
// beyond kMaxTensorElements (or on overflow, or a negative dimension).
inline std::int64_t checked_elements(std::int64_t rows, std::int64_t cols, const std::string& what) {
  if (rows < 0 || cols < 0) (void)checked_mul(rows, cols, what);  // the negative-size message
  const std::string over = std::string(" elements, over the limit of ") + kMaxTensorElementsText + " elements per tensor";
  if (rows != 0 && cols > std::numeric_limits<std::int64_t>::max() / rows)
    throw SizeError(what + ": " + std::to_string(rows) + " x " + std::to_string(cols) + " = more than 2^63" + over);
  const std::int64_t n = rows * cols;
  if (n > kMaxTensorElements)
    throw SizeError(what + ": " + (rows == 1 ? std::string() : std::to_string(rows) + " x " + std::to_string(cols) + " = ") +
                    std::to_string(n) + over);
  return n;
}

}  // namespace fp4d
