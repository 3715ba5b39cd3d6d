// sweep.h — a sweep: sample a space, run each sample's burst in a child
// process, commit each finished run to DIR/sweep.db, shrink each distinct
// failure (by fault signature) to a minimal config, write its repro and
// replay it from the checkpoint, then summarize: the failure rate overall and
// per factor with 95% Wilson intervals, and the shrunk failures with their
// replay commands and draft regression tests. A killed sweep resumes from the
// database: sample i is the same point every time (seed, i), and every burst
// already run is read back instead of trained again.
// Example:
//   SweepOptions o;  o.space = SearchSpace::builtin();  o.runs = 24;
//   int exit_code = run_sweep(o, std::cout);
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "generators/shrinker.h"
#include "generators/space.h"
#include "generators/store.h"
#include "harness/record.h"

namespace spikehunt {

struct SweepOptions {
  SearchSpace space = SearchSpace::builtin();
  std::string space_source = "<built-in space>";
  uint64_t seed = 0;
  int64_t runs = 24;                // search samples
  int jobs = 2;                     // bursts at once
  double timeout_seconds = 300;     // per burst
  double budget_seconds = 0;        // the whole sweep; 0: none
  int64_t shrink_evaluations = 60;  // bursts each shrink may run
  int64_t max_shrinks = 3;          // distinct failures shrunk, most frequent first
  std::string out_dir = "results/sweep";
  std::string binary;               // the spikehunt executable ("": this one)
  bool progress = true;             // a progress bar on a terminal
  std::string junit_path;           // --junit: JUnit XML of the distinct failures ("": none)
  PoolOptions pool;                 // how bursts run (child.h): persistent workers by default
  ShrinkMethod shrinker = ShrinkMethod::kPasses;  // kTree: the shrinker before passes, to compare with
  // Sharding (`sweep --shard I/N`): this process searches the samples i with
  // i mod shard_count = shard_index, into OUT/shard-I-of-N/sweep.db; the same
  // seed and space give the same configs whatever N is. `spikehunt merge`
  // joins the shards and shrinks. shard_shrinks: the shard shrinks its own
  // failures too.
  int64_t shard_index = 0, shard_count = 1;
  bool shard_shrinks = false;
  // A resume whose code (build_id) is not the one the sweep started with goes on, said in the summary
  // and the report, instead of being refused.
  bool allow_code_change = false;
};

// "OUT/shard-1-of-3": where shard I of N keeps its database.
std::string shard_folder(const std::string& out_dir, int64_t index, int64_t count);
std::string shard_text(int64_t index, int64_t count);  // "1/3"


// Runs (or resumes) a sweep; returns the exit code: 0 no failure, 1 failures found.
int run_sweep(const SweepOptions& options, std::ostream& out);

}  // namespace spikehunt
