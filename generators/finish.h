// finish.h — everything a sweep does after its search, on a database that
// holds the search runs (`sweep` and `merge` share it), in four phases:
//   1. distinct failures: the search runs grouped by fault signature, the
//      most frequent first;
//   2. shrinks: the first --max-shrinks of them shrunk to minimal configs
//      (with several slots, all at once first: shrink_ahead), a failure that
//      reaches another's shrink path joining it;
//   3. repros: each distinct minimal config recorded and replayed, as many at
//      once as there are slots;
//   4. the summary (rates, per-factor table, the failures with their repros,
//      replay commands and draft regression tests) and DIR/report.html.
// Example:
//   FinishContext c{options, dir, store, binary, children, cache, budget, start, search_bursts};
//   int exit_code = finish_sweep(c, std::cout);
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

#include "generators/shrinker.h"
#include "generators/store.h"
#include "generators/sweep.h"
#include "harness/record.h"

namespace spikehunt {

// What the phases after the search work on.
struct FinishContext {
  const SweepOptions& options;
  std::string dir;              // the sweep's folder: sweep.db, repros/, work/, report.html
  SweepStore& store;            // holds the search runs
  std::string binary;           // the program the bursts and repros run in
  Evaluator& children;          // runs the shrinks' bursts
  EvalCache& cache;             // the memo over the database (and what shrink_ahead holds)
  const Budget& budget;         // the sweep's wall time; each shrink's bursts
  std::chrono::steady_clock::time_point start;  // when the sweep started, for its time
  int64_t search_bursts = 0;    // search bursts this invocation ran
};

// The four phases; returns the exit code: 0 no failure, 1 failures found. A
// failure found in another environment than this process's (a merged shard
// on another kind of node) says that its shrink and replay here are not
// promised to be bit-exact.
int finish_sweep(const FinishContext& c, std::ostream& out);

// "" when `found` ran in this process's environment (or recorded none), else
// the warning that a shrink and replay here are not promised to be bit-exact.
std::string environment_note(const BurstSummary& found);

}  // namespace spikehunt
