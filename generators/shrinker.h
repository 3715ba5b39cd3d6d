// shrinker.h — a failing config shrunk to a minimal one that fails the same
// way: each candidate strictly simpler (closer to the space's simplest
// values), taken only when it fails with the same fault signature
// (record.h: non-finite in the same stage at the same tensor, extreme with
// the same first onset rule, crashed, timeout), so the minimal config fails
// as the failure's title says; bursts run by an Evaluator, none trained
// twice (memo.h), within a Budget.
// Example:
//   EvalCache cache(&store);
//   ShrinkResult r = shrink(space, start, start_summary, children, cache, budget);
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "generators/evaluator.h"
#include "generators/memo.h"
#include "generators/space.h"
#include "harness/record.h"

namespace spikehunt {

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
};

// Shrinks `start` in passes, each candidate strictly simpler and taken only
// when it fails with the same fault signature: (1) whole dimensions back to their
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
// A candidate below one seen healthy or failing in another class (on the
// ordered values: rates, momenta, batch counts) is taken not to fail this
// way without a burst; one that fails in the same class at another tensor
// or rule implies nothing below it.
// Passes repeat until one takes nothing: then no reset and no single step
// down fails the same way (a local minimum).
ShrinkResult shrink(const SearchSpace& space, const SpacePoint& start, const BurstSummary& start_summary,
                    Evaluator& evaluator, EvalCache& cache, const Budget& budget,
                    const std::function<void(const ShrinkResult&)>& progress = {});
// shrink() as shrink_ahead runs it: `ahead` true holds every result in the
// cache (counted by no one) instead of adding the ones the decisions ask for.
ShrinkResult shrink_passes(const SearchSpace& space, const SpacePoint& start, const BurstSummary& start_summary,
                           Evaluator& evaluator, EvalCache& cache, const Budget& budget,
                           const std::function<void(const ShrinkResult&)>& progress, bool ahead);

// The shrinker before shrink()'s passes, kept behind `sweep --shrinker tree`
// to compare with: a greedy walk of RapidCheck's shrink tree (gen.h:
// shrink_candidates), a window of parallelism() candidates at a time, every
// burst counted. No binary search, no idle-slot rule, no implied candidates.
enum class ShrinkMethod { kPasses, kTree };
ShrinkResult shrink_tree(const SearchSpace& space, const SpacePoint& start, const BurstSummary& start_summary,
                         Evaluator& evaluator, EvalCache& cache, const Budget& budget,
                         const std::function<void(const ShrinkResult&)>& progress = {});

}  // namespace spikehunt
