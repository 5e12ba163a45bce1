// graph_shape.hpp: node kinds by cudaGraphNodeGetType, the critical path by a topological walk
// (Kahn's algorithm) over cudaGraphGetEdges.
#include "backend/cuda/graph_shape.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace fp4d::cuda {

namespace {

void check_graph(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace

std::string GraphShape::text() const {
  const int nodes = kernels + memsets + copies + other;
  std::string s = std::to_string(nodes) + " nodes: " + std::to_string(kernels) + " kernels, " +
                  std::to_string(memsets) + " memsets, " + std::to_string(copies) + " copies";
  if (other) s += ", " + std::to_string(other) + " other";
  return s + "; critical path " + std::to_string(critical_path);
}

GraphShape graph_shape(cudaGraph_t graph) {
  static_assert(std::is_same_v<cudaGraph_t, CUgraph_st*>);
  std::size_t n = 0;
  check_graph(cudaGraphGetNodes(graph, nullptr, &n), "cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> nodes(n);
  if (n) check_graph(cudaGraphGetNodes(graph, nodes.data(), &n), "cudaGraphGetNodes");
  std::unordered_map<cudaGraphNode_t, std::size_t> index;
  GraphShape s;
  std::vector<int> weight(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    index[nodes[i]] = i;
    cudaGraphNodeType t{};
    check_graph(cudaGraphNodeGetType(nodes[i], &t), "cudaGraphNodeGetType");
    switch (t) {
      case cudaGraphNodeTypeKernel: ++s.kernels, weight[i] = 1; break;
      case cudaGraphNodeTypeMemset: ++s.memsets, weight[i] = 1; break;
      case cudaGraphNodeTypeMemcpy: ++s.copies, weight[i] = 1; break;
      default: ++s.other; break;
    }
  }
  std::size_t e = 0;
  check_graph(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &e), "cudaGraphGetEdges");
  std::vector<cudaGraphNode_t> from(e), to(e);
  std::vector<cudaGraphEdgeData> data(e);
  if (e) check_graph(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &e), "cudaGraphGetEdges");
  std::vector<std::vector<std::size_t>> next(n);
  std::vector<int> pending(n, 0);
  for (std::size_t k = 0; k < e; ++k) {
    next[index.at(from[k])].push_back(index.at(to[k]));
    ++pending[index.at(to[k])];
  }
  // depth[i]: work nodes on the longest chain ending at node i.
  std::vector<int> depth(weight);
  std::vector<std::size_t> ready;
  for (std::size_t i = 0; i < n; ++i)
    if (pending[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    const std::size_t i = ready.back();
    ready.pop_back();
    s.critical_path = std::max(s.critical_path, depth[i]);
    for (const std::size_t j : next[i]) {
      depth[j] = std::max(depth[j], depth[i] + weight[j]);
      if (--pending[j] == 0) ready.push_back(j);
    }
  }
  return s;
}

}  // namespace fp4d::cuda
