// NVFP4 quantization kernels (nvfp4-spec.md section 2), bit-identical to the CPU backend.
// Input element types: float32 and BF16 (raw uint16 bits; BF16 -> float is exact: bits << 16).
//
//  amax_kernel<In>     grid-stride max of the |x| bit patterns (NaN -> 0) as uint32 keys: an
//                      unsigned max is exact, so the warp and block reductions and the atomicMax give the
//                      same result in any order (deterministic).
//  quantize_simple<In> one thread per 1x16 block: the spec's loop, every shape, partial blocks
//                      zero-padded (padding codes 0).
//  quantize_16x16_strip<R>  16x16 tiles of float input, cols % 16 == 0, aligned outputs, every
//                      rounding but hw SR: a warp per 16 x 64 strip, a lane per 4 columns of
//                      8 rows, the tile amax by __shfl_xor among a tile's 8 lanes.
//  quantize_16x16<In>  16x16 tiles otherwise: a half-warp per tile, a lane per row, the tile
//                      amax by __shfl_xor; every shape, padded as the simple kernel.
//  quantize_1x16_owner<In>  1x16, cols % 16 == 0: several lanes per block, each one 16-byte
//                      load (4 floats or 8 BF16), block amaxes reduce-scattered by __shfl_xor,
//                      one owner lane per block computes its scales and broadcasts them; every
//                      load and store of a warp is contiguous. The default fast kernel.
// The quantize kernels can read the global scale from the amax key on the device
// (nvfp4_global_scale on the device: no host round trip) and call the same FP4D_HD
// functions as the CPU reference, so the bits agree by construction (--fmad=false).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/block_scale_fast.cuh"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/nvfp4.hpp"
#include "backend/cuda/unscaled_bf16_store.cuh"
#include "format/bf16.hpp"
#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "quant/nvfp4_math.hpp"

