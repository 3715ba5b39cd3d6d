// gpu_steps.cpp — the CNN and GPT training steps of bench/step_bench.cpp on a
// CUDA device, plain against monitored: the median ms of a step (each step
// ends in a device synchronize, in both modes, so the time is the step's) and
// the host-device synchronizations each mode makes in a step, counted by
// LibTorch's CUDA sync debug mode (every synchronizing call raises a warning,
// which spikehunt's WarningCounter counts). The monitor's promise is at most
// one per step. Prints one JSON object; exit 77 (skipped) when no CUDA device
// is visible, 1 when the monitored step syncs more than once.
// Usage: gpu_steps [STEPS [GPT_CONFIG [TEXT]]]   (default: 50 timed steps a
//        mode after 5 warm-ups, configs/gpt.json, the config's text file)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <c10/cuda/CUDAFunctions.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "harness/burst.h"
#include "harness/env.h"
#include "harness/monitor.h"
#include "harness/trainer.h"
#include "harness/warnings.h"
#include "scenarios/catalog.h"
#include "scenarios/config.h"

namespace spikehunt {
namespace {

// One step, plain (monitor null) or monitored.
void step(Trainer& trainer, const std::vector<Batch>& batch, Monitor* monitor) {
  if (monitor == nullptr) {
    trainer.step(0, batch, nullptr);
    return;
  }
  monitor->begin_step(0, batch);
  trainer.step(0, batch, monitor);
  monitor->finish_step();
}

// The synchronizations one step makes, counted while the debug mode warns.
int64_t syncs_in_a_step(Trainer& trainer, const std::vector<Batch>& batch, Monitor* monitor) {
  torch::cuda::synchronize();
  WarningCounter counter;
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  step(trainer, batch, monitor);
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  int64_t n = 0;
  for (const WarningCount& w : counter.counts()) {
    if (w.message.find("synchronizing CUDA operation") != std::string::npos) n += w.count;
  }
  return n;
}

nlohmann::json measure(const TrainingConfig& config, const char* model, int steps) {
  configure_runtime(config);
  std::unique_ptr<Scenario> scenario = make_scenario(config);
  Trainer trainer(*scenario);
  const std::vector<Batch> batch = trainer.next_batches();
  Monitor monitor(*scenario, config.health);
  nlohmann::json out = {{"model", model}};
  for (Monitor* m : {static_cast<Monitor*>(nullptr), &monitor}) {
    const char* mode = m == nullptr ? "plain" : "monitored";
    for (int i = 0; i < 5; ++i) step(trainer, batch, m);
    out[std::string(mode) + "_syncs_per_step"] = syncs_in_a_step(trainer, batch, m);
    std::vector<double> ms;
    for (int i = 0; i < steps; ++i) {
      torch::cuda::synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      step(trainer, batch, m);
      torch::cuda::synchronize();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    out[std::string(mode) + "_ms"] = ms[ms.size() / 2];
  }
  out["monitored/plain"] = out["monitored_ms"].get<double>() / out["plain_ms"].get<double>();
  return out;
}

}  // namespace
}  // namespace spikehunt

int main(int argc, char** argv) {
  using namespace spikehunt;
  if (!torch::cuda::is_available()) {
    std::printf("SKIPPED: no CUDA device visible to this LibTorch (%s)\n", TORCH_VERSION);
    return 77;
  }
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  const std::string gpt_config = argc > 2 ? argv[2] : std::string(SPIKEHUNT_SOURCE_DIR) + "/configs/gpt.json";
  std::vector<std::string> gpt_sets = {"optimizer.lr=0.001", "schedule.kind=constant", "schedule.warmup_steps=0",
                                       "device=cuda"};
  if (argc > 3) gpt_sets.push_back(std::string("dataset.text_path=") + argv[3]);
  const TrainingConfig cnn = default_config({"optimizer.lr=0.05", "device=cuda"});
  const TrainingConfig gpt = load_config(gpt_config, gpt_sets);
  nlohmann::json report = {{"environment", to_json(environment("cuda", cnn.threads))},
                           {"device", torch::cuda::device_count() > 0 ? "cuda:0" : ""},
                           {"steps", steps},
                           {"results", {measure(cnn, "simple_cnn", steps), measure(gpt, "gpt", steps)}}};
  std::printf("%s\n", report.dump(2).c_str());
  for (const auto& r : report["results"]) {
    if (r["monitored_syncs_per_step"].get<int64_t>() > 1) {
      std::fprintf(stderr, "FAIL: the monitored %s step made %lld host-device syncs (at most 1 promised)\n",
                   r["model"].get<std::string>().c_str(),
                   static_cast<long long>(r["monitored_syncs_per_step"].get<int64_t>()));
      return 1;
    }
  }
  return 0;
}
