// step_bench.cpp — one simple_cnn training step at batch 64 (the motivating
// case's model and optimizer), plain and under the monitor, on one fixed
// synthetic batch; prints monitored/plain as a ratio measured in this run,
// and the BLAS LibTorch loaded.
//   build/bench/spikehunt_bench --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
#include <algorithm>
#include <cstdio>
#include <map>

#include <benchmark/benchmark.h>

#include "harness/burst.h"
#include "harness/env.h"
#include "harness/monitor.h"
#include "scenarios/catalog.h"

namespace spikehunt {
namespace {

// The healthy control's config: repeated steps on one batch stay finite.
TrainingConfig bench_config() { return default_config({"optimizer.lr=0.05"}); }

void BM_CnnStep(benchmark::State& state) {
  const bool monitored = state.range(0) != 0;
  const TrainingConfig config = bench_config();
  configure_runtime(config);
  std::unique_ptr<Scenario> scenario = make_scenario(config);
  const Batch batch = *scenario->next_batch();
  Monitor monitor(*scenario, config.health);
  for (auto _ : state) {
    if (monitored) {
      monitor.begin_step(batch);
      train_step(*scenario, batch, &monitor);
      benchmark::DoNotOptimize(monitor.finish_step());
    } else {
      benchmark::DoNotOptimize(train_step(*scenario, batch, nullptr));
    }
  }
  state.SetLabel(monitored ? "monitored" : "plain");
}
BENCHMARK(BM_CnnStep)->Arg(0)->Arg(1)->ArgName("monitored")->Unit(benchmark::kMillisecond)->UseRealTime();

// Collects every repetition's time so the ratio (of medians) comes from this one run.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration) times_[r.benchmark_name()].push_back(r.GetAdjustedRealTime());
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    const double plain = median("BM_CnnStep/monitored:0/real_time");
    const double watched = median("BM_CnnStep/monitored:1/real_time");
    if (plain > 0 && watched > 0) {
      std::printf("simple_cnn step, batch 64 (median of %zu): plain %.2f ms, monitored %.2f ms, monitored/plain = %.3f\n",
                  times_["BM_CnnStep/monitored:0/real_time"].size(), plain, watched, watched / plain);
    }
  }

 private:
  double median(const std::string& name) {
    std::vector<double> v = times_[name];
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  }
  std::map<std::string, std::vector<double>> times_;
};

}  // namespace
}  // namespace spikehunt

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::printf("%s\n", spikehunt::describe(spikehunt::environment("cpu", spikehunt::bench_config().threads)).c_str());
  spikehunt::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
