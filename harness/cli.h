// cli.h — the `spikehunt` command line: one binary with verbs, each layer
// adding its own (harness: run, audit, replay, and the hidden burst that
// sweeps spawn; generators: sweep, shrink).
//   spikehunt run    [--config FILE] [--set key=value]... [--out DIR] [--no-checkpoints] [--fail-fast] [--print-config]
//   spikehunt audit  FILE.safetensors | --pair A B
//   spikehunt replay FILE.repro.json [--from-checkpoint] [--threads N]
//   spikehunt doctor [--config FILE | --planted NAME] [--set key=value]... [--json] [--verbose]
//   spikehunt guard  record|check --suite FILE (--out BASELINE | --baseline BASELINE) [--set key=value]...
//   spikehunt --version
// Conventions: an unknown verb or flag is named with did-you-mean; flag
// errors read like config errors (flag_error); printed commands start with
// the program as invoked (program_name()).
// Exit codes: 0 ok, 1 a finding (the burst failed, a checkpoint holds
// non-finite values, two checkpoints differ, a replay did not reproduce),
// 2 bad input, 3 internal error.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "scenarios/error.h"

namespace CLI {
class App;
}

namespace spikehunt {

constexpr int kExitInternal = 3;

class Cli {
 public:
  Cli();
  ~Cli();
  // Adds a verb; `run` is called when the command line names it.
  CLI::App* verb(const std::string& name, const std::string& description, std::function<int()> run,
                 bool hidden = false);
  // Parses, runs the verb, and maps errors to exit codes (InputError: 2).
  int main(int argc, char** argv);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

void add_harness_verbs(Cli& cli);

// A bad flag of a verb, in the form of config errors:
//   error: spikehunt sweep: --runs = 0 must be at least 1
//   hint: ...
InputError flag_error(const std::string& verb, const std::string& flag, const std::string& value,
                      const std::string& message, const std::string& hint = "");

}  // namespace spikehunt
