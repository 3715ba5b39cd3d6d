// step_bench.cpp — one simple_cnn training step at batch 64 (the motivating
// case's model and optimizer) on one fixed synthetic batch: plain (mode 0),
// monitored (1), and monitored with fail-fast checks on every statistic (2);
// bench/main.cpp prints monitored/plain and fail-fast/plain measured in this
// run, and the BLAS LibTorch loaded.
#include <cstdlib>

#include <benchmark/benchmark.h>

#include "harness/burst.h"
#include "harness/env.h"
#include "harness/monitor.h"
#include "scenarios/catalog.h"

namespace spikehunt {

// The healthy control's config (repeated steps on one batch stay finite), on
// $SPIKEHUNT_BENCH_THREADS threads when set.
TrainingConfig bench_config() {
  std::vector<std::string> sets = {"optimizer.lr=0.05"};
  if (const char* t = std::getenv("SPIKEHUNT_BENCH_THREADS")) sets.push_back(std::string("threads=") + t);
  return default_config(sets);
}

// Threads (and the allocator settings) of bench_config() for every benchmark.
void bench_setup() { configure_runtime(bench_config()); }

namespace {

void BM_CnnStep(benchmark::State& state) {
  const int64_t mode = state.range(0);
  const bool monitored = mode != 0;
  const TrainingConfig config = bench_config();
  configure_runtime(config);
  std::unique_ptr<Scenario> scenario = make_scenario(config);
  const Batch batch = *scenario->next_batch();
  Monitor monitor(*scenario, config.health);
  monitor.set_fail_fast(mode == 2);
  for (auto _ : state) {
    if (monitored) {
      monitor.begin_step(batch);
      train_step(*scenario, batch, &monitor);
      benchmark::DoNotOptimize(monitor.finish_step());
    } else {
      benchmark::DoNotOptimize(train_step(*scenario, batch, nullptr));
    }
  }
  state.SetLabel(mode == 0 ? "plain" : mode == 1 ? "monitored" : "monitored, fail-fast");
}
BENCHMARK(BM_CnnStep)->Arg(0)->Arg(1)->Arg(2)->ArgName("mode")->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace spikehunt
