// The resident lm step's Mamba-2 mixers, host side (lm.cu only): one M block's cached
// activations, the backward's scratch (shared by every M block: their backwards run one after
// the other on the step's stream), and the kernel sequence of lm_mamba_kernels.cuh for the
// mixer's forward and backward, everything between the in- and the out-projection.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/launch_util.cuh"
#include "backend/cuda/lm_kernels.cuh"
#include "backend/cuda/lm_mamba_kernels.cuh"
#include "model/lm_spec.hpp"

namespace fp4d::cuda {

namespace {

using MambaBuf = std::unique_ptr<DeviceBuffer<float>>;
inline MambaBuf mamba_buf(std::int64_t n, const char* what) {
  return std::make_unique<DeviceBuffer<float>>(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)), what);
}

inline MambaDims mamba_dims(const LmSpec& s, bool bf16) {
  const LmMamba& mb = s.mamba;
  MambaDims m;
  m.S = s.seq_len, m.R = s.batch * s.seq_len;
  m.H = lm_mamba_heads(s), m.P = mb.head_dim, m.N = mb.state, m.G = mb.groups, m.K = mb.conv_width, m.L = mb.chunk;
  m.DI = m.H * m.P, m.GN = m.G * m.N, m.CD = m.DI + 2 * m.GN, m.W = 2 * m.DI + 2 * m.GN + m.H;
  m.bf16 = bf16 ? 1 : 0;
  m.eps = static_cast<float>(s.norm_eps);
  return m;
}

constexpr std::int64_t kSmemLimit = 227 * 1024;
// One thread per serial sum of a position (3 N + P), at least 256 for the elementwise parts.
inline std::int64_t adjoint_threads(const MambaDims& m) {
  return std::min<std::int64_t>(1024, std::max<std::int64_t>(256, (3 * m.N + m.P + 31) / 32 * 32));
}
inline std::int64_t adjoint_smem_bytes(const MambaDims& m) { return mamba_adjoint_smem_floats(m.P, m.N) * 4; }
inline std::int64_t scan_smem_bytes(const MambaDims& m) { return mamba_scan_smem_floats(m.L, m.P, m.N) * 4; }
inline std::int64_t gate_norm_smem_bytes(const MambaDims& m) { return kRowWarps * (m.DI / m.G) * 4; }
inline std::int64_t checkpoint_elements(const MambaDims& m, std::int64_t batch) {
  return batch * m.H * mamba_segments(m.S) * m.P * m.N;
}

// Why the mixers of spec cannot run resident ("" if they can): the kernels' shared memory and
// grids.
inline std::string mamba_cuda_unsupported(const LmSpec& spec) {
  if (spec.pattern.find('M') == std::string::npos) return "";
  const MambaDims m = mamba_dims(spec, false);
  if (scan_smem_bytes(m) > kSmemLimit)
    return "mamba chunk, head_dim and state need chunk (head_dim + 2 state + chunk + 3) + head_dim state <= " +
           std::to_string(kSmemLimit / 4) + " floats (the scan's shared memory)";
  if (adjoint_smem_bytes(m) > kSmemLimit)
    return "mamba head_dim * state must be at most about " + std::to_string(kSmemLimit / 4 / (kMambaSegment + 2)) +
           " (the scan backward's shared memory)";
  if (gate_norm_smem_bytes(m) > kSmemLimit) return "mamba d_inner / groups is too large for the gated norm's shared memory";
  if (spec.batch * m.H > 65535) return "batch * mamba heads exceeds the scan backward's grid (65535)";
  if (checkpoint_elements(m, spec.batch) > (std::int64_t{1} << 34))
    return "the scan backward's checkpoints (batch heads seq_len / 4 head_dim state floats) exceed 64 GiB";
  return "";
}

// One M block's activations, from the in-projection's output to the mixer's output.
struct MambaCacheCuda {
  MambaBuf zx, pre, xbc, dt, y, n, rinv, out;
};
// The mixer's own parameters and their gradients (pointers into the step's flat buffers).
struct MambaParamsCuda {
  const float *conv_w = nullptr, *conv_b = nullptr, *dt_bias = nullptr, *a_log = nullptr, *d_skip = nullptr,
              *norm = nullptr;
};
struct MambaGradsCuda {
  float *conv_w = nullptr, *conv_b = nullptr, *dt_bias = nullptr, *a_log = nullptr, *d_skip = nullptr, *norm = nullptr;
};

