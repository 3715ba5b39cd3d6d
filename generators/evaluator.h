// evaluator.h — what runs the bursts a sweep or a shrink asks for: an
// Evaluator takes configs and gives back their summaries, up to parallelism()
// at once. ChildEvaluator runs each as `spikehunt burst` in a persistent
// worker (or a process of its own); FunctionEvaluator calls a function in this
// process (tests, the gtest macro).
// Example:
//   ChildEvaluator children(self_executable(), /*jobs=*/2, /*timeout=*/120, "results/sweep/work");
//   children.evaluate(configs, [&](size_t i, const BurstSummary& s) { ... });
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/child.h"
#include "harness/record.h"
#include "scenarios/config.h"

namespace spikehunt {

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  virtual int parallelism() const = 0;
  // Runs the configs, up to parallelism() at once, calling on_result(i, summary)
  // as each finishes. `stop` (optional) is asked before each start.
  virtual void evaluate(const std::vector<TrainingConfig>& configs,
                        const std::function<void(size_t, const BurstSummary&)>& on_result,
                        const std::function<bool()>& stop = {}) = 0;
  // Runs configs as they come, up to parallelism() at once: next(idle,
  // &finished) is asked whenever a slot is free and gives a config and the
  // id on_result gets it back with, or nothing for now (when `idle`, none
  // runs, and it may block until it has one); *finished = true: no more
  // come, and stream returns when the running ones have ended. This one
  // runs rounds of up to parallelism() through evaluate(); ChildEvaluator
  // starts each as a slot frees.
  using StreamJob = std::pair<size_t, TrainingConfig>;
  virtual void stream(const std::function<std::optional<StreamJob>(bool idle, bool* finished)>& next,
                      const std::function<void(size_t, const BurstSummary&)>& on_result);

  // Bursts killed by a signal this program did not send (the OOM killer, a
  // preemption, an operator's kill; a segfault too) and run once more in a
  // fresh worker: `retried` of them, `repeated` of those killed again (each
  // then a crashed verdict), `by_cause` the first kill's describe()
  // ("signal 9 (Killed)") -> count. Kept over the evaluator's life.
  // Bursts past their timeout run once more too (a machine busy for a while): `timeouts_retried`,
  // `timeouts_repeated` of those past it again (each then a timeout verdict).
  struct Retries {
    int64_t retried = 0, repeated = 0;
    std::map<std::string, int64_t> by_cause;
    int64_t timeouts_retried = 0, timeouts_repeated = 0;
  };
  virtual Retries retries() const { return {}; }
};

// The sweep summary's line for `r` ("" when no burst was retried).
std::string describe_retries(const Evaluator::Retries& r);

// Each burst is `spikehunt burst` run by a persistent worker of the pool (or,
// with pool.persistent false, in a process of its own). A burst whose worker
// dies on a signal this program did not send is run once more in a fresh
// worker (retries()): an outside kill is not a finding; killed again, it is a
// crashed verdict (a crash that repeats on the config). A burst that exits
// without a result is crashed at once, one that overstays `timeout_seconds`
// (SIGKILLed by the pool) a timeout; a fresh worker runs the next.
class ChildEvaluator : public Evaluator {
 public:
  ChildEvaluator(std::string binary, int jobs, double timeout_seconds, std::string work_dir, PoolOptions pool = {});
  int parallelism() const override { return jobs_; }
  void evaluate(const std::vector<TrainingConfig>& configs,
                const std::function<void(size_t, const BurstSummary&)>& on_result,
                const std::function<bool()>& stop = {}) override;
  void stream(const std::function<std::optional<StreamJob>(bool idle, bool* finished)>& next,
              const std::function<void(size_t, const BurstSummary&)>& on_result) override;
  // More arguments for every child's `burst` command (e.g. {"--heldout", "256"}).
  void set_extra_args(std::vector<std::string> args) { extra_args_ = std::move(args); }
  // Every burst is to run this build (build_id): a worker that loaded other code refuses, and the
  // evaluation throws an InputError (the code changed during the sweep) instead of a verdict.
  void expect_build(std::string id) { expected_build_ = std::move(id); }
  const PoolStats& pool_stats() const { return pool_.stats(); }
  Retries retries() const override { return retries_; }

 private:
  std::string binary_, work_dir_;
  std::vector<std::string> extra_args_;
  std::string expected_build_;
  int jobs_;
  double timeout_;
  int64_t counter_ = 0;
  ChildPool pool_;
  Retries retries_;
};

// Calls a function in this process, one config at a time.
class FunctionEvaluator : public Evaluator {
 public:
  explicit FunctionEvaluator(std::function<BurstSummary(const TrainingConfig&)> f) : f_(std::move(f)) {}
  int parallelism() const override { return 1; }
  void evaluate(const std::vector<TrainingConfig>& configs,
                const std::function<void(size_t, const BurstSummary&)>& on_result,
                const std::function<bool()>& stop = {}) override;
  int64_t calls() const { return calls_; }

 private:
  std::function<BurstSummary(const TrainingConfig&)> f_;
  int64_t calls_ = 0;
};

}  // namespace spikehunt
