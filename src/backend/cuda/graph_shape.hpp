// The shape of a captured CUDA graph, for the resident steps' benchmarks: a small model's step
// is bound by its chain of tiny kernels, so the number of work nodes and the longest chain of
// them (what a replay must run one after another) say where its time goes. Plain C++ header
// (the trainers' public headers include it): the graph type is declared, not included.
#pragma once

#include <string>

struct CUgraph_st;  // cudaGraph_t is CUgraph_st* (driver_types.h)

namespace fp4d::cuda {

struct GraphShape {
  int kernels = 0, memsets = 0, copies = 0, other = 0;  // other: event, empty and host nodes
  int critical_path = 0;  // work nodes (kernels, memsets, copies) on the longest dependency chain
  int work_nodes() const { return kernels + memsets + copies; }
  bool captured() const { return work_nodes() + other > 0; }
  // "62 nodes: 48 kernels, 8 memsets, 6 copies; critical path 52"
  std::string text() const;
};

// Throws std::runtime_error naming the failed CUDA call.
GraphShape graph_shape(CUgraph_st* graph);

}  // namespace fp4d::cuda
