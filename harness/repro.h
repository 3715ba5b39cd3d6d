// repro.h — a failure anyone can replay: the minimal config, the environment
// it failed in, the verdict, every step's input and label hash up to the
// failure, and (optionally) a safetensors checkpoint of the last healthy
// state (model, optimizer, RNG, data position, monitor windows) so the
// failure replays in the few steps after it instead of from step 0.
// Example:
//   Repro r = read_repro("results/sweep/repros/non_finite-forward-fc1_act.repro.json");
//   ReplayReport rep = replay(r, path, ReplayOptions{.from_checkpoint = true});
//   std::cout << (rep.reproduced ? "reproduced" : rep.mismatch);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/burst.h"
#include "harness/env.h"
#include "harness/record.h"
#include "harness/repro_file.h"
#include "scenarios/config.h"

namespace spikehunt {

// Writes `path` (JSON) and, when `state` is given, its checkpoint beside it
// ("<path without .repro.json>.last_healthy.safetensors"); both atomically.
void write_repro(const std::string& path, Repro repro, const std::optional<StateSnapshot>& state);

struct ReplayOptions {
  bool from_checkpoint = false;
  int64_t threads = 0;  // 0: the repro's; another count is allowed but not bit-exact
};

struct ReplayReport {
  bool reproduced = false;
  std::string mismatch;               // the first difference, when not reproduced
  std::vector<std::string> warnings;  // environment differences
  int64_t start_step = 0;
  int64_t steps_run = 0;
  double seconds = 0;                 // training, from the first replayed step to the end
  Verdict verdict;
};

// Reruns the repro and checks every recorded hash, the onset and failure
// steps, the fault's stage, tensor and counts.
ReplayReport replay(const Repro& repro, const std::string& repro_path, const ReplayOptions& options);

// Runs `config` as a repro would record it (step hashes, the last healthy
// state) and writes the repro file.
Repro record_repro(const TrainingConfig& config, const std::string& path);

// A GoogleTest a user can paste (a pytest test for a Python scenario): the
// config as overrides of the built-in default, expecting a healthy burst (so
// it fails until the instability is fixed).
std::string draft_regression_test(const Repro& repro, const std::string& repro_path);

}  // namespace spikehunt
