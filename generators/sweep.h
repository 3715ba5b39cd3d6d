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

#include "generators/driver.h"
#include "generators/space.h"
#include "harness/record.h"
#include "harness/store.h"

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
  PoolOptions pool;                 // how bursts run (child.h): persistent workers by default
  ShrinkMethod shrinker = ShrinkMethod::kPasses;  // kTree: the shrinker before passes, to compare with
  // Sharding (`sweep --shard I/N`): this process searches the samples i with
  // i mod shard_count = shard_index, into OUT/shard-I-of-N/sweep.db; the same
  // seed and space give the same configs whatever N is. `spikehunt merge`
  // joins the shards and shrinks. shard_shrinks: the shard shrinks its own
  // failures too.
  int64_t shard_index = 0, shard_count = 1;
  bool shard_shrinks = false;
};

// "OUT/shard-1-of-3": where shard I of N keeps its database.
std::string shard_folder(const std::string& out_dir, int64_t index, int64_t count);
std::string shard_text(int64_t index, int64_t count);  // "1/3"

// "46%": a rate for reports.
std::string percent(double x);

// 95% Wilson score interval of k successes in n trials.
std::pair<double, double> wilson_interval(int64_t k, int64_t n);

// Where a config falls along one dimension of its space, for the per-factor
// failure rates and the failure map: the dimension's field and a bucket of
// its value — a decade for a log range ("[0.01, 0.1)"), the value for a set,
// a task order ("B>A") or a range of at most 10 values, else one of four
// equal-width bins ("[0, 0.25)"). `order` sorts the buckets of a dimension.
struct Factor {
  std::string field;   // "optimizer.lr", "params.warmup", ...
  std::string bucket;
  double order = 0;
  std::optional<double> value;  // the numeric value, for the map's scatter
};
std::vector<Factor> factors_of(const SearchSpace& space, const nlohmann::json& config);

// Failure rates of a sweep's search runs, overall, per dimension of its space,
// and over its first two numeric dimensions (the failure map).
struct RateCell {
  int64_t failed = 0;
  int64_t runs = 0;
};
struct FactorRate {
  std::string field, bucket;
  double order = 0;
  RateCell cell;
};
struct SweepRates {
  RateCell all;
  std::map<std::string, int64_t> by_outcome;  // failed runs per outcome
  std::vector<FactorRate> factors;            // in the space's dimension order, buckets ascending
  // The failure map over SearchSpace::map_axes() ("" when the space has none).
  std::string map_x, map_y;
  std::vector<FactorRate> map_x_buckets, map_y_buckets;               // the axes, ascending
  std::map<std::pair<std::string, std::string>, RateCell> map;        // (x bucket, y bucket)
};
SweepRates sweep_rates(const std::vector<RunRow>& searched, const SearchSpace& space);

// Runs (or resumes) a sweep; returns the exit code: 0 no failure, 1 failures found.
int run_sweep(const SweepOptions& options, std::ostream& out);

// Everything a sweep does after its search, on a database that holds the
// search runs (`sweep` and `merge` share it): groups the failures by
// signature, shrinks the most frequent, records and replays their repros,
// prints the summary and writes DIR/report.html. A failure found in another
// environment than this process's (a merged shard on another kind of node)
// says that its shrink and replay here are not promised to be bit-exact.
int finish_sweep(const SweepOptions& o, const std::string& dir, SweepStore& store, const std::string& binary,
                 Evaluator& children, EvalCache& cache, const Budget& budget,
                 std::chrono::steady_clock::time_point start, int64_t search_bursts, std::ostream& out);

// What a failure that shrank to an earlier one's minimal config records as
// its replay ("one failure with SIGNATURE: it shrank to the same minimal
// config"); with "" the prefix all such records start with.
std::string one_failure_with(const std::string& signature);

// "" when `found` ran in this process's environment (or recorded none), else
// the warning that a shrink and replay here are not promised to be bit-exact.
std::string environment_note(const BurstSummary& found);

struct ShrinkOptions {
  TrainingConfig config;            // the failing config
  std::string source;               // where it came from, for messages
  SearchSpace space = SearchSpace::builtin();  // its simplest values and grids
  int jobs = 2;
  double timeout_seconds = 300;
  int64_t evaluations = 100;        // bursts the shrink may run
  std::string out_dir;              // "": results/shrink-<config hash>
  std::string binary;               // "": this executable
  PoolOptions pool;
};

// Shrinks one failing config: prints the minimal config as a diff from the
// original, the bursts spent, the repro and its replay. Exit code: 0 when the
// config does not fail (nothing to shrink), 1 when it does.
int run_shrink(const ShrinkOptions& options, std::ostream& out);

// Records the repro of `config` at `path` (a child process runs it) and
// replays it from its checkpoint in another child; returns the replay's
// verdict line ("reproduced: ..." or what went wrong) and sets *ok.
std::string record_and_replay(const std::string& binary, const TrainingConfig& config, const std::string& path,
                              const std::string& expected_class, double timeout_seconds, const std::string& work_dir,
                              bool* ok);

}  // namespace spikehunt
