#include "trace/token_file.hpp"

#include <filesystem>
#include <stdexcept>

#include "format/philox.hpp"
#include "util/checked_size.hpp"

namespace fp4d {

namespace {

constexpr std::uint32_t kFileTag = 0x46494cu;  // "FIL": window offsets
constexpr std::uint32_t kLmTag = 0x4c4d0000u;  // "LM", as the synthetic source's keys

std::string quoted(const TensorSource& src) { return "token file '" + src.text() + "'"; }

}  // namespace

TensorSource parse_token_source(const std::string& s) {
  if (s.find(":/") == std::string::npos) {
    if (s.empty()) throw std::invalid_argument("token file name is empty");
    return TensorSource{s, kDefaultTokenDataset};
  }
  return parse_tensor_source(s);
}

TokenData read_token_file(const TensorSource& src, std::int64_t vocab) {
  if (vocab < 1 || vocab > (std::int64_t{1} << 31))
    throw std::invalid_argument("lm: vocab must be in [1, 2^31] (got " + std::to_string(vocab) + ")");
  h5::File f = h5::File::open_read(src.file);
  const h5::Group root = f.root();
  if (!root.is_dataset(src.dataset))
    throw std::invalid_argument("dataset '" + src.dataset + "' not found in '" + src.file + "'");
  const h5::Dataset d = root.open_dataset(src.dataset);
  const h5::DatasetInfo info = d.info();
  const bool unsigned_int = info.type_class == h5::TypeClass::Integer && !info.is_signed;
  if (!unsigned_int || (info.element_size != 2 && info.element_size != 4))
    throw std::invalid_argument(quoted(src) + " is " + info.type_name + ", expected uint16 or uint32");
  if (info.dims.size() != 1)
    throw std::invalid_argument(quoted(src) + " has rank " + std::to_string(info.dims.size()) +
                                ", expected a 1-D array of token ids");
  if (info.dims[0] == 0) throw std::invalid_argument(quoted(src) + " is empty");
  if (info.dims[0] > static_cast<std::uint64_t>(kMaxTensorElements))
    throw SizeError(quoted(src) + " holds " + std::to_string(info.dims[0]) + " ids, over the limit of " +
                    kMaxTensorElementsText);
  TokenData out;
  out.source = src.text();
  out.bits = static_cast<int>(8 * info.element_size);
  out.ids = d.read<std::uint32_t>();  // uint16 widens exactly
  const auto v = static_cast<std::uint64_t>(vocab);
  for (std::size_t i = 0; i < out.ids.size(); ++i)
    if (out.ids[i] >= v)
      throw std::invalid_argument(quoted(src) + ": id " + std::to_string(out.ids[i]) + " at position " +
                                  std::to_string(i) + " is >= vocab " + std::to_string(vocab));
  return out;
}

TokenBatch make_file_batch(const TokenData& tokens, std::int64_t batch_index, std::int64_t batch,
                           std::int64_t seq_len, std::uint64_t seed) {
  if (batch_index < 0) throw std::invalid_argument("lm: batch_index must be >= 0 (got " + std::to_string(batch_index) + ")");
  if (batch < 1 || batch > (std::int64_t{1} << 32))
    throw std::invalid_argument("lm: batch must be in [1, 2^32] (got " + std::to_string(batch) + ")");
  if (seq_len < 1) throw std::invalid_argument("lm: seq_len must be >= 1 (got " + std::to_string(seq_len) + ")");
  const auto size = static_cast<std::int64_t>(tokens.ids.size());
  if (size < seq_len + 1)
    throw std::invalid_argument("token file '" + tokens.source + "' has " + std::to_string(size) +
                                " tokens, fewer than seq_len + 1 = " + std::to_string(seq_len + 1));
  const std::int64_t total = checked_mul(batch, seq_len + 1, "lm: batch x (seq_len + 1) token ids");
  if (total > kMaxTensorElements)
    throw SizeError("lm: batch x (seq_len + 1) = " + std::to_string(total) + " token ids, over the limit of " +
                    kMaxTensorElementsText);
  const Philox4x32 kc = philox4x32_10(Philox4x32{{kFileTag, kLmTag, 0u, 0u}}, static_cast<std::uint32_t>(seed),
                                      static_cast<std::uint32_t>(seed >> 32));
  const auto starts = static_cast<unsigned __int128>(size - seq_len);  // offsets 0 .. size - seq_len - 1
  const auto bi = static_cast<std::uint64_t>(batch_index);
  TokenBatch out;
  out.batch = batch;
  out.seq_len = seq_len;
  out.ids.resize(static_cast<std::size_t>(total));
  for (std::int64_t r = 0; r < batch; ++r) {
    const Philox4x32 c = philox4x32_10(
        Philox4x32{{static_cast<std::uint32_t>(r), 0u, static_cast<std::uint32_t>(bi), static_cast<std::uint32_t>(bi >> 32)}},
        kc.v[0], kc.v[1]);
    const std::uint64_t w = (static_cast<std::uint64_t>(c.v[0]) << 32) | c.v[1];
    const auto o = static_cast<std::size_t>((w * starts) >> 64);
    std::int32_t* dst = out.row(r);
    for (std::int64_t t = 0; t <= seq_len; ++t) dst[t] = static_cast<std::int32_t>(tokens.ids[o + static_cast<std::size_t>(t)]);
  }
  return out;
}

void write_token_file(const std::string& path, const std::string& dataset, const std::vector<std::int32_t>& ids,
                      int bits) {
  if (bits != 16 && bits != 32)
    throw std::invalid_argument("token file '" + path + ":" + dataset + "': bits must be 16 or 32 (got " +
                                std::to_string(bits) + ")");
  if (ids.empty()) throw std::invalid_argument("token file '" + path + ":" + dataset + "': no ids to write");
  const std::int64_t limit = std::int64_t{1} << bits;
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= limit)
      throw std::invalid_argument("token file '" + path + ":" + dataset + "': id " + std::to_string(ids[i]) +
                                  " at position " + std::to_string(i) + " does not fit uint" + std::to_string(bits));
  h5::File f = std::filesystem::exists(path) ? h5::File::open_rw(path) : h5::File::create(path);
  h5::Group root = f.root();
  const h5::Dims dims{ids.size()};
  if (bits == 16) {
    const std::vector<std::uint16_t> v(ids.begin(), ids.end());
    root.write(dataset, v, dims);
  } else {
    const std::vector<std::uint32_t> v(ids.begin(), ids.end());
    root.write(dataset, v, dims);
  }
  f.close();
}

}  // namespace fp4d