class MambaMixerCuda {
 public:
  MambaMixerCuda(const LmSpec& spec, bool bf16) : m_(mamba_dims(spec, bf16)), batch_(spec.batch) {
    const std::int64_t parts = batch_ * m_.H * m_.S * m_.N, R = m_.R;
    dy_ = mamba_buf(R * m_.DI, "cudaMalloc (mamba dy)");
    dxbc_ = mamba_buf(R * m_.CD, "cudaMalloc (mamba dxbc)");
    ckpt_ = mamba_buf(checkpoint_elements(m_, batch_), "cudaMalloc (mamba backward checkpoints)");
    dB_part_ = mamba_buf(parts, "cudaMalloc (mamba dB parts)");
    dC_part_ = mamba_buf(parts, "cudaMalloc (mamba dC parts)");
    da_part_ = mamba_buf(parts, "cudaMalloc (mamba decay parts)");
    GB_ = mamba_buf(R * m_.DI, "cudaMalloc (mamba G B)");
    dA_term_ = mamba_buf(R * m_.H, "cudaMalloc (mamba dA terms)");
    dD_term_ = mamba_buf(R * m_.H, "cudaMalloc (mamba dD terms)");
    draw_ = mamba_buf(R * m_.H, "cudaMalloc (mamba ddt)");
    const std::int64_t chunks = chunk_count(R, kRowChunk);
    gain_partial_ = mamba_buf(chunks * std::max(m_.DI, (m_.K + 1) * m_.CD), "cudaMalloc (mamba row-chunk partials)");
    head_part_ = mamba_buf(batch_ * 3 * m_.H, "cudaMalloc (mamba head parts)");
    smem_attribute(reinterpret_cast<const void*>(&mamba_scan_forward_kernel), scan_smem_bytes(m_));
    smem_attribute(reinterpret_cast<const void*>(&mamba_scan_adjoint_kernel), adjoint_smem_bytes(m_));
    smem_attribute(reinterpret_cast<const void*>(&mamba_gate_norm_forward_kernel), gate_norm_smem_bytes(m_));
    smem_attribute(reinterpret_cast<const void*>(&mamba_gate_norm_backward_kernel), gate_norm_smem_bytes(m_));
  }

  const MambaDims& dims() const { return m_; }

  // Benchmarks: with marks set, each launch is followed by an event on the stream named by its
  // kernel (the caller destroys them); the step never sets them (a graph captures no events).
  struct Mark {
    std::string what;
    cudaEvent_t event;
  };
  void set_marks(std::vector<Mark>* marks) { marks_ = marks; }

  void allocate(MambaCacheCuda& c) const {
    const std::int64_t R = m_.R;
    c.zx = mamba_buf(R * m_.W, "cudaMalloc (mamba in-projection output)");
    c.pre = mamba_buf(R * m_.CD, "cudaMalloc (mamba conv output)");
    c.xbc = mamba_buf(R * m_.CD, "cudaMalloc (mamba x B C)");
    c.dt = mamba_buf(R * m_.H, "cudaMalloc (mamba dt)");
    c.y = mamba_buf(R * m_.DI, "cudaMalloc (mamba scan output)");
    c.n = mamba_buf(R * m_.DI, "cudaMalloc (mamba normalised)");
    c.rinv = mamba_buf(R * m_.G, "cudaMalloc (mamba rinv)");
    c.out = mamba_buf(R * m_.DI, "cudaMalloc (mamba mixer output)");
  }

  // c.zx (the in-projection's output) -> c.out (the out-projection's input).
  void forward(cudaStream_t s, const MambaParamsCuda& p, MambaCacheCuda& c) const {
    mamba_conv_forward_kernel<<<blocks_for(m_.R * m_.CD), kThreads, 0, s>>>(m_, c.zx->p, p.conv_w, p.conv_b, c.pre->p,
                                                                          c.xbc->p);
    launched("mamba_conv_forward_kernel", s);
    mamba_dt_kernel<<<blocks_for(m_.R * m_.H), kThreads, 0, s>>>(m_, c.zx->p, p.dt_bias, c.dt->p);
    launched("mamba_dt_kernel", s);
    mamba_scan_forward_kernel<<<grid(batch_ * m_.H), 256, bytes(scan_smem_bytes(m_)), s>>>(m_, c.xbc->p, c.dt->p, p.a_log,
                                                                                          p.d_skip, c.y->p);
    launched("mamba_scan_forward_kernel", s);
    mamba_gate_norm_forward_kernel<<<row_blocks(), kRowWarps * 32, bytes(gate_norm_smem_bytes(m_)), s>>>(
        m_, c.zx->p, c.y->p, p.norm, c.n->p, c.rinv->p, c.out->p);
    launched("mamba_gate_norm_forward_kernel", s);
  }

