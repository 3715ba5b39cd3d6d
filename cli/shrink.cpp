// shrink.cpp — `spikehunt shrink`: one failing config (a file or a run's
// folder) shrunk to a minimal one that fails the same way.
#include <filesystem>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "base/program.h"
#include "cli/flags.h"
#include "cli/verbs.h"
#include "generators/shrink_config.h"

namespace spikehunt {

namespace {

struct ShrinkArgs : WorkerArgs {
  std::string config, run, space, rules, timeout = "5m", out;
  int64_t bursts = 100;
  int jobs = 2;
};

}  // namespace

void add_shrink_verb(Cli& cli) {
  auto k = std::make_shared<ShrinkArgs>();
  CLI::App* shrink_cmd = cli.verb("shrink", "Shrink one failing config to a minimal one that fails the same way", [k] {
    if (k->config.empty() == k->run.empty()) {
      throw flag_error("shrink", "--config / --run", "", "give exactly one of them",
                       program_name() + " shrink --config FILE, or --run ID of a results/ folder");
    }
    check_positive("shrink", "--bursts", k->bursts);
    check_positive("shrink", "-j", k->jobs);
    ShrinkOptions o;
    if (!k->config.empty()) {
      o.source = k->config;
    } else {
      o.source = std::filesystem::is_directory(k->run) ? k->run : "results/" + k->run;
      if (!std::filesystem::is_directory(o.source)) {
        throw flag_error("shrink", "--run", k->run, "is neither a run folder nor a run id under results/");
      }
      o.source += "/config.json";
    }
    o.config = load_config(o.source, with_rules(k->rules, {}));
    if (!k->space.empty()) o.space = SearchSpace::load(k->space);
    o.jobs = k->jobs;
    o.timeout_seconds = parse_duration(k->timeout, "shrink", "--timeout");
    o.evaluations = k->bursts;
    o.out_dir = k->out;
    o.pool = pool_options("shrink", *k);
    return run_shrink(o, std::cout);
  });
  shrink_cmd->add_option("--config", k->config, "The failing config JSON");
  shrink_cmd->add_option("--run", k->run, "A `spikehunt run` result: its id under results/, or its folder");
  add_rules_flag(shrink_cmd, k->rules);
  shrink_cmd->add_option("--space", k->space, "Space giving the simplest values and grids (default: built-in)");
  shrink_cmd->add_option("-j,--jobs", k->jobs, "Bursts at once")->capture_default_str();
  shrink_cmd->add_option("--bursts", k->bursts, "Bursts the shrink may run (a count; a sweep's --budget is time)")
      ->capture_default_str();
  shrink_cmd->add_option("--timeout", k->timeout, "Per-burst timeout")->capture_default_str();
  shrink_cmd->add_option("--out", k->out, "Folder for the minimal config and repro (default: results/shrink-<hash>)");
  add_worker_flags(shrink_cmd, *k);
}

}  // namespace spikehunt