namespace fp4d::cuda {

namespace {

constexpr int kBlock = 16;
constexpr int kThreads = 256;
static_assert(kThreads >= 128, "the CTA fills its 128-entry encode-scale table with one thread per code");

// Arguments shared by the quantize kernels. Pointers other than codes/scales may be null.
struct QuantArgs {
  GlobalScale g;                     // used when amax_key is null
  const std::uint32_t* amax_key;     // global scale = nvfp4_global_scale(bits_float(*amax_key))
  GlobalScale* global_out;           // written by thread 0 of block 0 (the scale the kernel used)
  RoundingSpec r;
  bool legacy;
  std::uint8_t* codes;
  std::uint8_t* scales;
  float* dequantized;                // rows x cols (unpadded), optional
  std::uint16_t* bf16_unscaled;      // rows x cols (unpadded) BF16 bits of q * S_b, optional
  unsigned long long* clipped;       // optional
};

// Input element -> float32. BF16 is the top half of a float32, so the conversion is exact.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(std::uint16_t b) { return bf16_to_float(b); }

// The amax keys of two BF16 values held in one word, as two 16-bit halves: |b| with NaN -> 0.
// A 16-bit key k is the float key k << 16 (the low half of a BF16's float is zero), so the
// halfword max equals the float keys' max; two elements per SIMD instruction.
__device__ __forceinline__ std::uint32_t bf16x2_keys(std::uint32_t w) {
  const std::uint32_t m = w & 0x7fff7fffu;
  return m & ~__vcmpgtu2(m, 0x7f807f80u);
}
__device__ __forceinline__ std::uint32_t bf16x2_key_max(std::uint32_t k2) {
  return max(k2 & 0xffffu, k2 >> 16) << 16;
}

// The 16-byte vector types of the amax and lanes kernels: 4 floats or 8 BF16 values.
// key(): the max of the elements' amax keys (NaN -> 0). block_key(): the same value, cheaper
// where no element is a NaN (the common case): the max of |x| bits is taken with NaNs
// included, and only if it is a NaN pattern (some element is NaN) are the keys recomputed
// with NaN -> 0.
template <class In>
struct Vec16;
template <>
struct Vec16<float> {
  using T = float4;
  static constexpr int kElems = 4;
  static __device__ __forceinline__ void unpack(const float4& v, float* e) {
    e[0] = v.x;
    e[1] = v.y;
    e[2] = v.z;
    e[3] = v.w;
  }
  static __device__ __forceinline__ std::uint32_t key(const float4& v) {
    return max(max(amax_key(v.x), amax_key(v.y)), max(amax_key(v.z), amax_key(v.w)));
  }
  // The max of the |x| bit patterns, NaNs included (above 0x7f800000 iff some x is a NaN).
  static __device__ __forceinline__ std::uint32_t raw_key(const float4& v) {
    return max(max(abs_bits(v.x), abs_bits(v.y)), max(abs_bits(v.z), abs_bits(v.w)));
  }
  static __device__ __forceinline__ std::uint32_t block_key(const float4& v) {
    const std::uint32_t m = raw_key(v);
    return m <= 0x7f800000u ? m : key(v);
  }
};
template <>
struct Vec16<std::uint16_t> {
  using T = uint4;
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void unpack(const uint4& v, float* e) {
    const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      e[2 * k] = bits_float(w[k] << 16);  // element 2k is the low half (little endian)
      e[2 * k + 1] = bits_float(w[k] & 0xffff0000u);
    }
  }
  static __device__ __forceinline__ std::uint32_t key(const uint4& v) {
    const std::uint32_t k2 = __vmaxu2(__vmaxu2(bf16x2_keys(v.x), bf16x2_keys(v.y)),
                                      __vmaxu2(bf16x2_keys(v.z), bf16x2_keys(v.w)));
    return bf16x2_key_max(k2);
  }
  static __device__ __forceinline__ std::uint32_t raw_key(const uint4& v) {
    const std::uint32_t m2 = __vmaxu2(__vmaxu2(v.x & 0x7fff7fffu, v.y & 0x7fff7fffu),
                                      __vmaxu2(v.z & 0x7fff7fffu, v.w & 0x7fff7fffu));
    return bf16x2_key_max(m2);
  }
  static __device__ __forceinline__ std::uint32_t block_key(const uint4& v) {
    const std::uint32_t m = raw_key(v);
    return m <= 0x7f800000u ? m : key(v);
  }
};

// The kernel's global scale: from the amax key on the device (or a.g without one); thread 0 of
// block 0 reports it. A kernel that asks for its input first reads the key with
// load_amax_key before those loads and hands it to kernel_global afterwards, so that the key's
// latency and the divisions overlap the input's instead of holding its first load back.
__device__ __forceinline__ std::uint32_t load_amax_key(const QuantArgs& a) {
  return a.amax_key ? __ldg(a.amax_key) : 0u;
}
__device__ __forceinline__ GlobalScale kernel_global(const QuantArgs& a, std::uint32_t key) {
  const GlobalScale g = a.amax_key ? nvfp4_global_scale(bits_float(key)) : a.g;
  if (a.global_out && blockIdx.x == 0 && threadIdx.x == 0) *a.global_out = g;
  return g;
}
__device__ __forceinline__ GlobalScale kernel_global(const QuantArgs& a) { return kernel_global(a, load_amax_key(a)); }

template <Rounding R>
__device__ __forceinline__ std::uint8_t round_e2m1(float y, const RoundingSpec& r, std::uint64_t index) {
  if constexpr (R == Rounding::NearestEven) return e2m1_rne(y);
  else if constexpr (R == Rounding::TowardZero) return e2m1_rz(y);
  else return e2m1_round(y, r, index);
}

// BF16 bits of E2M1value(q) * S_b (quant/nvfp4_math.hpp), widened for packing.
__device__ __forceinline__ std::uint32_t unscaled_bf16(std::uint8_t code, float scale_value) {
  return nvfp4_unscaled_bf16(code, scale_value);
}

template <class In>
__global__ void __launch_bounds__(kThreads) amax_kernel(const In* __restrict__ x, std::int64_t n, bool vec,
                                                        std::uint32_t* key) {
  using V = Vec16<In>;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::uint32_t m = 0;
  std::int64_t done = 0;
  if (vec) {
    const auto* xv = reinterpret_cast<const typename V::T*>(x);
    const std::int64_t nv = n / V::kElems;
    std::int64_t i = tid;
    for (; i + 3 * stride < nv; i += 4 * stride) {  // 4 loads in flight per thread
      typename V::T v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = __ldg(xv + i + k * stride);
#pragma unroll
      for (int k = 0; k < 4; ++k) m = max(m, V::key(v[k]));
    }
    for (; i < nv; i += stride) m = max(m, V::key(__ldg(xv + i)));
    done = V::kElems * nv;
  }
  for (std::int64_t i = done + tid; i < n; i += stride) m = max(m, amax_key(to_float(x[i])));
  const std::uint32_t mine[1] = {m};
  block_max_to_keys<kThreads>(mine, key);  // launched with kThreads threads only
}

// One row of a scale block: its values v[0 .. n) (the rest of the 16 is padding, code 0) scaled
// by e_b, clamped, rounded (SR element index r * pcols + column), packed into row r's codes, with
// the optional dequantized and BF16 outputs; returns how many elements clipped. The one rounding
// path of the simple and 16x16 kernels, so that both give the reference's bits the same way.
// A whole block whose destinations are aligned (the 16x16 kernel on cols % 16 == 0) leaves as
// one 8-byte code store and two 16-byte BF16 stores: element by element, each lane's one- and
// two-byte stores went to a different row from its neighbours', 26 store instructions per row
// that made the weight quantization of a wide layer memory-transaction bound.
__device__ __forceinline__ unsigned long long quantize_block_row(const float* v, int n, std::int64_t r, std::int64_t c0,
                                                                 std::int64_t cols, std::int64_t pcols, std::uint8_t s,
                                                                 float e_b, float s_value, const GlobalScale& g,
                                                                 const QuantArgs& a) {
  unsigned long long clipped = 0;
  std::uint32_t w[2] = {0, 0};  // the codes, element i in nibble i % 8 of w[i / 8]; padding stays code 0
#pragma unroll
  for (int i = 0; i < kBlock; ++i) {
    if (i >= n) continue;
    bool clip;
    const float y = clamp_e2m1_range(v[i] * e_b, &clip);
    clipped += clip && (s & 0x7fu) != 0;  // zero-scale blocks flush: underflow, not clipping
    const std::uint8_t q = e2m1_round(y, a.r, static_cast<std::uint64_t>(r * pcols + c0 + i));
    w[i >> 3] |= static_cast<std::uint32_t>(q) << (4 * (i & 7));
    if (a.dequantized) a.dequantized[r * cols + c0 + i] = nvfp4_dequantize(q, s, g.decode);
  }
  std::uint8_t* cr = a.codes + r * (pcols / 2) + c0 / 2;
  std::uint16_t* br = a.bf16_unscaled ? a.bf16_unscaled + r * cols + c0 : nullptr;
  const auto addr = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  // (s <= 0x7e: the table decode covers the finite non-negative scale codes, all a block scale
  // from nvfp4_global_scale can be; a caller's out-of-range GlobalScale takes the general path.)
  if (n == kBlock && s <= 0x7eu && addr(cr) % 8 == 0 && (br == nullptr || addr(br) % 16 == 0)) {
    *reinterpret_cast<uint2*>(cr) = make_uint2(w[0], w[1]);
    if (br) store_unscaled_bf16_block(make_uint2(w[0], w[1]), s_value, br);
    return clipped;
  }
#pragma unroll
  for (int i = 0; i < kBlock / 2; ++i) cr[i] = static_cast<std::uint8_t>(w[i >> 2] >> (8 * (i & 3)));
  if (br) {
#pragma unroll
    for (int i = 0; i < kBlock; ++i) {  // unrolled: w[i >> 3] stays in registers
      if (i >= n) break;
      const auto q = static_cast<std::uint8_t>((w[i >> 3] >> (4 * (i & 7))) & 0xfu);
      br[i] = static_cast<std::uint16_t>(unscaled_bf16(q, s_value));
    }
  }
  return clipped;
}

// One thread per 1x16 block: row r, columns [c0, c0 + 16) (a partial block zero-padded). The
// 1x16 blocks of a tensor the lanes kernel cannot take (cols % 16 != 0); 16x16 blocks go to
// the 16x16 kernels, which make the same bits in parallel. The block's values are loaded
// once, for its amax and its rounding (padding is +0, which leaves the amax as it is).
template <class In>
__global__ void __launch_bounds__(kThreads)
    quantize_simple_kernel(const In* __restrict__ x, std::int64_t rows, std::int64_t cols, std::int64_t pcols,
                           std::int64_t scale_cols, QuantArgs a) {
  const GlobalScale g = kernel_global(a);
  const std::int64_t tile = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tile >= rows * scale_cols) return;
  const std::int64_t r = tile / scale_cols, c0 = (tile % scale_cols) * kBlock;
  const int n = static_cast<int>(min(static_cast<std::int64_t>(kBlock), cols - c0));
  float v[kBlock];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kBlock; ++i) {
    v[i] = i < n ? to_float(x[r * cols + c0 + i]) : 0.0f;
    amax = max_ignore_nan(amax, abs_f32(v[i]));
  }
  const std::uint8_t s = nvfp4_block_scale_code(amax, g.encode, a.legacy);
  a.scales[tile] = s;
  const unsigned long long clipped =
      quantize_block_row(v, n, r, c0, cols, pcols, s, nvfp4_block_encode_scale(s, g.decode), e4m3_decode(s), g, a);
  if (a.clipped && clipped) atomicAdd(a.clipped, clipped);
}

