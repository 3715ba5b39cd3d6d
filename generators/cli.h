// cli.h — the generators' verbs:
//   spikehunt sweep  [--space FILE] [--runs N] [--seed S] [-j J] [--budget 30m] [--out DIR]
//                    [--timeout 5m] [--shrink-bursts N] [--max-shrinks K] [--no-progress]
//   spikehunt shrink (--config FILE | --run ID) [--space FILE] [-j J] [--bursts N] [--timeout 5m] [--out DIR]
//   spikehunt report [DIR] [--out FILE]
// and cli_main(): the whole spikehunt command line, for the spikehunt binary
// and for users' own programs that register their scenarios first.
#pragma once

#include <string>

#include "harness/cli.h"

namespace spikehunt {

// "30m", "90s", "1h30m", "45" (seconds); an InputError naming the verb and `flag` otherwise.
double parse_duration(const std::string& text, const std::string& verb, const std::string& flag);

void add_generator_verbs(Cli& cli);

// Every verb (run, audit, replay, doctor, guard, sweep, shrink, report and the
// hidden burst a sweep's children run); returns the exit code. A program of
// your own registers its scenarios, then returns cli_main(argc, argv): its
// sweeps spawn the program itself, so the children know the scenarios too.
int cli_main(int argc, char** argv);

}  // namespace spikehunt
