// sweep.cpp — `spikehunt sweep`: samples a search space (or one shard of it),
// then shrinks, records and replays every distinct failure.
#include <cstdlib>
#include <iostream>
#include <memory>
#include <tuple>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/flags.h"
#include "cli/verbs.h"
#include "generators/sweep.h"

namespace spikehunt {

namespace {

struct SweepArgs : FinishArgs {
  std::string space, rules, out = "results/sweep", shard;
  int64_t runs = 24;
  uint64_t seed = 0;
  bool shrink_in_shard = false, allow_code_change = false;
};

}  // namespace

void add_sweep_verb(Cli& cli) {
  auto s = std::make_shared<SweepArgs>();
  CLI::App* sweep = cli.verb(
      "sweep", "Sample a search space, run each burst in a child process, shrink and replay every distinct failure", [s] {
        SweepOptions o;
        if (!s->space.empty()) {
          o.space = SearchSpace::load(s->space);
          o.space_source = s->space;
        }
        if (!s->rules.empty()) {  // the rules file's health fields over the space's base config
          nlohmann::json j = o.space.to_json();
          if (!j.contains("base")) j["base"] = nlohmann::json::object();
          apply_overrides(j["base"], with_rules(s->rules, {}));
          o.space = SearchSpace::from_json(j, o.space_source);
          o.space_source += " with --rules " + s->rules;
        }
        check_positive("sweep", "--runs", s->runs);
        apply_finish_args("sweep", *s, &o);
        o.runs = s->runs;
        o.seed = s->seed;
        o.out_dir = s->out;
        if (!s->shard.empty()) {
          std::tie(o.shard_index, o.shard_count) = parse_shard(s->shard);
        } else if (const auto slurm = shard_from_slurm(std::getenv)) {
          std::tie(o.shard_index, o.shard_count) = *slurm;
          std::cout << "shard " << shard_text(o.shard_index, o.shard_count) << " from the Slurm array (task "
                    << std::getenv("SLURM_ARRAY_TASK_ID") << ")\n";
        }
        if (s->shrink_in_shard && o.shard_count == 1) {
          throw flag_error("sweep", "--shrink-in-shard", "", "needs --shard I/N (or a Slurm array task)");
        }
        o.shard_shrinks = s->shrink_in_shard;
        o.allow_code_change = s->allow_code_change;
        if (!o.junit_path.empty() && o.shard_count > 1 && !o.shard_shrinks) {
          throw flag_error("sweep", "--junit", o.junit_path, "applies where failures are shrunk: a shard only searches",
                           "give --junit to merge, or add --shrink-in-shard");
        }
        std::cout << "seed " << o.seed << " (rerun with --seed " << o.seed << " to resume or repeat)\n";
        return run_sweep(o, std::cout);
      });
  sweep->add_option("--space", s->space, "Search space JSON (default: the built-in space, configs/space.json)");
  add_rules_flag(sweep, s->rules);
  sweep->add_option("--runs", s->runs, "Search samples")->capture_default_str();
  sweep->add_option("--seed", s->seed, "Sweep seed: sample i is the same point for the same seed")->capture_default_str();
  add_finish_flags(sweep, *s, "Wall-time budget for the whole sweep, e.g. 30m, 90s, 1h30m (a duration)",
                   "--shrink-bursts,--shrink-budget", "Bursts each shrink may run (--shrink-budget: its old name)");
  sweep->add_option("--out", s->out, "Folder for sweep.db and repros/")->capture_default_str();
  sweep->add_option("--shard", s->shard,
                    "I/N: search only samples i with i mod N = I, into OUT/shard-I-of-N (default in a Slurm array task: "
                    "(SLURM_ARRAY_TASK_ID - MIN) / STEP of SLURM_ARRAY_TASK_COUNT); then `merge`");
  sweep->add_flag("--shrink-in-shard", s->shrink_in_shard, "A shard shrinks, records and replays its own failures too");
  sweep->add_flag("--allow-code-change", s->allow_code_change,
                  "Resume a sweep whose code changed since it started (said in the summary and the report)");
}

}  // namespace spikehunt