// 16x16 blocks (the 2D weight scaling): a half-warp per block, lane j its row r0 + j. Each
// lane loads its 16 elements before any arithmetic, the block amax is a __shfl_xor reduction
// over the half-warp (a max of values >= +0, exact in any order), and each element is rounded
// by the same functions, with the same element index, as quantize_simple_kernel: the same bits
// as one thread walking the block, whose 512 serial loads made it the longest node of a small
// model's training step. Blocks are numbered along the block row, so neighbouring half-warps
// read neighbouring 16-element segments of the same rows. vec: cols % 16 == 0 and x 16-byte
// aligned (every row segment then whole and 16-byte aligned: vector loads).
template <class In>
__global__ void __launch_bounds__(kThreads)
    quantize_16x16_kernel(const In* __restrict__ x, std::int64_t rows, std::int64_t cols, std::int64_t pcols,
                          std::int64_t scale_rows, std::int64_t scale_cols, bool vec, QuantArgs a) {
  using V = Vec16<In>;
  const GlobalScale g = kernel_global(a);
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t tile = t / kBlock;
  if (tile >= scale_rows * scale_cols) return;  // a whole half-warp: kBlock divides 32 and kThreads
  const int j = static_cast<int>(t % kBlock);
  const unsigned half = (threadIdx.x & 16u) ? 0xffff0000u : 0x0000ffffu;
  const std::int64_t tr = tile / scale_cols, tc = tile % scale_cols;
  const std::int64_t r = tr * kBlock + j, c0 = tc * kBlock;
  const bool live = r < rows;
  const int n = static_cast<int>(min(static_cast<std::int64_t>(kBlock), cols - c0));
  float v[kBlock];
  if (vec && live) {
    const auto* xv = reinterpret_cast<const typename V::T*>(x + r * cols + c0);
#pragma unroll
    for (int k = 0; k < kBlock / V::kElems; ++k) V::unpack(__ldg(xv + k), v + k * V::kElems);
  } else {
#pragma unroll
    for (int i = 0; i < kBlock; ++i) v[i] = live && i < n ? to_float(x[r * cols + c0 + i]) : 0.0f;
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kBlock; ++i) amax = max_ignore_nan(amax, abs_f32(v[i]));
#pragma unroll
  for (int off = kBlock / 2; off > 0; off /= 2) amax = max_ignore_nan(amax, __shfl_xor_sync(half, amax, off));
  const std::uint8_t s = nvfp4_block_scale_code(amax, g.encode, a.legacy);
  if (j == 0) a.scales[tile] = s;
  if (!live) return;
  const float e_b = nvfp4_block_encode_scale(s, g.decode);
  const float s_value = e4m3_decode(s);
  const unsigned long long clipped = quantize_block_row(v, n, r, c0, cols, pcols, s, e_b, s_value, g, a);
  if (a.clipped && clipped) atomicAdd(a.clipped, clipped);
}

// ---- quantize_1x16_lanes: 1x16, cols % 16 == 0 (padded_cols == cols: element index = linear
// index). Lane v of the grid owns 16-byte vector v (elements kElems*v ..), so a 1x16 block is
// kLanes = 16 / kElems adjacent lanes of one warp (2 for BF16, 4 for float): their loads, code
// stores (kElems/2 bytes per lane) and BF16 stores are contiguous across the warp, and the
// block amax is one (BF16) or two (float) __shfl_xor steps. Each thread handles kUnits
// vectors kThreads apart, all loads issued before any arithmetic (more bytes in flight).
// Extras = true adds what only the host wrapper asks for (clipped count, float dequantized):
// the device API's path stays free of them.

// Round one lane's elements (already scaled and clamped) into q. For SR the lane's first
// element index is a multiple of 4, so one Philox call gives the words of 4 elements
// (philox_word(s, i) is philox_block(s, i >> 2).v[i & 3]): the draws are e2m1_round's.
// hw SR instead takes the lane's N / 4 words of its block's philox_hw_block, hw_words (handed
// out by hw_lane_words): element first + j reads the byte at hw_byte_shift of word j / 4.
template <Rounding R, int N>
__device__ __forceinline__ void round_lane(const float* y, const RoundingSpec& r, std::uint64_t first,
                                           const std::uint32_t* hw_words, std::uint8_t* q) {
  if constexpr (R == Rounding::Stochastic) {
    if (r.sr_bits == kSrHw) {
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const std::uint64_t index = first + static_cast<std::uint64_t>(j);
        q[j] = e2m1_sr(y[j], hw_byte_of_word(hw_words[j >> 2], index), kSrHw, r.rng, index);
      }
      return;
    }
#pragma unroll
    for (int g4 = 0; g4 < N; g4 += 4) {
      const Philox4x32 w = philox_block(r.rng, (first + g4) >> 2);
#pragma unroll
      for (int j = 0; j < 4; ++j) q[g4 + j] = e2m1_sr(y[g4 + j], w.v[j], r.sr_bits, r.rng, first + g4 + j);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) q[j] = round_e2m1<R>(y[j], r, first + j);
  }
}

// The lane's BF16 q * S_b values: 16 bytes (BF16 input) or 8 bytes (float input) per lane.
template <int N>
__device__ __forceinline__ void store_unscaled(const std::uint8_t* q, std::uint8_t s, std::uint16_t* out,
                                               std::int64_t v) {
  const float sv = e4m3_decode(s);
  std::uint32_t w[N / 2];
#pragma unroll
  for (int k = 0; k < N / 2; ++k) w[k] = unscaled_bf16(q[2 * k], sv) | (unscaled_bf16(q[2 * k + 1], sv) << 16);
  if constexpr (N == 8) reinterpret_cast<uint4*>(out)[v] = make_uint4(w[0], w[1], w[2], w[3]);
  else reinterpret_cast<uint2*>(out)[v] = make_uint2(w[0], w[1]);
}

