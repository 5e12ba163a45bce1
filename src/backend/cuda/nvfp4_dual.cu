// Rowwise + columnwise (+ RHT) NVFP4 quantization in one pass (see nvfp4_dual.hpp).
//
// Work unit: a CTA of 8 warps per 128-row x 64-column tile, a warp per 16 rows of it.
//  load     lane l loads two rowwise 1x16 blocks whole (rows l/4 and l/4 + 8 of the warp's 16,
//           columns 16 (l % 4) .. + 15; 16-byte loads, 4 lanes per row) into the warp's shared
//           tile, whose 16-byte chunks are XOR-swizzled so that these stores and the column
//           reads below are free of bank conflicts.
//  rows     each lane quantizes its two rowwise blocks (codes straight to global memory: 32
//           contiguous bytes per row and warp).
//  columns  lane l reads columns 2l and 2l + 1 of the tile, applies the RHT (signs folded into
//           the first butterflies, fast Walsh-Hadamard butterflies, x 1/4, optional BF16 -
//           rht.hpp's order) and quantizes each as one columnwise 1x16 block.
//  write    the columnwise codes and scales and the rowwise scales go through shared memory
//           and leave together at the end: 64 contiguous code bytes per column and CTA.
//  decode   optionally, each lane writes its own four blocks' BF16 decodes (the emulated
//           GEMM's operands; 32 contiguous bytes each), from the codes it left in shared memory
//           (such a kernel keeps its rowwise codes there too, and stores them at the end).
// Fast paths, per block, chosen by the lane that owns it (no NaN among the values to round;
// RNE or SR): E2M1 RNE on the FMA pipe (e2m1_rne_magnitude_fma), SR by e2m1_sr_mag_fma below,
// codes packed by Horner's rule (one IMAD per element) and signs by one funnel shift per
// element, the E4M3 scale code by the hardware conversion and e_b from the CTA's table
// (block_scale_fast.cuh). Otherwise (a NaN, RZ, SR's 2^-23 band): quantize_block, the shared
// FP4D_HD code element by element, after the fast path. Every rounding decision equals the CPU
// backend's (--fmad=false; each fast form is checked against the shared one on all 2^32
// inputs), with the element's index in its stored orientation as the Philox counter, so the
// bits agree.
// The amax pass is dual_amax.cuh's over the input as it is (a training step's producer kernel
// can be that pass instead): 16 x 64 tiles (column pairs, grid-stride, one resident wave of
// blocks), |x| and |RHT(x)| reduced with fmaxf (NaN ignored, exact in any order), one
// atomicMax per key per block.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/block_scale_fast.cuh"
#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/dual_amax.cuh"
#include "backend/cuda/nvfp4_dual.hpp"
#include "backend/cuda/unscaled_bf16_store.cuh"
#include "format/bf16.hpp"
#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "quant/rht.hpp"

namespace fp4d::cuda {

namespace {

// The tiles of the amax pass (dual_amax.cuh): the same walk, a warp per 16 x 64 tile.
constexpr int kWarps = dual_tile::kWarps, kThreads = dual_tile::kThreads, kTileRows = dual_tile::kRows,
              kTileCols = dual_tile::kCols;  // 2 columns per lane
constexpr int kCtaRows = kWarps * kTileRows;  // the quantize kernel's CTA: 128 rows x 64 columns, a warp per 16 rows
// The largest rows and cols the quantize kernel takes: its tile coordinates (and a tile's end,
// up to 128 past them) are 32-bit. A matrix with a side of 2^30 is far beyond any layer's.
constexpr std::int64_t kMaxExtent = std::int64_t{1} << 30;
static_assert(kThreads == 256, "the setup: one thread per code of each direction's 128-entry encode-scale table");
// Quantize kernel blocks per SM asked of ptxas (registers per thread capped at 65536 / (256 x
// blocks)). The SR kernels need 64 registers (4 blocks, 50% occupancy; at 48 they spill). The
// RNE kernels fit in 48 without spilling; being bound by instruction issue they gain from the
// extra occupancy of 5 blocks (62.5%), and 6 (40 registers) gains nothing more while the RHT
// kernel would spill (docs/performance.md).
template <bool AnySr>
constexpr int kQuantizeMinBlocks = AnySr ? 4 : 5;

// e2m1_sr(y, w, r.sr_bits, r.rng, index) without the clamp (e2m1_sr saturates every |y| >= 6,
// Inf included, to 7 with y's sign, as the clamp to +-6 followed by e2m1_sr does; NaN -> 7 both
// ways) and, except on an exact-SR tie, without float conversions: the lower neighbour code c
// and floor(f * 2^32) (f the fraction toward the upper neighbour, sr_fraction_floor32's value)
// come from the bits of |y|:
//  |y| >= 1   (grid = one mantissa bit):  c = (bits >> 22) - 252, f * 2^32 = bits << 10 (the
//             low 22 mantissa bits; exact, so f * 2^32 has no remainder and a tie rounds down);
//  |y| < 1    (spacing 0.5): c = (|y| >= 0.5), f * 2^32 = (|y| * 2^33) mod 2^32 = the 24-bit
//             significand m shifted by E - 117 (E the biased exponent; left shifts wrap the
//             code's bit away, right shifts truncate: that is the floor).
// Where exact SR's first word ties (w == floor(f * 2^32)) e2m1_sr itself decides (probability
// 2^-32). The general path of the quantize kernel (a NaN among a block's values, or the rare
// band e2m1_sr_mag_fma leaves undecided) uses it; checked equal to e2m1_sr for all 2^32 y
// (sr_fast_check_kernel).
__device__ __noinline__ std::uint32_t e2m1_sr_tie(float y, std::uint32_t w, RoundingSpec r, std::uint64_t index) {
  return e2m1_sr(y, w, r.sr_bits, r.rng, index);
}
__device__ __forceinline__ std::uint32_t e2m1_sr_fast(float y, std::uint32_t w, const RoundingSpec& r, int drop,
                                                      std::uint64_t index) {
  const std::uint32_t u = float_bits(y), ab = u & 0x7fffffffu, e = ab >> 23;
  const std::uint32_t m = (ab & 0x7fffffu) | (e != 0u ? 0x800000u : 0u);
  const std::uint32_t low = e >= 117u ? m << (e - 117u) : m >> min(117u - e, 31u);
  const bool ge1 = ab >= 0x3f800000u;
  const std::uint32_t f32 = ge1 ? ab << 10 : low;
  const std::uint32_t c = ge1 ? (ab >> 22) - 252u : static_cast<std::uint32_t>(ab >= 0x3f000000u);
  if (r.sr_bits == kSrExact && w == f32) return e2m1_sr_tie(y, w, r, index);
  // hw SR: w is the element's random byte, the decision the carry of w + floor(f * 2^8).
  const std::uint32_t up = r.sr_bits == kSrHw ? static_cast<std::uint32_t>(sr_hw_round_up(f32, w))
                                              : static_cast<std::uint32_t>((w >> drop) < (f32 >> drop));
  const std::uint32_t mag = ab >= 0x40c00000u ? 7u : c + up;  // |y| >= 6, Inf or NaN: 7
  const std::uint32_t sign = ab > 0x7f800000u ? 0u : (u >> 28) & 8u;
  return mag | sign;
}

// The SR magnitude code of a non-NaN y mostly on the FMA pipe (the quantize kernel is bound by
// the ALU pipe, where e2m1_sr_fast's bit arithmetic runs). With a = |y| and k = 0, 1, 2 for
// a < 2, [2, 4), >= 4 (the E2M1 spacing sp = 0.5, 1, 2) and M = 2^(22 + k) (whose float ulp is
// sp):
//   P   = M + a rounded down    = M + the lower grid point g; bits(P) - bits(M) = g / sp
//   rem = a - (P - M)           = a - g, exact (Sterbenz), f = rem / sp
//   G   = 2^23 + rem * 2^23/sp rounded down = 2^23 + floor(f * 2^23), so
//   T   = bits(G) << 9          = floor(f * 2^23) * 2^9 (2^23's bits shift out) = F & ~511,
// F = floor(f * 2^32) the spec's word. The lower code is g / sp + 2k (0..3, 4..5, 6..7 on the
// three pieces), and the decision against the random word w is the spec's wherever the low 9
// bits of F cannot matter: k-bit SR with k <= 23 compares w >> drop with T >> drop exactly;
// otherwise w < T means w < F (up) and w >= T + 512 means w > F (down), and the band
// T <= w < T + 512 (probability 2^-23) is left to the caller (*undecided). Codes above 7 (a >= 6
// with an up) saturate to 7 as e2m1_sr does.
// Exact = true: exact SR (drop 0, the band always checked), one shift pair and a test fewer per
// element than the k-bit form. Hw = true: hw SR, w the element's random byte; floor(f * 2^8)
// = T >> 24 exactly (T drops only the low 9 bits of F), so the carry of w + (T >> 24) is
// sr_hw_round_up's decision and nothing is left undecided. |y| is first capped at 7 (every
// |y| >= 6 gives code 7 either way): then k needs one bound, and Inf no Inf - Inf.
template <bool Exact, bool Hw = false>
__device__ __forceinline__ std::uint32_t e2m1_sr_mag_fma(float y, std::uint32_t w, int drop, bool* undecided) {
  const float a = fminf(fabsf(y), 7.0f);
  const std::uint32_t e = float_bits(a) >> 23;
  const std::uint32_t k = max(e, 127u) - 127u;                // a < 8: e <= 129
  const float m = bits_float(0x4a800000u + (k << 23));       // 2^22, 2^23, 2^24
  const float scale = bits_float(0x4b800000u - (k << 23));   // 2^23 / sp: 2^24, 2^23, 2^22
  const float p = __fadd_rd(a, m);
  const float rem = a - (p - m);
  const std::uint32_t t = float_bits(__fmaf_rd(rem, scale, 0x1p23f)) << 9;
  const std::uint32_t c = float_bits(p) - float_bits(m) + 2u * k;
  std::uint32_t up;
  if constexpr (Hw) {
    (void)drop;
    (void)undecided;
    up = (w + (t >> 24)) >> 8;
  } else if constexpr (Exact) {
    *undecided |= (w - t) < 512u;
    up = static_cast<std::uint32_t>(w < t);
  } else {
    if (drop < 9) *undecided |= (w - t) < 512u;
    up = static_cast<std::uint32_t>((w >> drop) < (t >> drop));
  }
  return min(c + up, 7u);
}

// Element i of a 1x16 block held as raw input words (BF16: two per word, low half first).
template <class T>
__device__ __forceinline__ float block_elem(const std::uint32_t* w, int i) {
  if constexpr (sizeof(T) == 2) return bits_float((i & 1) ? (w[i >> 1] & 0xffff0000u) : (w[i >> 1] << 16));
  else return bits_float(w[i]);
}

// max(acc, |v|) that returns NaN if either is one (PTX max.NaN, sm_80+): the block amax then
// also says whether the block holds a NaN (and must take the general path).
__device__ __forceinline__ float max_abs_nan(float acc, float v) {
  float r;
  asm("{\n\t.reg .f32 t;\n\tabs.f32 t, %2;\n\tmax.NaN.f32 %0, %1, t;\n\t}" : "=f"(r) : "f"(acc), "f"(v));
  return r;
}
__device__ __forceinline__ float block_amax_nan(const float* v) {
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) a = max_abs_nan(a, v[i]);
  return a;
}

// One 1x16 block, as the CPU reference: block amax (NaN ignored: fmaxf returns the non-NaN
// operand, the values are >= +0, so this is max_ignore_nan), E4M3 scale, codes. No clamp before
// the conversions: e2m1_rne / e2m1_rz saturate exactly as the clamp does (all 2^32 inputs,
// long.formats), e2m1_sr_fast as said above. index0 (the first element's index in the stored
// orientation) is a multiple of 16, so the block's SR words are the four Philox blocks
// index0/4 .. index0/4 + 3: drawn once per 4 elements; hw SR's bytes all come from the one
// block philox_hw_block(index0 / 16). The kernel's general path, for blocks
// with a NaN to round, for RZ, and for a block with an undecided SR element.
// MaySr = false leaves the SR branch out (a kernel whose specs have no SR).
template <bool MaySr>
__device__ __forceinline__ std::uint8_t quantize_block(const float* v, GlobalScale g, bool legacy, const RoundingSpec& r,
                                                       std::uint64_t index0, std::uint8_t* codes8) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const std::uint8_t s = nvfp4_block_scale_code(amax, g.encode, legacy);
  const float e_b = nvfp4_block_encode_scale(s, g.decode);
  std::uint32_t w[2] = {0, 0};
  if (MaySr && r.mode == Rounding::Stochastic && r.sr_bits == kSrHw) {
    const Philox4x32 words = philox_hw_block(r.rng, index0 >> 4);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const std::uint64_t index = index0 + static_cast<std::uint64_t>(i);
      const std::uint32_t q = e2m1_sr_fast(v[i] * e_b, hw_byte_of_word(words.v[i >> 2], index), r, 0, index);
      w[i >> 3] |= q << (4 * (i & 7));
    }
  } else if (MaySr && r.mode == Rounding::Stochastic) {
    const int drop = r.sr_bits == kSrExact ? 0 : 32 - r.sr_bits;
#pragma unroll
    for (int q4 = 0; q4 < 4; ++q4) {
      const Philox4x32 words = philox_block(r.rng, (index0 >> 2) + static_cast<std::uint64_t>(q4));
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int i = 4 * q4 + k;
        const std::uint32_t q = e2m1_sr_fast(v[i] * e_b, words.v[k], r, drop, index0 + static_cast<std::uint64_t>(i));
        w[i >> 3] |= q << (4 * (i & 7));
      }
    }
  } else if (r.mode == Rounding::TowardZero) {
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i >> 3] |= static_cast<std::uint32_t>(e2m1_rz(v[i] * e_b)) << (4 * (i & 7));
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i >> 3] |= static_cast<std::uint32_t>(e2m1_rne(v[i] * e_b)) << (4 * (i & 7));
  }
  *reinterpret_cast<uint2*>(codes8) = make_uint2(w[0], w[1]);
  return s;
}

