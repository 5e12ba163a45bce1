// A resident training step captured as one CUDA graph (mlp.cu, lm.cu): what a step enqueues on
// its stream, and on the streams it forks from it, recorded once and instantiated for replay.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "backend/cuda/graph_shape.hpp"

namespace fp4d::cuda {

// Captures enqueue()'s work on `stream` (thread-local capture mode: other threads' runs keep
// launching meanwhile), fills *shape and returns the instantiated graph. Throws
// std::runtime_error "CUDA error in ... (capturing WHAT as a CUDA graph)" and leaves no graph
// behind; an exception from enqueue() ends the capture and propagates.
cudaGraphExec_t capture_step_graph(cudaStream_t stream, const std::function<void()>& enqueue, GraphShape* shape,
                                   const std::string& what);

}  // namespace fp4d::cuda