// 16x16 blocks of a row-major float tensor with cols % 16 == 0 and 16-byte aligned rows: a warp
// per 16 x 64 strip of four blocks. Lane l holds columns 4 (l % 16) .. + 3 of rows
// 8 (l / 16) .. + 7 of the strip, so a block is 4 lanes across times 2 down, and its amax two
// __shfl_xor steps across and one down. Every load and store instruction of a warp covers two
// contiguous row segments (16, 2 and 8 bytes a lane for the input, codes and BF16 decodes);
// quantize_16x16_kernel's half-warp per block, a lane per row, touches 16 rows in each access
// and its stores are 16 rows apart. Why 8 rows a lane: a lane holding all 16 rows of its
// columns keeps 64 values in registers (100 registers, 2 CTAs an SM), too few warps resident
// for one warp's loads to overlap another's rounding; 8 rows fit 64 registers (4 CTAs), and 4
// rows add shuffles and a block scale computation per 16 elements for no more warps. The
// rounding is quantize_block_row's, element for element (clamp, e2m1 rounding by element index
// r * cols + c, pcols = cols), through round_lane, whose one Philox call gives the four SR
// words of a lane's row piece (hw SR stays with quantize_16x16_kernel: its words are per 1x16
// block; the SR kernel, with its Philox state, gets 3 CTAs' registers rather than spill).
constexpr int kStripRowsPerLane = 8, kStripCols = 4 * 32 / (kBlock / kStripRowsPerLane);
template <Rounding R, bool Extras>
__global__ void __launch_bounds__(kThreads, R == Rounding::Stochastic ? 3 : 4)
    quantize_16x16_strip_kernel(const float* __restrict__ x, std::int64_t rows, std::int64_t cols,
                                std::int64_t scale_rows, std::int64_t scale_cols, QuantArgs a) {
  constexpr int kRowsPerLane = kStripRowsPerLane, kCols = 4, kDown = kBlock / kRowsPerLane, kAcross = 32 / kDown;
  constexpr int kStrip = kStripCols;
  const std::uint32_t key = load_amax_key(a);
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t strips = (cols + kStrip - 1) / kStrip;
  if (warp >= scale_rows * strips) return;  // a whole warp: the shuffles below see every lane
  const std::int64_t tr = warp / strips, c = (warp % strips) * kStrip + kCols * (lane % kAcross);
  const std::int64_t r0 = tr * kBlock + (lane / kAcross) * kRowsPerLane;
  const bool live = c < cols;  // cols % 16 == 0: a block's lanes are live together
  // The lane's rows that exist (none past the tensor's end or right of it), and the element
  // offset of its first: each further row is cols on, one add instead of a product per row.
  const int n = live ? static_cast<int>(min(max(rows - r0, std::int64_t{0}), std::int64_t{kRowsPerLane})) : 0;
  const std::int64_t e0 = r0 * cols + c;
  float v[kRowsPerLane][kCols];
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i) {
    if (i < n) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(x + e0 + i * cols));
      v[i][0] = f.x, v[i][1] = f.y, v[i][2] = f.z, v[i][3] = f.w;
    } else {
#pragma unroll
      for (int j = 0; j < kCols; ++j) v[i][j] = 0.0f;  // +0 leaves the amax as it is
    }
  }
  // The block amax as Vec16's block_key, folded over the lane's rows and the block's lanes (an
  // unsigned max: exact in any order): the raw abs_bits first, and only a warp with a NaN in
  // some block takes the keys again with amax_key.
  const auto block_max = [](std::uint32_t m) {
    m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = max(m, __shfl_xor_sync(0xffffffffu, m, 2));
#pragma unroll
    for (int down = kAcross; down < 32; down *= 2) m = max(m, __shfl_xor_sync(0xffffffffu, m, down));
    return m;
  };
  std::uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) m = max(m, abs_bits(v[i][j]));
  m = block_max(m);
  const bool no_nan = m <= 0x7f800000u;
  if (__any_sync(0xffffffffu, !no_nan)) {
    m = 0;
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i)
#pragma unroll
      for (int j = 0; j < kCols; ++j) m = max(m, amax_key(v[i][j]));
    m = block_max(m);
  }
  // The global scale only now: computed before the loads above, its key's latency and its
  // divisions held back the first load of every warp (whose only strip this is, mostly).
  const GlobalScale g = kernel_global(a, key);
  if (!live) return;
  const std::uint8_t s = block_scale_code_hw(bits_float(m), g.encode, a.legacy);
  if (lane % 4 == 0 && lane < kAcross) a.scales[tr * scale_cols + c / kBlock] = s;
  const float e_b = nvfp4_block_encode_scale(s, g.decode), s_value = e4m3_decode(s);
  // (The byte tables cover the finite non-negative scale codes, every code nvfp4_global_scale's
  // scales give; a caller's out-of-range GlobalScale decodes element by element.)
  const bool table = s <= 0x7eu;
  const UnscaledBf16Tables t = nvfp4_unscaled_bf16_tables(table ? s_value : 0.0f);
  unsigned long long clipped = 0;
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i) {
    if (i >= n) break;
    const std::int64_t e = e0 + i * cols;  // element (r0 + i, c)
    float y[kCols];
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      // Without the clipped count, RNE and RZ round the product unclamped, as the owner
      // kernel's quantize_lane does (the clamp changes no RNE or RZ code); SR keeps it.
      bool clip;
      if constexpr (!Extras && R != Rounding::Stochastic) y[j] = v[i][j] * e_b;
      else y[j] = clamp_e2m1_range(v[i][j] * e_b, &clip);
      if constexpr (Extras) clipped += clip && (s & 0x7fu) != 0;  // zero-scale blocks: underflow
    }
    std::uint8_t q[kCols];
    if (R == Rounding::NearestEven && !Extras && no_nan) {  // quantize_lane's fast path, its argument
#pragma unroll
      for (int j = 0; j < kCols; ++j) q[j] = e2m1_rne_not_nan(y[j]);
    } else {
      round_lane<R, kCols>(y, a.r, static_cast<std::uint64_t>(e), nullptr, q);
    }
    const std::uint32_t packed = q[0] | (q[1] << 4) | (q[2] << 8) | (q[3] << 12);
    *reinterpret_cast<std::uint16_t*>(a.codes + e / 2) = static_cast<std::uint16_t>(packed);
    if (a.bf16_unscaled) {
      if (table) {
        const Bf16x4 b = nvfp4_unscaled_bf16x4(t, packed);
        *reinterpret_cast<uint2*>(a.bf16_unscaled + e) = make_uint2(b.lo, b.hi);
      } else {
        store_unscaled<kCols>(q, s, a.bf16_unscaled + e, 0);
      }
    }
    if constexpr (Extras) {
      if (a.dequantized)
        *reinterpret_cast<float4*>(a.dequantized + e) =
            make_float4(nvfp4_dequantize(q[0], s, g.decode), nvfp4_dequantize(q[1], s, g.decode),
                        nvfp4_dequantize(q[2], s, g.decode), nvfp4_dequantize(q[3], s, g.decode));
    }
  }
  if constexpr (Extras) {
    if (a.clipped && clipped) atomicAdd(a.clipped, clipped);
  }
}

// Scales of one 1x16 block from its amax key (the max of its elements' keys, NaN -> 0, which
// is the block amax the reference's max_ignore_nan fold from 0 gives).
struct BlockScale {
  std::uint8_t s;  // E4M3 code of S_b
  float e_b;       // encode scale
};
// The code by the hardware E4M3 conversion and e_b from the CTA's table (block_scale_fast.cuh):
// the same values as nvfp4_block_scale_code / nvfp4_block_encode_scale (the key is never a NaN).
__device__ __forceinline__ BlockScale block_scale(std::uint32_t key, const GlobalScale& g, bool legacy,
                                                  const float* encode_of) {
  const std::uint8_t s = block_scale_code_hw(bits_float(key), g.encode, legacy);
  return {s, encode_of[s]};
}

