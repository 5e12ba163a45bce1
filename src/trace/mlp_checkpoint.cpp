#include "trace/mlp_checkpoint.hpp"

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

namespace {

// float and double as themselves; a wider reference scalar as limbs<T>() doubles per value
// ([n, K], exact: sim/mlp_precision.hpp).
template <class T>
void write_state(h5::Group g, const std::string& prefix, const std::vector<std::vector<T>>& v, Fnv1a64* digest) {
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
std::vector<T> read_state(h5::Group g, const std::string& name, Fnv1a64* digest) {
  if constexpr (std::is_floating_point_v<T>) {
    std::vector<T> v = g.read<T>(name);
    if (digest) digest->add(v);
    return v;
  } else {
    const std::vector<double> d = g.read<double>(name);
    if (digest) digest->add(d);
    return from_limbs<T>(d, "checkpoint " + name);
  }
}
template <class T>
void write_mlp_state(h5::Group g, const std::string& prefix, const MlpState<T>& s, Fnv1a64* digest) {
  write_state(g, prefix + "_w", s.w, digest);
  write_state(g, prefix + "_m1", s.m1, digest);
  if (!s.m2.empty()) write_state(g, prefix + "_m2", s.m2, digest);
}
template <class T>
void read_mlp_state(h5::Group g, const std::string& prefix, MlpState<T>& s, Fnv1a64* digest) {
  const auto read = [&](const std::string& name, std::vector<T>& into) {
    std::vector<T> v = read_state<T>(g, name, digest);
    if (v.size() != into.size())
      throw std::invalid_argument(name + " holds " + std::to_string(v.size()) + " values, the model needs " +
                                  std::to_string(into.size()));
    into = std::move(v);
  };
  // In write_mlp_state's order, which the digest follows.
  for (std::size_t l = 0; l < s.w.size(); ++l) read(prefix + "_w_" + std::to_string(l), s.w[l]);
  for (std::size_t l = 0; l < s.m1.size(); ++l) read(prefix + "_m1_" + std::to_string(l), s.m1[l]);
  for (std::size_t l = 0; l < s.m2.size(); ++l) read(prefix + "_m2_" + std::to_string(l), s.m2[l]);
}

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

template <class Ref>
void write_run_states(h5::Group g, const MlpState<Ref>& ref, const std::vector<MlpState<float>>& runs, Fnv1a64* digest) {
  write_mlp_state(g, "reference", ref, digest);
  for (std::size_t r = 0; r < runs.size(); ++r) write_mlp_state(g, "run_" + std::to_string(r), runs[r], digest);
}

template <class Ref>
void write_checkpoint(const std::string& trace_path, const CheckpointMark& m, const MlpState<Ref>& ref,
                      const std::vector<MlpState<float>>& runs) {
  h5::AtomicOutput out(checkpoint_path(trace_path));
  h5::File f = h5::File::create(out.temp_path());
  h5::Group g = f.root();
  Fnv1a64 states;
  write_run_states(g, ref, runs, &states);
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

template <class Ref>
CheckpointMark read_checkpoint(const std::string& trace_path, const std::string& config_text, MlpState<Ref>& ref,
                               std::vector<MlpState<float>>& runs) {
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
    read_mlp_state(g, "reference", ref, &states);
    for (std::size_t r = 0; r < runs.size(); ++r) read_mlp_state(g, "run_" + std::to_string(r), runs[r], &states);
    if (states.value() != g.get_attr_uint64("state_digest")) throw ResumeRefused("the states in " + p + " fail their checksum");
    read_mark(g, p, m);
  } catch (const std::invalid_argument&) {  // ResumeRefused, or the config
    throw;
  } catch (const std::exception& e) {  // unreadable, a missing dataset or attribute, a wrong shape
    throw ResumeRefused("its checkpoint cannot be read (" + std::string(e.what()) + ")");
  }
  return m;
}

#define FP4D_CHECKPOINT_FOR(Ref)                                                                                   \
  template void write_run_states<Ref>(h5::Group, const MlpState<Ref>&, const std::vector<MlpState<float>>&,      \
                                      Fnv1a64*);                                                                 \
  template void write_checkpoint<Ref>(const std::string&, const CheckpointMark&, const MlpState<Ref>&,           \
                                      const std::vector<MlpState<float>>&);                                      \
  template CheckpointMark read_checkpoint<Ref>(const std::string&, const std::string&, MlpState<Ref>&,           \
                                               std::vector<MlpState<float>>&);
FP4D_CHECKPOINT_FOR(double)
FP4D_CHECKPOINT_FOR(mlp_binary128)
FP4D_CHECKPOINT_FOR(mlp_mp256)
#undef FP4D_CHECKPOINT_FOR

}  // namespace fp4d
