// stats_bench.cpp — the monitor's statistics pass alone (L2 norm in double and
// max |x| of one float32 tensor, the fused CPU kernel) and XXH3-128 hashing,
// from 1e3 to 1e7 elements / bytes, as throughput.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "base/hash.h"
#include "harness/monitor.h"
#include "harness/record.h"

namespace spikehunt {
namespace {

void BM_TensorStats(benchmark::State& state) {
  torch::manual_seed(0);
  const torch::Tensor t = torch::randn({state.range(0)});
  for (auto _ : state) benchmark::DoNotOptimize(tensor_stats(t));
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(state.iterations() * state.range(0) * int64_t(sizeof(float)));
}
BENCHMARK(BM_TensorStats)->RangeMultiplier(10)->Range(1000, 10000000)->UseRealTime();

void BM_Xxh3(benchmark::State& state) {
  std::vector<unsigned char> bytes(size_t(state.range(0)));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  for (auto _ : state) benchmark::DoNotOptimize(hash_bytes(bytes.data(), bytes.size()));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Xxh3)->RangeMultiplier(10)->Range(1000, 10000000)->UseRealTime();

// One trace line: a StepRecord of the motivating SimpleCNN's size (8
// parameters, 6 taps) to JSON text, as TraceWriter writes one a step.
void BM_TraceLine(benchmark::State& state) {
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < 8; ++i) {
    layers.push_back({{"name", "layer" + std::to_string(i) + ".weight"}, {"is_weight", true}, {"grad_max", 0.0042720520},
                      {"grad_norm", 0.01871002668}, {"grad_spike_score", 0.0}, {"param_norm_after", 3.398422453875051},
                      {"param_norm_before", 3.3982187743716246}, {"state_max", 0.008228495717048645},
                      {"state_norm", 0.043542916066706495}, {"update_norm", 0.002177148396138696}, {"update_ratio", 0.0}});
  }
  nlohmann::json taps = nlohmann::json::object();
  for (const char* t : {"conv1", "conv2", "conv2_act", "fc1", "fc1_act", "fc2"}) taps[t] = 0.9330614805221558;
  const nlohmann::json j = {{"step", 2}, {"phase", "train"}, {"phase_index", 0}, {"epoch", 0}, {"batch", 2},
                            {"activations", taps}, {"layers", layers}, {"input_hash", "579af35e28070834b7c83c28a86c7fb6"},
                            {"label_hash", "3b13827a4704193627d18434754d0979"}, {"health", "finite"},
                            {"rules", nlohmann::json::array()}, {"step_ms", 13.2}, {"loss", 2.302585092994046},
                            {"grad_norm", 0.3345237456248321}, {"grad_max", 0.0615776069}, {"input_max", 0.99998},
                            {"activation_max", 1.7657290697097778}, {"param_norm_before", 10.0}, {"param_norm_after", 10.1},
                            {"state_norm", 0.5}, {"state_max", 0.1}, {"output_max", 0.2}, {"lr", 0.05},
                            {"update_norm", 0.01}, {"update_ratio", 0.0}, {"grad_spike_score", 0.0}, {"label_histogram", {4, 6, 5, 12, 7, 5, 7, 3, 7, 8}}};
  const StepRecord r = step_record_from_json(j, "bench");
  for (auto _ : state) {
    std::string line = trace_line(r);
    benchmark::DoNotOptimize(line);
  }
}
BENCHMARK(BM_TraceLine);

}  // namespace
}  // namespace spikehunt