// The SR codes and signs of one block, four elements per Philox block, packed as
// e2m1_rne_pack_fma packs the RNE codes (format/e2m1.hpp): codes by Horner's rule,
// acc * 16 + code (an IMAD) for i = 7 .. 0, which leaves element i's code in nibble i, and
// signs by a funnel shift of y's top nibble.
template <bool Exact>
__device__ __forceinline__ void sr_codes(const float* v, float e_b, const RoundingSpec& r, int drop, std::uint64_t index0,
                                         std::uint32_t (&acc)[2], std::uint32_t (&signs)[2], bool* undecided) {
#pragma unroll
  for (int q4 = 3; q4 >= 0; --q4) {
    const Philox4x32 words = philox_block(r.rng, (index0 >> 2) + static_cast<std::uint64_t>(q4));
#pragma unroll
    for (int k = 3; k >= 0; --k) {
      const int i = 4 * q4 + k;
      const float y = v[i] * e_b;
      acc[i >> 3] = acc[i >> 3] * 16u + e2m1_sr_mag_fma<Exact>(y, words.v[k], drop, undecided);
      signs[i >> 3] = e2m1_shift_in_top_nibble(signs[i >> 3], float_bits(y));
    }
  }
}

// sr_codes for hw SR: one Philox call (philox_hw_block(index0 / 16)) for the whole block,
// element i taking the byte at hw_byte_shift(i) of word i / 4 (index0 is a multiple of 16).
__device__ __forceinline__ void sr_codes_hw(const float* v, float e_b, const RoundingSpec& r, std::uint64_t index0,
                                            std::uint32_t (&acc)[2], std::uint32_t (&signs)[2]) {
  const Philox4x32 words = philox_hw_block(r.rng, index0 >> 4);
  bool never = false;
#pragma unroll
  for (int i = 15; i >= 0; --i) {
    const float y = v[i] * e_b;
    const std::uint32_t byte = hw_byte_of_word(words.v[i >> 2], static_cast<std::uint64_t>(i));
    acc[i >> 3] = acc[i >> 3] * 16u + e2m1_sr_mag_fma<false, true>(y, byte, 0, &never);
    signs[i >> 3] = e2m1_shift_in_top_nibble(signs[i >> 3], float_bits(y));
  }
}

// The fast path of one block with no NaN among its values (amax = its block amax): scales,
// codes (RNE on the FMA pipe, or SR), stores. Returns false, having stored nothing, when an SR
// element falls in e2m1_sr_mag_fma's undecided band: the caller takes the general path.
template <bool Sr>
__device__ __forceinline__ bool quantize_block_fast(const float* v, float amax, GlobalScale g, const float* encode_of,
                                                    bool legacy, const RoundingSpec& r, std::uint64_t index0,
                                                    std::uint8_t* codes8, std::uint8_t* scale, bool in) {
  const std::uint8_t s = block_scale_code_hw(amax, g.encode, legacy);
  const float e_b = encode_of[s];  // nvfp4_block_encode_scale(s, g.decode), tabulated per CTA
  uint2 packed;
  if constexpr (Sr) {
    std::uint32_t acc[2] = {0, 0}, signs[2] = {0, 0};
    bool undecided = false;
    if (r.sr_bits == kSrExact) sr_codes<true>(v, e_b, r, 0, index0, acc, signs, &undecided);
    else if (r.sr_bits == kSrHw) sr_codes_hw(v, e_b, r, index0, acc, signs);
    else sr_codes<false>(v, e_b, r, 32 - r.sr_bits, index0, acc, signs, &undecided);
    if (undecided) return false;
    packed = make_uint2(acc[0] | (signs[0] & 0x88888888u), acc[1] | (signs[1] & 0x88888888u));
  } else {
    float y[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) y[i] = v[i] * e_b;
    packed = make_uint2(e2m1_rne_pack_fma<8>(y), e2m1_rne_pack_fma<8>(y + 8));
  }
  if (in) {
    *reinterpret_cast<uint2*>(codes8) = packed;
    *scale = s;
  }
  return true;
}

