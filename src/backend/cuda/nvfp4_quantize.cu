// NVFP4 quantization kernels (nvfp4-spec.md section 2), bit-identical to the CPU backend.
//
//  amax_kernel         grid-stride max of the |x| bit patterns (NaN -> 0) as uint32 keys: an
//                      unsigned max is exact, so the warp reduction and the atomicMax give the
//                      same result in any order (deterministic).
//  quantize_simple     one thread per scale block (1x16 block or 16x16 tile): the spec's loop,
//                      every layout and shape, partial blocks zero-padded (padding codes 0).
//  quantize_1x16_vec   1x16 with cols % 16 == 0: coalesced float4 loads staged through shared
//                      memory (swizzled, conflict-free), then one thread per block; 8-byte
//                      code stores. Same FP4D_HD calls as the simple kernel.
// Both quantize kernels can read the global scale from the amax key on the device
// (nvfp4_global_scale on the device: no host round trip) and call the same FP4D_HD
// functions as the CPU reference, so the bits agree by construction (--fmad=false).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/nvfp4_quantize.hpp"
#include "format/e2m1.hpp"
#include "format/fp8.hpp"
#include "quant/nvfp4_math.hpp"

namespace fp4d::cuda {

namespace {

constexpr int kBlock = 16;
constexpr int kThreads = 256;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  DeviceBuffer(std::size_t n, const char* what) { check(cudaMalloc(&p, n * sizeof(T) + 16), what); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct EventPair {
  cudaEvent_t a = nullptr, b = nullptr;
  EventPair() {
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
  }
  ~EventPair() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
};

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
  unsigned long long* clipped;       // optional
};

__device__ __forceinline__ std::uint32_t amax_key_dev(float x) {
  const std::uint32_t a = float_bits(x) & 0x7fffffffu;
  return a <= 0x7f800000u ? a : 0u;
}

__device__ __forceinline__ GlobalScale kernel_global(const QuantArgs& a) {
  const GlobalScale g = a.amax_key ? nvfp4_global_scale(bits_float(*a.amax_key)) : a.g;
  if (a.global_out && blockIdx.x == 0 && threadIdx.x == 0) *a.global_out = g;
  return g;
}

template <Rounding R>
__device__ __forceinline__ std::uint8_t round_e2m1(float y, const RoundingSpec& r, std::uint64_t index) {
  if constexpr (R == Rounding::NearestEven) return e2m1_rne(y);
  else if constexpr (R == Rounding::TowardZero) return e2m1_rz(y);
  else return e2m1_round(y, r, index);
}

__global__ void __launch_bounds__(kThreads) amax_kernel(const float* __restrict__ x, std::int64_t n, bool vec4,
                                                        std::uint32_t* key) {
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::uint32_t m = 0;
  std::int64_t done = 0;
  if (vec4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const std::int64_t n4 = n / 4;
    std::int64_t i = tid;
    for (; i + 3 * stride < n4; i += 4 * stride) {
      float4 v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = __ldg(x4 + i + k * stride);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        m = max(max(max(m, amax_key_dev(v[k].x)), amax_key_dev(v[k].y)), max(amax_key_dev(v[k].z), amax_key_dev(v[k].w)));
    }
    for (; i < n4; i += stride) {
      const float4 v = __ldg(x4 + i);
      m = max(max(max(m, amax_key_dev(v.x)), amax_key_dev(v.y)), max(amax_key_dev(v.z), amax_key_dev(v.w)));
    }
    done = 4 * n4;
  }
  for (std::int64_t i = done + tid; i < n; i += stride) m = max(m, amax_key_dev(x[i]));
  m = __reduce_max_sync(0xffffffffu, m);
  if ((threadIdx.x & 31u) == 0 && m != 0) atomicMax(key, m);
}

// One thread per scale block: rows [tr*br, min(rows, tr*br + br)) x columns [tc*16, +16).
__global__ void __launch_bounds__(kThreads)
    quantize_simple_kernel(const float* __restrict__ x, std::int64_t rows, std::int64_t cols, std::int64_t pcols,
                           int br, std::int64_t scale_rows, std::int64_t scale_cols, QuantArgs a) {
  const GlobalScale g = kernel_global(a);
  const std::int64_t tile = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tile >= scale_rows * scale_cols) return;
  const std::int64_t tr = tile / scale_cols, tc = tile % scale_cols;
  const std::int64_t r0 = tr * br, r1 = min(rows, r0 + br), c0 = tc * kBlock;
  const int n = static_cast<int>(min(static_cast<std::int64_t>(kBlock), cols - c0));
  float amax = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r)
    for (int i = 0; i < n; ++i) amax = max_ignore_nan(amax, abs_f32(x[r * cols + c0 + i]));
  const std::uint8_t s = nvfp4_block_scale_code(amax, g.encode, a.legacy);
  const float e_b = nvfp4_block_encode_scale(s, g.decode);
  a.scales[tile] = s;
  unsigned long long clipped = 0;
  for (std::int64_t r = r0; r < r1; ++r) {
    std::uint8_t q[kBlock];
    for (int i = 0; i < kBlock; ++i) {
      if (i >= n) {
        q[i] = 0;  // padding: code 0, as the reference leaves it
        continue;
      }
      const float v = x[r * cols + c0 + i];
      bool clip;
      const float y = clamp_e2m1_range(v * e_b, &clip);
      clipped += clip && (s & 0x7fu) != 0;  // zero-scale blocks flush: underflow, not clipping
      const auto index = static_cast<std::uint64_t>(r * pcols + c0 + i);
      q[i] = e2m1_round(y, a.r, index);
      if (a.dequantized) a.dequantized[r * cols + c0 + i] = nvfp4_dequantize(q[i], s, g.decode);
    }
    std::uint8_t* cr = a.codes + r * (pcols / 2) + c0 / 2;
    for (int i = 0; i < kBlock / 2; ++i) cr[i] = static_cast<std::uint8_t>(q[2 * i] | (q[2 * i + 1] << 4));
  }
  if (a.clipped && clipped) atomicAdd(a.clipped, clipped);
}

