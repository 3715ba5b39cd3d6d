// monitor.h — watches one training step and classifies it.
// Collects loss, gradient, parameter (before and after the optimizer step,
// and the step itself: ‖after − before‖, from a copy of the parameters that
// costs their memory once more),
// optimizer-state, input and activation statistics as 0-dim double tensors on
// the training device, copies them to the host once per step, judges the
// step's health, and names the first non-finite tensor with its stage and
// NaN/+Inf/−Inf counts (counted only then).
// An optimizer step may cover several micro-batches (gradient accumulation):
// their bytes are hashed as one, their label counts summed, the loss is their
// mean, and each tap's max is the max over them. Optimizer state is also
// summed up per optimizer group, with the learning rate each group applied.
// Example (what run_burst does, with Trainer in burst.h):
//   Monitor monitor(scenario, config.health);
//   monitor.begin_step(step, batches);
//   trainer.step(step, batches, &monitor);  // forward (taps), after_forward, after_loss, after_backward
//   StepRecord r = monitor.finish_step();
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/health.h"
#include "harness/record.h"
#include "harness/state.h"
#include "harness/state_buffers.h"
#include "scenarios/scenario.h"

namespace spikehunt {

struct SumSqMax;

// ---- per-tensor statistics ----

// {L2 norm accumulated in double, max |x|} of t as a (2,) float64 tensor on
// t's device, without a host sync. Any NaN makes both NaN; an empty tensor
// gives {0, 0}. Contiguous float32 tensors on the CPU take a fused one-pass
// kernel; everything else takes LibTorch reductions on its device.
torch::Tensor tensor_stats(const torch::Tensor& t);
// {max |x|} as a (1,) float64 tensor (NaN if any NaN; 0 if empty): activations need no norm.
torch::Tensor max_abs_stat(const torch::Tensor& t);

struct NonFiniteCounts {
  int64_t nan = 0;
  int64_t pos_inf = 0;
  int64_t neg_inf = 0;
};
NonFiniteCounts count_non_finite(const torch::Tensor& t);  // syncs

// Everything about one tensor, on the host (syncs; for tests, audits, tools).
struct TensorSummary {
  int64_t numel = 0;
  double norm = 0;     // L2 in double
  double max_abs = 0;  // NaN if any element is NaN
  NonFiniteCounts counts;
  bool finite() const { return counts.nan == 0 && counts.pos_inf == 0 && counts.neg_inf == 0; }
};
TensorSummary summarize(const torch::Tensor& t);

// ---- the monitor ----

class Monitor : public TapSink {
 public:
  // Throws std::logic_error when the scenario breaks its contract (an
  // optimizer updates a tensor that is not a model parameter).
  Monitor(Scenario& scenario, const HealthRules& rules);

  Tap tap() { return Tap(this); }
  // Starts optimizer step `step` over its micro-batches: hashes their bytes,
  // counts their labels, reads their inputs.
  void begin_step(int64_t step, const std::vector<Batch>& batches);
  void begin_step(const Batch& batch) { begin_step(batch.step, {batch}); }
  void on_tap(const char* name, const torch::Tensor& t) override;
  void on_tap_max(const char* name, const torch::Tensor& t, double max_abs) override;
  bool reads_max_only() const override { return true; }  // t is read only for a non-finite max
  void after_forward(const torch::Tensor& output);  // what forward returned: its max |x|, once per micro-batch
  void after_loss(const torch::Tensor& loss);       // the unscaled loss, once per micro-batch
  // fp16 (Trainer's LossScaler): the scale this step used and whether it was skipped.
  void note_loss_scale(double scale, bool skipped) { record_.loss_scale = scale, record_.skipped = skipped; }
  // Between begin_step and after_backward: copies of the parameters entering
  // this step that the caller already made (capture_state's tensors, whose
  // first ones are the model's parameters as "model.<name>"). after_backward
  // reads them instead of copying each parameter again while the parameter
  // is unchanged (its version counter); they are never written, and must
  // live until finish_step.
  void lend_before(const std::vector<NamedTensor>& entering);
  void after_backward();     // gradients, and the parameters before the step
  // Before finish_step: copy the parameters and the optimizer state after the
  // step into `ready` as finish_step reads them for their statistics (one read
  // for both), by capture_state's names, reusing the buffers there; the next
  // capture_state_into(scenario, ..., ready) takes them instead of copying.
  void copy_after_into(std::vector<StateCopy>* ready) { copy_after_ = ready; }
  StepRecord finish_step();  // after the optimizer step; the one host copy
  // Drops the begun step as if begin_step had not been called (a framework
  // skipped the batch: Lightning's training_step returned None).
  void abandon_step();

  // Fail fast: each statistic is read the moment it is taken (a host sync per
  // statistic on a GPU) and the first non-finite one throws FailFast from the
  // tap, loss or backward hook that took it; finish_step() then records the
  // cut-short step with its fault as usual.
  void set_fail_fast(bool on) { fail_fast_ = on; }
  struct FailFast {};

  // Data-parallel: one burst over `world` processes, each training its shard
  // of the global batch, gradients averaged across them before
  // after_backward() (DistributedDataParallel does it in backward). `gather`
  // is an all_gather: every rank's vector (of one length) in rank order. Once
  // a step, finish_step() gathers what the step measured, so every rank's
  // record is the global batch's: maxima over the ranks, the loss their mean,
  // the hashes over every rank's batch (in rank order), the label counts
  // summed, and the first non-finite tensor in stage order named with its rank
  // (the lowest rank that has it). Fail fast then ends a step at its end: a
  // rank that stopped mid-step would leave the others waiting in backward.
  // Throws std::runtime_error when the ranks measured different things.
  using Gather = std::function<std::vector<double>(const std::vector<double>&)>;
  void set_ranks(int64_t rank, int64_t world, Gather gather);
  int64_t rank() const { return rank_; }
  int64_t world() const { return world_; }

