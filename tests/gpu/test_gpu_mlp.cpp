// The GPU-resident training step (backend/cuda/mlp.hpp) against the CPU backend.
//  - Every quantized GEMM operand of every step (all layers, Fprop/Dgrad/Wgrad, both operands,
//    RHT and SR included) equals quantize_cpu of the same float32 operand with the spec
//    RecipeGemm would use (same seed and stream): codes, scale codes and global scale bit for
//    bit, BF16 casts likewise. The operands are the GPU's own (downloaded), so later layers are
//    covered although their inputs differ from the CPU run's by accumulation order.
//  - fp32 recipe, step 0: |loss_gpu - loss_cpu| within a bound propagated from FP32
//    accumulation (gamma_K per GEMM on both sides) through the network - a transposed operand,
//    a wrong alpha or a wrong loss kernel moves the loss far outside it.
//  - Determinism, and resuming from state() equal to running straight through, bit for bit.
//  - Steps replayed as one CUDA graph equal steps launched kernel by kernel, bit for bit,
//    with steps that download operands (eager) in between, for SGD and AdamW, 2D and 1x16
//    weights: the graph re-reads the SR seed and the optimizer's coefficients every step; the
//    weights' quantizations run on a branch of their own (graph_shape's critical path is
//    shorter than its node count, checked on a hand-built graph).
//  - run_mlp with the device runs stepping concurrently (one host thread, stream and cuBLASLt
//    workspace each) writes the trace of the same runs stepped one after the other.
//  - With the sm90 accumulator, the resident run is the CPU run (train_step<float> with the
//    tensor-core model's GEMMs) bit for bit: loss, lost-update fractions and every weight and
//    moment, step after step, for every resident recipe.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/graph_shape.hpp"
#include "backend/cuda/mlp.hpp"
#include "backend/cuda/mlp_trainer.hpp"
#include "sim/mlp.hpp"
#include "sim/mlp_run.hpp"
#include "model/recipe_gemm.hpp"
#include "support/catch.hpp"
#include "support/trace_datasets.hpp"

using namespace fp4d;