// 1x16, cols % 16 == 0 (so padded_cols == cols and the element index is the linear index).
// A CTA takes kThreads consecutive blocks (kThreads * 16 floats): coalesced float4 loads
// (float4 f of the CTA is quarter f & 3 of block f >> 2) into shared memory, then one thread
// per block. Shared slots are XOR-swizzled (quarter q of block b at 4b + (q ^ ((b >> 1) & 3)))
// so that neither the stores nor the per-block float4 reads have bank conflicts. Codes are
// stored 8 bytes per block (a warp writes 256 contiguous bytes), scales 1 byte per block.
__device__ __forceinline__ int swizzled_slot(int b, int q) { return 4 * b + (q ^ ((b >> 1) & 3)); }

template <Rounding R>
__global__ void __launch_bounds__(kThreads) quantize_1x16_vec_kernel(const float4* __restrict__ x4, std::int64_t n4,
                                                                     QuantArgs a) {
  __shared__ float4 tile[kThreads * 4];  // 16 KiB
  const GlobalScale g = kernel_global(a);
  const std::int64_t cta0 = static_cast<std::int64_t>(blockIdx.x) * (kThreads * 4);  // first float4
  {
    float4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const std::int64_t i = cta0 + k * kThreads + threadIdx.x;
      v[k] = i < n4 ? __ldcs(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int f = k * kThreads + static_cast<int>(threadIdx.x);
      tile[swizzled_slot(f >> 2, f & 3)] = v[k];
    }
  }
  __syncthreads();
  const int b = static_cast<int>(threadIdx.x);
  const std::int64_t blk = cta0 / 4 + b;  // global block index
  const bool in = cta0 + 4 * b < n4;      // n4 is a multiple of 4: whole blocks only
  float e[kBlock];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float4 t = tile[swizzled_slot(b, q)];
    e[4 * q] = t.x;
    e[4 * q + 1] = t.y;
    e[4 * q + 2] = t.z;
    e[4 * q + 3] = t.w;
  }
  // Block amax as the max of the |x| keys (NaN -> 0): the same float as the reference's
  // max_ignore_nan fold from 0 (keys order non-NaN magnitudes as floats do), fewer instructions.
  std::uint32_t key = 0;
