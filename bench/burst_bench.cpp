// burst_bench.cpp — whole bursts: the default config's burst (steps per
// second), replay of a failure late in a run from its checkpoint against from
// step 0, and a small sweep's bursts per minute with -j 1 and -j 2.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <sstream>

#include "generators/space.h"
#include "generators/sweep.h"
#include "harness/burst.h"
#include "harness/repro.h"
#include "scenarios/catalog.h"

namespace spikehunt {
namespace {

namespace fs = std::filesystem;

void BM_DefaultBurst(benchmark::State& state) {
  const TrainingConfig config = default_config();
  int64_t steps = 0;
  for (auto _ : state) steps += run_config(config, BurstOptions{}).verdict.steps_run;
  state.counters["steps_per_s"] = benchmark::Counter(double(steps), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DefaultBurst)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// A failure late in a run: a learning-rate schedule bug in the training code
// (from update 600 on, the rate is 40x the config's) on the default CNN with
// 300-batch epochs, healthy until then. Registered as a scenario of its own,
// so the replays build it the way a user's program would.
class ScheduleBug : public StandardScenario {
 public:
  using StandardScenario::StandardScenario;
  void optimizer_step() override {
    if (++updates_ == 601) {
      for (auto& g : optimizer().param_groups()) static_cast<torch::optim::SGDOptions&>(g.options()).lr(2.0);
    }
    optimizer().step();
  }
  int64_t skip_batches(int64_t n) override {  // a checkpoint resumes the count too
    n = StandardScenario::skip_batches(n);
    updates_ += n;
    return n;
  }

 private:
  int64_t updates_ = 0;
};

const std::string& late_repro() {
  static const std::string path = [] {
    register_scenario("schedule_bug", [](const TrainingConfig& c) -> std::unique_ptr<Scenario> {
      return std::make_unique<ScheduleBug>(c, std::make_shared<const Dataset>(load_dataset(c.dataset)));
    });
    const std::string dir = (fs::temp_directory_path() / "spikehunt-bench-late").string();
    fs::remove_all(dir);
    const std::string p = dir + "/late.repro.json";
    record_repro(default_config({"scenario=schedule_bug", "optimizer.lr=0.05", "max_batches_per_epoch=300",
                                   "dataset.synthetic_train_per_class=4000"}), p);
    return p;
  }();
  return path;
}

void BM_LateReplay(benchmark::State& state) {
  const Repro repro = read_repro(late_repro());
  ReplayOptions o;
  o.from_checkpoint = state.range(0) != 0;
  for (auto _ : state) {
    const ReplayReport r = replay(repro, late_repro(), o);
    if (!r.reproduced) state.SkipWithError(("not reproduced: " + r.mismatch).c_str());
    state.counters["from_step"] = double(r.start_step);
    state.counters["failure_step"] = double(repro.verdict.failure_step.value_or(repro.verdict.onset_step.value_or(-1)));
  }
}
BENCHMARK(BM_LateReplay)->Arg(0)->Arg(1)->ArgName("checkpoint")->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

// A sweep of 8 tiny-MLP bursts, each a child process (start-up included).
void BM_Sweep(benchmark::State& state) {
  const SearchSpace space = SearchSpace::from_json(nlohmann::json::parse(R"({
    "base": {"model": {"kind": "mlp", "mlp_width": 64}, "dataset": {"synthetic_train_per_class": 100},
             "batch_size": 32, "threads": 1, "optimizer": {"lr": 0.01}},
    "dimensions": {"seed": {"range": [0, 100]}, "max_batches_per_epoch": {"range": [10, 20]}}})"),
                                                   "<bench space>");
  int64_t bursts = 0;
  for (auto _ : state) {
    const std::string out = (fs::temp_directory_path() / "spikehunt-bench-sweep").string();
    fs::remove_all(out);
    SweepOptions o;
    o.space = space;
    o.runs = 8;
    o.jobs = int(state.range(0));
    o.out_dir = out;
    o.binary = SPIKEHUNT_BINARY;
    o.progress = false;
    std::ostringstream log;
    run_sweep(o, log);
    bursts += o.runs;
  }
  state.counters["bursts_per_min"] = benchmark::Counter(double(bursts) * 60, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Sweep)->Arg(1)->Arg(2)->ArgName("jobs")->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace
}  // namespace spikehunt