// One lane's part of a block (its 16-byte vector v), the block's scales given. no_nan: the
// caller has checked that no element of the block is a NaN (warp-uniform), so RNE can use
// e2m1_rne_not_nan (the NaN select dropped).
template <class In, Rounding R, bool Extras>
__device__ __forceinline__ unsigned quantize_lane(const typename Vec16<In>::T& raw, std::int64_t v, bool in,
                                                  BlockScale bs, bool no_nan, const GlobalScale& g,
                                                  const QuantArgs& a, const std::uint32_t* hw_words) {
  using V = Vec16<In>;
  constexpr int N = V::kElems;
  const std::uint8_t s = bs.s;
  const float e_b = bs.e_b;
  float e[N], y[N];
  V::unpack(raw, e);
  unsigned clipped = 0;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    bool clip;
    // Step 5's clamp changes no RNE or RZ code: e2m1_rne/e2m1_rz saturate every |y| > 6
    // (Inf included) to code 7 with its sign, as the clamp to +-6 does, and pass NaN to 7
    // (tests/unit/test_formats.cpp checks this on all 2^32 inputs). So where the clipped
    // count is not wanted the RNE/RZ path rounds the product directly (two compare-selects
    // less per element); SR keeps the spec's clamp.
    if constexpr (!Extras && R != Rounding::Stochastic) y[j] = e[j] * e_b;
    else y[j] = clamp_e2m1_range(e[j] * e_b, &clip);
    if constexpr (Extras) clipped += clip && (s & 0x7fu) != 0;  // zero-scale blocks: underflow
  }
  const auto first = static_cast<std::uint64_t>(v) * N;
  if (R == Rounding::NearestEven && !Extras && no_nan && !a.bf16_unscaled) {
    // The ALU pipe bounds this kernel (ncu): round on the FMA pipe (e2m1_rne_magnitude_fma,
    // = e2m1_rne_not_nan on every non-NaN input), pack by Horner's rule and funnel shifts
    // (e2m1_rne_pack_fma, the dual kernel's form).
    const std::uint32_t packed = e2m1_rne_pack_fma<N>(y);
    if (!in) return 0;
    if constexpr (N == 8) reinterpret_cast<std::uint32_t*>(a.codes)[v] = packed;
    else reinterpret_cast<std::uint16_t*>(a.codes)[v] = static_cast<std::uint16_t>(packed);
    return 0;
  }
  std::uint8_t q[N];
  if (R == Rounding::NearestEven && !Extras && no_nan) {
    // (The codes are kept one per byte here: the BF16 output needs them one by one, and
    // packing them straight into their nibbles would make it unpack them again.)
#pragma unroll
    for (int j = 0; j < N; ++j) q[j] = e2m1_rne_not_nan(y[j]);
  } else {
    round_lane<R, N>(y, a.r, first, hw_words, q);
  }
  if (!in) return 0;
  std::uint32_t packed = 0;
#pragma unroll
  for (int j = 0; j < N; ++j) packed |= static_cast<std::uint32_t>(q[j]) << (4 * j);
  if constexpr (N == 8) reinterpret_cast<std::uint32_t*>(a.codes)[v] = packed;
  else reinterpret_cast<std::uint16_t*>(a.codes)[v] = static_cast<std::uint16_t>(packed);
  if (a.bf16_unscaled) store_unscaled<N>(q, s, a.bf16_unscaled, v);
  if constexpr (Extras) {
    if (a.dequantized) {
      float4* d4 = reinterpret_cast<float4*>(a.dequantized + first);
#pragma unroll
      for (int k = 0; k < N / 4; ++k)
        d4[k] = make_float4(nvfp4_dequantize(q[4 * k], s, g.decode), nvfp4_dequantize(q[4 * k + 1], s, g.decode),
                            nvfp4_dequantize(q[4 * k + 2], s, g.decode), nvfp4_dequantize(q[4 * k + 3], s, g.decode));
    }
  }
  return clipped;
}

// Whether any element of the 16-byte vector is a NaN (its |x| bits above Inf's).
template <class In>
__device__ __forceinline__ bool has_nan(const typename Vec16<In>::T& v) {
  return Vec16<In>::raw_key(v) > 0x7f800000u;
}

// The global scale, computed once per CTA (two IEEE divisions) and shared, and the CTA's table
// of block encode scales (fill_encode_table).
__device__ __forceinline__ GlobalScale cta_global(const QuantArgs& a, const float** encode_of) {
  __shared__ GlobalScale shared_g;
  __shared__ float table[128];
  if (threadIdx.x == 0) shared_g = kernel_global(a);
  __syncthreads();
  fill_encode_table(table, shared_g);
  __syncthreads();
  *encode_of = table;
  return shared_g;
}

// Word i (0..3) of a Philox block by selects (a dynamic index would put it in local memory).
__device__ __forceinline__ std::uint32_t philox_word_at(const Philox4x32& w, int i) {
  const std::uint32_t lo = i & 1 ? w.v[1] : w.v[0], hi = i & 1 ? w.v[3] : w.v[2];
  return i & 2 ? hi : lo;
}

// hw SR's words for the owner kernel: one Philox call per 16 elements. The kLanes lanes of a
// group share kUnits = kLanes blocks (one per unit); lane j calls philox_hw_block for the block
// of unit j only (its index: the unit's vector / kLanes, as the element index v * kElems / 16)
// and the words go round the group in kLanes rotation steps: at step t lane p reads from lane
// (p + t) mod kLanes, which sends the words of its block that lane p's piece uses (words
// W p' .. W p' + W - 1, p' = its own position - t, W = kElems / 4 words per lane). Afterwards
// out[k][m] is word W p + m of unit k's block, the words of this lane's elements.
template <int kLanes, int W>
__device__ __forceinline__ void hw_lane_words(const RoundingSpec& r, std::int64_t v_own, std::uint32_t (&out)[kLanes][W]) {
  const int p = static_cast<int>(threadIdx.x) & (kLanes - 1);
  const Philox4x32 mine = philox_hw_block(r.rng, static_cast<std::uint64_t>(v_own) / kLanes);
#pragma unroll
  for (int t = 0; t < kLanes; ++t) {
    const int give = (p - t) & (kLanes - 1);  // the lane this step's value is for
    const int from = (p + t) & (kLanes - 1);  // the lane (and unit) this lane reads from
#pragma unroll
    for (int m = 0; m < W; ++m) {
      const std::uint32_t got = __shfl_sync(0xffffffffu, philox_word_at(mine, W * give + m), from, kLanes);
#pragma unroll
      for (int k = 0; k < kLanes; ++k) out[k][m] = k == from ? got : out[k][m];
    }
  }
}

