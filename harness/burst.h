// burst.h — runs a scenario's training steps under the monitor and returns
// the verdict: healthy, extreme (finite but past a health rule), non_finite
// (with the faulting tensor), or crashed (the training code threw: the stage
// and, where spikehunt can tell, the cause). The burst stops at the first
// non-finite step (or at the first extreme one when health.stop_at is
// "extreme"). The steps themselves are the Trainer's (trainer.h).
// Example:
//   BurstResult r = run_config(config, BurstOptions{});
//   if (r.verdict.outcome == Outcome::kNonFinite) std::cout << r.verdict.fault->describe();
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <vector>

#include "harness/record.h"
#include "harness/state.h"
#include "harness/trace.h"
#include "harness/trainer.h"
#include "harness/training_error.h"
#include "scenarios/config.h"
#include "scenarios/scenario.h"

namespace spikehunt {

class Ranks;

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
  // Data-parallel (ranks.h): this process is ranks->rank() of ranks->world();
  // each batch is cut into world contiguous shards of its rows and this rank
  // trains its own, the gradients are averaged over the ranks after backward,
  // and the monitor records the global step (Monitor::set_ranks).
  Ranks* ranks = nullptr;
  // Called right before and after each step's optimizer_step() (Trainer::set_around_optimizer_step).
  std::function<void()> before_optimizer_step, after_optimizer_step;
  // Read between steps: true ends the burst where it is (`run`'s Ctrl-C), with
  // BurstResult::interrupted set; its verdict is what the steps run showed.
  const std::atomic<bool>* stop = nullptr;
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
  bool interrupted = false;                   // BurstOptions::stop ended it before the protocol did
};

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
// How many held-out samples the config's data holds, up to `max_samples`
// (its scenario built as a burst builds it; nothing trains).
int64_t heldout_samples(const TrainingConfig& config, int64_t max_samples);

// run_config, measuring RunMetrics around it: the held-out loss before and
// after, the last training loss and the largest attention logit and log Z.
BurstSummary run_config_measured(const TrainingConfig& config, int64_t heldout_samples);

// A crashed verdict from a TrainingError.
void set_crashed(Verdict& v, const TrainingError& e);

}  // namespace spikehunt
