// cli.h — the `spikehunt` command line: one binary with verbs, each layer
// adding its own (harness: run, audit, replay, and the hidden burst that
// sweeps spawn; generators: sweep, shrink).
//   spikehunt run    [--config FILE] [--set key=value]... [--out DIR] [--no-checkpoints]
//   spikehunt audit  FILE.safetensors | --pair A B
//   spikehunt replay FILE.repro.json [--from-checkpoint] [--threads N]
//   spikehunt doctor [--config FILE | --planted NAME] [--json]
//   spikehunt --version
// Exit codes: 0 ok, 1 a finding (the burst failed, a checkpoint holds
// non-finite values, two checkpoints differ, a replay did not reproduce),
// 2 bad input, 3 internal error.
#pragma once

#include <functional>
#include <memory>
#include <string>

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

}  // namespace spikehunt
