// step_bench.cpp — one simple_cnn training step at batch 64 (the motivating
// case's model and optimizer) on one fixed synthetic batch: plain (mode 0),
// monitored (1), and monitored with fail-fast checks on every statistic (2);
// bench/main.cpp prints monitored/plain and fail-fast/plain measured in this
// run, and the BLAS LibTorch loaded.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

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

// One step in mode 0 (plain), 1 (monitored) or 2 (monitored, fail-fast).
void step(int mode, Trainer& trainer, const std::vector<Batch>& batch, Monitor& monitor) {
  if (mode == 0) {
    benchmark::DoNotOptimize(trainer.step(0, batch, nullptr));
    return;
  }
  monitor.set_fail_fast(mode == 2);
  monitor.begin_step(0, batch);
  trainer.step(0, batch, &monitor);
  benchmark::DoNotOptimize(monitor.finish_step());
}

void BM_CnnStep(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  const TrainingConfig config = bench_config();
  configure_runtime(config);
  std::unique_ptr<Scenario> scenario = make_scenario(config);
  Trainer trainer(*scenario);
  const std::vector<Batch> batch = trainer.next_batches();
  Monitor monitor(*scenario, config.health);
  for (auto _ : state) step(mode, trainer, batch, monitor);
  state.SetLabel(mode == 0 ? "plain" : mode == 1 ? "monitored" : "monitored, fail-fast");
}
BENCHMARK(BM_CnnStep)->Arg(0)->Arg(1)->Arg(2)->ArgName("mode")->Unit(benchmark::kMillisecond)->UseRealTime();

// The three modes interleaved step by step on one model, each step timed on
// its own: drift on a shared machine hits all three alike, so the ratios of
// the per-mode medians (counters monitored/plain, fail-fast/plain) are the
// steadiest overhead figure. One iteration is three steps.
void BM_CnnStepInterleaved(benchmark::State& state) {
  const TrainingConfig config = bench_config();
  configure_runtime(config);
  std::unique_ptr<Scenario> scenario = make_scenario(config);
  Trainer trainer(*scenario);
  const std::vector<Batch> batch = trainer.next_batches();
  Monitor monitor(*scenario, config.health);
  std::vector<double> ms[3];
  int64_t i = 0;
  for (auto _ : state) {
    for (int k = 0; k < 3; ++k) {
      const int mode = int((i + k) % 3);  // rotate which mode goes first
      const auto t0 = std::chrono::steady_clock::now();
      step(mode, trainer, batch, monitor);
      ms[mode].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    ++i;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  const double plain = median(ms[0]);
  state.counters["plain_ms"] = plain;
  state.counters["monitored/plain"] = median(ms[1]) / plain;
  state.counters["fail-fast/plain"] = median(ms[2]) / plain;
}
BENCHMARK(BM_CnnStepInterleaved)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace spikehunt