  // From dout (the out-projection's input gradient): dzx (the in-projection's output gradient,
  // every column written) and the mixer's parameter gradients (overwritten).
  void backward(cudaStream_t s, const MambaParamsCuda& p, const MambaCacheCuda& c, const float* dout, float* dzx,
                const MambaGradsCuda& g) const {
    const std::int64_t R = m_.R;
    mamba_gate_norm_backward_kernel<<<row_blocks(), kRowWarps * 32, bytes(gate_norm_smem_bytes(m_)), s>>>(
        m_, c.zx->p, c.y->p, c.n->p, c.rinv->p, p.norm, dout, dy_->p, dzx);
    launched("mamba_gate_norm_backward_kernel", s);
    launch_gain_gradient(dout, c.n->p, gain_partial_->p, g.norm, R, m_.DI, s);
    launched("gain gradient (mamba norm)", s);
    const dim3 ckpt_grid(static_cast<unsigned>((m_.P * m_.N + 255) / 256), static_cast<unsigned>(batch_ * m_.H));
    mamba_scan_checkpoints_kernel<<<ckpt_grid, 256, 0, s>>>(m_, c.xbc->p, c.dt->p, p.a_log, ckpt_->p);
    launched("mamba_scan_checkpoints_kernel", s);
    mamba_scan_adjoint_kernel<<<grid(batch_ * m_.H), static_cast<unsigned>(adjoint_threads(m_)),
                                bytes(adjoint_smem_bytes(m_)), s>>>(m_, c.xbc->p, c.dt->p, p.a_log, p.d_skip, dy_->p,
                                                                    ckpt_->p, dxbc_->p, dB_part_->p, dC_part_->p,
                                                                    da_part_->p, GB_->p);
    launched("mamba_scan_adjoint_kernel", s);
    mamba_group_sum_kernel<<<blocks_for(R * m_.GN), kThreads, 0, s>>>(m_, dB_part_->p, dC_part_->p, dxbc_->p);
    launched("mamba_group_sum_kernel", s);
    mamba_dt_backward_kernel<<<blocks_for(R * m_.H), kThreads, 0, s>>>(m_, c.xbc->p, c.zx->p, c.dt->p, p.a_log,
                                                                      p.dt_bias, dy_->p, GB_->p, da_part_->p, dzx,
                                                                      dA_term_->p, dD_term_->p, draw_->p);
    launched("mamba_dt_backward_kernel", s);
    mamba_head_parts_kernel<<<blocks_for(batch_ * m_.H), kThreads, 0, s>>>(m_, draw_->p, dA_term_->p, dD_term_->p,
                                                                          head_part_->p);
    launched("mamba_head_parts_kernel", s);
    mamba_head_grads_kernel<<<blocks_for(m_.H), kThreads, 0, s>>>(m_, p.a_log, head_part_->p, g.dt_bias, g.a_log,
                                                                 g.d_skip);
    launched("mamba_head_grads_kernel", s);
    mamba_silu_backward_kernel<<<blocks_for(R * m_.CD, 4), kThreads, 0, s>>>(m_, c.pre->p, dxbc_->p);
    launched("mamba_silu_backward_kernel", s);
    mamba_conv_backward_kernel<<<blocks_for(R * m_.CD), kThreads, 0, s>>>(m_, dxbc_->p, p.conv_w, dzx);
    launched("mamba_conv_backward_kernel", s);
    const std::int64_t chunks = chunk_count(R, kRowChunk);
    mamba_conv_param_parts_kernel<<<blocks_for(chunks * (m_.K + 1) * m_.CD), kThreads, 0, s>>>(m_, dxbc_->p, c.zx->p,
                                                                                             gain_partial_->p);
    launched("mamba_conv_param_parts_kernel", s);
    mamba_conv_param_grads_kernel<<<blocks_for((m_.K + 1) * m_.CD), kThreads, 0, s>>>(m_, gain_partial_->p, g.conv_w,
                                                                                    g.conv_b);
    launched("mamba_conv_param_grads_kernel", s);
  }

 private:
  void launched(const char* what, cudaStream_t s) const {
    check(cudaGetLastError(), (std::string(what) + " launch").c_str());
    if (!marks_) return;
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate (mamba mark)");
    marks_->push_back({what, e});
    check(cudaEventRecord(e, s), "cudaEventRecord (mamba mark)");
  }
  static void smem_attribute(const void* kernel, std::int64_t b) {
    if (b > 48 * 1024)
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(b)),
            "cudaFuncSetAttribute (mamba kernel shared memory)");
  }
  static unsigned grid(std::int64_t n) { return static_cast<unsigned>(n); }
  static std::size_t bytes(std::int64_t b) { return static_cast<std::size_t>(b); }
  unsigned row_blocks() const {
    return static_cast<unsigned>(std::min<std::int64_t>((m_.R * m_.G + kRowWarps - 1) / kRowWarps, 65535));
  }

  MambaDims m_;
  std::int64_t batch_;
  std::vector<Mark>* marks_ = nullptr;
  MambaBuf dy_, dxbc_, ckpt_, dB_part_, dC_part_, da_part_, GB_, dA_term_, dD_term_, draw_, gain_partial_, head_part_;
};

}  // namespace

}  // namespace fp4d::cuda