namespace {

MlpSpec small_model() {
  MlpSpec s;
  s.widths = {64, 128, 64, 32};
  s.batch = 64;
  s.teacher_width = 64;
  s.seed = 7;
  s.outlier_fraction = 0.05;
  s.outlier_scale = 10.0;
  s.lr = 0.02;
  return s;
}

RecipeGemmOptions recipe(const std::string& name, std::vector<int> edges = {}) {
  RecipeGemmOptions o;
  o.recipe = name;
  o.high_precision_layers = std::move(edges);
  o.seed = 11;
  return o;
}

std::uint32_t bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

bool all_zero(const Matrix& m) {
  for (const float v : m.data)
    if (v != 0.0f) return false;
  return true;
}

// Compares the GPU's quantization of every operand of the last step with what the CPU run's
// RecipeGemm makes of the same float32 operands (quantize_cpu, same specs, seeds, streams).
void check_operands(const MlpSpec& s, const RecipeGemmOptions& opt, const cuda::MlpCudaTrainer& t,
                    const cuda::MlpCudaOperands& ops, std::int64_t step) {
  const auto L = static_cast<int>(s.widths.size() - 1);
  RecipeGemm rg(opt, L);
  for (int l = 0; l < L; ++l) {
    if (!rg.layer_recipe(l)) continue;
    const auto li = static_cast<std::size_t>(l);
    REQUIRE_FALSE(all_zero(ops.h[li]));
    REQUIRE_FALSE(all_zero(ops.dz[li]));
    for (const GemmRole role : {GemmRole::Fprop, GemmRole::Dgrad, GemmRole::Wgrad}) {
      if (role == GemmRole::Dgrad && l == 0) continue;
      // The role's logical operands, as sim/mlp.cpp passes them to the GemmFn.
      const Matrix& first = role == GemmRole::Dgrad ? ops.dz[li] : ops.h[li];
      const Matrix& second = role == GemmRole::Wgrad ? ops.dz[li] : ops.w[li];
      const auto cpu_pair = rg.quantize_operands(GemmCall{role, l, step}, first, second);
      REQUIRE(cpu_pair);
      for (int operand = 0; operand < 2; ++operand) {
        const QuantizedTensor& cpu = operand ? cpu_pair->second : cpu_pair->first;
        const QuantizedTensor gpu = t.quantized_operand(l, role, operand);
        INFO("step " << step << ", layer " << l << ", " << to_string(role) << " operand " << operand << ", recipe "
                     << rg.recipe_name(l));
        REQUIRE(gpu.rows == cpu.rows);
        REQUIRE(gpu.cols == cpu.cols);
        if (cpu.spec.scheme == Scheme::Cast) {
          CHECK(gpu.codes16 == cpu.codes16);
          continue;
        }
        CHECK(gpu.scale_rows == cpu.scale_rows);
        CHECK(gpu.scale_cols == cpu.scale_cols);
        CHECK(gpu.codes == cpu.codes);
        CHECK(gpu.scale_codes == cpu.scale_codes);
        CHECK(bits(gpu.global.decode) == bits(cpu.global.decode));
        CHECK(bits(gpu.global.encode) == bits(cpu.global.encode));
      }
    }
  }
}

// Bound on |loss_gpu - loss_cpu| at step 0 for the fp32 recipe with ReLU, from the GPU's own
// operands (H_l, W_l): each GEMM of either backend is within gamma_K |H||W|^T of the exact
// product of its inputs (u = 2^-24, any order, FMA or not), the inputs differ by E_l, so the
// outputs differ by at most D_l = E_l |W_l|^T + 2 gamma_K (|H_l| + E_l) |W_l|^T; ReLU is
// 1-Lipschitz (E_{l+1} = D_l). Loss (MSE): |dL| <= mean(|y - t| D + D^2 / 2); cross-entropy:
// logsumexp and y_label are 1-Lipschitz in the max norm, |dL| <= mean_i 2 max_j D_ij. Plus the
// two double-precision loss sums (relative 2^-50, generous).
double loss_bound(const MlpSpec& s, const cuda::MlpCudaOperands& ops, const Matrix& y_minus_t) {
  const double u = std::ldexp(1.0, -24);
  const auto L = s.widths.size() - 1;
  const std::int64_t M = s.batch;
  std::vector<double> e(static_cast<std::size_t>(M * s.widths[0]), 0.0);
  for (std::size_t l = 0; l < L; ++l) {
    const std::int64_t in = s.widths[l], out = s.widths[l + 1];
    const double gamma = static_cast<double>(in) * u / (1.0 - static_cast<double>(in) * u);
    std::vector<double> d(static_cast<std::size_t>(M * out), 0.0);
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < out; ++j) {
        double acc = 0;
        for (std::int64_t k = 0; k < in; ++k) {
          const double w = std::fabs(static_cast<double>(ops.w[l](j, k)));
          const double h = std::fabs(static_cast<double>(ops.h[l](i, k)));
          const double ek = e[static_cast<std::size_t>(i * in + k)];
          acc += ek * w + 2.0 * gamma * (h + ek) * w;
        }
        d[static_cast<std::size_t>(i * out + j)] = acc * (1.0 + 1e-12);
      }
    e = std::move(d);
  }
  const std::int64_t out = s.widths.back();
  double bound = 0;
  if (s.task == "classification") {
    for (std::int64_t i = 0; i < M; ++i) {
      double mx = 0;
      for (std::int64_t j = 0; j < out; ++j) mx = std::max(mx, e[static_cast<std::size_t>(i * out + j)]);
      bound += 2.0 * mx;
    }
    bound /= static_cast<double>(M);
  } else {
    for (std::int64_t i = 0; i < M * out; ++i) {
      const double di = e[static_cast<std::size_t>(i)];
      // |y_cpu - t| <= |y_minus_t| + D (y_minus_t: exact product of the GPU's last inputs).
      bound += (std::fabs(static_cast<double>(y_minus_t.data[static_cast<std::size_t>(i)])) + di) * di + 0.5 * di * di;
    }
    bound /= static_cast<double>(M * out);
  }
  return bound;
}

}  // namespace