// e4m3_decode by the hardware conversion (E4M3 -> FP16, exact: FP16 holds every E4M3 value;
// then to float): two instructions where the bit arithmetic takes about a dozen. NaN for the
// NaN codes 0x7f and 0xff, where e4m3_decode gives its own NaN (e4m3_hw_decode_check_kernel).
__device__ __forceinline__ float e4m3_decode_hw(unsigned code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3)));
}

// Per half of the packed BF16 pairs a and b the larger magnitude, exact, NaN if either is one;
// its sign is the XOR of the operands' (max.NaN.xorsign.abs), for the caller to drop.
__device__ __forceinline__ std::uint32_t bf16x2_absmax_xs_nan(std::uint32_t a, std::uint32_t b) {
  std::uint32_t r;
  asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
// Per half the largest magnitude of N packed words (a pairwise tree), sign to be dropped.
template <int N>
__device__ __forceinline__ std::uint32_t bf16x2_absmax_nan(const std::uint32_t* w) {
  std::uint32_t mx[N];
#pragma unroll
  for (int i = 0; i < N; ++i) mx[i] = w[i];
#pragma unroll
  for (int s = 1; s < N; s *= 2)
#pragma unroll
    for (int i = 0; i + s < N; i += 2 * s) mx[i] = bf16x2_absmax_xs_nan(mx[i], mx[i + s]);
  return mx[0];
}
// The block amax of BF16 elements held as raw words (two per word), as block_amax_nan gives it
// from their float values: the packed tree above, then the float max of the two halves'
// absolute values (+0 for zeros): 8 instructions for the block where the float maxima take 16
// (bf16_amax_check_kernel).
__device__ __forceinline__ float bf16_block_amax_nan(const std::uint32_t (&w)[8]) {
  const std::uint32_t m = bf16x2_absmax_nan<8>(w);
  return max_abs_nan(fabsf(bits_float(m << 16)), bits_float(m & 0xffff0000u));
}

// One block of one direction on the fast path; false (nothing stored) where it does not apply:
// a NaN among the values to round, RZ, or an undecided SR element. The lane owns the block, so
// the choice is the lane's own.
// amax: the block's amax (block_amax_nan(v), or bf16_block_amax_nan of its raw words).
template <bool Sr>
__device__ __forceinline__ bool quantize_fast_amax(const float (&v)[16], float amax, GlobalScale g,
                                                   const float* encode_of, bool legacy, const RoundingSpec& r,
                                                   std::uint64_t index0, std::uint8_t* codes8, std::uint8_t* scale,
                                                   bool in) {
  if (amax != amax || !(Sr || r.mode == Rounding::NearestEven)) return false;
  return quantize_block_fast<Sr>(v, amax, g, encode_of, legacy, r, index0, codes8, scale, in);
}
template <bool Sr>
__device__ __forceinline__ bool quantize_fast(const float (&v)[16], GlobalScale g, const float* encode_of, bool legacy,
                                              const RoundingSpec& r, std::uint64_t index0, std::uint8_t* codes8,
                                              std::uint8_t* scale, bool in) {
  return quantize_fast_amax<Sr>(v, block_amax_nan(v), g, encode_of, legacy, r, index0, codes8, scale, in);
}

// The warp's shared tile: 16 rows of 64 elements as 16-byte chunks (BF16: 8 per row, float: 16).
// Chunk ch of row r sits at ch ^ ((ch >> 3) << 1) ^ (r & 1): the 16-byte stores of a quarter
// warp (two rows, four blocks) and the column reads (one word or two per lane along a row) each
// hit distinct banks.
// The swizzle only permutes a 1x16 block's own chunks (its XOR term is below kVecs), so vector
// k of rowwise block blk sits at block_chunk: the block's first chunk plus k ^ swizzle(r, blk),
// the term being the same for all the block's vectors and, r & 1 aside, for all its rows.
template <class T>
struct SharedTile {
  static constexpr int kVecs = static_cast<int>(sizeof(T));  // 16-byte vectors per 1x16 block
  static constexpr int kChunks = 4 * kVecs;
  uint4 chunk[kTileRows * kChunks];
  __host__ __device__ __forceinline__ static constexpr int at(int r, int ch) {
    return r * kChunks + (ch ^ ((ch >> 3) << 1) ^ (r & 1));
  }
  __host__ __device__ __forceinline__ static constexpr int swizzle(int r, int blk) {
    return (((blk * kVecs) >> 3) << 1) ^ (r & 1);
  }
  __host__ __device__ __forceinline__ static constexpr int block_chunk(int r, int blk, int k) {
    return r * kChunks + blk * kVecs + (k ^ swizzle(r, blk));
  }
  static constexpr bool block_chunk_is_at() {
    for (int r = 0; r < kTileRows; ++r)
      for (int blk = 0; blk < 4; ++blk)
        for (int k = 0; k < kVecs; ++k)
          if (block_chunk(r, blk, k) != at(r, blk * kVecs + k)) return false;
    return true;
  }
};
static_assert(SharedTile<float>::block_chunk_is_at() && SharedTile<std::uint16_t>::block_chunk_is_at(),
              "block_chunk must address the chunk at() does");

// Rowwise block blk (16 columns) of tile row r, and column 2 lane + j, back from the shared tile.
template <class T>
__device__ __forceinline__ void tile_row_block(const SharedTile<T>& tile, int r, int blk, float (&v)[16]) {
  constexpr int kVecs = SharedTile<T>::kVecs;
  uint4 raw[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) raw[k] = tile.chunk[SharedTile<T>::block_chunk(r, blk, k)];
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = block_elem<T>(reinterpret_cast<const std::uint32_t*>(raw), i);
}
// tile_row_block's raw words (BF16 only: 8 words, two elements each).
template <class T>
__device__ __forceinline__ void tile_row_words(const SharedTile<T>& tile, int r, int blk, std::uint32_t (&w)[8]) {
  static_assert(sizeof(T) == 2, "BF16 tiles only");
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const uint4 q = tile.chunk[SharedTile<T>::block_chunk(r, blk, k)];
    w[4 * k] = q.x, w[4 * k + 1] = q.y, w[4 * k + 2] = q.z, w[4 * k + 3] = q.w;
  }
}
template <class T>
__device__ __forceinline__ void tile_column(const SharedTile<T>& tile, int lane, int j, float (&v)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    if constexpr (sizeof(T) == 2) {
      const std::uint32_t w = reinterpret_cast<const std::uint32_t*>(&tile.chunk[SharedTile<T>::at(i, lane >> 2)])[lane & 3];
      v[i] = bits_float(j ? (w & 0xffff0000u) : (w << 16));
    } else {
      v[i] = reinterpret_cast<const float*>(&tile.chunk[SharedTile<T>::at(i, lane >> 1)])[2 * (lane & 1) + j];
    }
  }
}

// The 16-byte vectors of row r from column c (a multiple of 16 elements) on.
// a * b for extents of at most kMaxExtent (check_shape), as one 32 x 32 -> 64-bit multiply.
// Both are non-negative, so the product is taken unsigned: one IMAD.WIDE.U32, where a signed
// 32 x 32 -> 64-bit product adds sign corrections.
__device__ __forceinline__ std::int64_t wide(int a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(static_cast<unsigned>(a)) * static_cast<unsigned>(b));
}

// Element index e's code byte (two codes a byte) and scale byte (one per 1x16 block). Indices
// are never negative: divided unsigned, a shift, where a signed division first fixes up the sign.
__device__ __forceinline__ std::uint64_t code_byte(std::int64_t e) { return static_cast<std::uint64_t>(e) / 2; }
__device__ __forceinline__ std::uint64_t scale_byte(std::int64_t e) { return static_cast<std::uint64_t>(e) / 16; }

template <class T>
__device__ __forceinline__ const uint4* row_vecs(const T* x, int r, std::int64_t cols, int c) {
  return reinterpret_cast<const uint4*>(x + wide(r, cols) + c);
}

