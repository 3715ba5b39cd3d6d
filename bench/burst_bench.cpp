// burst_bench.cpp — whole bursts: the default config's burst (steps per
// second), replay of a failure late in a run from its checkpoint against from
// step 0, sweeps' bursts per minute with -j 1 and -j 2, in persistent
// workers against a process a burst, the default sweep on the path before
// workers and passes against today's (with its shrink bursts per distinct
// failure), and the two shrinkers on the driver tests' planted properties.
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>
#include <sstream>

#include "generators/shrink_ahead.h"
#include "generators/shrinker.h"
#include "generators/space.h"
#include "generators/store.h"
#include "generators/sweep.h"
#include "harness/burst.h"
#include "harness/repro.h"
#include "scenarios/catalog.h"
#include "tests/planted.h"

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

// A sweep's bursts per minute, `jobs` at a time, in persistent workers
// (workers:1) or a process a burst (workers:0, `--process-per-burst`).
struct SweepRun {
  int64_t search = 0, shrink = 0;
  int64_t shrunk = 0;    // failures shrunk
  int64_t distinct = 0;  // failures with a repro of their own (each shrinks within its signature)
  int64_t reproduced = 0;  // of those, replays that reproduced
  double seconds = 0;
};

SweepRun run_bench_sweep(SweepOptions o, const std::string& name, bool workers) {
  o.out_dir = (fs::temp_directory_path() / ("spikehunt-bench-" + name + (workers ? "-workers" : "-processes"))).string();
  fs::remove_all(o.out_dir);
  o.binary = SPIKEHUNT_BINARY;
  o.progress = false;
  o.pool.persistent = workers;
  std::ostringstream log;
  const auto start = std::chrono::steady_clock::now();
  run_sweep(o, log);
  SweepRun r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  SweepStore store(o.out_dir + "/sweep.db", o.space.to_json().dump(), o.seed);
  r.search = store.count("search");
  r.shrink = store.count("shrink");
  for (const FailureRow& f : store.failures()) {
    r.shrunk += !f.minimal_config_json.empty();
    r.distinct += f.replay.rfind(one_failure_with(""), 0) != 0;
    r.reproduced += f.replay.rfind("reproduced", 0) == 0;
  }
  return r;
}

void report(benchmark::State& state, const SweepRun& r) {
  state.SetIterationTime(r.seconds);
  state.counters["bursts_per_min"] = double(r.search + r.shrink) * 60 / r.seconds;
  state.counters["search_bursts"] = double(r.search);
  state.counters["shrink_bursts"] = double(r.shrink);
  state.counters["failures"] = double(r.distinct);
  state.counters["reproduced"] = double(r.reproduced);
  if (r.shrunk > 0) state.counters["shrink_bursts_per_failure"] = double(r.shrink) / double(r.shrunk);
}

// 8 tiny-MLP bursts (start-up is most of a burst here), no shrinking.
void BM_Sweep(benchmark::State& state) {
  SweepOptions o;
  o.space = SearchSpace::from_json(nlohmann::json::parse(R"({
    "base": {"model": {"kind": "mlp", "mlp_width": 64}, "dataset": {"synthetic_train_per_class": 100},
             "batch_size": 32, "threads": 1, "optimizer": {"lr": 0.01}},
    "dimensions": {"seed": {"range": [0, 100]}, "max_batches_per_epoch": {"range": [10, 20]}}})"),
                                   "<bench space>");
  o.runs = 8;
  o.jobs = int(state.range(0));
  for (auto _ : state) report(state, run_bench_sweep(o, "sweep", state.range(1) != 0));
}
BENCHMARK(BM_Sweep)->ArgsProduct({{1, 2}, {0, 1}})->ArgNames({"jobs", "workers"})->Unit(benchmark::kMillisecond)
    ->UseManualTime()->Iterations(1);

// The default sweep (`spikehunt sweep`: the built-in space, 24 runs, its
// shrinks, repros and replays), -j 2, three ways: path:0 the path before
// workers and passes (`--process-per-burst --shrinker tree`), path:1 a
// process a burst with today's shrinker (`--process-per-burst`), path:2
// today's (workers, passes, the shrinks at once).
void BM_DefaultSweep(benchmark::State& state) {
  SweepOptions o;
  o.jobs = int(state.range(0));
  const int64_t path = state.range(1);
  if (path == 0) o.shrinker = ShrinkMethod::kTree;
  const std::string name = path == 0 ? "default-sweep-tree" : "default-sweep";
  for (auto _ : state) report(state, run_bench_sweep(o, name, path == 2));
}
BENCHMARK(BM_DefaultSweep)->ArgsProduct({{1, 2}, {0, 1, 2}})->ArgNames({"jobs", "path"})->Unit(benchmark::kMillisecond)
    ->UseManualTime()->Iterations(1);

// Shrink bursts per failure on the driver tests' planted properties
// (tests/planted.h: known boundaries, no training), from 8 far starts (4
// non-finite, 4 extreme): shrinker:0 the passes, shrinker:1 the tree walk
// they replaced. fields_away and distance: of the minimal configs, on
// average (smaller is simpler).
void BM_ShrinkPlanted(benchmark::State& state) {
  const SearchSpace s = planted_space();
  const bool tree = state.range(0) != 0;
  for (auto _ : state) {
    int64_t bursts = 0, fields = 0, failures = 0;
    double distance = 0;
    for (uint64_t k = 0; k < 8; ++k) {
      const SpacePoint start = far_point(s, [&](const TrainingConfig& c) {
        return planted(c).verdict.outcome == (k % 2 ? Outcome::kExtreme : Outcome::kNonFinite) && c.seed == k + 1;
      });
      FunctionEvaluator evaluator(planted);
      EvalCache cache;
      Budget budget;
      budget.evaluations = 400;
      const ShrinkResult r = tree ? shrink_tree(s, start, planted(s.config(start)), evaluator, cache, budget)
                                  : shrink(s, start, planted(s.config(start)), evaluator, cache, budget);
      bursts += r.evaluations;
      fields += s.fields_differing(r.minimal);
      distance += s.distance(r.minimal);
      ++failures;
    }
    state.counters["shrink_bursts_per_failure"] = double(bursts) / double(failures);
    state.counters["fields_away"] = double(fields) / double(failures);
    state.counters["distance"] = distance / double(failures);
  }
}
BENCHMARK(BM_ShrinkPlanted)->Arg(0)->Arg(1)->ArgName("shrinker")->Unit(benchmark::kMicrosecond)->Iterations(1);

}  // namespace
}  // namespace spikehunt