TEST_CASE("gpu mlp: every quantized operand equals quantize_cpu of the same operand", "[gpu][mlp]") {
  struct Case {
    std::string recipe;
    std::vector<int> edges;
    bool gelu_adamw_classification;
  };
  for (const Case& c : {Case{"nvfp4", {0, 2}, false}, Case{"nvfp4", {}, false}, Case{"nvfp4-no-2d", {}, false},
                        Case{"nvfp4-no-rht-sr8", {}, true}, Case{"nvfp4-no-sr", {2}, true}, Case{"bf16", {}, false}}) {
    MlpSpec s = small_model();
    if (c.gelu_adamw_classification) {
      s.activation = Activation::Gelu;
      s.optimizer = Optimizer::AdamW;
      s.task = "classification";
      s.lr = 1e-3;
    }
    const RecipeGemmOptions opt = recipe(c.recipe, c.edges);
    INFO("recipe " << c.recipe << (c.gelu_adamw_classification ? " (gelu, adamw, classification)" : ""));
    REQUIRE(cuda::mlp_cuda_unsupported(s, opt).empty());
    cuda::MlpCudaTrainer t(s, opt, init_state<float>(s));
    for (std::int64_t step = 0; step < 3; ++step) {
      cuda::MlpCudaOperands ops;
      const StepStats st = t.step(make_batch(s, step), &ops);
      REQUIRE(std::isfinite(st.loss));
      check_operands(s, opt, t, ops, step);
    }
    REQUIRE(t.step_index() == 3);
  }
}

TEST_CASE("gpu mlp: fp32 recipe, step 0 loss within the FP32 accumulation bound of the CPU's", "[gpu][mlp]") {
  for (const std::string task : {"regression", "classification"}) {
    MlpSpec s = small_model();
    s.task = task;
    const RecipeGemmOptions opt = recipe("fp32");
    cuda::MlpCudaTrainer t(s, opt, init_state<float>(s));
    const Batch b = make_batch(s, 0);
    cuda::MlpCudaOperands ops;
    const StepStats gpu = t.step(b, &ops);

    RecipeGemm rg(opt, static_cast<int>(s.widths.size() - 1));
    MlpState<float> cpu_state = init_state<float>(s);
    const StepStats cpu = train_step<float>(s, cpu_state, rg.fn());
    // |y - t| for the bound: the exact (double) product of the GPU's last-layer inputs.
    const std::size_t last = s.widths.size() - 2;
    Matrix ymt(s.batch, s.widths.back());
    for (std::int64_t i = 0; i < s.batch; ++i)
      for (std::int64_t j = 0; j < s.widths.back(); ++j) {
        double acc = 0;
        for (std::int64_t k = 0; k < s.widths[last]; ++k)
          acc += static_cast<double>(ops.h[last](i, k)) * static_cast<double>(ops.w[last](j, k));
        ymt(i, j) = static_cast<float>(std::fabs(acc - static_cast<double>(b.t(i, j))) * (1 + 1e-6));
      }
    const double bound = loss_bound(s, ops, ymt) + 4.0 * std::ldexp(1.0, -50) * std::fabs(cpu.loss);
    INFO(task << ": loss gpu " << gpu.loss << ", cpu " << cpu.loss << ", |diff| " << std::fabs(gpu.loss - cpu.loss)
              << ", bound " << bound);
    CHECK(std::fabs(gpu.loss - cpu.loss) <= bound);
    // The test's resolution: the worst-case bound (every rounding error aligned, amplified by
    // |W| at each layer) stays below 1% of the loss, so anything that moves the loss by more -
    // a transposed operand, a wrong alpha, a wrong loss reduction all move it by O(1) - fails.
    CHECK(bound < 0.01 * cpu.loss);
  }
}

