// worker.cpp — the hidden `spikehunt worker`: a pool's persistent worker
// (base/child.h), running the burst jobs sent on fd 3 until it closes.
#include <string>
#include <vector>

#include <torch/torch.h>

#include "base/child.h"
#include "base/program.h"
#include "cli/verbs.h"
#include "generators/store.h"

namespace spikehunt {

namespace {

int worker_verb() {
  // The code this worker runs is what it loaded now: a burst that expects another build refuses.
  set_loaded_build(build_id(self_executable()));
  return serve_worker([](const std::vector<std::string>& args) {
    // What a fresh process starts with: the default generators' seed (a
    // scenario that never seeds draws what it would in a process of its own).
    torch::manual_seed(c10::default_rng_seed_val);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // A fresh command line a job: nothing parsed by one job is left for the next.
    Cli cli;
    add_verbs(cli);
    return cli.main(int(args.size()), argv.data());
  });
}

}  // namespace

void add_worker_verb(Cli& cli) {
  cli.verb("worker", "Run bursts sent on fd 3 until it closes (a sweep's persistent worker)", [] { return worker_verb(); },
           /*hidden=*/true);
}

}  // namespace spikehunt
