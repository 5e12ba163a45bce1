// The GPU-resident low-precision training step (see mlp.hpp for the semantics), host side:
// the step's device buffers and GEMM plans, then per step the operands' quantization, the
// kernels of mlp_kernels.cuh and the cuBLASLt GEMMs launched in one fixed order on the run's
// stream, kernel by kernel or replayed as a CUDA graph.
#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_util.cuh"
#include "backend/cuda/dual_amax.cuh"
#include "backend/cuda/step_graph.hpp"
#include "backend/cuda/lt_gemm.cuh"
#include "backend/cuda/mlp.hpp"
#include "backend/cuda/mlp_kernels.cuh"
#include "backend/cuda/mlp_operands.hpp"
#include "backend/cuda/recipe_linear.cuh"
#include "model/mlp_math.hpp"
#include "model/recipe_gemm.hpp"
#include "quant/nvfp4_math.hpp"

namespace fp4d::cuda {

namespace {

struct Layer {
  std::int64_t in = 0, out = 0;
  Buf<float> w, m1, m2, dw, h, z, dz, dh;
  std::unique_ptr<RecipeLinear> lin;  // the recipe's operands and GEMM plans
};

}  // namespace

std::string mlp_cuda_unsupported(const MlpSpec& spec, const RecipeGemmOptions& opt) {
  validate(spec);
  if (spec.activation == Activation::Swiglu) return "the swiglu activation runs on the CPU path only (so far)";
  if (spec.norm != Norm::None) return "RMSNorm runs on the CPU path only (so far)";
  if (spec.residual) return "residual connections run on the CPU path only (so far)";
  if (spec.batch % 16 != 0) return "batch " + std::to_string(spec.batch) + " is not a multiple of 16";
  for (std::size_t i = 0; i < spec.widths.size(); ++i)
    if (spec.widths[i] % 16 != 0) return "width " + std::to_string(spec.widths[i]) + " is not a multiple of 16";
  const auto L = static_cast<int>(spec.widths.size() - 1);
  RecipeGemm rg(opt, L);
  for (int l = 0; l < L; ++l) {
    const GemmRecipe* g = rg.layer_recipe(l);
    if (!g) continue;
    if (g->kind != GemmRecipe::Kind::Bf16 && g->kind != GemmRecipe::Kind::Nvfp4)
      return "recipe '" + rg.recipe_name(l) + "' (layer " + std::to_string(l) +
             ") has no resident GPU path (fp32, bf16 and nvfp4 recipes have)";
  }
  return "";
}

struct MlpCudaTrainer::Impl {
  MlpSpec spec;
  RecipeGemmOptions opt;
  std::unique_ptr<RecipeGemm> rg;  // the recipe's per-layer choices (no products)
  std::int64_t M = 0, step = 0;
  int L = 0;
  std::vector<Layer> layers;
  Buf<float> target;
  Buf<double> loss_terms, loss_sum;  // one loss term per row; their tree sum
  Buf<unsigned long long> lost;
  cudaStream_t stream = nullptr;
  cudaStream_t side = nullptr;  // the NVFP4 layers' weight quantizations, beside X's (RecipeLinear)
  // This run's cuBLASLt workspace: runs step concurrently, each on its own stream.
  std::unique_ptr<OwnedLtContext> lt;
  // Where the Wgrad GEMMs run: dW_l is read only by the update, so the backward chain (dY's
  // quantization, Dgrad, the activation's gradient) goes on to the layers below meanwhile.
  std::unique_ptr<OwnedGemmLane> wgrad;
  // Pinned staging: the batch going up, the step's statistics coming down.
  float* host_x = nullptr;
  float* host_t = nullptr;
  double* host_loss = nullptr;
  unsigned long long* host_lost = nullptr;
  StepParams* host_params = nullptr;
  Buf<StepParams> params;
  bool pending = false;
  // The step replayed as one CUDA graph: ~70 launches and copies become one launch, which is
  // what bounds the small models. Captured at the first step without an operand download
  // after an eager one (by then cuBLASLt's algorithm choice is made and fixed); the steps that
  // download operands run eagerly. Same kernels, same order, same bits either way.
  bool graphs_wanted = true;
  std::string graph_blocker;  // why this recipe cannot replay a graph ("" if it can)
  bool eager_done = false;
  cudaGraphExec_t graph = nullptr;
  GraphShape shape;  // its nodes and critical path

