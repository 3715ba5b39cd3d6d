// stats_bench.cpp — the monitor's statistics pass alone (L2 norm in double and
// max |x| of one float32 tensor, the fused CPU kernel) and XXH3-128 hashing,
// from 1e3 to 1e7 elements / bytes, as throughput.
#include <benchmark/benchmark.h>

#include <vector>

#include "base/hash.h"
#include "harness/monitor.h"

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

}  // namespace
}  // namespace spikehunt
