// A batch of token sequences, the unit both token sources of the `lm` workload produce (the
// synthetic one, sim/token_source.hpp, and user files, trace/token_file.hpp). It lives in the
// trace layer so that both can return it without the file reader depending on sim/.
//
// Every row holds seq_len + 1 ids: the model's inputs are ids [0, seq_len), its targets
// ids [1, seq_len] of the same row (next-token prediction), so one array serves both.
#pragma once

#include <cstdint>
#include <vector>

namespace fp4d {

struct TokenBatch {
  std::int64_t batch = 0;          // rows
  std::int64_t seq_len = 0;        // inputs (= targets) per row
  std::vector<std::int32_t> ids;   // batch x (seq_len + 1), row-major

  std::int64_t width() const noexcept { return seq_len + 1; }
  const std::int32_t* row(std::int64_t r) const noexcept { return ids.data() + r * width(); }
  std::int32_t* row(std::int64_t r) noexcept { return ids.data() + r * width(); }
  std::int32_t input(std::int64_t r, std::int64_t t) const noexcept { return row(r)[t]; }       // t < seq_len
  std::int32_t target(std::int64_t r, std::int64_t t) const noexcept { return row(r)[t + 1]; }  // t < seq_len
};

}  // namespace fp4d