  Impl(const MlpSpec& s, const RecipeGemmOptions& o) : spec(s), opt(o) {
    validate(spec);
    const std::string why = mlp_cuda_unsupported(spec, opt);
    if (!why.empty()) throw std::invalid_argument("mlp --backend cuda (resident): " + why);
    M = spec.batch;
    L = static_cast<int>(spec.widths.size() - 1);
    rg = std::make_unique<RecipeGemm>(opt, L);
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate (side)");
    lt = std::make_unique<OwnedLtContext>();
    wgrad = std::make_unique<OwnedGemmLane>();
    allocate_staging();
    allocate_step_buffers();
    layers.resize(static_cast<std::size_t>(L));
    for (int l = 0; l < L; ++l) build_layer(l);
    graph_blocker = find_graph_blocker();
  }

  ~Impl() {
    if (stream) cudaStreamSynchronize(stream);
    if (side) cudaStreamSynchronize(side);  // a step that threw between a fork and its join
    if (graph) cudaGraphExecDestroy(graph);
    wgrad.reset();  // waits for the lane, which reads the layers' buffers
    layers.clear();
    lt.reset();
    cudaFreeHost(host_x);
    cudaFreeHost(host_t);
    cudaFreeHost(host_loss);
    cudaFreeHost(host_lost);
    cudaFreeHost(host_params);
    if (side) cudaStreamDestroy(side);
    if (stream) cudaStreamDestroy(stream);
  }

  Layer& layer(int l) { return layers[static_cast<std::size_t>(l)]; }

  // ---- construction ----

  // The pinned host buffers the batch goes up through and the step's statistics come down in.
  void allocate_staging() {
    const std::int64_t in0 = spec.widths.front(), outL = spec.widths.back();
    check(cudaMallocHost(&host_x, static_cast<std::size_t>(M * in0) * sizeof(float)), "cudaMallocHost (batch x)");
    check(cudaMallocHost(&host_t, static_cast<std::size_t>(M * outL) * sizeof(float)), "cudaMallocHost (batch t)");
    check(cudaMallocHost(&host_loss, sizeof(double)), "cudaMallocHost (loss)");
    check(cudaMallocHost(&host_lost, static_cast<std::size_t>(L) * sizeof(unsigned long long)), "cudaMallocHost (lost)");
    check(cudaMallocHost(&host_params, sizeof(StepParams)), "cudaMallocHost (step parameters)");
  }

  // The device buffers of the whole step: its parameters, the targets, the loss and lost updates.
  void allocate_step_buffers() {
    const std::int64_t outL = spec.widths.back();
    params = buf<StepParams>(1, "cudaMalloc (step parameters)");
    target = buf<float>(M * outL, "cudaMalloc (targets)");
    loss_terms = buf<double>(M, "cudaMalloc (loss terms)");
    loss_sum = buf<double>(1, "cudaMalloc (loss)");
    lost = buf<unsigned long long>(L, "cudaMalloc (lost updates)");
  }

  // Layer l's shape, its recipe, its buffers and the plans of its three GEMMs.
  void build_layer(int l) {
    Layer& y = layer(l);
    y.in = spec.widths[static_cast<std::size_t>(l)];
    y.out = spec.widths[static_cast<std::size_t>(l) + 1];
    allocate_layer_buffers(l);
    LinearTensors t;
    t.M = M, t.in = y.in, t.out = y.out;
    t.x = y.h->p, t.w = y.w->p, t.dy = y.dz->p, t.y = y.z->p, t.dx = l > 0 ? y.dh->p : nullptr, t.dw = y.dw->p;
    y.lin = std::make_unique<RecipeLinear>(l, rg->layer_recipe(l), t, &params->p->seed, lt->get(),
                                           opt.accumulator == Accumulator::Sm90, side);
    // W changes only in the optimizer step, which computes max |W| as it writes W, and in
    // set_state, which computes it after the upload.
    y.lin->adopt_weight_amax();
  }

  // The float32 tensors every mode has: weights, optimizer state, activations, gradients.
  void allocate_layer_buffers(int l) {
    Layer& y = layer(l);
    const std::int64_t nw = y.in * y.out, nh = M * y.in, nz = M * y.out;
    y.w = buf<float>(nw, "cudaMalloc (w)");
    y.m1 = buf<float>(nw, "cudaMalloc (m1)");
    y.m2 = buf<float>(spec.optimizer == Optimizer::AdamW ? nw : 0, "cudaMalloc (m2)");
    y.dw = buf<float>(nw, "cudaMalloc (dw)");
    y.h = buf<float>(nh, "cudaMalloc (h)");
    y.z = buf<float>(nz, "cudaMalloc (z)");
    y.dz = buf<float>(nz, "cudaMalloc (dz)");
    y.dh = buf<float>(l > 0 ? nh : 0, "cudaMalloc (dh)");
  }

