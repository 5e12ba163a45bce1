// User token files for the `lm` workload: a 1-D uint16 or uint32 HDF5 dataset of token ids
// ("tokens.h5:/train"; a bare "tokens.h5" means the dataset /train), read whole, and batches
// of windows cut from it at offsets that are a pure function of (seed, batch index, row), so a
// run resumes bit-exactly without data state, as with the synthetic source.
//
// Only the two unsigned widths tokenizers write are accepted: a signed or wider type would
// leave it unclear whether negative or huge values are ids, and a float would not be ids at
// all. Every id is checked against the model's vocab once, at reading, so a bad file fails
// before training with the position of its first bad id rather than as an out-of-range
// embedding lookup.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/tensor_io.hpp"
#include "trace/token_batch.hpp"

namespace fp4d {

inline constexpr const char* kDefaultTokenDataset = "/train";

// "file.h5:/path" as parse_tensor_source; a string without ":/" is a file whose dataset is
// /train. std::invalid_argument for an empty file name.
TensorSource parse_token_source(const std::string& s);

struct TokenData {
  std::vector<std::uint32_t> ids;  // every id < vocab (held as uint32 whatever the file's width)
  std::string source;              // "file.h5:/train", for messages
  int bits = 0;                    // the file's width: 16 or 32
};

// Reads the whole dataset. std::invalid_argument with a one-line message naming the file and
// dataset when it is missing, not 1-D, empty, not uint16/uint32 (naming the type), or holds
// an id >= vocab (naming the first such position and value); vocab must be in [1, 2^31].
// h5::Error when the file cannot be opened or read.
TokenData read_token_file(const TensorSource& src, std::int64_t vocab);

// batch x (seq_len + 1) ids: row r is the window tokens.ids[o, o + seq_len + 1) with o uniform
// over [0, size - seq_len - 1] (Philox of (seed, batch_index, r); bias below size / 2^64).
// std::invalid_argument when the file has fewer than seq_len + 1 tokens (naming it), for
// batch_index < 0, batch outside [1, 2^32] or seq_len < 1.
TokenBatch make_file_batch(const TokenData& tokens, std::int64_t batch_index, std::int64_t batch,
                           std::int64_t seq_len, std::uint64_t seed);

// Writes ids as a 1-D dataset of uint16 (bits = 16) or uint32 (bits = 32), compressed: into a
// new file, or beside the datasets of an existing one (h5::Error if the dataset exists).
// std::invalid_argument for other bits or an id outside [0, 2^bits) (naming its position).
void write_token_file(const std::string& path, const std::string& dataset, const std::vector<std::int32_t>& ids,
                      int bits);

}  // namespace fp4d
