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

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

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
};

// "46%": a rate for reports.
std::string percent(double x);

// 95% Wilson score interval of k successes in n trials.
std::pair<double, double> wilson_interval(int64_t k, int64_t n);

// The factor values a config falls under, for the per-factor failure rates:
// {"activation", "leaky_relu"}, {"task order", "B>A"}, {"lr decade", "[0.1, 1)"},
// {"momentum", "(0.5, 0.9]"}, {"optimizer", "sgd"}, {"seed", "3"}.
std::vector<std::pair<std::string, std::string>> factors_of(const TrainingConfig& c);

// Failure rates of a sweep's search runs, overall and per factor.
struct RateCell {
  int64_t failed = 0;
  int64_t runs = 0;
};
struct SweepRates {
  RateCell all;
  std::map<std::string, int64_t> by_outcome;  // failed runs per outcome
  std::map<std::pair<std::string, std::string>, RateCell> factors;       // (factor, value)
  std::map<std::pair<std::string, std::string>, RateCell> lr_momentum;   // (lr decade, momentum bucket)
};
SweepRates sweep_rates(const std::vector<RunRow>& searched, const std::string& source);

// Runs (or resumes) a sweep; returns the exit code: 0 no failure, 1 failures found.
int run_sweep(const SweepOptions& options, std::ostream& out);

struct ShrinkOptions {
  TrainingConfig config;            // the failing config
  std::string source;               // where it came from, for messages
  SearchSpace space = SearchSpace::builtin();  // its simplest values and grids
  int jobs = 2;
  double timeout_seconds = 300;
  int64_t evaluations = 100;        // bursts the shrink may run
  std::string out_dir;              // "": results/shrink-<config hash>
  std::string binary;               // "": this executable
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
