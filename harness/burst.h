// burst.h — runs a scenario's training steps under the monitor and returns
// the verdict: healthy, extreme (finite but past a health rule), non_finite
// (with the faulting tensor), or crashed (the training code threw: the stage
// and, where spikehunt can tell, the cause). The burst stops at the first
// non-finite step (or at the first extreme one when health.stop_at is
// "extreme"). Trainer is the harness's side of the scenario contract
// (scenario.h): zeroing, micro-batch accumulation, clipping, the learning-rate
// schedule, and the optimizer step.
// Example:
//   BurstResult r = run_config(config, BurstOptions{});
//   if (r.verdict.outcome == Outcome::kNonFinite) std::cout << r.verdict.fault->describe();
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "harness/record.h"
#include "harness/state.h"
#include "harness/trace.h"
#include "harness/training_error.h"
#include "scenarios/config.h"
#include "scenarios/scenario.h"

namespace spikehunt {

class Monitor;

struct BurstOptions {
  bool monitor = true;       // false: plain training, no taps and no statistics
  bool keep_states = false;  // keep the last healthy and first bad model+optimizer state
  size_t trace_capacity = 1024;
  std::function<void(const StepRecord&)> on_step;  // called after every monitored step
  // Continue a checkpointed burst at optimizer step `start_step`: the
  // scenario's state is restored and its data skipped to that step (Trainer::
  // skip_steps); this restores the monitor's chain and health windows.
  std::optional<MonitorState> resume;
  int64_t start_step = 0;
  int64_t max_steps = -1;  // stop after this many steps (-1: when the protocol ends)
  // Check every statistic the moment it is taken and stop the step at the
  // first non-finite one (a NaN tap ends the step before backward and the
  // optimizer step). Free on the CPU; on a GPU it costs a host sync per
  // statistic instead of one per step (see Monitor::set_fail_fast).
  bool fail_fast = false;
};

// A burst's state at one step (see state.h), kept on the training device.
struct StateSnapshot {
  int64_t step = 0;  // last_healthy: the state entering this step; first_bad: after it
  std::vector<NamedTensor> tensors;
  MonitorState monitor;  // entering the step
};

struct BurstResult {
  Verdict verdict;
  Trace trace;
  std::vector<StepHashes> step_hashes;        // every step run, in order
  std::optional<StateSnapshot> last_healthy;  // entering the onset step
  std::optional<StateSnapshot> first_bad;     // after the failure step (or the onset step)
};

// Clips gradients to a global L2 norm like torch::nn::utils::clip_grad_norm_,
// but without its host sync.
void clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

// Dynamic loss scaling for fp16 (LibTorch's C++ API has no GradScaler):
// the loss is multiplied by scale() before backward; unscale() divides every
// gradient by it and says whether any was non-finite (one host sync); then
// update(overflow) halves the scale after an overflow (the step is skipped)
// and doubles it after growth_interval steps in a row without one.
struct LossScaleOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(LossScaleOptions options = {}) : o_(options), scale_(options.init_scale) {}
  double scale() const { return scale_; }
  int64_t good_steps() const { return good_; }
  bool unscale(const std::vector<torch::Tensor>& params) const;
  void update(bool overflow);

 private:
  LossScaleOptions o_;
  double scale_;
  int64_t good_ = 0;  // steps since the last overflow or growth
};

// The harness's side of one optimizer step (the contract in scenario.h):
// zero the model's gradients; for each of config().accumulation_steps
// micro-batches forward, loss and (loss / k).backward(); clip to grad_clip();
// set every group's learning rate from config().schedule; optimizer_step().
// config().precision bf16 / fp16 runs forward and loss under autocast (the
// weights stay fp32); fp16 also scales the loss (LossScaler), and a step whose
// scaled gradients overflowed is skipped: its gradients are zeroed before the
// monitor reads them, the optimizer does not step, the record says skipped.
// What the scenario's code throws comes out as a TrainingError naming the stage.
class Trainer {
 public:
  // Remembers every optimizer group's learning rate as the schedule's base.
  // `schedule` false: leave the learning rates as they are (doctor's overfit check).
  explicit Trainer(Scenario& scenario, bool schedule = true);

  int64_t accumulation() const { return k_; }
  int64_t planned_steps() const;  // optimizer steps in the whole protocol
  // The next optimizer step's micro-batches (fewer at the very end; none when done).
  std::vector<Batch> next_batches();
  // Moves the data on by n optimizer steps without training; returns the steps skipped.
  int64_t skip_steps(int64_t n);
  // Trains optimizer step `step` on `batches`. With a monitor, the caller
  // brackets it with monitor->begin_step(step, batches) and finish_step().
  // Returns the mean loss over the micro-batches.
  torch::Tensor step(int64_t step, const std::vector<Batch>& batches, Monitor* monitor);
  // Sets every group to its base learning rate × the schedule's factor at `step`.
  void apply_schedule(int64_t step);
  const ErrorContext& context() const { return context_; }
  // Scales the loss from now on (fp16 turns it on by itself; tests plant
  // overflows on the CPU with it).
  void enable_loss_scaling(LossScaleOptions options = {}) { scaler_.emplace(options); }
  const std::optional<LossScaler>& loss_scaler() const { return scaler_; }

 private:
  Scenario& s_;
  int64_t k_;
  bool schedule_;
  std::optional<LossScaler> scaler_;
  std::vector<std::vector<double>> base_lr_;  // per optimizer, per group
  ErrorContext context_;
};

// Optimizer steps the scenario's protocol takes: its batches over config().accumulation_steps, rounded up.
int64_t planned_optimizer_steps(const Scenario& scenario);

BurstResult run_burst(Scenario& scenario, const HealthRules& rules, const BurstOptions& options);

// Sets the thread count and determinism flags, builds the config's scenario
// and runs it. A scenario whose construction throws is a crashed verdict
// (stage "setup"); bad input is still an InputError.
void configure_runtime(const TrainingConfig& config);
BurstResult run_config(const TrainingConfig& config, const BurstOptions& options);

// The mean loss over the scenario's held-out batches (up to `max_samples`
// samples), without gradients, under the config's precision; +inf when any
// batch's loss is not finite, NaN when the scenario has no held-out data.
// `samples` (optional) gets how many samples the batches held.
double heldout_loss(Scenario& scenario, int64_t max_samples, int64_t* samples = nullptr);

// run_config, measuring RunMetrics around it: the held-out loss before and
// after, the last training loss and the largest attention logit and log Z.
BurstSummary run_config_measured(const TrainingConfig& config, int64_t heldout_samples);

// A crashed verdict from a TrainingError.
void set_crashed(Verdict& v, const TrainingError& e);

}  // namespace spikehunt
