// The checkpoint of a long run in progress, OUT.ckpt (schema fp4drift.checkpoint,
// docs/trace-format.md and docs/reliability.md): the file-level part every workload shares
// (the mlp's states are trace/mlp_checkpoint.hpp's, the lm's trace/lm_trace.hpp's).
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
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

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

// A workload's states in a checkpoint group: written, or read back into the shapes the model
// gives, in one fixed order that the digest (when given) follows over the values as stored.
using StateWriter = std::function<void(h5::Group, Fnv1a64*)>;
using StateReader = std::function<void(h5::Group, Fnv1a64*)>;

// Writes OUT.ckpt (replacing the previous one as described above).
void write_checkpoint_file(const std::string& trace_path, const CheckpointMark& m, const StateWriter& states);

// Reads OUT.ckpt, its states through `states`, or refuses: ResumeRefused naming what is
// missing or fails its digest; std::invalid_argument when the config differs.
CheckpointMark read_checkpoint_file(const std::string& trace_path, const std::string& config_text,
                                    const StateReader& states);

// One state tensor list as datasets prefix_0, prefix_1, ...: float and double as themselves; a
// wider scalar (sim/mlp_precision.hpp's binary128, mp256) as limbs<T>() doubles per value
// ([n, K], exact). T: float, double, mlp_binary128, mlp_mp256.
template <class T>
void write_state_list(h5::Group g, const std::string& prefix, const std::vector<std::vector<T>>& v, Fnv1a64* digest);
// Reads them into `into`, whose entries already have the model's sizes (std::invalid_argument
// naming the dataset when a size differs).
template <class T>
void read_state_list(h5::Group g, const std::string& prefix, std::vector<std::vector<T>>& into, Fnv1a64* digest);

}  // namespace fp4d