// The lanes kernel with one owner lane per block (the default): a thread holds kLanes
// vectors (BF16: 2, float: 4), one piece of each of kLanes blocks that the same kLanes
// consecutive lanes share. The block amaxes are reduce-scattered (log2(kLanes) steps of
// __shfl_xor), lane j of the group computes the scales of block j only (the E4M3 encode,
// decode and the IEEE division once per block instead of once per lane) and writes its
// scale byte, and the encode scales are broadcast back. Blocks without a NaN (one vote per
// warp) take e2m1_rne_not_nan.
template <class In, Rounding R, bool Extras>
__global__ void __launch_bounds__(kThreads)
    quantize_1x16_owner_kernel(const typename Vec16<In>::T* __restrict__ xv, std::int64_t nvec, QuantArgs a) {
  using V = Vec16<In>;
  using VT = typename V::T;
  constexpr int kLanes = kBlock / V::kElems, kUnits = kLanes;
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * (kThreads * kUnits) + threadIdx.x;
  VT raw[kUnits];
#pragma unroll
  for (int k = 0; k < kUnits; ++k) {
    const std::int64_t v = base + k * kThreads;
    raw[k] = v < nvec ? __ldcs(xv + v) : VT{};  // out of range: zeros, still in the shuffles
  }
  const float* encode_of = nullptr;
  const GlobalScale g = cta_global(a, &encode_of);
  const int j = static_cast<int>(threadIdx.x) & (kLanes - 1);  // the block this lane owns
  std::uint32_t key[kUnits];
  bool nan = false;
#pragma unroll
  for (int k = 0; k < kUnits; ++k) {
    nan |= has_nan<In>(raw[k]);
    key[k] = V::block_key(raw[k]);
  }
  // Reduce-scatter: at step m the lane keeps the units whose bit m equals its own, taking the
  // partner's part of them, and hands the partner the others; key[u] and key[u | m] then both
  // hold the kept value, so after the last step key[j] is block j's amax over all its lanes.
#pragma unroll
  for (int m = kLanes / 2; m >= 1; m >>= 1) {
    const bool upper = (j & m) != 0;
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      if (u & m) continue;
      const std::uint32_t got = __shfl_xor_sync(0xffffffffu, upper ? key[u] : key[u | m], m);
      key[u] = key[u | m] = max(upper ? key[u | m] : key[u], got);
    }
  }
  std::uint32_t own = key[0];
#pragma unroll
  for (int u = 1; u < kUnits; ++u) own = u == j ? key[u] : own;  // selects, no local memory
  const BlockScale mine = block_scale(own, g, a.legacy, encode_of);
  const std::int64_t v_own = base + j * kThreads;
  if (v_own < nvec) a.scales[v_own / kLanes] = mine.s;
  const bool no_nan = !__any_sync(0xffffffffu, nan);
  constexpr int kWords = V::kElems / 4;  // hw SR words per lane and unit
  std::uint32_t hw_words[kUnits][kWords] = {};
  if constexpr (R == Rounding::Stochastic) {
    if (a.r.sr_bits == kSrHw) hw_lane_words<kLanes, kWords>(a.r, v_own, hw_words);  // uniform branch
  }
  unsigned clipped = 0;
#pragma unroll
  for (int k = 0; k < kUnits; ++k) {
    const std::int64_t v = base + k * kThreads;
    BlockScale bs;
    bs.e_b = __shfl_sync(0xffffffffu, mine.e_b, k, kLanes);
    bs.s = static_cast<std::uint8_t>(__shfl_sync(0xffffffffu, static_cast<unsigned>(mine.s), k, kLanes));
    clipped += quantize_lane<In, R, Extras>(raw[k], v, v < nvec, bs, no_nan, g, a, hw_words[k]);
  }
  if constexpr (Extras) {
    if (a.clipped) {
      clipped = __reduce_add_sync(0xffffffffu, clipped);
      if ((threadIdx.x & 31u) == 0 && clipped) atomicAdd(a.clipped, static_cast<unsigned long long>(clipped));
    }
  }
}

int sm_count() {
  // Once per thread (runs quantize from several host threads; a plain static was a data race).
  thread_local int sms = 0;
  if (sms == 0) {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute(SM count)");
  }
  return sms;
}

template <class In>
int amax_grid(std::int64_t n) {
  const std::int64_t want = (n / Vec16<In>::kElems + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(want, 8LL * sm_count())));
}

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

unsigned grid_of(std::int64_t work, std::int64_t per_cta) {
  const std::int64_t grid = (work + per_cta - 1) / per_cta;
  if (grid > std::numeric_limits<int>::max()) throw std::invalid_argument("nvfp4 cuda: tensor too large");
  return static_cast<unsigned>(grid);
}

template <class In>
void launch_amax(const In* d_x, std::int64_t n, std::uint32_t* d_key, cudaStream_t st) {
  check(cudaMemsetAsync(d_key, 0, sizeof(std::uint32_t), st), "cudaMemsetAsync(amax key)");
  if (n <= 0) return;
  amax_kernel<In><<<amax_grid<In>(n), kThreads, 0, st>>>(d_x, n, aligned(d_x, 16), d_key);
  check(cudaGetLastError(), "amax_kernel launch");
}

// The clipped count and float dequantized output (host wrapper only) select the Extras
// instantiation, as for the owner kernel.
template <Rounding R>
void launch_16x16_strips_t(const float* d_x, std::int64_t rows, std::int64_t cols, std::int64_t srows,
                           std::int64_t scols, const QuantArgs& a, cudaStream_t st) {
  const std::int64_t warps = srows * ((cols + kStripCols - 1) / kStripCols);
  const unsigned grid = grid_of(warps * 32, kThreads);
  if (a.clipped || a.dequantized)
    quantize_16x16_strip_kernel<R, true><<<grid, kThreads, 0, st>>>(d_x, rows, cols, srows, scols, a);
  else
    quantize_16x16_strip_kernel<R, false><<<grid, kThreads, 0, st>>>(d_x, rows, cols, srows, scols, a);
  check(cudaGetLastError(), "quantize_16x16_strip_kernel launch");
}
void launch_16x16_strips(const float* d_x, std::int64_t rows, std::int64_t cols, std::int64_t srows,
                         std::int64_t scols, const QuantArgs& a, cudaStream_t st) {
  switch (a.r.mode) {
    case Rounding::NearestEven:
      launch_16x16_strips_t<Rounding::NearestEven>(d_x, rows, cols, srows, scols, a, st);
      break;
    case Rounding::TowardZero:
      launch_16x16_strips_t<Rounding::TowardZero>(d_x, rows, cols, srows, scols, a, st);
      break;
    case Rounding::Stochastic:
      launch_16x16_strips_t<Rounding::Stochastic>(d_x, rows, cols, srows, scols, a, st);
      break;
  }
}

