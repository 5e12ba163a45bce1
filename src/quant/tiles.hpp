// Iteration over the block grid of a stored-orientation matrix: blocks of br x bc elements
// (br = 1 for 1xN blocks; bc = 0 for one block spanning the whole matrix). Tiles of one
// block-row are visited by one thread, so per-tile work needs no synchronisation.
#pragma once

#include <algorithm>
#include <cstdint>

#include "quant/matrix.hpp"
#include "util/parallel_worth.hpp"

namespace fp4d {

struct TileGrid {
  std::int64_t br, bc;             // block shape (bc = cols and br = rows for per-tensor)
  std::int64_t tile_rows, tile_cols;
  std::int64_t padded_cols;        // cols rounded up to bc
  TileGrid(std::int64_t rows, std::int64_t cols, std::int64_t block_rows, std::int64_t block_cols) {
    const bool whole = block_cols == 0;
    br = whole ? std::max<std::int64_t>(rows, 1) : block_rows;
    bc = whole ? std::max<std::int64_t>(cols, 1) : block_cols;
    tile_rows = (rows + br - 1) / br;
    tile_cols = (cols + bc - 1) / bc;
    padded_cols = whole ? cols : tile_cols * bc;
  }
};

// f(tr, tc, r0, r1, c0, c1) for every tile, block-rows in parallel (OpenMP).
template <class F>
void for_each_tile(const Matrix& x, const TileGrid& g, F&& f) {
#pragma omp parallel for schedule(static) if (parallel_worth(x.size()))
  for (std::int64_t tr = 0; tr < g.tile_rows; ++tr) {
    const std::int64_t r0 = tr * g.br, r1 = std::min(x.rows, r0 + g.br);
    for (std::int64_t tc = 0; tc < g.tile_cols; ++tc) {
      const std::int64_t c0 = tc * g.bc, c1 = std::min(x.cols, c0 + g.bc);
      f(tr, tc, r0, r1, c0, c1);
    }
  }
}

template <class F>
float tile_amax(const Matrix& x, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1, F&& absf) {
  float a = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t c = c0; c < c1; ++c) {
      const float t = absf(x(r, c));
      a = t > a ? t : a;  // NaN ignored
    }
  return a;
}

}  // namespace fp4d