// What a CTA keeps in shared memory besides its warps' tiles: the global scales and the block
// encode scale of every E4M3 scale code (0..127; computed once per CTA, so a block's e_b is
// one load instead of an IEEE division), and the CTA's outputs that are not contiguous per
// warp - the columnwise codes and scales (8 and 1 bytes per column and warp) and the rowwise
// scales (4 bytes per row) - written out together at the end: 64 contiguous code bytes per
// column instead of 8 (the scattered 8-byte stores bound the previous version by L2 traffic).
// A kernel that writes the BF16 decodes also keeps the rowwise codes here until its decode
// (each lane its own blocks'), so that it need not read back from global memory what it just
// stored there: that load waits for an L2 round trip at the end of every warp; and the decode's
// byte tables of every scale code (a block's tables are one 16-byte load instead of an E4M3
// decode and ~20 instructions; a block scale code is 0..0x7e, the satfinite E4M3 of a
// non-negative amax times a positive finite encode scale).
template <class T, bool Decode>
struct DualShared {
  SharedTile<T> tile[kWarps];
  uint2 col_codes[kWarps][kTileCols];         // [warp][column]: the column's 16 codes of the warp's rows
  std::uint8_t col_scales[kWarps][kTileCols];
  std::uint8_t row_scales[kCtaRows][kTileCols / 16];
  uint2 row_codes[Decode ? kCtaRows : 1][kTileCols / 16];  // Decode only: [row][block]
  uint4 decode_tables[Decode ? 128 : 1];  // Decode only: [E4M3 code] unscaled_bf16_tables_word of its value
  float encode_of[2][128];                          // [direction][E4M3 code]
  float2 g[2];  // [direction]: the global scale (encode, decode); plain floats, as shared memory has no initialisers
  std::uint64_t seed;
};

// Elements 8k .. 8k + 7 of a block's BF16 decode from code word w (codes.x: k = 0, codes.y: 1)
// and the tables of its scale (unscaled_bf16_block's halves).
__device__ __forceinline__ uint4 unscaled_bf16_half(std::uint32_t w, uint4 tables) {
  const UnscaledBf16Tables t{{tables.x, tables.y}, {tables.z, tables.w}};
  const Bf16x4 a = nvfp4_unscaled_bf16x4(t, w), b = nvfp4_unscaled_bf16x4(t, w >> 16);
  return make_uint4(a.lo, a.hi, b.lo, b.hi);
}

// Each lane's two 32-byte BF16 decodes of whole blocks p (to dst[p], 16-byte aligned), stored by
// the lane pair (lane, lane ^ 1) so that every store instruction writes whole 32-byte sectors
// (a lane storing its own block would write half of every sector it touches); a lane whose
// partner has no block (in = false there) stores its own. The partner's destination is dst[p]
// + step (even lane) or - step (odd lane), computed, not shuffled. Every lane of the warp must
// call it (the shuffles). Decoded by halves: in a lane pair the even lane decodes the first
// halves of both lanes' blocks p, the odd lane the second halves (the partner's code word and
// scale code by two shuffles, its tables from the CTA's table), so that each store instruction
// writes one lane's whole block with data each lane computed itself: no decoded word crosses a
// shuffle and none is selected. scale[p] may be a byte nobody wrote where the lane has no block
// (masked: no read past the table; such a half is never stored).
__device__ __forceinline__ void decode_store_block_pairs(const uint2 (&codes)[2], const std::uint8_t (&scale)[2],
                                                         const uint4* tables, std::uint16_t* const (&dst)[2],
                                                         std::int64_t step, bool in) {
  const bool odd = (threadIdx.x & 1u) != 0;
  const bool partner_in = __shfl_xor_sync(0xffffffffu, in, 1);  // by every lane: not after a short-circuit
  const bool both = in && partner_in;
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    // The half of this lane's block that the partner decodes: the even lane's .y, the odd lane's .x.
    const std::uint32_t recv = __shfl_xor_sync(0xffffffffu, odd ? codes[p].x : codes[p].y, 1);
    const std::uint32_t partner_scale = __shfl_xor_sync(0xffffffffu, static_cast<std::uint32_t>(scale[p]), 1);
    if (both) {
      // a: this lane's half of the even lane's block, b: of the odd lane's block.
      const std::uint32_t code_a = odd ? recv : codes[p].x, code_b = odd ? codes[p].y : recv;
      const std::uint32_t own = scale[p];
      const std::uint32_t scale_a = odd ? partner_scale : own, scale_b = odd ? own : partner_scale;
      std::uint16_t* const even_block = dst[p] - (odd ? step : 0);
      reinterpret_cast<uint4*>(even_block)[odd] = unscaled_bf16_half(code_a, tables[scale_a & 127u]);
      reinterpret_cast<uint4*>(even_block + step)[odd] = unscaled_bf16_half(code_b, tables[scale_b & 127u]);
    } else if (in) {
      const uint4 t = tables[scale[p] & 127u];
      uint4* const mine = reinterpret_cast<uint4*>(dst[p]);
      mine[0] = unscaled_bf16_half(codes[p].x, t), mine[1] = unscaled_bf16_half(codes[p].y, t);
    }
  }
}

// Decode: the kernel writes out's BF16 decodes (a separate instantiation, so that the kernels
// without them carry none of their state: the SR kernels sit at their register limit).
template <class T, bool Rht, bool RowSr, bool ColSr, bool Decode>
__global__ void __launch_bounds__(kThreads, kQuantizeMinBlocks<RowSr || ColSr>)
    dual_quantize_kernel(const T* __restrict__ x, std::int64_t rows, std::int64_t cols, DualSpec spec, RhtArgs rs,
                         const std::uint32_t* keys, DualOutputs out) {
  constexpr int kVecs = SharedTile<T>::kVecs;
  __shared__ DualShared<T, Decode> sh;
  // Tile coordinates in 32 bits (rows and cols are at most kMaxExtent, check_shape): element
  // offsets are 64-bit products (wide), but what a thread keeps live across the kernel is
  // single registers, and the CTA's coordinates come from a 32-bit division.
  const unsigned col_tiles = (static_cast<unsigned>(cols) + kTileCols - 1) / kTileCols;
  const int R0 = static_cast<int>(blockIdx.x / col_tiles) * kCtaRows;
  const int c0 = static_cast<int>(blockIdx.x % col_tiles) * kTileCols;
  // The lane's two rowwise blocks, into the warp's shared tile, by cp.async before anything
  // else: they are in flight while the CTA computes its global scales and tables, and hold no
  // registers meanwhile (a CTA quantizes only 16 KB of BF16; loaded after the tables, each CTA
  // began with the keys' latency, the divisions and a barrier before its first byte was asked for).
  const int lane = static_cast<int>(threadIdx.x & 31u), warp = static_cast<int>(threadIdx.x >> 5);
  const int r0 = R0 + kTileRows * warp;
  // 32-bit compares (rows, cols <= kMaxExtent; the indices are non-negative): a predicate the
  // compiler rematerialises is then one ISETP, not a sign extension and a 64-bit compare.
  const unsigned rows32 = static_cast<unsigned>(rows), cols32 = static_cast<unsigned>(cols);
  const bool warp_in = static_cast<unsigned>(r0) < rows32;
  const int blk = lane & 3;
  const int cb = c0 + 16 * blk;
  const bool row_in = warp_in && static_cast<unsigned>(cb) < cols32;
  SharedTile<T>& tile = sh.tile[warp];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Where !row_in, x's first vectors (rows, cols >= 16) stand in as sources never read.
    const uint4* src = row_in ? row_vecs(x, r0 + (lane >> 2) + 8 * h, cols, cb) : reinterpret_cast<const uint4*>(x);
#pragma unroll
    for (int k = 0; k < kVecs; ++k)
      copy16_to_shared_async(&tile.chunk[SharedTile<T>::block_chunk((lane >> 2) + 8 * h, blk, k)], src + k, row_in);
  }
  // The global scales, the encode tables and the seed, behind one barrier: thread t works for
  // direction t / 128 (0 rowwise, 1 columnwise), computes that direction's global scale from
  // its key itself and fills entry t % 128 of its table. Two divisions more per thread than
  // one thread computing both scales for all, but no thread waits on another's chain of key
  // loads and divisions, and the tables need no second barrier: the CTA's first barrier, where
  // its warps wait for all this, was the kernel's largest stall (ncu, docs/performance.md).
  {
    const unsigned t = threadIdx.x, dir = t >> 7, code = t & 127u;
    const GlobalScale g = nvfp4_global_scale(bits_float(keys[dir]));
    // Independent of the key: computed while it loads.
    const float scale_value = e4m3_decode_hw(code);  // code 127 (NaN) is never a block scale
    if constexpr (Decode) {
      if (dir == 0) sh.decode_tables[code] = unscaled_bf16_tables_word(scale_value);
    }
    sh.encode_of[dir][code] = nvfp4_block_encode_scale_of_value(scale_value, g.decode);
    if (code == 0) {
      sh.g[dir] = make_float2(g.encode, g.decode);
      if (blockIdx.x == 0) {
        out.globals[dir] = g;
        float* const alpha = dir == 0 ? out.row_alpha : out.col_alpha;
        const GlobalScale* const partner = dir == 0 ? out.row_alpha_partner : out.col_alpha_partner;
        if (alpha) alpha[0] = g.decode * partner->decode, alpha[1] = 0.0f;
      }
    }
    if (t == 32 && spec.device_seed) sh.seed = *spec.device_seed;
  }
  __syncthreads();
  RoundingSpec rr = spec.row_rounding, cr = spec.col_rounding;
  if (spec.device_seed) rr.rng.seed = cr.rng.seed = sh.seed;
  const GlobalScale gr{sh.g[0].x, sh.g[0].y}, gc{sh.g[1].x, sh.g[1].y};
  copy_to_shared_wait_all();
  __syncwarp();  // the warp's tile (a warp reads only its own)

  // Rows: this lane's two rowwise blocks, whole.
  // Not unrolled (here and for the columns): one copy of the block code per direction keeps
  // the kernel's instructions in cache; the block comes back from the shared tile.
  // Blocks left to the general path, shifted in as they fail (one shift-add per block, where a
  // variable bit each was a shift and a select): bit 3 - h rowwise block h, bit 1 - j column j.
  unsigned general = 0;
  // Where rowwise block (row tr of the CTA tile, element index base) puts its codes.
  const auto row_codes_at = [&](int tr, std::int64_t base) {
    return Decode ? reinterpret_cast<std::uint8_t*>(&sh.row_codes[tr][blk]) : out.row_codes + code_byte(base);
  };
  // The fast path's code bytes: row R0 + tr holds cols / 2 of them (cols and cb are even), so
  // the address is one wide product-add, without the element index and its 64-bit halving.
  std::uint8_t* const row_codes_cb = out.row_codes + (static_cast<unsigned>(cb) >> 1);
  const auto row_codes_fast = [&](int tr) {
    return Decode ? reinterpret_cast<std::uint8_t*>(&sh.row_codes[tr][blk])
                  : row_codes_cb + wide(R0 + tr, static_cast<std::int64_t>(static_cast<unsigned>(cols) >> 1));
  };
