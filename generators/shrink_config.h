// shrink_config.h — `spikehunt shrink`: one failing config shrunk over the
// space around it to a minimal config that fails the same way, its repro
// recorded and replayed.
// Example:
//   ShrinkOptions o;  o.config = load_config("failing.json");
//   int exit_code = run_shrink(o, std::cout);
#pragma once

#include <ostream>
#include <string>

#include "base/child.h"
#include "generators/space.h"
#include "scenarios/config.h"

namespace spikehunt {

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

}  // namespace spikehunt
