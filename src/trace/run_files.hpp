// The files of a long run (the mlp's, the lm's) from creation to completion: the trace OUT,
// its checkpoint OUT.ckpt (trace/run_checkpoint.hpp) and its journal OUT.rows
// (trace/row_journal.hpp). One lifecycle for every workload, so that a newly created run is
// either whole or absent, and a resumed one either verified or refused unchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "trace/row_journal.hpp"
#include "trace/run_checkpoint.hpp"
#include "trace/h5.hpp"

namespace fp4d {

void remove_run_files(const std::string& trace, std::initializer_list<const char*> suffixes);
// std::invalid_argument "output directory '...' does not exist" unless the trace's directory does.
void require_output_directory(const std::string& trace);
void sync_directory_of(const std::string& path);
std::string new_run_id();  // 16 hex digits from std::random_device

// A new run's files: the trace made as OUT.partial (create_trace(partial path, run id)) with
// its journal and step-0 checkpoint (write_checkpoint(mark)), and only then named OUT: a
// process killed while creating it leaves no OUT, and the next run starts over. A failed
// creation leaves nothing behind.
void create_run_files(const std::string& trace, const std::string& config_text,
                      const std::function<void(const std::string&, const std::string&)>& create_trace,
                      const std::function<void(const CheckpointMark&)>& write_checkpoint);

// Makes `trace` anew for a resume that found it torn: `fill` writes the new file (given as
// trace.partial, created in the SWMR format; it syncs what it wrote), which then replaces the old one and the
// directory is synced.
void replace_trace_file(const std::string& trace, const std::function<void(h5::File)>& fill);

// Whether the run trace at `path` says it is complete (false when it cannot be read: the
// caller's own checks say why).
bool run_trace_is_complete(const std::string& path);

// A complete trace with its run's checkpoint or journal still beside it: the run was killed after
// it closed the trace and before remove_resume_files. Finishes that (the trace synced, then
// both removed) and returns true; returns false, changing nothing, where the trace is not
// complete or nothing is beside it. What a --resume of a complete run and a sweep that finds
// one do, so that a complete run never keeps files that look like an unfinished one.
bool remove_leftovers_of_complete_run(const std::string& trace);
// A --resume of the complete run `path`: removes its leftovers, then throws std::invalid_argument
// "--resume: PATH is complete" (saying so when it removed any).
[[noreturn]] void throw_complete(const std::string& path);

// Opens a run trace to continue it: std::invalid_argument when it is not an fp4drift run trace
// of `workload`, was started with another config, is complete, or has no run id.
h5::File open_run_trace(const std::string& path, const std::string& workload, const std::string& config_text);

// The journal as the checkpoint counts it, or ResumeRefused.
RowJournal reopen_journal(const std::string& trace, const CheckpointMark& mark);

// The trace, holding the rows its checkpoint counts and none after them. Where it does not
// hold them (a kill or a full disk tore it mid-flush), it is rebuilt from the journal; where
// the journal cannot vouch for them either, the resume is refused and nothing is changed.
// Trace: open() -> Trace (std::invalid_argument for a trace of another run or config),
// Trace::run_id(), Trace::verify_and_truncate(mark); rebuild() makes OUT anew from the journal.
template <class Trace, class Open, class Rebuild>
Trace open_verified_trace(const std::string& trace, const CheckpointMark& mark, Open open, Rebuild rebuild,
                          const std::function<void(const std::string&)>& note) {
  std::string damage;
  try {
    Trace t = open();
    if (t.run_id() != mark.run_id)
      throw std::invalid_argument("--resume: " + checkpoint_path(trace) + " belongs to another run than " + trace);
    t.verify_and_truncate(mark);
    return t;
  } catch (const ResumeRefused& e) {
    damage = e.what();
  } catch (const h5::Error& e) {
    damage = e.what();
  }
  rebuild();
  if (note) note("the trace was damaged (" + damage + "); rebuilt it from its journal up to step " + std::to_string(mark.step));
  Trace t = open();
  t.verify_and_truncate(mark);
  return t;
}

// A flush point: the staged rows committed and made durable (journal, then trace), and the mark
// of a checkpoint that counts them at `step` (the caller writes it with the states). Trace:
// commit(journal), sync(), records(), compares(), digests().
template <class Trace>
CheckpointMark commit_durably(Trace& trace, RowJournal& journal, const CheckpointMark& base, std::int64_t step) {
  trace.commit(journal);
  journal.sync();
  trace.sync();
  CheckpointMark m = base;
  m.step = step;
  m.records = trace.records();
  m.compares = trace.compares();
  m.digests = trace.digests();
  m.journal_length = journal.length();
  m.journal_digest = journal.digest();
  return m;
}

// A stop (SIGINT/SIGTERM): every staged row reaches the trace and the journal, status
// "interrupted" (a resume drops the rows after the checkpoint).
template <class Trace>
void mark_interrupted(Trace& trace, RowJournal& journal) {
  trace.commit(journal);
  journal.sync();
  trace.set_status("interrupted");
  trace.sync();
}

// A complete run needs its checkpoint and journal no more: the closed trace synced (what its
// close wrote), then both removed and the directory synced.
void remove_resume_files(const std::string& trace);

// How far a run got, for its error path: the step of the checkpoint on disk, and whether any
// step was taken (a fresh run that fails before its first step made nothing worth keeping).
struct RunProgress {
  std::int64_t durable_step = 0;
  bool stepped = false;
};

// Steps a run whose files exist (body()), and on failure leaves them as a user can act on: a
// full disk marks the trace "failed" and says what it keeps and how to continue; a fresh run
// that fails before its first step (a trainer, a GEMM workspace) is removed as if never
// created; anything else marks the trace "failed". The exception goes on.
template <class Trace, class Body>
auto run_guarded(Trace& trace, const std::string& path, bool resume, const RunProgress& progress, Body body)
    -> decltype(body()) {
  const auto mark_failed = [&] {
    try {
      trace.set_status("failed");
      trace.flush();
    } catch (...) {
    }
  };
  try {
    return body();
  } catch (const h5::DiskFull& e) {
    mark_failed();
    throw h5::DiskFull(std::string(e.what()) + "; " + path + " keeps every step up to its checkpoint at step " +
                       std::to_string(progress.durable_step) + ": free some space and continue with --resume");
  } catch (...) {
    if (!resume && !progress.stepped) {
      try {
        trace.close();
      } catch (...) {
      }
      remove_run_files(path, {"", ".ckpt", ".rows"});
      throw;
    }
    mark_failed();
    throw;
  }
}

// A refused resume as one line: what was refused, that nothing changed, what to do instead.
[[noreturn]] void rethrow_resume_refused(const std::string& path, const ResumeRefused& e);

}  // namespace fp4d
