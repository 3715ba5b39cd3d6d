// replay.cpp — `spikehunt replay`: reruns a repro file and checks every
// recorded hash, the failure step, stage and tensor.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/verbs.h"
#include "harness/repro.h"

namespace spikehunt {

namespace {

struct ReplayArgs {
  std::string file;
  bool from_checkpoint = false;
  int64_t threads = 0;
  bool threads_given = false;
};

int replay_verb(const ReplayArgs& a) {
  if (a.threads_given && (a.threads < 1 || a.threads > kMaxThreads)) {  // the config field's range
    throw flag_error("replay", "--threads", std::to_string(a.threads),
                     "is not in [1, " + std::to_string(kMaxThreads) + "]",
                     "leave it out to replay on the repro's thread count");
  }
  const Repro repro = read_repro(a.file);
  ReplayOptions options;
  options.from_checkpoint = a.from_checkpoint;
  options.threads = a.threads_given ? a.threads : 0;
  // The checkpoint beside it is found from an absolute path: the training code may change directory.
  const ReplayReport r = replay(repro, std::filesystem::absolute(a.file).string(), options);
  for (const std::string& w : r.warnings) std::cout << "warning: " << w << "\n";
  const char* from = !a.from_checkpoint ? ""
                     : r.start_step == 0 ? " (its checkpoint: the onset is the first step, so it holds the initial state)"
                                         : " (its checkpoint)";
  std::printf("replayed %s from step %lld%s: %lld steps in %.2f s\n", a.file.c_str(),
              static_cast<long long>(r.start_step), from, static_cast<long long>(r.steps_run), r.seconds);
  if (r.reproduced) {
    std::printf("reproduced: %s", to_string(r.verdict.outcome));
    if (r.verdict.fault) std::printf(", %s", r.verdict.fault->describe().c_str());
    if (r.verdict.failure_step) std::printf(" at step %lld", static_cast<long long>(*r.verdict.failure_step));
    std::printf(", hash chain %s\n", r.verdict.hash_chain.hex().c_str());
    return kExitOk;
  }
  std::printf("not reproduced: %s\n", r.mismatch.c_str());
  return kExitFinding;
}

}  // namespace

void add_replay_verb(Cli& cli) {
  auto replay_args = std::make_shared<ReplayArgs>();
  CLI::App* replay_cmd = cli.verb("replay", "Rerun a repro file and check every recorded hash, the failure step, stage and tensor",
                                  [replay_args] { return replay_verb(*replay_args); });
  replay_cmd->add_option("file", replay_args->file, "The .repro.json file")->required();
  replay_cmd->add_flag("--from-checkpoint", replay_args->from_checkpoint,
                       "Start from the repro's last healthy checkpoint instead of step 0");
  CLI::Option* threads =
      replay_cmd->add_option("--threads", replay_args->threads, "Thread count (default: the repro's; others are not bit-exact)");
  replay_cmd->callback([replay_args, threads] { replay_args->threads_given = threads->count() > 0; });
}

}  // namespace spikehunt
