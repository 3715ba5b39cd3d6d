// training_burst.h — what fuzz_training and training_random share: the fuzz
// search space (a tiny MLP, a few steps, tiny synthetic data), one burst under
// the monitor, and the numerical features it reached — what libFuzzer's extra
// counters feed back: the half-decade bucket of the largest global grad norm,
// activation, optimizer-state element and loss the burst reached (magnitudes
// healthy training reaches share one bucket: grad norm and state below 1,
// activations below 10, loss below 3), the health reached, the stage and
// tensor of a fault, the rules that fired, the lead time. Two designs were
// measured and dropped (fuzz/compare.sh): per-step histograms over all
// buckets, and every bucket of the maxima; both reward variety in healthy
// regimes and did no better than mutation without feedback.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "generators/space.h"
#include "harness/record.h"

namespace spikehunt::fuzz {

constexpr int kFeatures = 768;

const SearchSpace& training_space();

struct BurstFeatures {
  std::vector<int> features;  // indices into [0, kFeatures)
  Verdict verdict;
  std::vector<StepHashes> step_hashes;
  std::string signature;      // fault_signature(); "" when healthy
};

// Runs one tiny burst (monitored unless `monitor` is false: then no features).
BurstFeatures run_tiny_burst(const TrainingConfig& config, bool monitor = true);

// Distinct features and failure signatures over many bursts.
class Tally {
 public:
  // Returns true when the burst's failure signature is new.
  bool add(const BurstFeatures& f);
  int64_t bursts() const { return bursts_; }
  size_t features() const { return features_.size(); }
  size_t faults() const { return faults_.size(); }
  std::string json() const;  // {"bursts": .., "features": .., "faults": .., "signatures": [..]}

 private:
  int64_t bursts_ = 0;
  std::set<int> features_;
  std::set<std::string> faults_;
};

}  // namespace spikehunt::fuzz
