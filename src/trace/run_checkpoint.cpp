#include "trace/run_checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <type_traits>

#include "sim/mlp_precision.hpp"

namespace fp4d {

std::string checkpoint_path(const std::string& trace) { return trace + ".ckpt"; }
std::string journal_path(const std::string& trace) { return trace + ".rows"; }

std::uint64_t text_digest(const std::string& text) {
  Fnv1a64 d;
  d.add(text.data(), text.size());
  return d.value();
}

template <class T>
void write_state_list(h5::Group g, const std::string& prefix, const std::vector<std::vector<T>>& v, Fnv1a64* digest) {
  const h5::WriteOptions replace{false, true};
  for (std::size_t l = 0; l < v.size(); ++l) {
    const std::string name = prefix + "_" + std::to_string(l);
    if constexpr (std::is_floating_point_v<T>) {
      g.write(name, v[l], h5::Dims{v[l].size()}, replace);
      if (digest) digest->add(v[l]);
    } else {
      const std::vector<double> d = to_limbs(v[l], "checkpoint " + name);
      g.write(name, d, h5::Dims{v[l].size(), static_cast<std::uint64_t>(limbs<T>())}, replace);
      if (digest) digest->add(d);
    }
  }
}

template <class T>
void read_state_list(h5::Group g, const std::string& prefix, std::vector<std::vector<T>>& into, Fnv1a64* digest) {
  for (std::size_t l = 0; l < into.size(); ++l) {
    const std::string name = prefix + "_" + std::to_string(l);
    std::vector<T> v;
    if constexpr (std::is_floating_point_v<T>) {
      v = g.read<T>(name);
      if (digest) digest->add(v);
    } else {
      const std::vector<double> d = g.read<double>(name);
      if (digest) digest->add(d);
      v = from_limbs<T>(d, "checkpoint " + name);
    }
    if (v.size() != into[l].size())
      throw std::invalid_argument(name + " holds " + std::to_string(v.size()) + " values, the model needs " +
                                  std::to_string(into[l].size()));
    into[l] = std::move(v);
  }
}

namespace {

void read_mark(h5::Group g, const std::string& p, CheckpointMark& m) {
  m.step = g.get_attr_int64("step");
  m.records = g.get_attr_uint64("records");
  m.compares = g.get_attr_uint64("compares");
  const std::string names = g.get_attr_string("record_datasets");
  const std::vector<std::int64_t> values = g.has_attr("record_digests") ? g.get_attr_int64_vector("record_digests") : std::vector<std::int64_t>{};
  std::size_t i = 0;
  for (std::size_t b = 0; b < names.size(); ++i) {
    const std::size_t e = std::min(names.find(',', b), names.size());
    if (i >= values.size()) throw ResumeRefused(p + " lists more datasets than digests");
    m.digests[names.substr(b, e - b)] = static_cast<std::uint64_t>(values[i]);
    b = e + 1;
  }
  if (i != values.size()) throw ResumeRefused(p + " lists fewer datasets than digests");
}

}  // namespace

void write_checkpoint_file(const std::string& trace_path, const CheckpointMark& m, const StateWriter& write_states) {
  h5::AtomicOutput out(checkpoint_path(trace_path));
  h5::File f = h5::File::create(out.temp_path());
  h5::Group g = f.root();
  Fnv1a64 states;
  write_states(g, &states);
  g.set_attr("schema", std::string("fp4drift.checkpoint"));
  g.set_attr("run_id", m.run_id);
  g.set_attr("config_digest", m.config_digest);
  g.set_attr("journal_length", m.journal_length);
  g.set_attr("journal_digest", m.journal_digest);
  g.set_attr("step", m.step);
  g.set_attr("records", m.records);
  g.set_attr("compares", m.compares);
  std::string names;
  std::vector<std::int64_t> values;
  for (const auto& [name, d] : m.digests) {
    names += (names.empty() ? "" : ",") + name;
    values.push_back(static_cast<std::int64_t>(d));
  }
  g.set_attr("record_datasets", names);
  if (!values.empty()) g.set_attr("record_digests", values);
  g.set_attr("state_digest", states.value());
  out.commit(f);
}

CheckpointMark read_checkpoint_file(const std::string& trace_path, const std::string& config_text,
                                    const StateReader& read_states) {
  const std::string p = checkpoint_path(trace_path);
  if (!std::filesystem::exists(p)) throw ResumeRefused("its checkpoint " + p + " is missing");
  CheckpointMark m;
  try {
    h5::File f = h5::File::open_read(p);
    h5::Group g = f.root();
    if (g.get_attr_string("schema") != "fp4drift.checkpoint") throw ResumeRefused(p + " is not an fp4drift checkpoint");
    m.config_digest = g.get_attr_uint64("config_digest");
    if (m.config_digest != text_digest(config_text))
      throw std::invalid_argument("--resume: the config differs from the one " + trace_path +
                                  " was started with (resuming would not continue the same run)");
    m.run_id = g.get_attr_string("run_id");
    m.journal_length = g.get_attr_uint64("journal_length");
    m.journal_digest = g.get_attr_uint64("journal_digest");
    Fnv1a64 states;
    read_states(g, &states);
    if (states.value() != g.get_attr_uint64("state_digest")) throw ResumeRefused("the states in " + p + " fail their checksum");
    read_mark(g, p, m);
  } catch (const std::invalid_argument&) {  // ResumeRefused, or the config
    throw;
  } catch (const std::exception& e) {  // unreadable, a missing dataset or attribute, a wrong shape
    throw ResumeRefused("its checkpoint cannot be read (" + std::string(e.what()) + ")");
  }
  return m;
}

#define FP4D_STATE_LIST_FOR(T)                                                                                  \
  template void write_state_list<T>(h5::Group, const std::string&, const std::vector<std::vector<T>>&, Fnv1a64*); \
  template void read_state_list<T>(h5::Group, const std::string&, std::vector<std::vector<T>>&, Fnv1a64*);
FP4D_STATE_LIST_FOR(float)
FP4D_STATE_LIST_FOR(double)
FP4D_STATE_LIST_FOR(mlp_binary128)
FP4D_STATE_LIST_FOR(mlp_mp256)
#undef FP4D_STATE_LIST_FOR

}  // namespace fp4d
