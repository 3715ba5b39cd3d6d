// burst.h — runs a scenario's training steps under the monitor and returns
// the verdict: healthy, extreme (finite but past a health rule), non_finite
// (with the faulting tensor), or crashed (the training code threw).
// The burst stops at the first non-finite step (or at the first extreme one
// when health.stop_at is "extreme").
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
#include "scenarios/config.h"
#include "scenarios/scenario.h"

namespace spikehunt {

class Monitor;

struct BurstOptions {
  bool monitor = true;       // false: plain training, no taps and no statistics
  bool keep_states = false;  // keep the last healthy and first bad model+optimizer state
  size_t trace_capacity = 1024;
  std::function<void(const StepRecord&)> on_step;  // called after every monitored step
  // Continue a checkpointed burst: the scenario's state and data position are
  // already restored; this restores the monitor's chain and health windows.
  std::optional<MonitorState> resume;
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

// One optimizer step: zero_grad, forward (taps to `monitor`), loss, backward,
// clipping, step. `monitor` may be null (plain training); the caller brackets
// it with monitor->begin_step() and monitor->finish_step().
torch::Tensor train_step(Scenario& scenario, const Batch& batch, Monitor* monitor);

BurstResult run_burst(Scenario& scenario, const HealthRules& rules, const BurstOptions& options);

// Sets the thread count and determinism flags, builds the built-in scenario
// and runs it.
void configure_runtime(const TrainingConfig& config);
BurstResult run_config(const TrainingConfig& config, const BurstOptions& options);

}  // namespace spikehunt
