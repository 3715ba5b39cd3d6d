// cli.h — the generators' verbs:
//   spikehunt sweep  [--space FILE] [--runs N] [--seed S] [-j J] [--budget 30m] [--out DIR]
//                    [--timeout 5m] [--shrink-budget N] [--max-shrinks K]
//   spikehunt shrink (--config FILE | --run ID) [--space FILE] [-j J] [--budget N] [--out DIR]
#pragma once

#include <string>

#include "harness/cli.h"

namespace spikehunt {

// "30m", "90s", "1h30m", "45" (seconds); InputError naming `flag` otherwise.
double parse_duration(const std::string& text, const std::string& flag);

void add_generator_verbs(Cli& cli);

}  // namespace spikehunt
