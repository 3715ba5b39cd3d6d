// cli.h — the generators' verbs:
//   spikehunt sweep  [--space FILE] [--runs N] [--seed S] [-j J] [--budget 30m] [--out DIR]
//                    [--timeout 5m] [--shrink-bursts N] [--max-shrinks K] [--no-progress]
//                    [--shard I/N] [--shrink-in-shard]
//   spikehunt merge  OUT SHARD_DIR... [--allow-missing] [-j J] [--shrink-bursts N] [--max-shrinks K]
//   spikehunt compare A B
//   spikehunt shrink (--config FILE | --run ID) [--space FILE] [-j J] [--bursts N] [--timeout 5m] [--out DIR]
//   spikehunt report [DIR] [--out FILE]
// and cli_main(): the whole spikehunt command line, for the spikehunt binary
// and for users' own programs that register their scenarios first.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "harness/cli.h"

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

void add_generator_verbs(Cli& cli);

// Every verb (run, audit, replay, doctor, guard, sweep, shrink, report and the
// hidden burst a sweep's children run); returns the exit code. A program of
// your own registers its scenarios, then returns cli_main(argc, argv): its
// sweeps spawn the program itself, so the children know the scenarios too.
int cli_main(int argc, char** argv);

}  // namespace spikehunt