#pragma unroll 1
  for (int h = 0; h < 2; ++h) {
    float v[16];
    const int tr = kTileRows * warp + (lane >> 2) + 8 * h;  // row in the CTA tile
    const std::int64_t base = wide(R0 + tr, cols) + cb;
    bool ok;
    if constexpr (sizeof(T) == 2) {
      std::uint32_t w[8];
      tile_row_words(tile, (lane >> 2) + 8 * h, blk, w);
      const float amax = bf16_block_amax_nan(w);
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = block_elem<T>(w, i);
      ok = quantize_fast_amax<RowSr>(v, amax, gr, sh.encode_of[0], spec.legacy, rr, static_cast<std::uint64_t>(base),
                                     row_codes_fast(tr), &sh.row_scales[tr][blk], row_in);
    } else {
      tile_row_block(tile, (lane >> 2) + 8 * h, blk, v);
      ok = quantize_fast<RowSr>(v, gr, sh.encode_of[0], spec.legacy, rr, static_cast<std::uint64_t>(base),
                                row_codes_fast(tr), &sh.row_scales[tr][blk], row_in);
    }
    general = 2u * general + static_cast<unsigned>(!ok && row_in);
  }

  // Columns: c0 + 2 lane and the next, the warp's 16 rows each, from the shared tile.
  const int c = c0 + 2 * lane;
  const bool col_in = warp_in && static_cast<unsigned>(c) < cols32;
#pragma unroll 1
  for (int j = 0; j < 2; ++j) {
    float v[16];
    tile_column(tile, lane, j, v);
    if constexpr (Rht) rht16(v, rs);
    const std::int64_t base = wide(c + j, rows) + r0;  // index in the transposed (stored) orientation
    const bool ok = quantize_fast<ColSr>(v, gc, sh.encode_of[1], spec.legacy, cr, static_cast<std::uint64_t>(base),
                                         reinterpret_cast<std::uint8_t*>(&sh.col_codes[warp][2 * lane + j]),
                                         &sh.col_scales[warp][2 * lane + j], col_in);
    general = 2u * general + static_cast<unsigned>(!ok && col_in);
  }

  // The general path, rarely taken, where little else is live (so that it costs the fast path
  // no registers): each left block again from the shared tile.
  if (general) {
#pragma unroll 1
    for (int b = 0; b < 4; ++b) {
      if (!((general >> (3 - b)) & 1u)) continue;
      float v[16];
      const bool row = b < 2;
      if (row) {
        tile_row_block(tile, (lane >> 2) + 8 * b, blk, v);
        const int tr = kTileRows * warp + (lane >> 2) + 8 * b;
        const std::int64_t base = wide(R0 + tr, cols) + cb;
        sh.row_scales[tr][blk] = quantize_block<RowSr || ColSr>(v, gr, spec.legacy, rr, static_cast<std::uint64_t>(base),
                                                                row_codes_at(tr, base));
      } else {
        tile_column(tile, lane, b - 2, v);
        if constexpr (Rht) rht16(v, rs);
        const int col = 2 * lane + (b - 2);
        const std::int64_t base = wide(c0 + col, rows) + r0;
        sh.col_scales[warp][col] =
            quantize_block<RowSr || ColSr>(v, gc, spec.legacy, cr, static_cast<std::uint64_t>(base),
                                           reinterpret_cast<std::uint8_t*>(&sh.col_codes[warp][col]));
      }
    }
  }
  __syncthreads();

  // Write-out: threads 0..63 one column's codes (8 bytes per warp row group), 64..127 its
  // scales, 128..255 one row's four rowwise scale bytes.
  const int t = static_cast<int>(threadIdx.x);
  const int valid_rows = min(kCtaRows, static_cast<int>(rows) - R0);
  const int groups = valid_rows / kTileRows;  // warps with rows
  if (t < 2 * kTileCols) {
    const int col = t & (kTileCols - 1);
    if (static_cast<unsigned>(c0 + col) < cols32) {
      if (t < kTileCols) {
        uint2* dst = reinterpret_cast<uint2*>(out.col_codes + code_byte(wide(c0 + col, rows) + R0));
        if (groups == kWarps && wide(c0 + col, rows) % 32 == 0) {
#pragma unroll
          for (int q = 0; q < kWarps / 2; ++q) {
            const uint2 a = sh.col_codes[2 * q][col], b = sh.col_codes[2 * q + 1][col];
            reinterpret_cast<uint4*>(dst)[q] = make_uint4(a.x, a.y, b.x, b.y);
          }
        } else {
          for (int w = 0; w < groups; ++w) dst[w] = sh.col_codes[w][col];
        }
      } else {
        std::uint8_t* dst = out.col_scales + scale_byte(wide(c0 + col, rows) + R0);
        if (groups == kWarps && wide(c0 + col, rows) % 128 == 0) {
          std::uint32_t lo = 0, hi = 0;
#pragma unroll
          for (int w = 0; w < 4; ++w) {
            lo |= static_cast<std::uint32_t>(sh.col_scales[w][col]) << (8 * w);
            hi |= static_cast<std::uint32_t>(sh.col_scales[w + 4][col]) << (8 * w);
          }
          *reinterpret_cast<uint2*>(dst) = make_uint2(lo, hi);
        } else {
          for (int w = 0; w < groups; ++w) dst[w] = sh.col_scales[w][col];
        }
      }
    }
  } else {
    const int tr = t - 2 * kTileCols;
    if (tr < valid_rows) {
      std::uint8_t* dst = out.row_scales + scale_byte(wide(R0 + tr, cols) + c0);
      const int nb = min(4, (static_cast<int>(cols) - c0) / 16);
      if (nb == 4 && (cols % 64) == 0) {
        *reinterpret_cast<std::uint32_t*>(dst) = *reinterpret_cast<const std::uint32_t*>(sh.row_scales[tr]);
      } else {
        for (int k = 0; k < nb; ++k) dst[k] = sh.row_scales[tr][k];
      }
    }
  }

  // Decode: the lane's own blocks (every code and scale read here the lane wrote itself, and the
  // tables were filled before the setup's barrier, so no barrier), each 32 bytes of BF16, stored
  // by lane pairs (store_block_pairs). warp_in is warp-uniform, as the pairs' shuffles need. The
  // rowwise codes leave for global memory here, from shared memory.
  if constexpr (Decode) {
    if (!warp_in) return;
    // A block's tables by its scale code. A lane without the block (in = false) computes a
    // decode it does not store (the pairs' shuffles need every lane) from a scale byte nobody
    // wrote: masked, so that it reads no byte past the table.
    uint2 row_codes[2];
    std::int64_t row_base[2];  // element index of the lane's rowwise block h
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int tr = kTileRows * warp + (lane >> 2) + 8 * h;
      row_base[h] = wide(R0 + tr, cols) + cb;
      row_codes[h] = row_in ? sh.row_codes[tr][blk] : make_uint2(0, 0);
      if (row_in) *reinterpret_cast<uint2*>(out.row_codes + code_byte(row_base[h])) = row_codes[h];
    }
    if (out.row_bf16) {
      std::uint8_t scale[2];
      std::uint16_t* dst[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int tr = kTileRows * warp + (lane >> 2) + 8 * h;
        scale[h] = sh.row_scales[tr][blk];
        dst[h] = out.row_bf16 + row_base[h];
      }
      // The partner's block: 16 columns along the row.
      decode_store_block_pairs(row_codes, scale, sh.decode_tables, dst, 16, row_in);
    }
    if (out.col_bf16) {
      uint2 codes[2];
      std::uint8_t scale[2];
      std::uint16_t* dst[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col = 2 * lane + j;
        codes[j] = sh.col_codes[warp][col];
        scale[j] = sh.col_scales[warp][col];
        dst[j] = out.col_bf16 + wide(c + j, rows) + r0;
      }
      decode_store_block_pairs(codes, scale, sh.decode_tables, dst, 2 * rows, col_in);  // the partner's columns: 2 on
    }
  }
}