TEST_CASE("gpu mlp: deterministic, and resuming from state() continues bit for bit", "[gpu][mlp]") {
  const MlpSpec s = small_model();
  const RecipeGemmOptions opt = recipe("nvfp4", {0});
  cuda::MlpCudaTrainer a(s, opt, init_state<float>(s)), b(s, opt, init_state<float>(s));
  std::vector<double> la, lb;
  for (std::int64_t step = 0; step < 6; ++step) la.push_back(a.step(make_batch(s, step)).loss);
  for (std::int64_t step = 0; step < 3; ++step) lb.push_back(b.step(make_batch(s, step)).loss);
  const MlpState<float> mid = b.state();
  REQUIRE(mid.step == 3);
  cuda::MlpCudaTrainer c(s, opt, mid);
  for (std::int64_t step = 3; step < 6; ++step) lb.push_back(c.step(make_batch(s, step)).loss);
  CHECK(la == lb);
  const MlpState<float> sa = a.state(), sc = c.state();
  CHECK(sa.step == sc.step);
  CHECK(sa.w == sc.w);
  CHECK(sa.m1 == sc.m1);
  // The weights moved (the check above is not comparing two untouched initialisations).
  CHECK(sa.w != init_state<float>(s).w);
}

TEST_CASE("gpu mlp: recipes and shapes without a resident path are named", "[gpu][mlp]") {
  MlpSpec s = small_model();
  CHECK(cuda::mlp_cuda_unsupported(s, recipe("mxfp4")).find("mxfp4") != std::string::npos);
  CHECK(cuda::mlp_cuda_unsupported(s, recipe("fp8")).find("fp8") != std::string::npos);
  MlpSpec g = small_model();
  g.activation = Activation::Swiglu;
  CHECK(cuda::mlp_cuda_unsupported(g, recipe("nvfp4")).find("swiglu") != std::string::npos);
  g = small_model();
  g.norm = Norm::RmsNorm;
  CHECK(cuda::mlp_cuda_unsupported(g, recipe("nvfp4")).find("RMSNorm") != std::string::npos);
  s.widths = {64, 120, 32};
  CHECK(cuda::mlp_cuda_unsupported(s, recipe("nvfp4")).find("120") != std::string::npos);
  CHECK_THROWS_AS(cuda::MlpCudaTrainer(s, recipe("nvfp4"), init_state<float>(s)), std::invalid_argument);
}

TEST_CASE("gpu mlp: runs stepping concurrently write the sequential trace bit for bit", "[gpu][mlp]") {
  // Three resident runs (one with SR and RHT), operand statistics every step, compares with
  // the reference (states read back, local-error probes) and checkpoints in between. Whether
  // cuBLASLt picks kernels that use the workspace at these shapes is its choice; the test
  // checks the runs' independence (own streams, workspaces, host threads), not that choice.
  MlpRunSpec spec;
  spec.model = small_model();
  spec.model.widths = {64, 512, 512, 16};
  spec.model.batch = 256;
  spec.steps = 20;
  spec.compare_every = 5;
  spec.flush_every = 7;
  spec.recipes = {"nvfp4", "bf16", "fp32"};
  test::Datasets traces[2];
  for (const bool concurrent : {false, true}) {
    MlpRunControl ctl;
    ctl.backend = "cuda";
    ctl.backend_is_device = true;
    ctl.trainer = [](const MlpSpec& m, const RecipeGemmOptions& o, const MlpState<float>& st) {
      return cuda::make_cuda_trainer(m, o, st);
    };
    ctl.concurrent_runs = concurrent;
    traces[concurrent] = test::run_mlp_datasets(spec, ctl, "fp4d_gpu_mlp_concurrent_" + std::to_string(concurrent));
  }
  REQUIRE(traces[0].count("/mlp/runs/nvfp4/loss") == 1);
  test::check_same_datasets(traces[0], traces[1]);
}

