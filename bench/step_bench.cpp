// step_bench.cpp — one training step on one fixed batch: the simple_cnn at
// batch 64 (the motivating case's model and optimizer, synthetic images) and
// the gpt of configs/gpt.json (width 128, 2 layers, 4 heads, context 64,
// batch 16 of the fortunes text, AdamW, clip 1.0); each plain (mode 0),
// monitored (1), and monitored with fail-fast checks on every statistic (2),
// alone and interleaved; bench/main.cpp prints the ratios measured in this
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
#include "scenarios/config.h"

namespace spikehunt {

// The healthy control's config (repeated steps on one batch stay finite), on
// $SPIKEHUNT_BENCH_THREADS threads when set.
TrainingConfig bench_config() {
  std::vector<std::string> sets = {"optimizer.lr=0.05"};
  if (const char* t = std::getenv("SPIKEHUNT_BENCH_THREADS")) sets.push_back(std::string("threads=") + t);
  return default_config(sets);
}

// configs/gpt.json at a healthy peak lr (steps repeated on one batch stay
// finite), without warm-up, on bench_config()'s threads.
TrainingConfig gpt_bench_config() {
  const TrainingConfig base = bench_config();
  return load_config(std::string(SPIKEHUNT_SOURCE_DIR) + "/configs/gpt.json",
                     {"optimizer.lr=0.001", "schedule.kind=constant", "schedule.warmup_steps=0",
                      "threads=" + std::to_string(base.threads)});
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

void modes(benchmark::State& state, const TrainingConfig& config, const char* model) {
  const int mode = static_cast<int>(state.range(0));
  configure_runtime(config);
  std::unique_ptr<Scenario> scenario = make_scenario(config);
  Trainer trainer(*scenario);
  const std::vector<Batch> batch = trainer.next_batches();
  Monitor monitor(*scenario, config.health);
  for (auto _ : state) step(mode, trainer, batch, monitor);
  state.SetLabel(std::string(model) + (mode == 0 ? " plain" : mode == 1 ? " monitored" : " monitored, fail-fast"));
}

// The three modes interleaved step by step on one model, each step timed on
// its own: drift on a shared machine hits all three alike, so the ratios of
// the per-mode medians (counters monitored/plain, fail-fast/plain) are the
// steadiest overhead figure. One iteration is three steps.
void interleaved(benchmark::State& state, const TrainingConfig& config, const char* model) {
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
  state.SetLabel(std::string(model) + " step");
}

void BM_CnnStep(benchmark::State& state) { modes(state, bench_config(), "simple_cnn"); }
BENCHMARK(BM_CnnStep)->Arg(0)->Arg(1)->Arg(2)->ArgName("mode")->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_CnnStepInterleaved(benchmark::State& state) { interleaved(state, bench_config(), "simple_cnn"); }
BENCHMARK(BM_CnnStepInterleaved)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GptStep(benchmark::State& state) { modes(state, gpt_bench_config(), "gpt"); }
BENCHMARK(BM_GptStep)->Arg(0)->Arg(1)->Arg(2)->ArgName("mode")->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GptStepInterleaved(benchmark::State& state) { interleaved(state, gpt_bench_config(), "gpt"); }
BENCHMARK(BM_GptStepInterleaved)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace spikehunt