void check_shape(std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0 || rows % 16 != 0 || cols % 16 != 0)
    throw std::invalid_argument("dual NVFP4 quantization needs rows and cols that are positive multiples of 16 (got " +
                                std::to_string(rows) + " x " + std::to_string(cols) + ")");
  if (rows > kMaxExtent || cols > kMaxExtent)
    throw std::invalid_argument("dual NVFP4 quantization takes rows and cols up to 2^30 (got " + std::to_string(rows) +
                                " x " + std::to_string(cols) + ")");
}

// The kernels read the input as 16-byte vectors (also by cp.async) and store codes and scales
// as 4- to 16-byte words, at offsets that are multiples of those sizes; cudaMalloc's buffers
// are 256-byte aligned, a view into one need not be, and a misaligned access would surface
// as a sticky "misaligned address" error at some later CUDA call. Checked before any launch.
struct BufferRule {
  const void* p;
  std::size_t align;
  const char* what;
};
void check_buffer(const BufferRule& b) {
  const auto addr = reinterpret_cast<std::uintptr_t>(b.p);
  if (b.p == nullptr) throw std::invalid_argument(std::string("dual NVFP4 quantization: no ") + b.what + " buffer (null)");
  if (addr % b.align != 0)
    throw std::invalid_argument(std::string("dual NVFP4 quantization: the ") + b.what + " buffer must be " +
                                std::to_string(b.align) + "-byte aligned (its address is " +
                                std::to_string(addr % b.align) + " bytes past a multiple)");
}
BufferRule input_rule(const void* d_x) { return {d_x, 16, "input"}; }
BufferRule keys_rule(const std::uint32_t* d_keys) { return {d_keys, alignof(std::uint32_t), "amax keys"}; }
void check_buffers(const void* d_x, const DualOutputs& out, const std::uint32_t* d_keys) {
  const BufferRule bufs[] = {input_rule(d_x),
                             {out.row_codes, 8, "row codes"},
                             {out.row_scales, 4, "row scales"},
                             {out.col_codes, 16, "column codes"},
                             {out.col_scales, 8, "column scales"},
                             {out.globals, alignof(GlobalScale), "global scales"},
                             keys_rule(d_keys)};
  for (const BufferRule& b : bufs) check_buffer(b);
  if (out.row_bf16) check_buffer({out.row_bf16, 16, "row BF16 decode"});
  if (out.col_bf16) check_buffer({out.col_bf16, 16, "column BF16 decode"});
  if (out.row_alpha) {
    check_buffer({out.row_alpha, alignof(float), "row alpha"});
    check_buffer({out.row_alpha_partner, alignof(GlobalScale), "row alpha's partner global scale"});
  }
  if (out.col_alpha) {
    check_buffer({out.col_alpha, alignof(float), "column alpha"});
    check_buffer({out.col_alpha_partner, alignof(GlobalScale), "column alpha's partner global scale"});
  }
}
// What the amax pass alone touches: the input and the keys.
void check_amax_buffers(const void* d_x, const std::uint32_t* d_keys) {
  check_buffer(input_rule(d_x));
  check_buffer(keys_rule(d_keys));
}

template <class T, bool Rht, bool RowSr, bool ColSr>
void launch_quantize(const T* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec, const RhtArgs& rs,
                     const std::uint32_t* d_keys, const DualOutputs& out, cudaStream_t st) {
  const auto blocks = static_cast<unsigned>(((rows + kCtaRows - 1) / kCtaRows) * ((cols + kTileCols - 1) / kTileCols));
  if (out.row_bf16 || out.col_bf16)
    dual_quantize_kernel<T, Rht, RowSr, ColSr, true><<<blocks, kThreads, 0, st>>>(d_x, rows, cols, spec, rs, d_keys, out);
  else
    dual_quantize_kernel<T, Rht, RowSr, ColSr, false><<<blocks, kThreads, 0, st>>>(d_x, rows, cols, spec, rs, d_keys, out);
  check(cudaGetLastError(), "dual_quantize_kernel launch");
}

// One kernel per (RHT, rowwise SR, columnwise SR): each holds only the paths it runs.
template <class T>
void launch_quantize_pass(const T* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                          const DualOutputs& out, const std::uint32_t* d_keys, cudaStream_t st) {
  const RhtArgs rs = rht_args(spec);
  const bool row_sr = spec.row_rounding.mode == Rounding::Stochastic, col_sr = spec.col_rounding.mode == Rounding::Stochastic;
  const int which = (spec.col_rht ? 4 : 0) + (row_sr ? 2 : 0) + (col_sr ? 1 : 0);
  switch (which) {
    case 0: launch_quantize<T, false, false, false>(d_x, rows, cols, spec, rs, d_keys, out, st); break;
    case 1: launch_quantize<T, false, false, true>(d_x, rows, cols, spec, rs, d_keys, out, st); break;
    case 2: launch_quantize<T, false, true, false>(d_x, rows, cols, spec, rs, d_keys, out, st); break;
    case 3: launch_quantize<T, false, true, true>(d_x, rows, cols, spec, rs, d_keys, out, st); break;
    case 4: launch_quantize<T, true, false, false>(d_x, rows, cols, spec, rs, d_keys, out, st); break;
    case 5: launch_quantize<T, true, false, true>(d_x, rows, cols, spec, rs, d_keys, out, st); break;
    case 6: launch_quantize<T, true, true, false>(d_x, rows, cols, spec, rs, d_keys, out, st); break;
    default: launch_quantize<T, true, true, true>(d_x, rows, cols, spec, rs, d_keys, out, st); break;
  }
}

template <class T>
void launch(const T* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec, const DualOutputs& out,
            std::uint32_t* d_keys, void* stream) {
  check_shape(rows, cols);
  check_buffers(d_x, out, d_keys);
  const auto st = static_cast<cudaStream_t>(stream);
  launch_dual_amax(LoadPair<T>{d_x, cols}, rows, cols, spec, d_keys, st);
  launch_quantize_pass(d_x, rows, cols, spec, out, d_keys, st);
}

template <class T>
void launch_amax_only(const T* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec, std::uint32_t* d_keys,
                      void* stream) {
  check_shape(rows, cols);
  check_amax_buffers(d_x, d_keys);
  launch_dual_amax(LoadPair<T>{d_x, cols}, rows, cols, spec, d_keys, static_cast<cudaStream_t>(stream));
}

template <class T>
void launch_quantize_only(const T* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                          const DualOutputs& out, const std::uint32_t* d_keys, void* stream) {
  check_shape(rows, cols);
  check_buffers(d_x, out, d_keys);
  launch_quantize_pass(d_x, rows, cols, spec, out, d_keys, static_cast<cudaStream_t>(stream));
}

std::uint32_t sign_mask(const RhtSpec& r) {
  const std::vector<float> s = rht_signs(r);
  std::uint32_t m = 0;
  for (int i = 0; i < 16; ++i) m |= (s[static_cast<std::size_t>(i)] < 0 ? 1u : 0u) << i;
  return m;
}

