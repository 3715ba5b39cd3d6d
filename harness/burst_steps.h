// burst_steps.h — a burst's bookkeeping one step at a time, for loops that run
// their steps themselves: run_burst's own loop (burst.cpp), and training that
// stays in its framework (spikehunt.Watch, the Lightning and Hugging Face
// callbacks: python/binding.cpp), which call the monitor's stages as their
// loop reaches them. It owns the monitor; what it records is run_burst's:
// the trace, the step hashes, the onset and failure, the states around them.
// Example:
//   BurstSteps steps(scenario, config.health, options);
//   steps.begin(step, batches);                 // before the step's first forward
//   ... forward: steps.monitor().on_tap(...), after_forward, after_loss; backward;
//   steps.monitor().after_backward(); optimizer step ...
//   if (!steps.finish(step_ms)) break;          // judged and recorded; false: the burst is over
//   BurstResult r = steps.take();
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "harness/burst.h"
#include "harness/monitor.h"

namespace spikehunt {

class BurstSteps {
 public:
  // Builds the monitor (throws std::logic_error when the scenario breaks its
  // contract); restores options.resume; starts at options.start_step.
  BurstSteps(Scenario& scenario, const HealthRules& rules, const BurstOptions& options);

  Monitor& monitor() { return monitor_; }
  int64_t next_step() const { return step_; }
  bool over() const { return over_; }

  // Starts the next optimizer step over its micro-batches (keeping the state
  // entering it while no onset was seen, with options.keep_states).
  void begin(const std::vector<Batch>& batches);
  // Ends it (after the optimizer step, or after a Monitor::FailFast cut it
  // short): judges it, records it, calls options.on_step. Returns the record;
  // over() says whether the burst stops here (non-finite, or extreme with
  // health.stop_at "extreme").
  const StepRecord& finish(double step_ms);
  // Drops the begun step: no record, the step number and hash chain as before it.
  void abandon() { monitor_.abandon_step(); }
  BurstResult& result() { return result_; }
  const BurstResult& result() const { return result_; }

 private:
  Scenario& scenario_;
  const HealthRules& rules_;
  BurstOptions options_;
  Monitor monitor_;
  BurstResult result_;
  StateSnapshot entering_;  // the state entering the current step, until the onset
  // The parameters and optimizer state after the last step, copied by the
  // monitor as it read them (Monitor::copy_after_into): the next step's
  // entering state without a copy of its own.
  std::vector<StateCopy> ready_;
  bool copy_ahead_ = true;                     // the last copies ahead were taken (or it is time to try again)
  std::optional<HealthJudge> entering_judge_;  // the judge entering the current step, until the onset
  StepRecord last_;
  int64_t step_;
  bool over_ = false;
};

}  // namespace spikehunt
