// step_graph.hpp: begin, enqueue, end, measure, instantiate; the captured graph freed on every path.
#include "backend/cuda/step_graph.hpp"

#include <stdexcept>

#include "backend/cuda/cuda_util.cuh"

namespace fp4d::cuda {

cudaGraphExec_t capture_step_graph(cudaStream_t stream, const std::function<void()>& enqueue, GraphShape* shape,
                                   const std::string& what) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  try {
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      enqueue();
    } catch (...) {
      cudaStreamEndCapture(stream, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    check(cudaStreamEndCapture(stream, &g), "cudaStreamEndCapture");
    GraphShape s;
    try {
      s = graph_shape(g);
      check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
    } catch (...) {
      cudaGraphDestroy(g);
      throw;
    }
    cudaGraphDestroy(g);
    *shape = s;
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string(e.what()) + " (capturing " + what + " as a CUDA graph)");
  }
  return exec;
}

}  // namespace fp4d::cuda
