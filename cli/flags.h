// flags.h — what several verbs parse alike: durations, shards (and a Slurm
// array task's), the worker-pool flags and the finishing flags that sweep and
// merge share, and where a config came from.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/child.h"
#include "generators/lr_sensitivity.h"
#include "generators/sweep.h"

namespace CLI {
class App;
}

namespace spikehunt {

// "30m", "90s", "1h30m", "45" (seconds); an InputError naming the verb and `flag` otherwise.
double parse_duration(const std::string& text, const std::string& verb, const std::string& flag);

// "1/3" -> {1, 3}: shard I of N, counting from 0; an InputError naming --shard otherwise.
std::pair<int64_t, int64_t> parse_shard(const std::string& text);
// The shard of a Slurm array task, from `env` (std::getenv): (SLURM_ARRAY_TASK_ID
// - SLURM_ARRAY_TASK_MIN) / SLURM_ARRAY_TASK_STEP of SLURM_ARRAY_TASK_COUNT, so
// --array=1-7:2 gives shards 0/4 to 3/4; nullopt outside an array task, an
// InputError naming the variable when they do not make a shard.
std::optional<std::pair<int64_t, int64_t>> shard_from_slurm(const std::function<const char*(const char*)>& env);

// An InputError naming the verb and flag when v < 1.
void check_positive(const char* verb, const char* flag, int64_t v);

// How bursts run (child.h's pool), for every verb that runs them.
struct WorkerArgs {
  bool process_per_burst = false;
  int64_t worker_bursts = PoolOptions{}.jobs_per_worker;
  int64_t worker_rss_mb = PoolOptions{}.rss_limit_mb;
};
void add_worker_flags(CLI::App* verb, WorkerArgs& a);
PoolOptions pool_options(const char* verb, const WorkerArgs& a);

// The flags of what a sweep does besides its search (its bursts, shrinks,
// budget), shared by `sweep` and `merge`.
struct FinishArgs : WorkerArgs {
  std::string budget, timeout = "5m", shrinker = "passes", junit;
  int64_t shrink_bursts = 60, max_shrinks = 3;
  int jobs = 2;
  bool no_progress = false;
};
void add_finish_flags(CLI::App* verb, FinishArgs& a, const char* budget_help, const char* shrink_bursts_names,
                      const char* shrink_bursts_help);
void apply_finish_args(const char* verb, const FinishArgs& a, SweepOptions* o);
// `path` when a file can be written there (not a folder, in a folder that
// exists): checked before anything trains, not after an hour of it; else an
// InputError naming the verb's `flag`.
std::string checked_output_file(const std::string& verb, const char* flag, const std::string& path);
// What a verb writes at an output flag, known by its first bytes: an existing
// file there that is not one (`kind` says what it would be) is the user's, and
// refused with an InputError naming the flag; nothing is overwritten.
enum class OutputKind { kJunit, kRules, kBaseline };
void refuse_foreign_output(const std::string& verb, const char* flag, const std::string& path, OutputKind kind);
// Every output flag of the parsed command (--out, --junit, OUT) against every
// other value it was given: an output that is one of its inputs (the same file,
// by any path) is refused, naming both, before anything runs.
void refuse_outputs_that_are_inputs(const CLI::App& command, const std::string& verb);
// The limit on open files (ulimit -n) against what the parsed command needs
// (more with more --jobs): a soft limit below it is raised as far as the hard
// limit allows; below that, InputError before anything runs (a sweep at 12
// ran, then failed to write its repros and report).
void ensure_open_files(const CLI::App& command, const std::string& verb);

// `lr-sensitivity`'s flags (cli/lr_sensitivity.cpp parses them):
// "FIELD=V1,V2,..." (what --vary takes), each value one the field takes; an
// InputError names --vary.
LrVary parse_vary(const std::string& text);
// "3e-4,1e-3,..." (what --lrs takes): each a learning rate in (0, 10];
// anything else is an InputError naming the verb's --lrs.
std::vector<double> parse_lrs(const std::string& text, const char* verb = "lr-sensitivity");

// --rules FILE (what `spikehunt calibrate` writes): the file's "health"
// fields as --set overrides, ahead of the verb's own --set (which win).
// An InputError names the file, the field and the value it rejects.
void add_rules_flag(CLI::App* verb, std::string& file);
std::vector<std::string> with_rules(const std::string& file, const std::vector<std::string>& sets);

// Where a config came from, as headers print it: "<built-in default>" or the
// file, and the overrides ("my.json with --set optimizer.lr=0.1").
std::string config_source(const std::string& file, const std::vector<std::string>& sets);

}  // namespace spikehunt