// Every float32 y (as bits) against e2m1_sr, for the general path's e2m1_sr_fast and the fast
// path's e2m1_sr_mag_fma (non-NaN y; its sign comes from y's bit, as the kernel packs it): a
// random w, the tie w = F = floor(f * 2^32) and its neighbours, 0 and ~0, and the edges of
// e2m1_sr_mag_fma's band, T = F & ~511, T - 1, T + 511, T + 512. A band answer counts as right
// only where the band is allowed (more than 23 random bits: drop < 9); counts
// mismatches (*first_bad: the smallest mismatching bits) and the band's share of the random
// words (*undecided). hw SR (sr_bits = kSrHw) takes random bytes instead: a random one, the
// carry's edges 256 - floor(f 2^8) and its neighbours, 0, 255 and four more random ones.
__global__ void sr_fast_check_kernel(int sr_bits, unsigned long long* bad, std::uint32_t* first_bad,
                                     unsigned long long* undecided_random) {
  RoundingSpec r;
  r.mode = Rounding::Stochastic;
  r.sr_bits = sr_bits;
  r.rng = RngStream{0x0123456789abcdefull, 77};
  const bool hw = sr_bits == kSrHw;
  const int drop = sr_bits == kSrExact || hw ? 0 : 32 - sr_bits;
  unsigned long long n_bad = 0, n_band = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t b = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < (1ull << 32); b += stride) {
    const float y = bits_float(static_cast<std::uint32_t>(b));
    float f = 0.0f, rem;
    const float a = abs_f32(y);
    if (a < kE2M1Max) (void)e2m1_floor_and_fraction(a, &f);
    const std::uint32_t tie = sr_fraction_floor32(f, &rem), band = tie & ~511u;
    std::uint32_t h = static_cast<std::uint32_t>(b) * 0x9E3779B1u;
    h ^= h >> 15, h *= 0x85EBCA77u, h ^= h >> 13;
    const std::uint32_t edge = 256u - (tie >> 24);
    const std::uint32_t ws[10] = {
        hw ? h & 255u : h,          hw ? edge & 255u : tie,        hw ? (edge - 1u) & 255u : tie - 1u,
        hw ? (edge + 1u) & 255u : tie + 1u, 0u,                   hw ? 255u : 0xffffffffu,
        hw ? (h >> 8) & 255u : band, hw ? (h >> 16) & 255u : band - 1u, hw ? h >> 24 : band + 511u,
        hw ? 128u : band + 512u};
    bool wrong = false;
#pragma unroll
    for (int k = 0; k < 10; ++k) {
      const std::uint64_t index = b * 11u + static_cast<std::uint64_t>(k);
      const std::uint32_t want = e2m1_sr(y, ws[k], sr_bits, r.rng, index);
      if (k < 6 && e2m1_sr_fast(y, ws[k], r, drop, index) != want) wrong = true;
      if (is_nan_f32(y)) continue;
      bool undecided = false;
      const std::uint32_t mag = sr_bits == kSrExact ? e2m1_sr_mag_fma<true>(y, ws[k], drop, &undecided)
                                : hw                  ? e2m1_sr_mag_fma<false, true>(y, ws[k], drop, &undecided)
                                                      : e2m1_sr_mag_fma<false>(y, ws[k], drop, &undecided);
      const std::uint32_t got = mag | ((float_bits(y) >> 28) & 8u);
      if (undecided) {
        if (drop >= 9) wrong = true;  // the band is for k > 23 random bits only
        if (k == 0) ++n_band;
      } else if (got != want) {
        wrong = true;
      }
    }
    if (wrong) {
      ++n_bad;
      atomicMin(first_bad, static_cast<std::uint32_t>(b));
    }
  }
  if (n_bad) atomicAdd(bad, n_bad);
  if (n_band) atomicAdd(undecided_random, n_band);
}

// Every float32 x: the hardware E4M3 conversion against e4m3_rne_satfinite. Counts mismatches
// on non-NaN and on NaN inputs separately (*first_bad: the smallest non-NaN mismatch).
__global__ void e4m3_hw_check_kernel(unsigned long long* bad, std::uint32_t* first_bad) {
  unsigned long long n_bad = 0, n_nan = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t b = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < (1ull << 32); b += stride) {
    const float x = bits_float(static_cast<std::uint32_t>(b));
    if (e4m3_satfinite_hw(x) == e4m3_rne_satfinite(x)) continue;
    if (is_nan_f32(x)) {
      ++n_nan;
    } else {
      ++n_bad;
      atomicMin(first_bad, static_cast<std::uint32_t>(b));
    }
  }
  if (n_bad) atomicAdd(bad, n_bad);
  if (n_nan) atomicAdd(bad + 1, n_nan);
}

// nvfp4_unscaled_bf16x4 as the kernels compile it, against nvfp4_unscaled_bf16: for every
// 32-bit b, scale code (b >> 16) % 127 (every finite non-negative E4M3 code, 0 .. 0x7e, each
// with every low half of b) and the code words b and b rotated by 16 (so every scale code meets
// every pattern of each half of a word, the two halves taking different paths).
__global__ void unscaled_decode_check_kernel(unsigned long long* bad, std::uint32_t* first_bad) {
  unsigned long long n_bad = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t b = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < (1ull << 32); b += stride) {
    const auto w = static_cast<std::uint32_t>(b);
    const float s = e4m3_decode(static_cast<std::uint8_t>((w >> 16) % 127u));
    const std::uint32_t words[2] = {w, (w << 16) | (w >> 16)};
    const UnscaledBf16Tables t = nvfp4_unscaled_bf16_tables(s);
    bool wrong = false;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const std::uint32_t c = words[q / 2] >> (16 * (q & 1));
      const Bf16x4 v = nvfp4_unscaled_bf16x4(t, c);
      const std::uint32_t got[4] = {v.lo & 0xffffu, v.lo >> 16, v.hi & 0xffffu, v.hi >> 16};
#pragma unroll
      for (int k = 0; k < 4; ++k)
        wrong |= got[k] != nvfp4_unscaled_bf16(static_cast<std::uint8_t>((c >> (4 * k)) & 0xfu), s);
    }
    if (wrong) {
      ++n_bad;
      atomicMin(first_bad, w);
    }
  }
  if (n_bad) atomicAdd(bad, n_bad);
}

// e4m3_decode_hw against e4m3_decode on all 256 codes: bits equal, or both NaN.
__global__ void e4m3_hw_decode_check_kernel(unsigned long long* bad, std::uint32_t* first_bad) {
  const unsigned code = threadIdx.x;
  const float got = e4m3_decode_hw(code), want = e4m3_decode(static_cast<std::uint8_t>(code));
  const bool same = float_bits(got) == float_bits(want) || (is_nan_f32(got) && is_nan_f32(want));
  if (!same) {
    atomicAdd(bad, 1ull);
    atomicMin(first_bad, code);
  }
}

// bf16_block_amax_nan against block_amax_nan of the same 16 elements, for every 32-bit b: the
// block's words b and b rotated by 16 (so the low halves meet every ordered pair of BF16
// values), b with both signs flipped three levels down the tree, zeros elsewhere. Equal bits,
// or both NaN.
__global__ void bf16_amax_check_kernel(unsigned long long* bad, std::uint32_t* first_bad) {
  unsigned long long n_bad = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  const std::uint64_t first = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::uint64_t b = first; b < (1ull << 32); b += stride) {
    const auto x = static_cast<std::uint32_t>(b);
    const std::uint32_t w[8] = {x, (x << 16) | (x >> 16), 0u, 0u, 0u, x ^ 0x80008000u, 0u, 0u};
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = block_elem<std::uint16_t>(w, i);
    const float got = bf16_block_amax_nan(w), want = block_amax_nan(v);
    if (!(float_bits(got) == float_bits(want) || (is_nan_f32(got) && is_nan_f32(want)))) {
      ++n_bad;
      atomicMin(first_bad, x);
    }
  }
  if (n_bad) atomicAdd(bad, n_bad);
}

}  // namespace

void nvfp4_quantize_dual_check_shape(std::int64_t rows, std::int64_t cols) { check_shape(rows, cols); }

