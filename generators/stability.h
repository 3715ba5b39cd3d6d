// stability.h — a small budgeted property over any scenario, in this process:
// sample a space, train each config under the monitor, and on the first
// failure shrink it to a minimal config and record its repro. What the
// SPIKEHUNT_EXPECT_STABLE GoogleTest macro (include/spikehunt/gtest.h) runs.
// Example:
//   StabilityResult r = check_stability(SearchSpace::load("my_space.json"), StabilityOptions{});
//   if (!r.stable) std::cerr << r.message;
#pragma once

#include <cstdint>
#include <string>

#include "generators/space.h"
#include "harness/record.h"

namespace spikehunt {

struct StabilityOptions {
  int64_t runs = 8;                // configs sampled from the space
  uint64_t seed = 0;               // sample i is the same config for the same seed
  int64_t shrink_evaluations = 30; // bursts the shrink of a failure may run
  std::string out_dir = "spikehunt-failures";  // where a failure's repro is written
};

struct StabilityResult {
  bool stable = true;
  int64_t runs = 0;         // configs trained before the first failure (or all)
  int64_t failed_sample = -1;
  TrainingConfig minimal;   // the shrunk failing config
  Verdict verdict;          // of the minimal config, as recorded in the repro
  std::string repro_path;
  std::string message;      // what failed, the minimal config, the repro and how to replay it
};

StabilityResult check_stability(const SearchSpace& space, const StabilityOptions& options = {});

}  // namespace spikehunt
