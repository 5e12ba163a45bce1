// cuBLASLt GEMMs in fp4drift's row-major conventions, shared by the CUDA backend's .cu files
// (gemm.cu: single GEMMs and probes; bench_gemm.cu: the GEMM benchmark; mlp.cu: the
// GPU-resident training step).
//
// Layout: fp4drift's stored orientation is row-major A (M x K) and B (N x K), C = A B^T (M x N,
// row-major). cuBLASLt is column-major, so it computes C^T (N x M, column-major == C row-major)
// = B A^T: its "A" is our B read as a K x N column-major matrix with op T, its "B" is our A read
// as K x M with op N - the "TN" form that the FP8 kernels require. A training step also needs
// operands that are stored the other way round (dY W: W is N x K... stored K x N; dY^T X: dY
// stored K x M): `a_km` / `b_kn` say that A / B are stored transposed (row-major K x M / K x N),
// which flips the corresponding cuBLASLt op instead of copying the operand.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_util.cuh"

namespace fp4d::cuda {

inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt error in ") + what + ": " + cublasLtGetStatusString(s));
}

// One cuBLASLt handle and workspace per process. Deliberately never destroyed: a static
// destructor would run after the CUDA runtime has torn the context down.
struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 32u << 20;  // cuBLAS' recommendation for Hopper
  static LtContext& get() {
    static LtContext* c = [] {
      auto* ctx = new LtContext;
      check(cublasLtCreate(&ctx->handle), "cublasLtCreate");
      check(cudaMalloc(&ctx->workspace, ctx->workspace_bytes), "cudaMalloc (cuBLASLt workspace)");
      return ctx;
    }();
    return *c;
  }
};

// A handle and workspace of one user's own (a training run stepping on its own stream and host
// thread): GEMMs running concurrently on different streams must not share a workspace (cuBLAS
// documentation, "Thread Safety" and "Results Reproducibility": one workspace per stream).
class OwnedLtContext {
 public:
  OwnedLtContext() {
    check(cublasLtCreate(&ctx_.handle), "cublasLtCreate");
    if (cudaMalloc(&ctx_.workspace, ctx_.workspace_bytes) != cudaSuccess) {
      cudaGetLastError();
      cublasLtDestroy(ctx_.handle);
      throw std::runtime_error("CUDA error in cudaMalloc (cuBLASLt workspace of a run): out of memory?");
    }
  }
  ~OwnedLtContext() {
    cudaFree(ctx_.workspace);
    cublasLtDestroy(ctx_.handle);
  }
  OwnedLtContext(const OwnedLtContext&) = delete;
  OwnedLtContext& operator=(const OwnedLtContext&) = delete;
  const LtContext& get() const { return ctx_; }

 private:
  LtContext ctx_;
};

// One GEMM D = alpha * scale_a * scale_b * (A B^T) in fp4drift's orientation (see the file
// comment): a (M x ld_k, type ta; K x M with leading dimension ld_m if a_km), b (N x ld_k, type
// tb; K x N with leading dimension ld_n if b_kn), d (M x N float32, row-major, leading dim N).
struct LtGemm {
  cudaDataType_t ta = CUDA_R_16BF, tb = CUDA_R_16BF;
  std::int64_t M = 0, N = 0, K = 0, ld_k = 0;
  bool a_km = false, b_kn = false;        // operand stored transposed (not for FP8)
  std::int64_t ld_m = 0, ld_n = 0;        // their leading dimensions (0: M / N)
  const void* a = nullptr;
  const void* b = nullptr;
  float* d = nullptr;
  const float* alpha = nullptr;           // host pointer unless alpha_on_device
  bool alpha_on_device = false;           // then alpha points to device {alpha, beta}
  const float* scale_a = nullptr;         // FP8 only: device pointers to the decode scales
  const float* scale_b = nullptr;
  // FP8 only: cuBLASLt scale modes (CUBLASLT_MATMUL_MATRIX_SCALE_*; -1: the default scalar).
  // VEC128_32F: one float per 128 consecutive K elements of each row, stored K-block major
  // [ceil(K/128)][round_up(rows, 4)]; BLK128x128_32F: one per 128 x 128 tile,
  // [ceil(rows/128)][round_up(ceil(K/128), 4)] (gemm.cu's padded_scales).
  int scale_mode_a = -1, scale_mode_b = -1;
  bool fast_accumulation = false;         // FP8 only
  // Only algorithms that sum each output in one pass over K, in k order (no split-K, no
  // reduction scheme): what the tensor-core model (quant/tensor_core_model.hpp) describes.
  bool k_order = false;
};

