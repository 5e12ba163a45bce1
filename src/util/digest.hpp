// A running 64-bit checksum of byte streams (FNV-1a, http://www.isthe.com/chongo/tech/comp/fnv/):
// what a checkpoint records of the data it must find again on resume. It detects damage, not
// tampering: any one changed byte changes it, and unrelated data collide with probability
// about 2^-64. Its state is its value, so a stream can be continued from a stored digest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fp4d {

class Fnv1a64 {
 public:
  static constexpr std::uint64_t kOffsetBasis = 0xcbf29ce484222325ULL;
  static constexpr std::uint64_t kPrime = 0x100000001b3ULL;

  explicit Fnv1a64(std::uint64_t state = kOffsetBasis) : h_(state) {}
  void add(const void* data, std::size_t bytes) {
    const auto* b = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) h_ = (h_ ^ b[i]) * kPrime;
  }
  template <class T>
  void add(const std::vector<T>& v) {
    add(v.data(), v.size() * sizeof(T));
  }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_;
};

}  // namespace fp4d
