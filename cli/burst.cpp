// burst.cpp — the hidden `spikehunt burst`: one burst whose summary JSON a
// sweep, shrink, merge, guard or lr-sensitivity reads back (what children run).
#include <sys/prctl.h>

#include <csignal>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/files.h"
#include "cli/verbs.h"
#include "harness/child_verdict.h"
#include "generators/store.h"
#include "base/program.h"
#include "harness/burst.h"
#include "harness/env.h"
#include "harness/guard.h"
#include "harness/repro.h"
#include "harness/results.h"

namespace spikehunt {

namespace {

struct BurstArgs {
  std::string config, result, repro, guard, build;
  bool hashes = false;
  int64_t heldout = 0;
};

int burst_verb(const BurstArgs& given) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // die with the sweep that spawned us
  // Every path absolute before the training code runs: it may change the working directory.
  BurstArgs a = given;
  for (std::string* p : {&a.config, &a.result, &a.repro}) {
    if (!p->empty()) *p = std::filesystem::absolute(*p).string();
  }
  if (!a.build.empty()) {  // the sweep's code: a worker that loaded other code refuses (no verdict of it)
    const std::string mine = loaded_build().empty() ? build_id(self_executable()) : loaded_build();
    if (mine != a.build) {
      std::cerr << "error: this worker runs build " << mine << ", the sweep's is " << a.build
                << ": the program or the files it is built from changed since the sweep started\n";
      return kExitOtherBuild;
    }
  }
  const TrainingConfig config = load_config(a.config);
  if (!a.guard.empty()) {  // a guard case: the whole GuardRun (every loss too)
    write_file_atomic(a.result, guard_run_to_json(guard_run({a.guard, config})).dump() + "\n");
    return kExitOk;
  }
  BurstSummary summary;
  if (!a.repro.empty()) {
    Repro repro = record_repro(config, a.repro);
    summary = summary_of(repro.verdict, std::move(repro.step_hashes));
  } else if (a.heldout > 0) {
    summary = run_config_measured(config, a.heldout);
  } else {
    BurstResult r = run_config(config, BurstOptions{});
    summary = summary_of(r.verdict, std::move(r.step_hashes));
  }
  if (!a.hashes) summary.step_hashes.clear();
  summary.environment = environment(to_string(config.device), config.threads);
  nlohmann::json j = to_json(summary);
  j["config_hash"] = config_hash(config).hex();
  write_file_atomic(a.result, j.dump() + "\n");
  return kExitOk;
}

}  // namespace

void add_burst_verb(Cli& cli) {
  auto burst_args = std::make_shared<BurstArgs>();
  CLI::App* burst = cli.verb("burst", "Run one burst and write its summary (what sweeps spawn)",
                             [burst_args] { return burst_verb(*burst_args); }, /*hidden=*/true);
  burst->add_option("--config", burst_args->config, "The config JSON to train")->required();
  burst->add_option("--result", burst_args->result, "Where to write the burst's summary JSON")->required();
  burst->add_option("--repro", burst_args->repro, "Also record a repro file here (with its checkpoint and trace)");
  burst->add_flag("--hashes", burst_args->hashes, "Put every step's hashes in the summary");
  burst->add_option("--build", burst_args->build, "Refuse (exit 4) unless this process runs this build id");
  burst->add_option("--heldout", burst_args->heldout,
                    "Also measure the held-out loss before and after on this many samples, and the largest logits");
  burst->add_option("--guard", burst_args->guard, "Run it as the guard case of this name: write its GuardRun (every loss)");
}

}  // namespace spikehunt
