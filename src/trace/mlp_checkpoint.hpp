// The states of an mlp run in its checkpoint OUT.ckpt (trace/run_checkpoint.hpp: the file,
// its mark and digests) and in the finished trace's /mlp/checkpoint group: one layout, the
// only code that knows it.
#pragma once

#include <string>
#include <vector>

#include "model/mlp_spec.hpp"
#include "trace/h5.hpp"
#include "trace/run_checkpoint.hpp"
#include "util/digest.hpp"

namespace fp4d {

// Every state of the run under g: reference_{w,m1,m2}_l and run_r_{w,m1,m2}_l (float32; a
// reference wider than double as its limbs, sim/mlp_precision.hpp). The digest, when given,
// runs over the values exactly as stored. Ref: double, mlp_binary128, mlp_mp256.
template <class Ref>
void write_run_states(h5::Group g, const MlpState<Ref>& ref, const std::vector<MlpState<float>>& runs,
                      Fnv1a64* digest = nullptr);

// Writes OUT.ckpt (write_checkpoint_file).
template <class Ref>
void write_checkpoint(const std::string& trace_path, const CheckpointMark& m, const MlpState<Ref>& ref,
                      const std::vector<MlpState<float>>& runs);

// Reads OUT.ckpt into ref and runs (their shapes given by the model), or refuses as
// read_checkpoint_file does.
template <class Ref>
CheckpointMark read_checkpoint(const std::string& trace_path, const std::string& config_text, MlpState<Ref>& ref,
                               std::vector<MlpState<float>>& runs);

}  // namespace fp4d