template <class In>
void launch_simple(const In* d_x, std::int64_t rows, std::int64_t cols, int br, const QuantArgs& a,
                   cudaStream_t st) {
  const std::int64_t pcols = (cols + kBlock - 1) / kBlock * kBlock;
  const std::int64_t srows = (rows + br - 1) / br, scols = pcols / kBlock, tiles = srows * scols;
  if (tiles == 0) return;
  if (br == kBlock) {
    const bool vec = cols % kBlock == 0 && aligned(d_x, 16);
    // (Float input only: every 16x16 caller quantizes float32 weights.)
    if constexpr (std::is_same_v<In, float>) {
      if (vec && !(a.r.mode == Rounding::Stochastic && a.r.sr_bits == kSrHw) && aligned(a.codes, 2) &&
          aligned(a.bf16_unscaled, 8) && aligned(a.dequantized, 16)) {
        launch_16x16_strips(d_x, rows, cols, srows, scols, a, st);
        return;
      }
    }
    quantize_16x16_kernel<In><<<grid_of(tiles * kBlock, kThreads), kThreads, 0, st>>>(d_x, rows, cols, pcols, srows,
                                                                                       scols, vec, a);
    check(cudaGetLastError(), "quantize_16x16_kernel launch");
    return;
  }
  quantize_simple_kernel<In><<<grid_of(tiles, kThreads), kThreads, 0, st>>>(d_x, rows, cols, pcols, scols, a);
  check(cudaGetLastError(), "quantize_simple_kernel launch");
}

template <class In, Rounding R, bool Extras>
void launch_owner_t(const In* d_x, std::int64_t n, const QuantArgs& a, cudaStream_t st) {
  using V = Vec16<In>;
  constexpr int kUnits = kBlock / V::kElems;
  const std::int64_t nvec = n / V::kElems;
  if (nvec == 0) return;
  quantize_1x16_owner_kernel<In, R, Extras><<<grid_of(nvec, kThreads * kUnits), kThreads, 0, st>>>(
      reinterpret_cast<const typename V::T*>(d_x), nvec, a);
  check(cudaGetLastError(), "quantize_1x16_owner_kernel launch");
}

template <class In, bool Extras>
void launch_lanes_rounding(const In* d_x, std::int64_t n, const QuantArgs& a, cudaStream_t st) {
  switch (a.r.mode) {
    case Rounding::NearestEven: launch_owner_t<In, Rounding::NearestEven, Extras>(d_x, n, a, st); break;
    case Rounding::TowardZero: launch_owner_t<In, Rounding::TowardZero, Extras>(d_x, n, a, st); break;
    case Rounding::Stochastic: launch_owner_t<In, Rounding::Stochastic, Extras>(d_x, n, a, st); break;
  }
}

// Caller: lanes_applies. The clipped count and float dequantized output (host wrapper only)
// select the Extras instantiation.
template <class In>
void launch_lanes(const In* d_x, std::int64_t rows, std::int64_t cols, const QuantArgs& a, cudaStream_t st) {
  if (a.clipped || a.dequantized) launch_lanes_rounding<In, true>(d_x, rows * cols, a, st);
  else launch_lanes_rounding<In, false>(d_x, rows * cols, a, st);
}

// Whether the lanes kernel applies: whole 1x16 blocks per row and aligned vector accesses
// (16-byte loads; kElems/2-byte code stores; 2*kElems-byte BF16 stores).
template <class In>
bool lanes_applies(const In* d_x, std::int64_t cols, const QuantArgs& a) {
  constexpr std::size_t n = Vec16<In>::kElems;
  return cols % kBlock == 0 && aligned(d_x, 16) && aligned(a.codes, n / 2) &&
         (a.bf16_unscaled == nullptr || aligned(a.bf16_unscaled, 2 * n));
}

void check_sr_range(const RoundingSpec& r, std::int64_t rows, std::int64_t pcols) {
  if (r.mode == Rounding::Stochastic && rows > 0 && pcols > 0 &&
      static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(pcols) - 1 > kMaxRngElementIndex)
    throw std::invalid_argument("nvfp4 cuda: SR element index beyond 2^62 - 1");
}

QuantArgs make_args(GlobalScale g, const std::uint32_t* key, RoundingSpec r, bool legacy, std::uint8_t* codes,
                    std::uint8_t* scales, std::uint16_t* bf16_unscaled = nullptr) {
  QuantArgs a{};
  a.g = g;
  a.amax_key = key;
  a.global_out = nullptr;
  a.r = r;
  a.legacy = legacy;
  a.codes = codes;
  a.scales = scales;
  a.dequantized = nullptr;
  a.bf16_unscaled = bf16_unscaled;
  a.clipped = nullptr;
  return a;
}

template <class In>
void quantize_1x16_device(const In* d_x, std::int64_t rows, std::int64_t cols, const QuantArgs& a, cudaStream_t st) {
  check_sr_range(a.r, rows, (cols + kBlock - 1) / kBlock * kBlock);
  if (lanes_applies(d_x, cols, a)) launch_lanes(d_x, rows, cols, a, st);
  else launch_simple(d_x, rows, cols, 1, a, st);
}

}  // namespace

void nvfp4_amax_device(const float* d_x, std::int64_t n, std::uint32_t* d_amax_key, void* stream) {
  launch_amax(d_x, n, d_amax_key, static_cast<cudaStream_t>(stream));
}
void nvfp4_amax_device(const std::uint16_t* d_x_bf16, std::int64_t n, std::uint32_t* d_amax_key, void* stream) {
  launch_amax(d_x_bf16, n, d_amax_key, static_cast<cudaStream_t>(stream));
}

void nvfp4_quantize_1x16_device(const float* d_x, std::int64_t rows, std::int64_t cols, GlobalScale g, RoundingSpec r,
                                bool legacy, std::uint8_t* d_codes, std::uint8_t* d_scales, void* stream,
                                std::uint16_t* d_bf16_unscaled) {
  quantize_1x16_device(d_x, rows, cols, make_args(g, nullptr, r, legacy, d_codes, d_scales, d_bf16_unscaled),
                       static_cast<cudaStream_t>(stream));
}
void nvfp4_quantize_1x16_device(const std::uint16_t* d_x_bf16, std::int64_t rows, std::int64_t cols, GlobalScale g,
                                RoundingSpec r, bool legacy, std::uint8_t* d_codes, std::uint8_t* d_scales,
                                void* stream, std::uint16_t* d_bf16_unscaled) {
  quantize_1x16_device(d_x_bf16, rows, cols, make_args(g, nullptr, r, legacy, d_codes, d_scales, d_bf16_unscaled),
                       static_cast<cudaStream_t>(stream));
}

void nvfp4_quantize_1x16_device_from_amax(const float* d_x, std::int64_t rows, std::int64_t cols,
                                          const std::uint32_t* d_amax_key, RoundingSpec r, bool legacy,
                                          std::uint8_t* d_codes, std::uint8_t* d_scales, void* stream,
                                          std::uint16_t* d_bf16_unscaled) {
  quantize_1x16_device(d_x, rows, cols,
                       make_args(GlobalScale{}, d_amax_key, r, legacy, d_codes, d_scales, d_bf16_unscaled),
                       static_cast<cudaStream_t>(stream));
}
void nvfp4_quantize_1x16_device_from_amax(const std::uint16_t* d_x_bf16, std::int64_t rows, std::int64_t cols,
                                          const std::uint32_t* d_amax_key, RoundingSpec r, bool legacy,
                                          std::uint8_t* d_codes, std::uint8_t* d_scales, void* stream,
                                          std::uint16_t* d_bf16_unscaled) {
  quantize_1x16_device(d_x_bf16, rows, cols,
                       make_args(GlobalScale{}, d_amax_key, r, legacy, d_codes, d_scales, d_bf16_unscaled),
                       static_cast<cudaStream_t>(stream));
}

