// main.cpp — the benchmark runner: prints the environment (LibTorch, the BLAS
// loaded at run time, threads) first, and after the runs the ratios that
// matter, each between two benchmarks measured in this one run (medians of
// the repetitions when --benchmark_repetitions is given).
//   build/bench/spikehunt_bench --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "harness/env.h"
#include "scenarios/config.h"

namespace spikehunt {

TrainingConfig bench_config();  // step_bench.cpp
void bench_setup();             // step_bench.cpp: configure_runtime(bench_config())

namespace {

struct Ratio {
  const char* numerator;
  const char* denominator;
  const char* text;  // printf format taking numerator ms, denominator ms, ratio
};

const Ratio kRatios[] = {
    {"BM_CnnStep/mode:1/real_time", "BM_CnnStep/mode:0/real_time",
     "simple_cnn step, batch 64: monitored %.2f ms, plain %.2f ms, monitored/plain = %.3f\n"},
    {"BM_CnnStep/mode:2/real_time", "BM_CnnStep/mode:0/real_time",
     "simple_cnn step, batch 64: fail-fast %.2f ms, plain %.2f ms, fail-fast/plain = %.3f\n"},
    {"BM_GptStep/mode:1/real_time", "BM_GptStep/mode:0/real_time",
     "gpt step, batch 16 x 64 tokens: monitored %.2f ms, plain %.2f ms, monitored/plain = %.3f\n"},
    {"BM_GptStep/mode:2/real_time", "BM_GptStep/mode:0/real_time",
     "gpt step, batch 16 x 64 tokens: fail-fast %.2f ms, plain %.2f ms, fail-fast/plain = %.3f\n"},
    {"BM_LateReplay/checkpoint:0/iterations:1/real_time", "BM_LateReplay/checkpoint:1/iterations:1/real_time",
     "late failure replay: from step 0 %.0f ms, from the checkpoint %.0f ms, speed-up = %.1fx\n"},
    {"BM_Sweep/jobs:1/workers:1/iterations:1/manual_time", "BM_Sweep/jobs:2/workers:1/iterations:1/manual_time",
     "sweep of 8 tiny bursts in workers: -j 1 %.0f ms, -j 2 %.0f ms, -j 2 speed-up = %.2fx\n"},
    {"BM_Sweep/jobs:1/workers:1/iterations:1/manual_time", "BM_Sweep/jobs:1/workers:0/iterations:1/manual_time",
     "sweep of 8 tiny bursts, -j 1: workers %.0f ms, a process a burst %.0f ms, workers/processes = %.3f\n"},
    {"BM_Sweep/jobs:2/workers:1/iterations:1/manual_time", "BM_Sweep/jobs:2/workers:0/iterations:1/manual_time",
     "sweep of 8 tiny bursts, -j 2: workers %.0f ms, a process a burst %.0f ms, workers/processes = %.3f\n"},
    {"BM_DefaultSweep/jobs:2/path:2/iterations:1/manual_time",
     "BM_DefaultSweep/jobs:2/path:0/iterations:1/manual_time",
     "default sweep, -j 2: today %.0f ms, the path before workers and passes (a process a burst, shrink tree) %.0f ms, "
     "today/before = %.3f\n"},
    {"BM_DefaultSweep/jobs:1/path:2/iterations:1/manual_time",
     "BM_DefaultSweep/jobs:1/path:0/iterations:1/manual_time",
     "default sweep, -j 1: today %.0f ms, the path before workers and passes (a process a burst, shrink tree) %.0f ms, "
     "today/before = %.3f\n"},
    {"BM_DefaultSweep/jobs:1/path:2/iterations:1/manual_time",
     "BM_DefaultSweep/jobs:1/path:1/iterations:1/manual_time",
     "default sweep, -j 1: workers %.0f ms, a process a burst (today's shrinker) %.0f ms, workers/processes = %.3f\n"},
    {"BM_DefaultSweep/jobs:2/path:2/iterations:1/manual_time",
     "BM_DefaultSweep/jobs:2/path:1/iterations:1/manual_time",
     "default sweep, -j 2: workers %.0f ms, a process a burst (today's shrinker) %.0f ms, workers/processes = %.3f\n"},
};

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration && !r.error_occurred) {
        times_[r.benchmark_name()].push_back(r.GetAdjustedRealTime());
        for (const auto& [name, counter] : r.counters) {
          // a ratio counter, per benchmark label ("simple_cnn step", "gpt step")
          if (name.find('/') != std::string::npos) ratios_[{r.report_label, name}].push_back(counter.value);
        }
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    for (const Ratio& r : kRatios) {
      const double a = median(times_[r.numerator]), b = median(times_[r.denominator]);
      if (a > 0 && b > 0) std::printf(r.text, a, b, a / b);
    }
    for (const auto& [key, values] : ratios_) {
      std::printf("%s, interleaved step by step: %s = %.3f (median of %zu)\n", key.first.c_str(), key.second.c_str(),
                  median(values), values.size());
    }
  }

 private:
  static double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  }
  std::map<std::string, std::vector<double>> times_;
  std::map<std::pair<std::string, std::string>, std::vector<double>> ratios_;  // (label, "monitored/plain")
};

}  // namespace
}  // namespace spikehunt

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  spikehunt::bench_setup();
  std::printf("%s\n", spikehunt::describe(spikehunt::environment("cpu", spikehunt::bench_config().threads)).c_str());
  spikehunt::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
