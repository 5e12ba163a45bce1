// The trace of an `mlp` run (schema fp4drift.run, workload mlp; docs/trace-format.md): the
// root's provenance and config, /mlp's attributes, the rows it grows by as the run goes
// (/mlp/step, /mlp/reference/*, /mlp/compare_step, /mlp/runs/R/*), and at the end the runs'
// final attributes and states. The only code that knows that layout (the checkpoint file and
// the states' layout are trace/mlp_checkpoint.hpp's).
//
// Rows reach the file only at commit(), which the run calls at its flush points: between
// flushes the file is not touched, so a process killed outright (SIGKILL, a lost node) leaves
// it exactly as at its last flush - readable, and resumable from its checkpoint. (An HDF5 1.10
// file being written is not crash-safe: appending record by record, a kill mid-way left chunks
// that failed to inflate.) Every row committed also goes to the run's journal, from which
// rebuild() makes the trace anew when a resume finds it torn. While the run steps, the trace is
// in SWMR mode (start_swmr_write): other processes can read it as it grows.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/mlp_run.hpp"
#include "trace/mlp_checkpoint.hpp"
#include "trace/run_checkpoint.hpp"
#include "trace/row_journal.hpp"
#include "util/digest.hpp"

namespace fp4d {

// Names in the layout that other code reads (the sweep's index takes each run's final values).
namespace mlp_trace {
inline constexpr const char* kGroup = "mlp";
inline constexpr const char* kRecipesAttr = "recipes";  // on kGroup: the runs' order, comma-separated
inline constexpr const char* kReferenceLoss = "mlp/reference/loss";
inline constexpr const char* kRunsGroup = "mlp/runs";  // one subgroup per recipe, holding:
inline constexpr const char* kLoss = "loss";
inline constexpr const char* kRelLossGap = "rel_loss_gap";
inline constexpr const char* kWeightRelError = "weight_rel_error";
inline constexpr const char* kGrowthExponentAttr = "weight_error_growth_exponent";
inline constexpr const char* kFirstNonfiniteStepAttr = "first_nonfinite_step";
// The run summary's headline (docs/trace-format.md, "Run summary attributes").
inline constexpr const char* kLossGapMeanAttr = "rel_loss_gap_window_mean";
inline constexpr const char* kQuantizedLayersAttr = "quantized_layers";
inline constexpr const char* kQuantizedWeightRelErrorAttr = "quantized_weight_rel_error";
}  // namespace mlp_trace

// One recorded step: the losses of the batch of that step, before its update.
struct MlpRecordRow {
  std::int64_t step = 0;
  double reference_loss = 0;  // NaN without a reference
  struct Run {
    double loss = 0, rel_loss_gap = 0;
    std::vector<double> lost_update_fraction;  // per layer
    std::vector<OperandRecord> operands;       // per GEMM operand slot
  };
  std::vector<Run> runs;  // in the recipes' order
};

// One weight comparison, after step `step` (the trace records step + 1).
struct MlpCompareRow {
  std::int64_t step = 0;
  struct Run {
    std::vector<double> weight_rel_error, grad_cosine, grad_rel_error, grad_sr_mean_rel_error;  // per layer
  };
  std::vector<Run> runs;
  // With check_precision: the reference's own one-step error.
  std::optional<std::vector<double>> check_weight_rel_error;
  double check_loss_rel_error = 0;
};

class MlpTrace {
 public:
  // A new trace in `file` (the caller's OUT.partial): the root's attributes (status running,
  // run_id), /mlp's, and every dataset empty; synced.
  static void create(const MlpRunSpec& spec, const MlpRunControl& ctl, const std::string& file, const std::string& run_id);
  // Makes ctl.path anew from its journal, for a resume that found the trace unable to show
  // the rows its checkpoint counts: the datasets get the journal's rows up to the checkpoint,
  // the root its attributes anew (with rebuilt_at_step). ResumeRefused when the journal names
  // a dataset the trace does not have or holds the wrong type for one.
  static void rebuild(const MlpRunSpec& spec, const MlpRunControl& ctl, const CheckpointMark& m, const RowJournal& journal);
  // Whether the trace at `path` says it is complete (false when it cannot be read).
  static bool is_complete(const std::string& path);
  // Opens ctl.path to continue it. std::invalid_argument when it is not an mlp run trace of
  // this config, is complete, or has no run id.
  static MlpTrace open(const MlpRunSpec& spec, const MlpRunControl& ctl);

  MlpTrace(MlpTrace&&) noexcept;
  MlpTrace& operator=(MlpTrace&&) noexcept;
  ~MlpTrace();

  std::string run_id() const;
  // Checks that every dataset holds at least the checkpoint's rows and that they are the rows
  // the checkpoint's digests were taken of; then drops the rows after them (a run stopped
  // after its checkpoint recorded further steps) and continues the digests from the
  // checkpoint's. ResumeRefused, changing nothing, otherwise.
  void verify_and_truncate(const CheckpointMark& m);
  // Rows so far, staged ones included: records (recorded steps) and compares.
  std::uint64_t records() const;
  std::uint64_t compares() const;

  // From here until the end (or a stop or failure), readers can open the trace while it grows
  // (SWMR, trace/run_rows.hpp's SwmrPhase): called once the run's attributes are set.
  void start_swmr_write();

  // Root and run attributes. A status other than running ends the SWMR phase; the other
  // attributes set during it are written when it ends.
  void set_status(const std::string& status);  // running | interrupted | failed (complete: finish())
  // resumed_at_step, and the device attributes of this attempt (MlpRunControl::device, as
  // open() was given it): a resume may run on another device than the steps before it.
  void set_resumed_at(std::int64_t step);
  void set_concurrent_runs(bool concurrent);
  void set_gemm_path(std::size_t run, const std::string& path);

  // Rows, staged until commit().
  void stage(const MlpRecordRow& row);
  void stage(const MlpCompareRow& row);
  // Appends the staged rows to the trace and to the journal.
  void commit(RowJournal& journal);
  // The running digest of every row committed so far, per dataset path: a checkpoint stores
  // them, and a resume must find the same rows in the trace.
  std::map<std::string, std::uint64_t> digests() const;

  void sync();   // durable (fsync)
  void flush();  // handed to the OS
  void close();

  // The end of a complete run, with every row committed: per run the headline metrics (the
  // loss gap's window mean, the quantized layers' weight error and its growth exponents), the
  // growth exponent of the last layer's weight error over every compare and the first
  // non-finite loss, the reference's first
  // non-finite loss, the final states (/mlp/checkpoint, at `steps` with the row counts), status
  // complete; synced and closed. Returns what the trace now says, for the run's summary.
  template <class Ref>
  MlpRunSummary finish(const MlpState<Ref>& ref, const std::vector<MlpState<float>>& runs);

 private:
  struct Impl;
  explicit MlpTrace(std::unique_ptr<Impl> impl);
  // ref_sq_norm: per layer ||W_ref||_F^2 at the end (the last compare is the last step).
  MlpRunSummary write_final_attributes(const std::vector<double>& ref_sq_norm);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp4d