TEST_CASE("gpu mlp: steps replayed as a CUDA graph equal steps launched kernel by kernel", "[gpu][mlp]") {
  // The graph is captured once and replays its launch arguments; what changes per step (SR
  // seeds, learning rate, Adam's bias corrections) comes from device memory. Were any of it
  // baked into the graph, the SR draws or the updates of later steps would differ - SR on the
  // gradients makes every step's seed matter, warmup-cosine and AdamW every step's
  // coefficients. Steps 3 and 7 download operands (eager, as the runner's record steps do).
  for (const std::string& name : {std::string("nvfp4"), std::string("nvfp4-no-2d")})
    for (const Optimizer opt_kind : {Optimizer::Sgd, Optimizer::AdamW}) {
      MlpSpec s = small_model();
      s.optimizer = opt_kind;
      s.schedule = "warmup-cosine";
      s.warmup_steps = 4;
      s.total_steps = 12;
      if (opt_kind == Optimizer::AdamW) s.lr = 1e-3, s.weight_decay = 0.01;
      const RecipeGemmOptions opt = recipe(name, {0});
      cuda::MlpCudaTrainer graph(s, opt, init_state<float>(s)), kernels(s, opt, init_state<float>(s));
      kernels.set_cuda_graphs(false);
      INFO(name << (opt_kind == Optimizer::Sgd ? " sgd" : " adamw") << ": " << graph.launch_mode());
      REQUIRE(graph.launch_mode() == "one CUDA graph per step");
      REQUIRE(kernels.launch_mode().find("kernel by kernel") != std::string::npos);
      for (std::int64_t step = 0; step < s.total_steps; ++step) {
        const Batch b = make_batch(s, step);
        cuda::MlpCudaOperands og, ok;
        const bool record = step == 3 || step == 7;
        const StepStats a = graph.step(b, record ? &og : nullptr), k = kernels.step(b, record ? &ok : nullptr);
        INFO("step " << step);
        REQUIRE(a.loss == k.loss);
        REQUIRE(a.lost_update_fraction == k.lost_update_fraction);
        // The SR'd gradient operands of this step, as quantized, bit for bit.
        for (int l = 1; l < 3; ++l) {
          const QuantizedTensor qa = graph.quantized_operand(l, GemmRole::Wgrad, 1),
                                qk = kernels.quantized_operand(l, GemmRole::Wgrad, 1);
          REQUIRE(qa.codes == qk.codes);
          REQUIRE(qa.scale_codes == qk.scale_codes);
        }
      }
      const MlpState<float> sg = graph.state(), sk = kernels.state();
      CHECK(sg.w == sk.w);
      CHECK(sg.m1 == sk.m1);
      CHECK(sg.m2 == sk.m2);
      CHECK(sg.w != init_state<float>(s).w);
      // The NVFP4 layers' weight quantizations ran beside X's: the graph has parallel branches.
      const cuda::GraphShape shape = graph.graph_shape();
      INFO(shape.text());
      CHECK(shape.captured());
      CHECK(shape.critical_path < shape.work_nodes());
      CHECK(!kernels.graph_shape().captured());
    }
}