  // A graph replays its launch arguments: the layers name what would vary from step to step.
  std::string find_graph_blocker() const {
    for (const Layer& y : layers) {
      const std::string why = y.lin->graph_blocker();
      if (!why.empty()) return why;
    }
    return "";
  }

  void launch_check(const char* what) { check(cudaGetLastError(), what); }

  // ---- the step ----

  // Z_l = H_l W_l^T, then H_{l+1} = act(Z_l) below the last layer. x_amax_done: the kernel that
  // made H_l left the amaxes of its quantization. Returns whether act(Z_l)'s kernel did so
  // for layer l + 1.
  bool forward_layer(int l, std::uint64_t seed, bool x_amax_done) {
    layer(l).lin->forward(seed, stream, lt->get(), x_amax_done);
    return l + 1 < L && activation_forward(l, seed);
  }

  // H_{l+1} = act(Z_l). Where layer l + 1 quantizes H_{l+1} as NVFP4, the kernel is the amax
  // pass of that quantization (dual_amax.cuh): H_{l+1} is read once less; returns true then.
  bool activation_forward(int l, std::uint64_t seed) {
    const Layer& y = layer(l);
    Layer& next = layer(l + 1);
    const int gelu = spec.activation == Activation::Gelu;
    const RecipeLinear::AmaxTarget t = next.lin->amax_target(OperandKind::Activation, seed);
    return produce_tensor(ActForwardPair{y.z->p, next.h->p, y.out, gelu}, M, y.out, t.keys, t.spec, stream);
  }

  // dW_l = dZ_l^T H_l (on the Wgrad lane), then (above layer 0) dH_l = dZ_l W_l and
  // dZ_{l-1} = dH_l act'(Z_{l-1}). dy_amax_done and the result: as forward_layer's, for dZ_l
  // and dZ_{l-1}.
  bool backward_layer(int l, std::uint64_t seed, bool dy_amax_done) {
    layer(l).lin->backward(seed, stream, lt->get(), dy_amax_done, wgrad->lane());
    return l > 0 && activation_backward(l, seed);
  }

  // dZ_{l-1} = dH_l act'(Z_{l-1}); the amax pass of layer l - 1's dY quantization where it has
  // one (then true).
  bool activation_backward(int l, std::uint64_t seed) {
    const Layer& y = layer(l);
    Layer& prev = layer(l - 1);
    const int gelu = spec.activation == Activation::Gelu;
    const RecipeLinear::AmaxTarget t = prev.lin->amax_target(OperandKind::Gradient, seed);
    return produce_tensor(ActBackwardPair{y.dh->p, prev.z->p, prev.dz->p, y.in, gelu}, M, y.in, t.keys, t.spec, stream);
  }

  // The loss of the last layer's output into loss_sum (a term per row, then their tree sum:
  // sim/mlp.cpp's order) and its gradient dZ_{L-1}. The regression loss's kernel is also the
  // amax pass of dZ_{L-1}'s NVFP4 quantization where the last layer has one (then true).
  bool loss_and_output_gradient(std::uint64_t seed) {
    Layer& last = layers.back();
    bool amax_done = false;
    if (spec.task == "classification") {
      softmax_ce_kernel<<<blocks_for(M), kThreads, 0, stream>>>(last.z->p, target->p, last.dz->p, M, last.out,
                                                                loss_terms->p);
      launch_check("softmax_ce_kernel launch");
    } else {
      const RecipeLinear::AmaxTarget t = last.lin->amax_target(OperandKind::Gradient, seed);
      MseAmax a;
      if (t.keys && M % 16 == 0) {  // the kernel's column blocks are its blocks' 16 rows
        check(cudaMemsetAsync(t.keys, 0, 2 * sizeof(std::uint32_t), stream), "cudaMemsetAsync (dZ amax keys)");
        a.keys = t.keys, a.rht = t.spec.col_rht, a.rs = rht_args(t.spec);
        amax_done = true;
      }
      mse_kernel<<<mse_blocks(M), kMseThreads, 0, stream>>>(last.z->p, target->p, last.dz->p, M, last.out,
                                                            static_cast<float>(M * last.out), loss_terms->p, a);
      launch_check("mse_kernel launch");
    }
    tree_sum_kernel<<<1, kThreads, 0, stream>>>(loss_terms->p, M, loss_sum->p);
    launch_check("tree_sum_kernel launch");
    return amax_done;
  }