  const Hash128& hash_chain() const { return chain_; }
  // The chain and health windows between steps; restore() continues a burst
  // from a checkpoint as if it had run from step 0.
  MonitorState state() const { return {chain_, judge_.state()}; }
  const HealthJudge& judge() const { return judge_; }  // state()'s judge as an object (copy it: cheaper than its JSON)
  void restore(const MonitorState& s);

 private:
  struct Check {  // a tensor whose finiteness localizes a fault, in stage order
    Stage stage;
    std::string name;
    torch::Tensor tensor;  // kept only off the CPU, to count after the host copy
    int slot;              // its norm or max |x|: non-finite iff the tensor is
    int64_t numel;
    std::optional<NonFiniteCounts> counts;  // on the CPU, counted at once when non-finite
  };
  struct LayerSlots {  // norm slots; the max of each is the next slot
    int grad = -1, before = -1, after = -1, update = -1, spike = -1;
    std::vector<int> state;
  };

  // Records t's statistics; returns the slot of its norm (max |x| is slot + 1).
  // CPU values land in values_ at once; device values wait for the one copy.
  int push_stats(const torch::Tensor& t);
  int push_values(const SumSqMax& s);  // a fused kernel's statistics: {norm, max}
  int push_max(const torch::Tensor& t);   // max |x|; returns its slot
  int push_scalar(torch::Tensor scalar);  // a 0-dim tensor
  // Parameter i's SPAM gradient spike score (LayerStats::grad_spike_score)
  // against its optimizer's second moment; -1 where there is none.
  int push_spike_score(size_t i, const torch::Tensor& g);
  int reserve(int n);                     // n slots, filled later by put / put_stats
  void put(int slot, torch::Tensor stats);              // a small tensor of statistics
  void put_stats(int slot, const torch::Tensor& t);     // t's {norm, max |x|}
  // Registers t, whose statistic was just pushed at `slot`, for fault localization.
  void check(Stage stage, std::string name, const torch::Tensor& t, int slot);

  Scenario& scenario_;
  std::vector<NamedTensor> params_;
  std::vector<int> param_group_;         // per parameter: index into groups_ (-1: no optimizer)
  std::vector<char> adaptive_;           // per parameter: its optimizer normalizes updates (Adam and kin)
  bool spike_scores_ = false;            // grad_spike_limit is on: score each gradient against v
  // Each parameter as it was before this step's optimizer step (copied in
  // after_backward; the step's update is measured against it, in place).
  std::vector<torch::Tensor> before_copy_;
  // Copies of the parameters entering the step made by someone else
  // (lend_before), with the version each parameter had then; used instead
  // of before_copy_ while the parameter is still that version, read only.
  struct Lent {
    torch::Tensor copy;
    int64_t version = -1;
  };
  std::vector<Lent> lent_;
  std::vector<torch::Tensor> before_;  // this step's "before" per parameter: before_copy_ or lent_
  std::vector<StateCopy>* copy_after_ = nullptr;  // this step's copy_after_into
  size_t copy_cursor_ = 0;                        // where copy_target looks first
  // The buffer in *copy_after_ for capture_state's `name` of t, ready to be
  // written with t's value; undefined without copy_after_into.
  torch::Tensor copy_target(const std::string& name, const torch::Tensor& t);
  bool copied_ = false;
  std::vector<NamedOptimizer> optimizers_;
  std::vector<std::pair<int, int>> groups_;  // (optimizer, group) in order
  std::vector<std::string> phase_names_;
  HealthJudge judge_;
  Hash128 chain_;
  Hash128 chain_before_;  // the chain entering the begun step (abandon_step)
  // this step
  StepRecord record_;
  std::vector<double> values_;                         // every statistic of the step, by slot
  std::vector<std::pair<int, torch::Tensor>> device_;  // (slot, stats) still on the device
  std::vector<Check> checks_;
  std::vector<LayerSlots> layers_;
  std::vector<std::pair<std::string, int>> taps_;
  std::vector<int> loss_slots_, input_slots_, output_slots_;  // one per micro-batch
  bool fail_fast_ = false;
  // Each parameter's statistics after the last step: reused as "before" the
  // next one when the tensor is untouched (same storage, same version counter).
  struct AfterCache {
    const void* data = nullptr;
    int64_t version = -1;
    double norm = 0, max = 0;
  };
  std::vector<AfterCache> after_cache_;
  // data-parallel (set_ranks)
  int64_t rank_ = 0, world_ = 1;
  Gather gather_;
  Hash128 local_inputs_, local_labels_;  // this rank's batch, until the gather
  // This step's batch tensors as the hashes read them: host tensors, or (a
  // batch on the device with no host copy) their bytes on the device until
  // the step's one host copy brings them over.
  struct Held {
    torch::Tensor inputs, targets;
    torch::ScalarType label_type;
  };
  std::vector<Held> held_;
  // finish_step()'s phases, in order (between copy_to_host and fill_record: gather_ranks).
  void read_after_step();
  void copy_to_host();
  void fill_record();
  void localize(const std::optional<Fault>& rank_fault);
  void hash_held();  // the step's hashes, label counts and chain, from held_ on the host
  // Gathers the step's values from every rank and folds them into values_ and
  // record_ (hashes, chain, label counts); returns the first fault over the ranks.
  std::optional<Fault> gather_ranks();
};

}  // namespace spikehunt
