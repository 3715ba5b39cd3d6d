// cli.h — the `spikehunt` command line: one binary, one verb a file in cli/
// (README's table of commands names them; docs/cli.md is the reference).
//   spikehunt run | audit | guard | replay | doctor        one config or file
//   spikehunt sweep | merge | compare | shrink | lr-sensitivity | report
//   spikehunt --version
// (and the hidden burst and worker verbs that sweeps' children run).
// Conventions: an unknown verb or flag is named with did-you-mean; flag
// errors read like config errors (flag_error, base/error.h); printed commands
// start with the program as invoked (program_name(), base/child.h).
// Exit codes (base/error.h): 0 ok, 1 a finding, 2 bad input, 3 internal error.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace CLI {
class App;
}

namespace spikehunt {

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

// Every verb of the spikehunt command line, in the order help lists them.
void add_verbs(Cli& cli);

// The whole spikehunt command line; returns the exit code. A program of your
// own registers its scenarios, then returns cli_main(argc, argv): its sweeps
// spawn the program itself, so the children know the scenarios too.
int cli_main(int argc, char** argv);

}  // namespace spikehunt