#pragma unroll
  for (int j = 0; j < kBlock; ++j) key = max(key, amax_key_dev(e[j]));
  const float amax = bits_float(key);
  const std::uint8_t s = nvfp4_block_scale_code(amax, g.encode, a.legacy);
  const float e_b = nvfp4_block_encode_scale(s, g.decode);
  const bool scale_nonzero = (s & 0x7fu) != 0;
  const auto first = static_cast<std::uint64_t>(16 * blk);
  unsigned clipped = 0;
  unsigned long long packed = 0;
  std::uint8_t q[kBlock];
#pragma unroll
  for (int j = 0; j < kBlock; ++j) {
    bool clip;
    const float y = clamp_e2m1_range(e[j] * e_b, &clip);
    clipped += clip && scale_nonzero;
    q[j] = round_e2m1<R>(y, a.r, first + j);
    packed |= static_cast<unsigned long long>(q[j]) << (4 * j);
  }
  if (in) {
    reinterpret_cast<unsigned long long*>(a.codes)[blk] = packed;
    a.scales[blk] = s;
    if (a.dequantized) {
      float4* d4 = reinterpret_cast<float4*>(a.dequantized) + 4 * blk;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        d4[k] = make_float4(nvfp4_dequantize(q[4 * k], s, g.decode), nvfp4_dequantize(q[4 * k + 1], s, g.decode),
                            nvfp4_dequantize(q[4 * k + 2], s, g.decode), nvfp4_dequantize(q[4 * k + 3], s, g.decode));
    }
  }
  if (a.clipped) {
    clipped = __reduce_add_sync(0xffffffffu, in ? clipped : 0u);
    if ((threadIdx.x & 31u) == 0 && clipped) atomicAdd(a.clipped, static_cast<unsigned long long>(clipped));
  }
}

int amax_grid(std::int64_t n) {
  static int sms = 0;
  if (sms == 0) {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute(SM count)");
  }
  const std::int64_t want = (n / 4 + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(want, 8LL * sms)));
}

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

void launch_amax(const float* d_x, std::int64_t n, std::uint32_t* d_key, cudaStream_t st) {
  check(cudaMemsetAsync(d_key, 0, sizeof(std::uint32_t), st), "cudaMemsetAsync(amax key)");
  if (n <= 0) return;
  amax_kernel<<<amax_grid(n), kThreads, 0, st>>>(d_x, n, aligned(d_x, 16), d_key);
  check(cudaGetLastError(), "amax_kernel launch");
}

void launch_simple(const float* d_x, std::int64_t rows, std::int64_t cols, int br, const QuantArgs& a,
                   cudaStream_t st) {
  const std::int64_t pcols = (cols + kBlock - 1) / kBlock * kBlock;
  const std::int64_t srows = (rows + br - 1) / br, scols = pcols / kBlock, tiles = srows * scols;
  if (tiles == 0) return;
  const std::int64_t grid = (tiles + kThreads - 1) / kThreads;
  if (grid > std::numeric_limits<int>::max()) throw std::invalid_argument("nvfp4 cuda: tensor too large");
  quantize_simple_kernel<<<static_cast<unsigned>(grid), kThreads, 0, st>>>(d_x, rows, cols, pcols, br, srows, scols,
                                                                            a);
  check(cudaGetLastError(), "quantize_simple_kernel launch");
}