// The descriptors and the algorithm cuBLASLt chose for one GEMM shape, made once and run many
// times (benchmarks time run() alone, without the host-side set-up).
class LtPlan {
 public:
  // own: the workspace run() will be given (OwnedLtContext), so that the algorithm is chosen
  // for the workspace it gets; nullptr: the process's shared context.
  explicit LtPlan(const LtGemm& g, const LtContext* own = nullptr) : g_(g) {
    const LtContext& ctx = own ? *own : LtContext::get();
    check(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    // cuBLAS "A" is our B: op T reads our row-major N x K as K x N column-major; stored K x N
    // (b_kn) it is already N x K column-major: op N. Likewise for cuBLAS "B" = our A.
    const cublasOperation_t op_a = g.b_kn ? CUBLAS_OP_N : CUBLAS_OP_T, op_b = g.a_km ? CUBLAS_OP_T : CUBLAS_OP_N;
    set(CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a, "set TRANSA");
    set(CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b, "set TRANSB");
    if (g.alpha_on_device) {
      const cublasLtPointerMode_t mode = CUBLASLT_POINTER_MODE_DEVICE;
      set(CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode, "set POINTER_MODE");
    }
    const bool fp8 = g.ta == CUDA_R_8F_E4M3 || g.ta == CUDA_R_8F_E5M2;
    if (fp8) {
      if (g.a_km || g.b_kn) throw std::invalid_argument("cuBLASLt FP8 GEMMs take the TN form only");
      set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.scale_b, sizeof g.scale_b, "set A_SCALE_POINTER");
      set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.scale_a, sizeof g.scale_a, "set B_SCALE_POINTER");
      if (g.scale_mode_b >= 0) {
        const std::int32_t m = g.scale_mode_b;
        set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &m, sizeof m, "set A_SCALE_MODE");
      }
      if (g.scale_mode_a >= 0) {
        const std::int32_t m = g.scale_mode_a;
        set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &m, sizeof m, "set B_SCALE_MODE");
      }
      const std::int8_t fast = g.fast_accumulation ? 1 : 0;
      set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast, "set FAST_ACCUM");
    }
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    if (g.b_kn) check(cublasLtMatrixLayoutCreate(&la_, g.tb, u(g.N), u(g.K), g.ld_n ? g.ld_n : g.N), "cublasLtMatrixLayoutCreate (A)");
    else check(cublasLtMatrixLayoutCreate(&la_, g.tb, u(g.K), u(g.N), g.ld_k), "cublasLtMatrixLayoutCreate (A)");
    if (g.a_km) check(cublasLtMatrixLayoutCreate(&lb_, g.ta, u(g.M), u(g.K), g.ld_m ? g.ld_m : g.M), "cublasLtMatrixLayoutCreate (B)");
    else check(cublasLtMatrixLayoutCreate(&lb_, g.ta, u(g.K), u(g.M), g.ld_k), "cublasLtMatrixLayoutCreate (B)");
    check(cublasLtMatrixLayoutCreate(&lc_, CUDA_R_32F, u(g.N), u(g.M), g.N), "cublasLtMatrixLayoutCreate (C)");
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &ctx.workspace_bytes, sizeof ctx.workspace_bytes);
    if (st == CUBLAS_STATUS_SUCCESS && g.k_order) {
      const std::uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &none, sizeof none);
    }
    int found = 0;
    heur_.resize(kCandidates);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(ctx.handle, desc_, la_, lb_, lc_, lc_, pref, kCandidates, heur_.data(), &found);
    cublasLtMatmulPreferenceDestroy(pref);
    check(st, "cublasLtMatmulAlgoGetHeuristic");
    heur_.resize(static_cast<std::size_t>(found));
    if (g.k_order) {
      // The mask keeps reductions out; a split of K without one is refused here as well.
      std::vector<cublasLtMatmulHeuristicResult_t> kept;
      for (const auto& h : heur_) {
        std::int32_t splits = 1;
        std::size_t written = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(&h.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits,
                                                 &written) == CUBLAS_STATUS_SUCCESS &&
            splits <= 1)
          kept.push_back(h);
      }
      heur_ = std::move(kept);
      found = static_cast<int>(heur_.size());
    }
    if (found == 0)
      throw std::invalid_argument("cuBLASLt has no algorithm for this GEMM (" + std::to_string(g.M) + " x " +
                                  std::to_string(g.N) + " x " + std::to_string(g.K) + ")" +
                                  (g.k_order ? " that sums in k order without split-K" : ""));
  }
  ~LtPlan() {
    if (lc_) cublasLtMatrixLayoutDestroy(lc_);
    if (lb_) cublasLtMatrixLayoutDestroy(lb_);
    if (la_) cublasLtMatrixLayoutDestroy(la_);
    if (desc_) cublasLtMatmulDescDestroy(desc_);
  }
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;

  // The first run takes the heuristic's candidates in order until one launches (a candidate can
  // answer NOT_SUPPORTED at launch); later runs use that one, so repeated runs are the same
  // kernel with the same summation order.
  // own: a workspace of the caller's (OwnedLtContext) instead of the process's shared one.
  void run(cudaStream_t stream = nullptr, const LtContext* own = nullptr) const {
    const LtContext& ctx = own ? *own : LtContext::get();
    const float host_ab[2] = {g_.alpha_on_device ? 0.0f : *g_.alpha, 0.0f};
    const void* alpha = g_.alpha_on_device ? static_cast<const void*>(g_.alpha) : static_cast<const void*>(&host_ab[0]);
    const void* beta = g_.alpha_on_device ? static_cast<const void*>(g_.alpha + 1) : static_cast<const void*>(&host_ab[1]);
    const auto launch = [&](std::size_t i) {
      return cublasLtMatmul(ctx.handle, desc_, alpha, g_.b, la_, g_.a, lb_, beta, g_.d, lc_, g_.d, lc_, &heur_[i].algo,
                            ctx.workspace, ctx.workspace_bytes, stream);
    };
    if (chosen_ >= 0) return check(launch(static_cast<std::size_t>(chosen_)), "cublasLtMatmul");
    cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
    for (std::size_t i = 0; i < heur_.size(); ++i) {
      st = launch(i);
      if (st == CUBLAS_STATUS_SUCCESS) {
        chosen_ = static_cast<int>(i);
        return;
      }
      if (st != CUBLAS_STATUS_NOT_SUPPORTED) break;
    }
    check(st, "cublasLtMatmul (every candidate algorithm)");
  }

 private:
  void set(cublasLtMatmulDescAttributes_t attr, const void* v, std::size_t n, const char* what) {
    check(cublasLtMatmulDescSetAttribute(desc_, attr, v, n), what);
  }
  LtGemm g_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
  static constexpr int kCandidates = 8;
  std::vector<cublasLtMatmulHeuristicResult_t> heur_;
  mutable int chosen_ = -1;
};

inline void lt_matmul(const LtGemm& g, cudaStream_t stream) { LtPlan(g).run(stream); }

}  // namespace fp4d::cuda
