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
#include <mutex>
#include <optional>
#include <string>
#include <utility>
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
  void stream(const std::function<std::optional<StreamJob>(bool idle, bool* finished)>& next,
              const std::function<void(size_t, const BurstSummary&)>& on_result) override;
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

  void hold(const std::string& config_hash, const BurstSummary& summary);
  bool holds(const std::string& config_hash) const;
  std::optional<BurstSummary> peek(const std::string& config_hash) const;  // and keep holding it
  std::optional<BurstSummary> release(const std::string& config_hash);     // and forget it
  int64_t held() const;                                                    // trained, never asked for

 private:
  mutable std::mutex mu_;  // shrinks run ahead in threads of their own (shrink_ahead)
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
  int64_t ran = 0;               // bursts this shrink trained (asked for by its decisions in order or not)
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
// them with three) on the slots its one candidate leaves idle.
// A result counts (memo, database, budget, evaluations) only when the
// decisions in order ask for it (until then the cache holds it), so the
// result, the bursts counted and where a budget runs out do not depend on
// the job count.
// Passes repeat until one takes nothing: then no reset and no single step
// down fails the same way (a local minimum). `reached` (optional) is asked
// of every point taken: true (a point another failure's shrink passed
// through) stops the shrink there, `joined`: from there on it is that one.
ShrinkResult shrink(const SearchSpace& space, const SpacePoint& start, const BurstSummary& start_summary,
                    Evaluator& evaluator, EvalCache& cache, const Budget& budget,
                    const std::function<void(const ShrinkResult&)>& progress = {},
                    const std::function<bool(const SpacePoint&)>& reached = {});

// The shrinker before shrink()'s passes, kept behind `sweep --shrinker tree`
// to compare with: a greedy walk of RapidCheck's shrink tree (gen.h:
// shrink_candidates), a window of parallelism() candidates at a time, every
// burst counted. No binary search, no idle-slot rule, no stop at another
// shrink's path.
enum class ShrinkMethod { kPasses, kTree };
ShrinkResult shrink_tree(const SearchSpace& space, const SpacePoint& start, const BurstSummary& start_summary,
                         Evaluator& evaluator, EvalCache& cache, const Budget& budget,
                         const std::function<void(const ShrinkResult&)>& progress = {});

// The shrinks of several failures at once, before they run in order: one
// thread each, sharing the evaluator's slots (the first one's bursts first,
// each shrink filling its share of them: parallelism() over the shrinks still
// running), a config two of them ask for trained once. Every burst is only
// held in the cache, none counted; a shrink that takes a point an earlier one
// took stops there. The shrinks in order then find their bursts trained and
// decide as without this, so it changes how long they take, not what they
// find. Returns the bursts it trained.
int64_t shrink_ahead(const SearchSpace& space, const std::vector<std::pair<SpacePoint, BurstSummary>>& starts,
                     Evaluator& evaluator, EvalCache& cache, const Budget& budget);

}  // namespace spikehunt
