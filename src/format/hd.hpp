// Host/device qualifiers for code that must be compiled identically by the host
// compiler (CPU backend) and by nvcc (CUDA backend). Everything that decides a
// rounding - element conversion, scale math, the RNG - lives in headers marked
// FP4D_HD, so that the two backends agree bit for bit by construction.
#pragma once

#if defined(__CUDACC__)
#define FP4D_HD __host__ __device__ __forceinline__
#else
// Forced inline on the host too: these are tiny and sit in the innermost loops.
#define FP4D_HD inline __attribute__((always_inline))
#endif

#include <cstdint>
#include <cstring>

namespace fp4d {

// Bit casts usable on host and device (std::bit_cast is not available in device code
// for every toolkit; on the host __builtin_bit_cast keeps the vectoriser able to see
// through the conversion, which a memcpy does not always allow).
FP4D_HD std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(std::uint32_t, x);
#endif
}

FP4D_HD float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

FP4D_HD std::uint64_t double_bits(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(x));
#else
  return __builtin_bit_cast(std::uint64_t, x);
#endif
}

FP4D_HD double bits_double(std::uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  return __builtin_bit_cast(double, u);
#endif
}

FP4D_HD float abs_f32(float x) { return bits_float(float_bits(x) & 0x7fffffffu); }
// CUDA's __byte_perm(x, y, s): byte n of the result is byte ((s >> 4n) & 7) of the eight bytes
// x (0..3) and y (4..7), little endian. The device form is one PRMT instruction.
FP4D_HD std::uint32_t byte_perm(std::uint32_t x, std::uint32_t y, std::uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const std::uint64_t in = (static_cast<std::uint64_t>(y) << 32) | x;
  std::uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<std::uint32_t>((in >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
  return r;
#endif
}

FP4D_HD bool is_nan_f32(float x) { return (float_bits(x) & 0x7fffffffu) > 0x7f800000u; }
FP4D_HD bool is_finite_f32(float x) { return (float_bits(x) & 0x7f800000u) != 0x7f800000u; }
FP4D_HD bool sign_bit_f32(float x) { return (float_bits(x) >> 31) != 0u; }

// max that ignores NaN (as fmaxf and the CUDA amax kernels do): the NaN policy of the
// quantizers is decided elsewhere, not by accident of comparison order.
FP4D_HD float max_ignore_nan(float a, float b) {
  if (is_nan_f32(a)) return b;
  if (is_nan_f32(b)) return a;
  return a > b ? a : b;
}

constexpr float kFltMax = 3.40282346638528859812e+38f;

}  // namespace fp4d