void launch_vec(const float* d_x, std::int64_t rows, std::int64_t cols, const QuantArgs& a, cudaStream_t st) {
  const std::int64_t n4 = rows * cols / 4;
  if (n4 == 0) return;
  const std::int64_t grid = (n4 + kThreads * 4 - 1) / (kThreads * 4);
  if (grid > std::numeric_limits<int>::max()) throw std::invalid_argument("nvfp4 cuda: tensor too large");
  const auto* x4 = reinterpret_cast<const float4*>(d_x);
  const auto g = static_cast<unsigned>(grid);
  switch (a.r.mode) {
    case Rounding::NearestEven: quantize_1x16_vec_kernel<Rounding::NearestEven><<<g, kThreads, 0, st>>>(x4, n4, a); break;
    case Rounding::TowardZero: quantize_1x16_vec_kernel<Rounding::TowardZero><<<g, kThreads, 0, st>>>(x4, n4, a); break;
    case Rounding::Stochastic: quantize_1x16_vec_kernel<Rounding::Stochastic><<<g, kThreads, 0, st>>>(x4, n4, a); break;
  }
  check(cudaGetLastError(), "quantize_1x16_vec_kernel launch");
}

bool vec_applies(const float* d_x, std::int64_t cols, const std::uint8_t* d_codes) {
  return cols % kBlock == 0 && aligned(d_x, 16) && aligned(d_codes, 8);
}

void check_sr_range(const RoundingSpec& r, std::int64_t rows, std::int64_t pcols) {
  if (r.mode == Rounding::Stochastic && rows > 0 && pcols > 0 &&
      static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(pcols) - 1 > kMaxRngElementIndex)
    throw std::invalid_argument("nvfp4 cuda: SR element index beyond 2^62 - 1");
}

QuantArgs make_args(GlobalScale g, const std::uint32_t* key, RoundingSpec r, bool legacy, std::uint8_t* codes,
                    std::uint8_t* scales) {
  QuantArgs a{};
  a.g = g;
  a.amax_key = key;
  a.global_out = nullptr;
  a.r = r;
  a.legacy = legacy;
  a.codes = codes;
  a.scales = scales;
  a.dequantized = nullptr;
  a.clipped = nullptr;
  return a;
}

void quantize_1x16_device(const float* d_x, std::int64_t rows, std::int64_t cols, const QuantArgs& a,
                          cudaStream_t st) {
  check_sr_range(a.r, rows, (cols + kBlock - 1) / kBlock * kBlock);
  if (vec_applies(d_x, cols, a.codes)) launch_vec(d_x, rows, cols, a, st);
  else launch_simple(d_x, rows, cols, 1, a, st);
}

// Deterministic bench input: log-uniform magnitudes over 2^-20 .. 2^4 with random signs.
__global__ void fill_bench_kernel(float* x, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 0x9E3779B9u ^ static_cast<std::uint32_t>(i >> 32);
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    const std::uint32_t e = 107u + (h >> 27) % 24u;  // biased exponent 2^-20 .. 2^3
    x[i] = bits_float(((h & 1u) << 31) | (e << 23) | ((h >> 4) & 0x7fffffu));
  }
}

}  // namespace

void nvfp4_amax_device(const float* d_x, std::int64_t n, std::uint32_t* d_amax_key, void* stream) {
  launch_amax(d_x, n, d_amax_key, static_cast<cudaStream_t>(stream));
}

void nvfp4_quantize_1x16_device(const float* d_x, std::int64_t rows, std::int64_t cols, GlobalScale g, RoundingSpec r,
                                bool legacy, std::uint8_t* d_codes, std::uint8_t* d_scales, void* stream) {
  quantize_1x16_device(d_x, rows, cols, make_args(g, nullptr, r, legacy, d_codes, d_scales),
                       static_cast<cudaStream_t>(stream));
}

