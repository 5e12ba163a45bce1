// The files of a long run (the mlp's, the lm's) from creation to completion: the trace OUT,
// its checkpoint OUT.ckpt (trace/run_checkpoint.hpp) and its journal OUT.rows
// (trace/row_journal.hpp). One lifecycle for every workload, so that a newly created run is
// either whole or absent, and a resumed one either verified or refused unchanged.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>

#include "trace/row_journal.hpp"
#include "trace/run_checkpoint.hpp"
#include "trace/h5.hpp"

namespace fp4d {

void remove_run_files(const std::string& trace, std::initializer_list<const char*> suffixes);
void sync_directory_of(const std::string& path);
std::string new_run_id();  // 16 hex digits from std::random_device

// A new run's files: the trace made as OUT.partial (create_trace(partial path, run id)) with
// its journal and step-0 checkpoint (write_checkpoint(mark)), and only then named OUT: a
// process killed while creating it leaves no OUT, and the next run starts over. A failed
// creation leaves nothing behind.
void create_run_files(const std::string& trace, const std::string& config_text,
                      const std::function<void(const std::string&, const std::string&)>& create_trace,
                      const std::function<void(const CheckpointMark&)>& write_checkpoint);

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

}  // namespace fp4d
