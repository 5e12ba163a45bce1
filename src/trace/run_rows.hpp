// The datasets a long run's trace grows by, row by row (the mlp's and the lm's: one class, so
// that staging, journaling, verification and rebuilding are written once). Each dataset
// follows one of two counts: records (one row per recorded step) or compares (one row per
// comparison with the reference); a checkpoint (trace/run_checkpoint.hpp) stores both counts
// and a digest of every dataset's rows.
//
// Rows reach the file only at commit(), which the run calls at its flush points: between
// flushes the file is not touched, so a process killed outright leaves it exactly as at its
// last flush. Every row committed also goes to the run's journal (trace/row_journal.hpp), from
// which replay() fills a new trace when a resume finds the old one torn.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "model/trainer.hpp"  // OperandRecord
#include "trace/h5.hpp"
#include "trace/row_journal.hpp"
#include "trace/run_checkpoint.hpp"
#include "util/digest.hpp"

namespace fp4d {

class RunRows {
 public:
  enum class Counts { Records, Compares };
  using Id = std::size_t;  // registration order

  // A dataset under root (path relative to it): created empty, or opened to continue a trace.
  Id doubles(h5::Group root, const std::string& path, h5::Dims row, Counts counts, bool create);
  Id ints(h5::Group root, const std::string& path, Counts counts, bool create);

  void stage(Id id, const std::vector<double>& row);
  void stage(Id id, const std::vector<std::int64_t>& row);
  // Appends the staged rows to the file and to the journal, in registration order.
  void commit(RowJournal& journal);
  // The running digest of every row committed so far, per dataset path.
  std::map<std::string, std::uint64_t> digests() const;

  // Checks that every dataset holds at least the checkpoint's rows and that they are the rows
  // its digests were taken of; then drops the rows after them and continues the digests from
  // the checkpoint's. ResumeRefused, changing nothing, otherwise.
  void verify_and_truncate(const CheckpointMark& m);
  // Appends the journal's rows (its first `length` bytes) to these (new, empty) datasets.
  // ResumeRefused when the journal names a dataset not registered or has the wrong type for one.
  void replay(const RowJournal& journal, std::uint64_t length);

  // The quantization statistics of a step's GEMM operands, one column per operand slot, into
  // the four datasets of a run (nmse, clipped, underflow, zero-scale fractions).
  struct OperandIds {
    Id nmse, clipped, underflow, zero_scales;
  };
  void stage_operands(const OperandIds& ids, const std::vector<OperandRecord>& operands);

  const h5::Appendable<double>& doubles_at(Id id) const;
  const h5::Appendable<std::int64_t>& ints_at(Id id) const;

  // Closes every dataset (before the file is closed: a dataset identifier outliving a file
  // whose close failed, on a full disk, crashes HDF5 when it is dropped), and opens them again
  // by their paths under `root` once the file is open again; staged rows and digests are kept.
  void close();
  void reopen(h5::Group root);

 private:
  struct Entry {
    std::variant<h5::Appendable<double>, h5::Appendable<std::int64_t>> ds;
    std::string path;  // of ds in the file
    Counts counts = Counts::Records;
    std::vector<double> staged_d;
    std::vector<std::int64_t> staged_i;
  };
  template <class F>
  void visit(Entry& e, F&& f);
  std::vector<Entry> entries_;
  std::map<std::string, Fnv1a64> digests_;
};

// The SWMR phase of a run trace (h5::File::start_swmr_write): while the run steps, readers may
// open the trace and watch its rows grow. Every object and attribute the file holds at the end
// of the run that a reader needs during it exists before the phase starts (the datasets, empty,
// with their dimension scales; the root's and the groups' attributes). What cannot exist
// before - the final attributes and states, a status other than "running", an attribute that
// changes during the run (an lm run's GEMM path at its switch to BF16) - waits until the phase
// ends: HDF5 1.10 forbids creating or changing attributes in SWMR mode, and leaves it only by
// closing the file, which end() does and then opens it again as before.
class SwmrPhase {
 public:
  // Starts the phase where the file is in the SWMR format; a trace made by an fp4drift before
  // it (the earliest format) is written as it was, without readers.
  void start(h5::File& file);
  bool active() const noexcept { return active_; }
  // An attribute change: made now, or while the phase lasts, when it ends (a run killed before
  // then loses it; its resume sets the attributes again before it starts the phase).
  void set_attrs(h5::File& file, std::function<void(h5::Group)> write);
  // Ends the phase (a no-op outside it): the file closed, opened read-write again (without
  // HDF5's file lock, which a SWMR reader still holding the file would deny), the rows' datasets
  // reopened and the deferred attribute changes made. A reader open across this must open the
  // file again to see the end: what it reads meanwhile may fail (HDF5 "... checksum ...").
  void end(h5::File& file, RunRows& rows);

 private:
  bool active_ = false;
  std::vector<std::function<void(h5::Group)>> deferred_;
};

// Least-squares slope of log(err) against log(step) over the entries with err > 0 and step > 0
// (NaN with fewer than two): how a run's accumulated error grows, the traces' final attribute.
double growth_exponent(const std::vector<std::int64_t>& steps, const std::vector<double>& err);

}  // namespace fp4d
