// doctor/samples.cpp — probes on samples by their bytes (XXH3-128 a sample):
// held-out samples inside the training batches (heldout_overlap), and an
// input seen again with another target (label_pairing: inputs and labels
// drawn apart).
#include <algorithm>
#include <map>
#include <set>

#include "base/hash.h"
#include "base/number_format.h"
#include "harness/doctor/signs.h"
#include "harness/trainer.h"

namespace spikehunt::doctor_detail {

std::vector<Hash128> sample_hashes(const torch::Tensor& x) {
  std::vector<Hash128> out;
  if (!x.defined() || x.dim() == 0) return out;
  const torch::Tensor c = x.to(torch::kCPU).contiguous();
  const int64_t n = c.size(0), bytes = n ? int64_t(c.nbytes()) / n : 0;
  const auto* base = static_cast<const uint8_t*>(c.data_ptr());
  for (int64_t i = 0; i < n; ++i) out.push_back(hash_bytes(base + i * bytes, size_t(bytes)));
  return out;
}

// The held-out share found among the first training batches at which it moves held-out scores: real data
// sets hold a few duplicates (a 1% overlap of short texts' prefixes is common), a split leaking into the
// training set holds many more.
constexpr double kOverlapShare = 0.03;

VitalSign heldout_overlap(const std::vector<Batch>& training, const std::vector<Batch>& heldout, bool has_heldout) {
  VitalSign v = sign("heldout_overlap");
  if (!has_heldout) return skipped("heldout_overlap", "no held-out data");
  std::set<std::pair<uint64_t, uint64_t>> seen;
  int64_t train_samples = 0;
  for (const Batch& b : training) {
    for (const Hash128& h : sample_hashes(b.inputs)) seen.insert({h.high, h.low}), ++train_samples;
  }
  int64_t held = 0, inside = 0;
  for (const Batch& b : heldout) {
    for (const Hash128& h : sample_hashes(b.inputs)) ++held, inside += seen.count({h.high, h.low}) > 0;
  }
  v.data = {{"heldout_samples", held}, {"training_samples_checked", train_samples}, {"heldout_in_training", inside}};
  v.evidence = std::to_string(inside) + " of " + std::to_string(held) + " held-out samples are byte-identical to one " +
               "of the first " + std::to_string(train_samples) + " training samples";
  if (inside >= 5 && double(inside) >= kOverlapShare * double(held)) {
    v.named = {"held-out data"};
    fail(v, kRankHeldoutInputs,
         std::to_string(inside) + " of " + std::to_string(held) + " held-out samples are also in the training " +
             "batches (byte-identical inputs among the first " + std::to_string(train_samples) +
             " training samples): the held-out data is inside the training data, so held-out scores measure memory",
         "split before building the training loader and train on the training split only (a DataModule whose "
         "train_dataloader wraps the full dataset, a split made after shuffling, augmented copies of one image)");
  }
  return v;
}

// Each input comes with its own target: across the batches of `steps` training steps drawn from a fresh
// scenario (as the watched run draws them), an input seen more than once has one target each time. Inputs
// and targets shuffled or sampled apart (two shuffled loaders zipped, x[perm1] with y[perm2] each epoch) give
// a repeated input another target at each epoch.
VitalSign label_pairing(const ScenarioFactory& make, int64_t steps) {
  VitalSign v = sign("label_pairing");
  std::unique_ptr<Scenario> s = guarded("setup", make);
  Trainer trainer(*s);
  std::map<std::pair<uint64_t, uint64_t>, std::pair<int64_t, std::vector<std::pair<uint64_t, uint64_t>>>> seen;
  std::map<std::pair<uint64_t, uint64_t>, int64_t> label_of;  // a target's hash -> its class id (class ids only)
  int64_t samples = 0, drawn = 0;
  for (; drawn < steps; ++drawn) {
    const std::vector<Batch> batches = trainer.next_batches();
    if (batches.empty()) break;
    for (const Batch& b : batches) {
      if (!b.targets.defined() || b.targets.dim() == 0 || b.targets.size(0) != b.inputs.size(0)) continue;
      const std::vector<Hash128> xs = sample_hashes(b.inputs), ys = sample_hashes(b.targets);
      const bool ids = class_ids(b.targets);
      const torch::Tensor y = ids ? b.targets.to(torch::kCPU).to(torch::kInt64).contiguous() : torch::Tensor();
      for (size_t i = 0; i < xs.size(); ++i, ++samples) {
        auto& [count, targets] = seen[{xs[i].high, xs[i].low}];
        ++count;
        const std::pair<uint64_t, uint64_t> t{ys[i].high, ys[i].low};
        if (std::find(targets.begin(), targets.end(), t) == targets.end() && targets.size() < 4) targets.push_back(t);
        if (ids) label_of[t] = y.data_ptr<int64_t>()[i];
      }
    }
  }
  int64_t repeated = 0, conflicting = 0;
  std::string example;
  for (const auto& [x, entry] : seen) {
    if (entry.first < 2) continue;
    ++repeated;
    if (entry.second.size() < 2) continue;
    ++conflicting;
    if (example.empty() && label_of.count(entry.second[0]) && label_of.count(entry.second[1])) {
      example = " (one input came with labels " + std::to_string(label_of[entry.second[0]]) + " and " +
                std::to_string(label_of[entry.second[1]]) + ")";
    }
  }
  v.data = {{"steps", drawn}, {"samples", samples}, {"inputs_seen_twice", repeated}, {"with_another_target", conflicting}};
  if (repeated == 0) {
    return skipped("label_pairing", "no input seen twice in the batches of " + std::to_string(drawn) + " steps (" +
                                        std::to_string(samples) + " samples): nothing to compare");
  }
  const double share = double(conflicting) / double(repeated);
  v.evidence = std::to_string(repeated) + " inputs seen more than once in the batches of " + std::to_string(drawn) +
               " steps, " + std::to_string(conflicting) + " of them (" + percent(share) + ") with another target";
  if (repeated >= 8 && share >= 0.5) {
    v.named = {"data"};
    fail(v, kRankBatchComposition,
         "the labels do not stay with their inputs: of " + std::to_string(repeated) + " inputs seen more than once in "
             "the first " + std::to_string(drawn) + " steps, " + percent(share) + " had their labels differ between "
             "draws" + example + ", so a label does not say what its input is",
         "index inputs and targets with one permutation (one Dataset returning (x, y), or x[perm] with y[perm]), and "
         "encode the labels once for the whole data set (a label encoder fitted per batch numbers the classes anew "
         "each time); two shuffled DataLoaders zipped pair them at random");
  }
  return v;
}

}  // namespace spikehunt::doctor_detail