  // The step's seed and optimizer coefficients (StepParams), as the host computes them.
  StepParams params_at(std::uint64_t seed) const {
    StepParams p;
    p.seed = seed;
    p.lr = static_cast<float>(lr_at(spec, step));
    if (spec.optimizer == Optimizer::AdamW) {
      p.adam = mlp_math::adam_coefficients<float>(lr_at(spec, step), spec.beta1, spec.beta2, spec.eps,
                                                  spec.weight_decay, step);
    }
    return p;
  }

  // Every layer's optimizer step, counting its lost updates and the new weights' amax keys
  // from zero (this step's weight quantizations, on the side stream, were joined by forward()).
  void update() {
    check(cudaMemsetAsync(lost->p, 0, static_cast<std::size_t>(L) * sizeof(unsigned long long), stream), "cudaMemsetAsync (lost)");
    for (const Layer& y : layers)
      if (const RecipeLinear::WeightAmax& a = y.lin->adopted_weight_amax(); a.keys)
        check(cudaMemsetAsync(a.keys, 0, static_cast<std::size_t>(a.count) * sizeof(std::uint32_t), stream),
              "cudaMemsetAsync (weight amax keys)");
    for (int first = 0; first < L; first += kOptimizerLayersPerLaunch)
      update_layers(first, std::min(L - first, kOptimizerLayersPerLaunch));
  }

  // W_l and its optimizer state by SGD or AdamW for layers first .. first + count - 1 in one
  // launch; layer l's lost updates counted into lost[l].
  void update_layers(int first, int count) {
    OptimizerLayers ls;
    std::int64_t most = 0;
    for (int k = 0; k < count; ++k) {
      Layer& y = layer(first + k);
      const RecipeLinear::WeightAmax& a = y.lin->adopted_weight_amax();
      ls.layer[k] = OptimizerLayer{y.w->p, y.m1->p, y.m2->p, y.dw->p, y.in * y.out, a.keys, a.count};
      most = std::max(most, y.in * y.out);
    }
    const dim3 grid(blocks_for(most, 4), static_cast<unsigned>(count));
    if (spec.optimizer == Optimizer::Sgd) {
      sgd_kernel<<<grid, kThreads, 0, stream>>>(ls, params->p, static_cast<float>(spec.momentum),
                                                static_cast<float>(spec.weight_decay), spec.weight_decay > 0.0,
                                                lost->p + first);
      launch_check("sgd_kernel launch");
    } else {
      adamw_kernel<<<grid, kThreads, 0, stream>>>(ls, params->p, lost->p + first);
      launch_check("adamw_kernel launch");
    }
  }