namespace {
// Runs one of the exhaustive check kernels above: launch(counts, first) fills counts[0] (the
// mismatches, returned), counts[1] (a second count, to *second) and first (the smallest
// mismatching input bits, to *first_bad).
template <class Launch>
std::uint64_t run_exhaustive_check(Launch launch, const char* what, std::uint32_t* first_bad, std::uint64_t* second) {
  DeviceBuffer<unsigned long long> counts(2);
  DeviceBuffer<std::uint32_t> first(1);
  check(cudaMemset(counts.p, 0, 2 * sizeof(unsigned long long)), "cudaMemset");
  check(cudaMemset(first.p, 0xff, sizeof(std::uint32_t)), "cudaMemset");
  launch(counts.p, first.p);
  check(cudaGetLastError(), what);
  check(cudaDeviceSynchronize(), what);
  unsigned long long n[2] = {0, 0};
  check(cudaMemcpy(n, counts.p, sizeof n, cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(cudaMemcpy(first_bad, first.p, sizeof(std::uint32_t), cudaMemcpyDeviceToHost), "cudaMemcpy");
  *second = n[1];
  return n[0];
}
}  // namespace

// Test hook: mismatches of the hardware E4M3 conversion against e4m3_rne_satfinite over all
// 2^32 float32 inputs, non-NaN (returned; *first_bad the smallest) and NaN (*nan_mismatches).
std::uint64_t dual_e4m3_hw_exhaustive_check(std::uint32_t* first_bad, std::uint64_t* nan_mismatches) {
  return run_exhaustive_check([](unsigned long long* c, std::uint32_t* f) { e4m3_hw_check_kernel<<<4096, 256>>>(c, f); },
                              "e4m3_hw_check_kernel", first_bad, nan_mismatches);
}

// Test hook: E4M3 codes on which e4m3_decode_hw disagrees with e4m3_decode; *first_bad the
// smallest.
std::uint64_t dual_e4m3_hw_decode_check(std::uint32_t* first_bad) {
  std::uint64_t unused = 0;
  return run_exhaustive_check(
      [](unsigned long long* c, std::uint32_t* f) { e4m3_hw_decode_check_kernel<<<1, 256>>>(c, f); },
      "e4m3_hw_decode_check_kernel", first_bad, &unused);
}

// Test hook: words b (of all 2^32; bf16_amax_check_kernel) on which bf16_block_amax_nan
// disagrees with block_amax_nan; *first_bad the smallest.
std::uint64_t dual_bf16_amax_exhaustive_check(std::uint32_t* first_bad) {
  std::uint64_t unused = 0;
  return run_exhaustive_check(
      [](unsigned long long* c, std::uint32_t* f) { bf16_amax_check_kernel<<<4096, 256>>>(c, f); },
      "bf16_amax_check_kernel", first_bad, &unused);
}

// Test hook: code words b (of all 2^32; unscaled_decode_check_kernel) on which the device's
// nvfp4_unscaled_bf16x4 disagrees with nvfp4_unscaled_bf16; *first_bad the smallest.
std::uint64_t dual_unscaled_decode_exhaustive_check(std::uint32_t* first_bad) {
  std::uint64_t unused = 0;
  return run_exhaustive_check(
      [](unsigned long long* c, std::uint32_t* f) { unscaled_decode_check_kernel<<<4096, 256>>>(c, f); },
      "unscaled_decode_check_kernel", first_bad, &unused);
}

// Test hook (tests/gpu/test_gpu_nvfp4_dual.cpp declares it): inputs (of all 2^32 float32) on
// which a fast SR conversion of this file disagrees with e2m1_sr for `sr_bits`; *undecided: how
// many random words fell in e2m1_sr_mag_fma's band (sent to the general path).
std::uint64_t dual_sr_fast_exhaustive_check(int sr_bits, std::uint32_t* first_bad, std::uint64_t* undecided) {
  return run_exhaustive_check(
      [sr_bits](unsigned long long* c, std::uint32_t* f) { sr_fast_check_kernel<<<4096, 256>>>(sr_bits, c, f, c + 1); },
      "sr_fast_check_kernel", first_bad, undecided);
}

DualSpec dual_spec(const QuantSpec& row, const QuantSpec& col) {
  const auto is_1x16 = [](const QuantSpec& s) {
    return s.scheme == Scheme::Nvfp4 && s.block_rows == 1 && s.block_cols == 16;
  };
  if (!is_1x16(row) || row.axis != 1 || row.rht.enabled())
    throw std::invalid_argument("dual NVFP4: the rowwise spec must be NVFP4 1x16 along axis 1 without RHT");
  if (!is_1x16(col) || col.axis != 0 || (col.rht.enabled() && (col.rht.size != 16 || col.rht_axis != 0)))
    throw std::invalid_argument("dual NVFP4: the columnwise spec must be NVFP4 1x16 along axis 0, RHT off or 16 along axis 0");
  if (row.nv_scale_rule != col.nv_scale_rule)
    throw std::invalid_argument("dual NVFP4: both directions must use the same block-scale rule");
  DualSpec d;
  d.row_rounding = row.rounding;
  d.col_rounding = col.rounding;
  d.legacy = row.nv_scale_rule == NvScaleRule::TeLegacy;
  d.col_rht = col.rht.enabled();
  if (d.col_rht) {
    d.rht_sign_mask = sign_mask(col.rht);
    d.rht_bf16_output = col.rht.bf16_output;
  }
  return d;
}

void nvfp4_quantize_dual_device(const float* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                                const DualOutputs& out, std::uint32_t* d_keys, void* stream) {
  launch(d_x, rows, cols, spec, out, d_keys, stream);
}
void nvfp4_quantize_dual_device(const std::uint16_t* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                                const DualOutputs& out, std::uint32_t* d_keys, void* stream) {
  launch(d_x, rows, cols, spec, out, d_keys, stream);
}

void nvfp4_quantize_dual_amax_pass(const float* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                                   std::uint32_t* d_keys, void* stream) {
  launch_amax_only(d_x, rows, cols, spec, d_keys, stream);
}
void nvfp4_quantize_dual_amax_pass(const std::uint16_t* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                                   std::uint32_t* d_keys, void* stream) {
  launch_amax_only(d_x, rows, cols, spec, d_keys, stream);
}
void nvfp4_quantize_dual_quantize_pass(const float* d_x, std::int64_t rows, std::int64_t cols, const DualSpec& spec,
                                       const DualOutputs& out, const std::uint32_t* d_keys, void* stream) {
  launch_quantize_only(d_x, rows, cols, spec, out, d_keys, stream);
}
void nvfp4_quantize_dual_quantize_pass(const std::uint16_t* d_x, std::int64_t rows, std::int64_t cols,
                                       const DualSpec& spec, const DualOutputs& out, const std::uint32_t* d_keys,
                                       void* stream) {
  launch_quantize_only(d_x, rows, cols, spec, out, d_keys, stream);
}

DualHostResult nvfp4_quantize_dual_cuda(const Matrix& x, const QuantSpec& row_spec, const QuantSpec& col_spec,
                                        bool bf16_input, bool bf16_outputs, const GlobalScale* alpha_partners) {
  const DualSpec spec = dual_spec(row_spec, col_spec);
  check_shape(x.rows, x.cols);
  const auto n = static_cast<std::size_t>(x.size());
  DeviceBuffer<float> dx(bf16_input ? 0 : n);
  DeviceBuffer<std::uint16_t> dxb(bf16_input ? n : 0);
  DeviceBuffer<std::uint8_t> rc(n / 2), rs(n / 16), cc(n / 2), cs(n / 16);
  DeviceBuffer<GlobalScale> g(2);
  DeviceBuffer<std::uint32_t> keys(2);
  DeviceBuffer<std::uint16_t> rb(bf16_outputs ? n : 0), cb(bf16_outputs ? n : 0);
  DeviceBuffer<GlobalScale> partners(2);
  DeviceBuffer<float> alphas(4);
  DualOutputs out{rc.p, rs.p, cc.p, cs.p, g.p, bf16_outputs ? rb.p : nullptr, bf16_outputs ? cb.p : nullptr};
  if (alpha_partners) {
    partners.upload(alpha_partners);
    out.row_alpha_partner = partners.p, out.row_alpha = alphas.p;
    out.col_alpha_partner = partners.p + 1, out.col_alpha = alphas.p + 2;
  }
  if (bf16_input) {
    std::vector<std::uint16_t> b(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t u = float_bits(x.data[i]);
      if ((u & 0xffffu) != 0u)
        throw std::invalid_argument("dual NVFP4 with BF16 input: element " + std::to_string(i) + " is not a BF16 value");
      b[i] = static_cast<std::uint16_t>(u >> 16);
    }
    check(cudaMemcpy(dxb.p, b.data(), n * sizeof(std::uint16_t), cudaMemcpyHostToDevice), "cudaMemcpy (x, BF16)");
    nvfp4_quantize_dual_device(dxb.p, x.rows, x.cols, spec, out, keys.p);
  } else {
    check(cudaMemcpy(dx.p, x.data.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy (x)");
    nvfp4_quantize_dual_device(dx.p, x.rows, x.cols, spec, out, keys.p);
  }
  check(cudaDeviceSynchronize(), "dual NVFP4 kernels");
  DualHostResult h;
  h.row_codes.resize(n / 2), h.col_codes.resize(n / 2), h.row_scales.resize(n / 16), h.col_scales.resize(n / 16);
  check(cudaMemcpy(h.row_codes.data(), rc.p, n / 2, cudaMemcpyDeviceToHost), "cudaMemcpy (row codes)");
  check(cudaMemcpy(h.col_codes.data(), cc.p, n / 2, cudaMemcpyDeviceToHost), "cudaMemcpy (col codes)");
  check(cudaMemcpy(h.row_scales.data(), rs.p, n / 16, cudaMemcpyDeviceToHost), "cudaMemcpy (row scales)");
  check(cudaMemcpy(h.col_scales.data(), cs.p, n / 16, cudaMemcpyDeviceToHost), "cudaMemcpy (col scales)");
  GlobalScale gs[2];
  check(cudaMemcpy(gs, g.p, sizeof gs, cudaMemcpyDeviceToHost), "cudaMemcpy (globals)");
  h.row_global = gs[0];
  h.col_global = gs[1];
  if (alpha_partners) {
    float a[4];
    alphas.download(a);
    h.row_alpha[0] = a[0], h.row_alpha[1] = a[1], h.col_alpha[0] = a[2], h.col_alpha[1] = a[3];
  }
  if (bf16_outputs) {
    h.row_bf16.resize(n), h.col_bf16.resize(n);
    rb.download(h.row_bf16.data());
    cb.download(h.col_bf16.data());
  }
  return h;
}

}  // namespace fp4d::cuda
