// The trace of an `lm` run (schema fp4drift.run, workload lm; docs/trace-format.md): the
// root's provenance and config, /lm's attributes (the model, the data, the recipes, the
// parameter and linear-layer names the datasets' columns follow), the rows it grows by
// (trace/run_rows.hpp: flushed only at checkpoints, journaled, readable while the run goes
// through SWMR), at the end the runs' final
// attributes and states (/lm/checkpoint). Its checkpoint's states are written here too. The
// only code that knows that layout.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/lm_trainer.hpp"
#include "sim/lm_run.hpp"
#include "trace/row_journal.hpp"
#include "trace/run_checkpoint.hpp"

namespace fp4d {

namespace lm_trace {
inline constexpr const char* kGroup = "lm";
inline constexpr const char* kRecipesAttr = "recipes";  // on kGroup: the runs' order, comma-separated
inline constexpr const char* kReferenceLoss = "lm/reference/loss";
inline constexpr const char* kRunsGroup = "lm/runs";  // one subgroup per recipe
inline constexpr const char* kLoss = "loss";
inline constexpr const char* kRelLossGap = "rel_loss_gap";
inline constexpr const char* kWeightRelErrorTotal = "weight_rel_error_total";
inline constexpr const char* kGrowthExponentAttr = "weight_error_growth_exponent";
inline constexpr const char* kFirstNonfiniteStepAttr = "first_nonfinite_step";
inline constexpr const char* kTailLossAttr = "tail_loss";
inline constexpr const char* kTailRelLossGapAttr = "tail_rel_loss_gap";
// The run summary's headline (docs/trace-format.md, "Run summary attributes").
inline constexpr const char* kLossGapMeanAttr = "rel_loss_gap_window_mean";
inline constexpr const char* kQuantizedParamsAttr = "quantized_params";
inline constexpr const char* kQuantizedWeightRelErrorAttr = "quantized_weight_rel_error";
}  // namespace lm_trace

// What /lm's attributes say beyond the spec: the data's loss floor and unigram entropy.
struct LmTraceInfo {
  double loss_floor = 0;    // NaN for a token file
  double unigram_loss = 0;  // nats
  std::string data;         // "synthetic" or the token file
};

// One recorded step (losses of that step's batch, before its update).
struct LmRecordRow {
  std::int64_t step = 0;
  double lr = 0;
  double reference_loss = 0, reference_grad_norm = 0;  // NaN without a reference
  struct Run {
    double loss = 0, rel_loss_gap = 0, grad_norm = 0, clip_factor = 1;
    std::vector<double> lost_update_fraction;  // per parameter
    std::vector<OperandRecord> operands;       // per GEMM operand slot (linear * 6 + role * 2 + operand)
  };
  std::vector<Run> runs;
};

// One comparison with the reference, after step `step` (the trace records step + 1).
struct LmCompareRow {
  std::int64_t step = 0;
  struct Run {
    std::vector<double> weight_rel_error;  // per parameter
    double weight_rel_error_total = 0;     // every parameter as one vector
    std::vector<double> grad_cosine, grad_rel_error, grad_sr_mean_rel_error;  // per parameter
  };
  std::vector<Run> runs;
};

// The states of an lm run in its checkpoint and in /lm/checkpoint: reference_{p,m,v}_i,
// run_r_{p,m,v}_i (float32 runs; a double reference as float64, a wider one as its exact double
// limbs, trace/run_checkpoint.hpp's state lists; i in lm_params order). Ref: double,
// mlp_binary128, mlp_mp256.
template <class Ref>
void write_lm_states(h5::Group g, const LmState<Ref>& ref, const std::vector<LmState<float>>& runs, Fnv1a64* digest);
template <class Ref>
void read_lm_states(h5::Group g, LmState<Ref>& ref, std::vector<LmState<float>>& runs, Fnv1a64* digest);

class LmTrace {
 public:
  static void create(const LmRunSpec& spec, const LmRunControl& ctl, const LmTraceInfo& info, const std::string& file,
                     const std::string& run_id);
  static void rebuild(const LmRunSpec& spec, const LmRunControl& ctl, const LmTraceInfo& info, const CheckpointMark& m,
                      const RowJournal& journal);
  static bool is_complete(const std::string& path);
  // std::invalid_argument when it is not an lm run trace of this config, is complete, or has
  // no run id.
  static LmTrace open(const LmRunSpec& spec, const LmRunControl& ctl);

  LmTrace(LmTrace&&) noexcept;
  LmTrace& operator=(LmTrace&&) noexcept;
  ~LmTrace();

  std::string run_id() const;
  void verify_and_truncate(const CheckpointMark& m);
  std::uint64_t records() const;
  std::uint64_t compares() const;

  // From here until the end (or a stop or failure), readers can open the trace while it grows
  // (SWMR, trace/run_rows.hpp's SwmrPhase): called once the run's attributes are set.
  void start_swmr_write();
  // A status other than running ends the SWMR phase; the other attributes set during it are
  // written when it ends.
  void set_status(const std::string& status);
  // resumed_at_step, and the device attributes of this attempt (LmRunControl::device, as
  // open() was given it): a resume may run on another device than the steps before it.
  void set_resumed_at(std::int64_t step);
  void set_gemm_path(std::size_t run, const std::string& path);

  void stage(const LmRecordRow& row);
  void stage(const LmCompareRow& row);
  void commit(RowJournal& journal);
  std::map<std::string, std::uint64_t> digests() const;

  void sync();
  void flush();
  void close();

  // The end of a complete run: final attributes (per run tail loss and gap over the last tenth
  // of the records, growth exponent of the total weight error, first non-finite loss), the
  // final states, status complete; synced and closed.
  template <class Ref>
  LmRunSummary finish(const LmState<Ref>& ref, const std::vector<LmState<float>>& runs);

 private:
  struct Impl;
  explicit LmTrace(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp4d
