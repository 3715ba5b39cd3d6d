// guard.h — a regression guard for training code: record a pinned suite of
// configurations (seeds fixed) once, then rerun it in CI and fail when
// anything got less stable: a healthy config now goes extreme or non-finite
// (or an extreme one non-finite), an onset or first non-finite step came
// earlier, a loss left its tolerance, or the hash chain changed (the data
// pipeline feeds other batches).
// Example:
//   spikehunt guard record --suite guard.json --out guard.baseline.json
//   spikehunt guard check  --suite guard.json --baseline guard.baseline.json
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "base/child.h"
#include "harness/env.h"
#include "harness/record.h"
#include "scenarios/config.h"

namespace spikehunt {

// How far a rerun may move before it counts as a regression.
struct GuardTolerances {
  double loss_relative = 0.01;  // |loss - baseline| <= loss_absolute + loss_relative * |baseline| at every step
  double loss_absolute = 1e-4;
  int64_t onset_steps = 0;      // an onset (or first non-finite step) this many steps earlier is still fine
};

struct GuardCase {
  std::string name;
  TrainingConfig config;
};

// The suite file: {"configs": [{"name", "config": path-or-object (absent: the
// built-in default), "set": ["key=value", ...]}], "tolerances": {...}}.
// Paths are relative to the suite file. `overrides` (guard --set) apply to
// every config after its own "set". Bad suites are InputErrors naming the
// file and the field.
struct GuardSuite {
  std::vector<GuardCase> cases;
  GuardTolerances tolerances;
};
GuardSuite load_guard_suite(const std::string& path, const std::vector<std::string>& overrides = {});

// One case trained under the monitor.
struct GuardRun {
  std::string name;
  TrainingConfig config;
  BurstSummary summary;       // verdict (with the hash chain) and every step's hashes
  std::vector<double> losses; // every step's loss
};
GuardRun guard_run(const GuardCase& c);  // in this process
nlohmann::json guard_run_to_json(const GuardRun& r);
// An InputError naming `path` and `field` (e.g. "configs[1]") when it is not one.
GuardRun guard_run_from_json(const nlohmann::json& j, const std::string& path, const std::string& field);

// How record and check run the suite: every case is `PROGRAM burst --guard`
// in a persistent worker (child.h), so training code that segfaults, aborts
// or hangs past the timeout is a crashed or timeout run with a diff like any
// other regression instead of the end of the check.
struct GuardOptions {
  std::string binary;          // "": this executable (spikehunt, or the user's program calling cli_main)
  int jobs = 1;                // cases at once
  double timeout_seconds = 0;  // per case; 0: none
  PoolOptions pool;
  std::string junit_path;      // check: JUnit XML, a test case per config ("": none)
};
std::vector<GuardRun> guard_runs(const GuardSuite& suite, const GuardOptions& options);

struct GuardBaseline {
  Environment environment;
  std::string recorded;  // UTC time
  std::vector<GuardRun> runs;
};
void write_guard_baseline(const std::string& path, const std::vector<GuardRun>& runs);
GuardBaseline read_guard_baseline(const std::string& path);

// One line of a check's diff.
struct GuardFinding {
  bool regression = false;  // false: a note (an improvement, a changed config)
  std::string text;
};
std::vector<GuardFinding> guard_compare(const GuardRun& baseline, const GuardRun& now, const GuardTolerances& t);

// The verbs. record: exit 0 (2 on bad input). check: 0 when nothing got
// worse, 1 with the diff when something did, 2 on bad input.
int guard_record(const std::string& suite, const std::string& out, const std::vector<std::string>& overrides,
                 std::ostream& log, const GuardOptions& options = {});
int guard_check(const std::string& suite, const std::string& baseline, const std::vector<std::string>& overrides,
                std::ostream& log, const GuardOptions& options = {});

}  // namespace spikehunt
