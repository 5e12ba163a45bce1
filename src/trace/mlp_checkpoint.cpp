#include "trace/mlp_checkpoint.hpp"

#include "sim/mlp_precision.hpp"

namespace fp4d {

namespace {

template <class T>
void write_mlp_state(h5::Group g, const std::string& prefix, const MlpState<T>& s, Fnv1a64* digest) {
  write_state_list(g, prefix + "_w", s.w, digest);
  write_state_list(g, prefix + "_m1", s.m1, digest);
  if (!s.m2.empty()) write_state_list(g, prefix + "_m2", s.m2, digest);
}

// In write_mlp_state's order, which the digest follows (SGD has no m2).
template <class T>
void read_mlp_state(h5::Group g, const std::string& prefix, MlpState<T>& s, Fnv1a64* digest) {
  read_state_list(g, prefix + "_w", s.w, digest);
  read_state_list(g, prefix + "_m1", s.m1, digest);
  read_state_list(g, prefix + "_m2", s.m2, digest);
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
  write_checkpoint_file(trace_path, m, [&](h5::Group g, Fnv1a64* d) { write_run_states(g, ref, runs, d); });
}

template <class Ref>
CheckpointMark read_checkpoint(const std::string& trace_path, const std::string& config_text, MlpState<Ref>& ref,
                               std::vector<MlpState<float>>& runs) {
  return read_checkpoint_file(trace_path, config_text, [&](h5::Group g, Fnv1a64* d) {
    read_mlp_state(g, "reference", ref, d);
    for (std::size_t r = 0; r < runs.size(); ++r) read_mlp_state(g, "run_" + std::to_string(r), runs[r], d);
  });
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
