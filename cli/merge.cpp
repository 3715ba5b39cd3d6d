// merge.cpp — `spikehunt merge`: joins the shards of a sharded sweep, then
// shrinks, replays and reports as one machine's sweep would.
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "cli/flags.h"
#include "cli/verbs.h"
#include "generators/merge.h"

namespace spikehunt {

void add_merge_verb(Cli& cli) {
  struct MergeArgs : FinishArgs {
    std::string out;
    std::vector<std::string> shards;
    bool allow_missing = false;
  };
  auto mg = std::make_shared<MergeArgs>();
  CLI::App* merge = cli.verb(
      "merge", "Join the shards of a sharded sweep, then shrink, replay and report as one machine's sweep would", [mg] {
        MergeOptions o;
        apply_finish_args("merge", *mg, &o.sweep);
        o.out_dir = mg->out;
        o.shard_dirs = mg->shards;
        o.allow_missing = mg->allow_missing;
        return run_merge(o, std::cout);
      });
  merge->add_option("OUT", mg->out, "The merged sweep's folder (sweep.db, repros/, report.html)")->required();
  merge->add_option("SHARD_DIR", mg->shards, "The shards' folders, e.g. OUT/shard-*")->required();
  merge->add_flag("--allow-missing", mg->allow_missing, "Merge even when some samples are in no shard (they are listed)");
  add_finish_flags(merge, *mg, "Wall-time budget for the shrinks (a duration)", "--shrink-bursts",
                   "Bursts each shrink may run");
}

}  // namespace spikehunt