  // This step's quantizer inputs (before the update changes W), waiting for them.
  void download_operands(MlpCudaOperands* ops) {
    ops->h.clear(), ops->w.clear(), ops->dz.clear();
    for (const Layer& y : layers) {
      ops->h.emplace_back(M, y.in);
      ops->w.emplace_back(y.out, y.in);
      ops->dz.emplace_back(M, y.out);
      check(cudaMemcpyAsync(ops->h.back().data.data(), y.h->p, static_cast<std::size_t>(M * y.in) * sizeof(float),
                            cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (h)");
      check(cudaMemcpyAsync(ops->w.back().data.data(), y.w->p, static_cast<std::size_t>(y.in * y.out) * sizeof(float),
                            cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (w)");
      check(cudaMemcpyAsync(ops->dz.back().data.data(), y.dz->p, static_cast<std::size_t>(M * y.out) * sizeof(float),
                            cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (dz)");
    }
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (operands)");
  }

  // The loss and lost-update counts into pinned memory, for finish().
  void read_back_stats() {
    check(cudaMemcpyAsync(host_loss, loss_sum->p, sizeof(double), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (loss)");
    check(cudaMemcpyAsync(host_lost, lost->p, static_cast<std::size_t>(L) * sizeof(unsigned long long),
                          cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (lost)");
  }

  // The batch up through the pinned staging: X into layer 0's H, T into target.
  void upload(const Batch& b) {
    if (pending) throw std::logic_error("MlpCudaTrainer: a batch upload during a step");
    // The pinned staging buffers may still feed the previous upload's copies.
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (batch upload)");
    const std::int64_t in0 = spec.widths.front(), outL = spec.widths.back();
    if (b.x.rows != M || b.x.cols != in0 || b.t.rows != M || b.t.cols != outL)
      throw std::invalid_argument("MlpCudaTrainer: the batch has the wrong shape");
    std::copy(b.x.data.begin(), b.x.data.end(), host_x);
    std::copy(b.t.data.begin(), b.t.data.end(), host_t);
    check(cudaMemcpyAsync(layers[0].h->p, host_x, static_cast<std::size_t>(M * in0) * sizeof(float), cudaMemcpyHostToDevice,
                          stream), "cudaMemcpyAsync (batch x)");
    check(cudaMemcpyAsync(target->p, host_t, static_cast<std::size_t>(M * outL) * sizeof(float), cudaMemcpyHostToDevice,
                          stream), "cudaMemcpyAsync (batch t)");
  }

  // The step's StepParams up to the device, where the kernels (and a graph's replay) read them.
  void upload_params(std::uint64_t seed) {
    // The previous step has finished (finish() waited), so its copy of host_params is done.
    *host_params = params_at(seed);
    check(cudaMemcpyAsync(params->p, host_params, sizeof(StepParams), cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync (step parameters)");
  }

  // Everything one step puts on the stream after its parameters are up: the body a graph
  // captures (ops = nullptr) or the eager step.
  void enqueue_step(std::uint64_t seed, MlpCudaOperands* ops) {
    // Every NVFP4 weight's quantization first, on the side stream: none waits for the layers
    // before its own.
    for (int l = 0; l < L; ++l) layer(l).lin->start_weight(seed, stream);
    bool amax_done = false;  // the input batch comes without amaxes
    for (int l = 0; l < L; ++l) amax_done = forward_layer(l, seed, amax_done);
    amax_done = loss_and_output_gradient(seed);
    for (int l = L - 1; l >= 0; --l) amax_done = backward_layer(l, seed, amax_done);
    wgrad->join(stream);  // before the update reads dW
    if (ops) download_operands(ops);
    update();
    read_back_stats();
  }

  // ---- CUDA graphs ----

  // A failure names the way around it: the same step kernel by kernel.
  void capture(std::uint64_t seed) {
    try {
      graph = capture_step_graph(stream, [&] { enqueue_step(seed, nullptr); }, &shape, "the training step");
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::string(e.what()) +
                               "; `fp4drift run --cuda-graphs off` runs the same step kernel by kernel");
    }
  }

  // Replay? When graphs are wanted and possible, after an eager step has fixed cuBLASLt's
  // choices; a step that downloads its operands runs eagerly (it waits for them mid-step).
  bool graph_ready_for(const MlpCudaOperands* ops) const {
    return graphs_wanted && graph_blocker.empty() && eager_done && !ops;
  }

  // The step body as the graph (captured on first use) or kernel by kernel.
  void run_step(std::uint64_t seed, MlpCudaOperands* ops) {
    if (graph_ready_for(ops)) {
      if (!graph) capture(seed);
      check(cudaGraphLaunch(graph, stream), "cudaGraphLaunch (training step)");
    } else {
      enqueue_step(seed, ops);
      eager_done = true;
    }
  }

  // ---- one step, from the host's side ----

  // One step on the stream without waiting for it: the batch (if given) and the parameters up,
  // then the body; finish() waits.
  void launch_step(const Batch* b, MlpCudaOperands* ops) {
    if (pending) throw std::logic_error("MlpCudaTrainer: step_async without finish");
    if (b) upload(*b);
    const std::uint64_t seed = recipe_step_seed(opt.seed, step);
    upload_params(seed);
    run_step(seed, ops);
    pending = true;
  }

  // Waits for the step and turns the read-back sums into its StepStats.
  StepStats finish() {
    if (!pending) throw std::logic_error("MlpCudaTrainer: finish without a step");
    check(cudaStreamSynchronize(stream), "training step (cudaStreamSynchronize)");
    pending = false;
    StepStats st;
    const double denom = spec.task == "classification" ? static_cast<double>(M)
                                                        : static_cast<double>(M * spec.widths.back());
    st.loss = spec.task == "classification" ? *host_loss / denom : 0.5 * *host_loss / denom;
    for (int l = 0; l < L; ++l) {
      const Layer& y = layer(l);
      st.lost_update_fraction.push_back(static_cast<double>(host_lost[l]) / static_cast<double>(y.in * y.out));
    }
    ++step;
    return st;
  }

  // ---- operands for tests ----

};

MlpCudaTrainer::MlpCudaTrainer(const MlpSpec& spec, const RecipeGemmOptions& opt, const MlpState<float>& state)
    : impl_(std::make_unique<Impl>(spec, opt)) {
  set_state(state);
}
MlpCudaTrainer::~MlpCudaTrainer() = default;

StepStats MlpCudaTrainer::step(const Batch& batch, MlpCudaOperands* operands) {
  impl_->launch_step(&batch, operands);
  return impl_->finish();
}
void MlpCudaTrainer::upload_batch(const Batch& batch) { impl_->upload(batch); }
StepStats MlpCudaTrainer::step_on_uploaded_batch() {
  impl_->launch_step(nullptr, nullptr);
  return impl_->finish();
}
void MlpCudaTrainer::step_async(const Batch& batch) { impl_->launch_step(&batch, nullptr); }
StepStats MlpCudaTrainer::finish() { return impl_->finish(); }
std::int64_t MlpCudaTrainer::step_index() const { return impl_->step; }

MlpState<float> MlpCudaTrainer::state() const {
  Impl& m = *impl_;
  if (m.pending) throw std::logic_error("MlpCudaTrainer: state() during a step");
  MlpState<float> s;
  s.step = m.step;
  for (const Layer& y : m.layers) {
    s.w.emplace_back(static_cast<std::size_t>(y.in * y.out));
    s.m1.emplace_back(s.w.back().size());
    y.w->download(s.w.back().data());
    y.m1->download(s.m1.back().data());
    if (m.spec.optimizer == Optimizer::AdamW) {
      s.m2.emplace_back(s.w.back().size());
      y.m2->download(s.m2.back().data());
    }
  }
  return s;
}

void MlpCudaTrainer::set_state(const MlpState<float>& s) {
  Impl& m = *impl_;
  if (m.pending) throw std::logic_error("MlpCudaTrainer: set_state() during a step");
  const bool adam = m.spec.optimizer == Optimizer::AdamW;
  if (s.w.size() != m.layers.size() || s.m1.size() != m.layers.size() || (adam && s.m2.size() != m.layers.size()))
    throw std::invalid_argument("MlpCudaTrainer: the state has the wrong number of layers");
  // Every size checked before anything is uploaded: a state refused half-way would leave some
  // layers' W new and their amax keys old.
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const auto n = static_cast<std::size_t>(m.layers[l].in * m.layers[l].out);
    if (s.w[l].size() != n || s.m1[l].size() != n || (adam && s.m2[l].size() != n))
      throw std::invalid_argument("MlpCudaTrainer: layer " + std::to_string(l) + " of the state has the wrong size");
  }
  check(cudaStreamSynchronize(m.stream), "cudaStreamSynchronize (set_state)");
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    Layer& y = m.layers[l];
    y.w->upload(s.w[l].data());
    y.m1->upload(s.m1[l].data());
    if (adam) y.m2->upload(s.m2[l].data());
  }
  // The uploads went through the legacy default stream, which does not order the trainer's
  // non-blocking stream, and a pageable cudaMemcpy may return before its DMA lands: wait.
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (set_state)");
  for (const Layer& y : m.layers) y.lin->refresh_weight_amax(m.stream);  // the new W's amax keys
  m.step = s.step;
}

std::string MlpCudaTrainer::path(int layer) const { return impl_->layers.at(static_cast<std::size_t>(layer)).lin->path(); }

void MlpCudaTrainer::set_cuda_graphs(bool on) {
  if (impl_->pending) throw std::logic_error("MlpCudaTrainer: set_cuda_graphs() during a step");
  impl_->graphs_wanted = on;
}

std::string MlpCudaTrainer::launch_mode() const {
  if (!impl_->graphs_wanted) return "kernel by kernel (CUDA graphs off)";
  if (!impl_->graph_blocker.empty()) return "kernel by kernel (" + impl_->graph_blocker + ")";
  return "one CUDA graph per step";
}

GraphShape MlpCudaTrainer::graph_shape() const { return impl_->shape; }

QuantizedTensor MlpCudaTrainer::quantized_operand(int layer, GemmRole role, int operand) const {
  const Impl& m = *impl_;
  const Layer& y = m.layers.at(static_cast<std::size_t>(layer));
  if (role == GemmRole::Dgrad && layer == 0) return {};
  check(cudaStreamSynchronize(m.stream), "cudaStreamSynchronize (quantized_operand)");
  return download_operand(y.lin->operand_location(role, operand));
}

}  // namespace fp4d::cuda