void nvfp4_quantize_1x16_device_from_amax(const float* d_x, std::int64_t rows, std::int64_t cols,
                                          const std::uint32_t* d_amax_key, RoundingSpec r, bool legacy,
                                          std::uint8_t* d_codes, std::uint8_t* d_scales, void* stream) {
  quantize_1x16_device(d_x, rows, cols, make_args(GlobalScale{}, d_amax_key, r, legacy, d_codes, d_scales),
                       static_cast<cudaStream_t>(stream));
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
  if (kernel == Nvfp4Kernel::Vectorized && !vec)
    throw std::invalid_argument("nvfp4_quantize_cuda: the vectorised kernel needs 1x16 blocks and cols % 16 == 0");
  const bool use_vec = vec && kernel != Nvfp4Kernel::Simple;

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
  if (use_vec) launch_vec(dx.p, rows, cols, a, nullptr);
  else launch_simple(dx.p, rows, cols, br, a, nullptr);
  check(cudaDeviceSynchronize(), use_vec ? "quantize_1x16_vec_kernel" : "quantize_simple_kernel");

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

double nvfp4_quantize_cuda_bench(std::int64_t rows, std::int64_t cols, int repeat, double* copy_gbps,
                                 double* quantize_only_s) {
  if (rows <= 0 || cols <= 0 || repeat <= 0) throw std::invalid_argument("nvfp4_quantize_cuda_bench: bad arguments");
  const std::int64_t n = rows * cols, pcols = (cols + kBlock - 1) / kBlock * kBlock;
  DeviceBuffer<float> dx(static_cast<std::size_t>(n), "cudaMalloc(bench x)");
  DeviceBuffer<float> dcopy(static_cast<std::size_t>(n), "cudaMalloc(bench copy)");
  DeviceBuffer<std::uint8_t> dcodes(static_cast<std::size_t>(rows * pcols / 2), "cudaMalloc(bench codes)");
  DeviceBuffer<std::uint8_t> dscales(static_cast<std::size_t>(rows * pcols / kBlock), "cudaMalloc(bench scales)");
  DeviceBuffer<std::uint32_t> dkey(1, "cudaMalloc(bench amax key)");
  fill_bench_kernel<<<1024, kThreads>>>(dx.p, n);
  check(cudaGetLastError(), "fill_bench_kernel launch");
  check(cudaDeviceSynchronize(), "fill_bench_kernel");

  const RoundingSpec rne{};
  const QuantArgs a = make_args(GlobalScale{}, dkey.p, rne, false, dcodes.p, dscales.p);
  EventPair ev;
  auto time_it = [&](auto&& body, const char* what) {
    float best = std::numeric_limits<float>::infinity();
    body();  // warm-up
    check(cudaDeviceSynchronize(), what);
    for (int i = 0; i < repeat; ++i) {
      check(cudaEventRecord(ev.a), "cudaEventRecord");
      body();
      check(cudaEventRecord(ev.b), "cudaEventRecord");
      check(cudaEventSynchronize(ev.b), what);
      float ms = 0;
      check(cudaEventElapsedTime(&ms, ev.a, ev.b), "cudaEventElapsedTime");
      best = std::min(best, ms);
    }
    return static_cast<double>(best) * 1e-3;
  };
  const double t = time_it(
      [&] {
        launch_amax(dx.p, n, dkey.p, nullptr);
        quantize_1x16_device(dx.p, rows, cols, a, nullptr);
      },
      "amax + quantize (bench)");
  if (quantize_only_s)
    *quantize_only_s = time_it([&] { quantize_1x16_device(dx.p, rows, cols, a, nullptr); }, "quantize (bench)");
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  const double tc = time_it(
      [&] { check(cudaMemcpyAsync(dcopy.p, dx.p, bytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync(D2D)"); },
      "cudaMemcpyAsync(D2D) (bench)");
  if (copy_gbps) *copy_gbps = 2.0 * static_cast<double>(bytes) / tc * 1e-9;
  return t;
}

}  // namespace fp4d::cuda