void nvfp4_quantize_16x16_device_from_amax(const float* d_x, std::int64_t rows, std::int64_t cols,
                                           const std::uint32_t* d_amax_key, RoundingSpec r, bool legacy,
                                           std::uint8_t* d_codes, std::uint8_t* d_scales, void* stream,
                                           std::uint16_t* d_bf16_unscaled, GlobalScale* d_global_out) {
  check_sr_range(r, rows, (cols + kBlock - 1) / kBlock * kBlock);
  QuantArgs a = make_args(GlobalScale{}, d_amax_key, r, legacy, d_codes, d_scales, d_bf16_unscaled);
  a.global_out = d_global_out;
  launch_simple(d_x, rows, cols, kBlock, a, static_cast<cudaStream_t>(stream));
}

void nvfp4_quantize_cuda(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize) {
  nvfp4_quantize_cuda(x, spec, out, dequantize, Nvfp4Kernel::Auto);
}

void nvfp4_quantize_cuda(const Matrix& x, const QuantSpec& spec, QuantizedTensor& out, bool dequantize,
                         Nvfp4Kernel kernel) {
  if (spec.scheme != Scheme::Nvfp4) throw std::invalid_argument("nvfp4_quantize_cuda: scheme must be nvfp4");
  if (spec.block_cols != kBlock || (spec.block_rows != 1 && spec.block_rows != kBlock))
    throw std::invalid_argument("nvfp4_quantize_cuda: layout must be 1x16 or 16x16");
  const bool two_d = spec.is_2d();
  const int br = two_d ? kBlock : 1;
  const std::int64_t rows = x.rows, cols = x.cols, n = x.size();
  const std::int64_t pcols = (cols + kBlock - 1) / kBlock * kBlock;
  check_sr_range(spec.rounding, rows, pcols);
  const bool vec = !two_d && cols % kBlock == 0;
  if (kernel == Nvfp4Kernel::Lanes && !vec)
    throw std::invalid_argument("nvfp4_quantize_cuda: the lanes kernel needs 1x16 blocks and cols % 16 == 0");
  // Auto: the lanes kernel (its buffers below are cudaMalloc'd, hence aligned).
  const bool use_lanes = vec && (kernel == Nvfp4Kernel::Lanes || kernel == Nvfp4Kernel::Auto);

  out.rows = rows;
  out.cols = cols;
  out.padded_cols = pcols;
  out.scale_rows = (rows + br - 1) / br;
  out.scale_cols = pcols / kBlock;
  const auto ncodes = static_cast<std::size_t>(rows * pcols / 2);
  const auto nscales = static_cast<std::size_t>(out.scale_rows * out.scale_cols);
  out.codes.assign(ncodes, 0);
  out.scale_codes.assign(nscales, 0);
  out.scale_values.assign(nscales, 0.0f);
  out.dequantized = dequantize ? Matrix(rows, cols) : Matrix();

  DeviceBuffer<float> dx(static_cast<std::size_t>(n), "cudaMalloc(x)");
  DeviceBuffer<std::uint8_t> dcodes(ncodes, "cudaMalloc(codes)"), dscales(nscales, "cudaMalloc(scales)");
  DeviceBuffer<float> ddeq(dequantize ? static_cast<std::size_t>(n) : 0, "cudaMalloc(dequantized)");
  DeviceBuffer<std::uint32_t> dkey(1, "cudaMalloc(amax key)");
  DeviceBuffer<GlobalScale> dglobal(1, "cudaMalloc(global scale)");
  DeviceBuffer<unsigned long long> dclipped(1, "cudaMalloc(clipped)");

  if (n > 0) check(cudaMemcpy(dx.p, x.data.data(), static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyHostToDevice),
                   "cudaMemcpy(x, host to device)");
  check(cudaMemset(dclipped.p, 0, sizeof(unsigned long long)), "cudaMemset(clipped)");
  const GlobalScale g0{};
  check(cudaMemcpy(dglobal.p, &g0, sizeof g0, cudaMemcpyHostToDevice), "cudaMemcpy(global scale, host to device)");
  launch_amax(dx.p, n, dkey.p, nullptr);
  check(cudaDeviceSynchronize(), "amax_kernel");

  QuantArgs a = make_args(GlobalScale{}, dkey.p, spec.rounding, spec.nv_scale_rule == NvScaleRule::TeLegacy, dcodes.p,
                          dscales.p);
  a.global_out = dglobal.p;
  a.dequantized = dequantize ? ddeq.p : nullptr;
  a.clipped = dclipped.p;
  if (use_lanes) launch_lanes(dx.p, rows, cols, a, nullptr);
  else launch_simple(dx.p, rows, cols, br, a, nullptr);
  check(cudaDeviceSynchronize(),
        use_lanes ? "quantize_1x16_owner_kernel" : two_d ? "the 16x16 quantize kernel" : "quantize_simple_kernel");

  std::uint32_t key = 0;
  GlobalScale g{};
  unsigned long long clipped = 0;
  check(cudaMemcpy(&key, dkey.p, sizeof key, cudaMemcpyDeviceToHost), "cudaMemcpy(amax key, device to host)");
  check(cudaMemcpy(&g, dglobal.p, sizeof g, cudaMemcpyDeviceToHost), "cudaMemcpy(global scale, device to host)");
  check(cudaMemcpy(&clipped, dclipped.p, sizeof clipped, cudaMemcpyDeviceToHost), "cudaMemcpy(clipped, device to host)");
  if (ncodes) check(cudaMemcpy(out.codes.data(), dcodes.p, ncodes, cudaMemcpyDeviceToHost), "cudaMemcpy(codes, device to host)");
  if (nscales)
    check(cudaMemcpy(out.scale_codes.data(), dscales.p, nscales, cudaMemcpyDeviceToHost),
          "cudaMemcpy(scale codes, device to host)");
  if (dequantize && n > 0)
    check(cudaMemcpy(out.dequantized.data.data(), ddeq.p, static_cast<std::size_t>(n) * sizeof(float),
                     cudaMemcpyDeviceToHost),
          "cudaMemcpy(dequantized, device to host)");
  // The kernels wrote the scale they used only when they ran; with no blocks (empty
  // tensor) it is the host's nvfp4_global_scale of the (zero) amax, the same function.
  out.global = nscales ? g : nvfp4_global_scale(bits_float(key));
  out.clipped = static_cast<std::int64_t>(clipped);
  // Scale values: e4m3_decode of the device's codes (the shared decode, no rounding involved).
  for (std::size_t i = 0; i < nscales; ++i) out.scale_values[i] = e4m3_decode(out.scale_codes[i]);
}

}  // namespace fp4d::cuda
