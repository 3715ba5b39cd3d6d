// rank.cpp — the hidden `spikehunt rank`: one rank (1 and up) of a
// data-parallel burst, started by rank 0 (harness/ranks.h: run_burst_ranked).
#include <sys/prctl.h>

#include <csignal>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/verbs.h"
#include "harness/ranks.h"
#include "scenarios/config.h"

namespace spikehunt {

namespace {

struct RankArgs {
  std::string config_json, state;
  int64_t rank = 1, world = 2, start_step = 0;
  int port = 0;
};

}  // namespace

void add_rank_verb(Cli& cli) {
  auto a = std::make_shared<RankArgs>();
  CLI::App* rank = cli.verb("rank", "Run one rank of a data-parallel burst (what rank 0 starts)", [a] {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // die with rank 0
    const TrainingConfig config = parse_config(nlohmann::json::parse(a->config_json), "--config-json");
    return run_rank(config, a->rank, a->world, a->port, a->state, a->start_step);
  }, /*hidden=*/true);
  rank->add_option("--config-json", a->config_json, "the burst's config")->required();
  rank->add_option("--rank", a->rank, "this rank")->required();
  rank->add_option("--world", a->world, "the ranks in all")->required();
  rank->add_option("--port", a->port, "rank 0's store")->required();
  rank->add_option("--start-step", a->start_step, "the step the burst resumes at");
  rank->add_option("--state", a->state, "rank 0's state at --start-step (safetensors)");
}

}  // namespace spikehunt
