// The checkpoint of an mlp run in progress, OUT.ckpt (schema fp4drift.checkpoint,
// docs/trace-format.md and docs/reliability.md), and the layout of the run's states that it
// shares with the finished trace's /mlp/checkpoint group. The only code that knows either.
//
// A checkpoint lives in a file of its own beside the trace, replaced whole at every flush:
// written as OUT.ckpt.partial, fsynced, renamed over the old one (atomic on POSIX), the
// directory fsynced. A process killed at any instant therefore leaves the previous checkpoint
// or the new one, never a mix. (HDF5 1.10 rewrites a file in place, so a checkpoint kept
// inside the trace could be torn by a kill during a flush and still read as valid.)
// The caller syncs the rows - in the trace and in its journal OUT.rows (trace/row_journal.hpp)
// - before it writes the checkpoint that counts them; the checkpoint carries what a resume
// must find again: the run id, the config's digest, the step, the row counts, a digest of
// every dataset's rows up to them, the journal's length and digest, and a digest of its own
// states.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/mlp_spec.hpp"
#include "trace/h5.hpp"
#include "util/digest.hpp"

namespace fp4d {

// Raised when a trace cannot be proven consistent with its checkpoint: nothing is changed.
struct ResumeRefused : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The files beside a run's trace while it is not complete.
std::string checkpoint_path(const std::string& trace);  // OUT.ckpt
std::string journal_path(const std::string& trace);     // OUT.rows

struct CheckpointMark {
  std::string run_id;
  std::uint64_t config_digest = 0;
  std::int64_t step = 0;
  std::uint64_t records = 0, compares = 0;
  std::map<std::string, std::uint64_t> digests;  // dataset path -> digest of its rows
  std::uint64_t journal_length = 0, journal_digest = 0;
};

// FNV-1a 64 of a config's text: a checkpoint is only resumed with the config it was made with.
std::uint64_t text_digest(const std::string& text);

// Every state of the run under g: reference_{w,m1,m2}_l and run_r_{w,m1,m2}_l (float32; a
// reference wider than double as its limbs, sim/mlp_precision.hpp). The digest, when given,
// runs over the values exactly as stored. Ref: double, mlp_binary128, mlp_mp256.
template <class Ref>
void write_run_states(h5::Group g, const MlpState<Ref>& ref, const std::vector<MlpState<float>>& runs,
                      Fnv1a64* digest = nullptr);

// Writes OUT.ckpt (replacing the previous one as described above).
template <class Ref>
void write_checkpoint(const std::string& trace_path, const CheckpointMark& m, const MlpState<Ref>& ref,
                      const std::vector<MlpState<float>>& runs);

// Reads OUT.ckpt into ref and runs (their shapes given by the model), or refuses: ResumeRefused
// naming what is missing or fails its digest; std::invalid_argument when the config differs.
template <class Ref>
CheckpointMark read_checkpoint(const std::string& trace_path, const std::string& config_text, MlpState<Ref>& ref,
                               std::vector<MlpState<float>>& runs);

}  // namespace fp4d