TEST_CASE("gpu mlp: graph_shape counts a captured graph's nodes and its critical path", "[gpu][mlp]") {
  // A memset, then two on a side stream beside one on the main stream, then one after both:
  // five memsets, and the longest chain (first, side, side, last) holds four.
  cudaStream_t main_s = nullptr, side = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&main_s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t fork = nullptr, join = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 1024) == cudaSuccess);
  char* b = static_cast<char*>(p);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamBeginCapture(main_s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(cudaMemsetAsync(b, 1, 64, main_s) == cudaSuccess);
  CHECK(cudaEventRecord(fork, main_s) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
  CHECK(cudaMemsetAsync(b + 64, 2, 64, side) == cudaSuccess);
  CHECK(cudaMemsetAsync(b + 128, 3, 64, side) == cudaSuccess);
  CHECK(cudaEventRecord(join, side) == cudaSuccess);
  CHECK(cudaMemsetAsync(b + 192, 4, 64, main_s) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(main_s, join, 0) == cudaSuccess);
  CHECK(cudaMemsetAsync(b + 256, 5, 64, main_s) == cudaSuccess);
  REQUIRE(cudaStreamEndCapture(main_s, &g) == cudaSuccess);
  const cuda::GraphShape shape = cuda::graph_shape(g);
  INFO(shape.text());
  CHECK(shape.memsets == 5);
  CHECK(shape.kernels == 0);
  CHECK(shape.copies == 0);
  CHECK(shape.critical_path == 4);
  CHECK(shape.text() == "5 nodes: 0 kernels, 5 memsets, 0 copies; critical path 4");
  cudaGraphDestroy(g);
  cudaFree(p);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  cudaStreamDestroy(side);
  cudaStreamDestroy(main_s);
}

TEST_CASE("gpu mlp: with the sm90 accumulator the resident run is the CPU run bit for bit", "[gpu][mlp]") {
  // Every resident recipe, with each task, activation and optimizer somewhere among them; the
  // paper's recipe for a few hundred steps. A difference is reported at the first step whose
  // loss, lost-update counts or weights differ.
  struct Case {
    std::string recipe;
    std::vector<int> edges;
    std::string task;
    Activation act;
    Optimizer optimizer;
    int steps;
  };
  const std::vector<Case> cases = {
      {"nvfp4", {0}, "regression", Activation::Relu, Optimizer::Sgd, 300},
      {"nvfp4", {}, "classification", Activation::Gelu, Optimizer::AdamW, 300},
      {"nvfp4-no-sr", {}, "regression", Activation::Gelu, Optimizer::Sgd, 60},
      {"nvfp4-no-rht", {}, "classification", Activation::Relu, Optimizer::AdamW, 60},
      {"nvfp4-no-2d", {0}, "regression", Activation::Relu, Optimizer::AdamW, 60},
      {"nvfp4-sr8", {}, "classification", Activation::Gelu, Optimizer::Sgd, 60},
      {"nvfp4-sr-exact", {0}, "regression", Activation::Gelu, Optimizer::AdamW, 60},
      {"nvfp4-plain", {}, "classification", Activation::Relu, Optimizer::Sgd, 60},
      {"bf16", {}, "classification", Activation::Gelu, Optimizer::AdamW, 100},
      {"fp32", {}, "regression", Activation::Gelu, Optimizer::Sgd, 100},
  };
  for (const Case& c : cases) {
    MlpSpec s = small_model();
    s.task = c.task;
    s.activation = c.act;
    s.optimizer = c.optimizer;
    if (c.optimizer == Optimizer::AdamW) s.lr = 1e-3, s.weight_decay = 0.01;
    RecipeGemmOptions opt = recipe(c.recipe, c.edges);
    opt.accumulator = Accumulator::Sm90;
    cuda::MlpCudaTrainer gpu(s, opt, init_state<float>(s));
    RecipeGemm rg(opt, static_cast<int>(s.widths.size() - 1));
    MlpState<float> cpu = init_state<float>(s);
    INFO(c.recipe << " " << c.task << ": " << gpu.path(1));
    // Each side's time, printed per recipe: where a device call's minutes go.
    double gpu_s = 0, cpu_s = 0;
    const auto timed = [](double& total, auto&& f) {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = f();
      total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return r;
    };
    for (std::int64_t step = 0; step < c.steps; ++step) {
      const StepStats g = timed(gpu_s, [&] { return gpu.step(make_batch(s, step)); });
      const StepStats h = timed(cpu_s, [&] { return train_step<float>(s, cpu, rg.fn()); });
      INFO("step " << step << ": loss gpu " << g.loss << ", cpu " << h.loss);
      REQUIRE(std::memcmp(&g.loss, &h.loss, sizeof(double)) == 0);
      REQUIRE(g.lost_update_fraction == h.lost_update_fraction);
      if (step % 25 == 0 || step + 1 == c.steps) {
        const MlpState<float> gs = gpu.state();
        REQUIRE(gs.w == cpu.w);
        REQUIRE(gs.m1 == cpu.m1);
        REQUIRE(gs.m2 == cpu.m2);
      }
    }
    // The runs trained (the equality is not that of two untouched initialisations).
    CHECK(cpu.w != init_state<float>(s).w);
    std::printf("sm90 mlp %s %s: %d steps bit for bit (gpu %.1f s, cpu %.1f s)\n", c.recipe.c_str(), c.task.c_str(),
                c.steps, gpu_s, cpu_s);
    std::fflush(stdout);
  }
}
