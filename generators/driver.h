// driver.h — the search driver. RapidCheck draws *what* to try (the samples
// of a space); this decides *how*, and shrinks each failure: bursts
// run by an Evaluator (child processes in a sweep, a plain function in tests),
// a memo keyed by config hash so no configuration is trained twice, and
// budgets. A shrink is accepted only when the candidate fails in the same
// class (non-finite in the same stage, extreme, crashed, timeout).
// Example:
//   ChildEvaluator children(self_executable(), /*jobs=*/2, /*timeout=*/120, "results/sweep/work");
//   EvalCache cache(&store);
//   ShrinkResult r = shrink(space, start, start_summary, children, cache, budget);
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "generators/space.h"
#include "harness/child.h"
#include "harness/record.h"
#include "harness/store.h"

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
};

// Each burst is `spikehunt burst` run by a persistent worker of the pool (or,
// with pool.persistent false, in a process of its own); a burst that kills its
// worker (a signal, an abort) is a crashed verdict, one that overstays
// `timeout_seconds` a timeout, and a fresh worker runs the next.
class ChildEvaluator : public Evaluator {
 public:
  ChildEvaluator(std::string binary, int jobs, double timeout_seconds, std::string work_dir, PoolOptions pool = {});
  int parallelism() const override { return jobs_; }
  void evaluate(const std::vector<TrainingConfig>& configs,
                const std::function<void(size_t, const BurstSummary&)>& on_result,
                const std::function<bool()>& stop = {}) override;
  // More arguments for every child's `burst` command (e.g. {"--heldout", "256"}).
  void set_extra_args(std::vector<std::string> args) { extra_args_ = std::move(args); }
  const PoolStats& pool_stats() const { return pool_.stats(); }

 private:
  std::string binary_, work_dir_;
  std::vector<std::string> extra_args_;
  int jobs_;
  double timeout_;
  int64_t counter_ = 0;
  ChildPool pool_;
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

// Every burst by config hash, in memory and (when given) in the sweep database.
// Beside it, bursts trained on parallel slots before a shrink asked for them
// (`pending`): not in the memo, the database or any budget until one does.
class EvalCache {
 public:
  explicit EvalCache(SweepStore* store = nullptr) : store_(store) {}
  std::optional<BurstSummary> find(const std::string& config_hash);
  // Remembers and (with a store) commits one run: one transaction.
  void add(const std::string& kind, int64_t sample, const TrainingConfig& config, const BurstSummary& summary);

  void hold(const std::string& config_hash, const BurstSummary& summary) { pending_[config_hash] = summary; }
  bool holds(const std::string& config_hash) const { return pending_.count(config_hash) > 0; }
  std::optional<BurstSummary> release(const std::string& config_hash);  // and forget it
  int64_t held() const { return int64_t(pending_.size()); }             // trained, never asked for

 private:
  SweepStore* store_;
  std::map<std::string, BurstSummary> memory_;
  std::map<std::string, BurstSummary> pending_;
};

struct Budget {
  int64_t evaluations = 100;  // new bursts one shrink may run
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  bool expired() const { return std::chrono::steady_clock::now() >= deadline; }
};

struct ShrinkResult {
  SpacePoint start, minimal;
  BurstSummary summary;         // of the minimal config
  int64_t evaluations = 0;      // bursts run (memo hits not counted)
  int64_t memo_hits = 0;
  int64_t implied = 0;          // candidates not run: at or below one seen not to fail this way
  int64_t accepted = 0;         // shrink steps taken
  int64_t ran = 0;               // bursts this shrink trained: for itself (asked for or not) and `spare`
  bool budget_exhausted = false;
  std::vector<SpacePoint> path;  // every point taken, in order (the last is `minimal`)
  bool joined = false;           // stopped at a point `reached` said another shrink passed through
};

// Shrinks `start` in passes, each candidate strictly simpler and taken only
// when it fails in the same class: (1) whole dimensions back to their
// simplest value, the farthest first (a window of up to parallelism() resets
// at once; the earliest failing one in order is taken, and the rest are tried
// again from the new point); (2) for each value still away from its simplest,
// a binary search for the smallest index (values are ordered by distance from
// the simplest) that still fails — in later passes one step down first;
// with more than one job, the binary search runs its next probe (both of
// them with three) on the slots its one candidate leaves idle, then `spare`.
// A result counts (memo, database, budget, evaluations) only when the
// decisions in order ask for it (until then the cache holds it), so the
// result, the bursts counted and where a budget runs out do not depend on
// the job count.
// Passes repeat until one takes nothing: then no reset and no single step
// down fails the same way (a local minimum). `reached` (optional) is asked
// of every point taken: true (a point another failure's shrink passed
// through) stops the shrink there, `joined`: from there on it is that one.
// `spare` (optional): candidates of shrinks to come (first_resets() of their
// starts), trained on slots this one leaves idle and held in the cache until
// their own shrink asks for them.
ShrinkResult shrink(const SearchSpace& space, const SpacePoint& start, const BurstSummary& start_summary,
                    Evaluator& evaluator, EvalCache& cache, const Budget& budget,
                    const std::function<void(const ShrinkResult&)>& progress = {},
                    const std::function<bool(const SpacePoint&)>& reached = {},
                    const std::vector<SpacePoint>& spare = {});

// The first candidates a shrink from `start` tries: each dimension away from
// its simplest value reset to it, the farthest first.
std::vector<SpacePoint> first_resets(const SearchSpace& space, const SpacePoint& start);

}  // namespace spikehunt
