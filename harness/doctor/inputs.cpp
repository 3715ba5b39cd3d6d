// doctor/inputs.cpp — the inputs and the held-out data as handed over: their
// scale, NaN/Inf (targets too), samples that barely differ or collapse to a
// few values, held-out data preprocessed otherwise or inside the training
// batches (samples compared by their bytes, XXH3-128 a sample), and an input
// seen again with another label.
#include <algorithm>
#include <cmath>
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
  int64_t held = 0, inside = 0, inside_constant = 0;  // constant: every feature of the sample one value (all zeros)
  double inside_zero_share = 0;  // summed over the shared samples: the share of their values that are exactly 0
  for (const Batch& b : heldout) {
    const std::vector<Hash128> hashes = sample_hashes(b.inputs);
    torch::Tensor constant, zeros;
    if (b.inputs.dim() >= 2 && b.inputs.size(0) == int64_t(hashes.size())) {
      const torch::Tensor rows = b.inputs.reshape({b.inputs.size(0), -1});
      constant = (rows == rows.select(1, 0).unsqueeze(1)).all(1).to(torch::kCPU);
      zeros = (rows == 0).to(torch::kFloat64).mean(1).to(torch::kCPU);
    }
    for (size_t i = 0; i < hashes.size(); ++i) {
      ++held;
      if (seen.count({hashes[i].high, hashes[i].low}) == 0) continue;
      ++inside;
      if (constant.defined() && constant[int64_t(i)].item<bool>()) ++inside_constant;
      if (zeros.defined()) inside_zero_share += zeros[int64_t(i)].item<double>();
    }
  }
  v.data = {{"heldout_samples", held}, {"training_samples_checked", train_samples}, {"heldout_in_training", inside}};
  v.evidence = std::to_string(inside) + " of " + std::to_string(held) + " held-out samples are byte-identical to one " +
               "of the first " + std::to_string(train_samples) + " training samples";
  // Training inputs that repeat among themselves (collapsed by their preprocessing) overlap anything: input_scale
  // says so, and the overlap with held-out data follows from it.
  if (double(seen.size()) <= 0.8 * double(train_samples)) {
    v.evidence += "; the training samples themselves repeat (" + std::to_string(seen.size()) + " distinct of " +
                  std::to_string(train_samples) + "): see input_scale";
    return v;
  }
  const double blank = inside ? inside_zero_share / double(inside) : 0;
  if (inside >= 5 && double(inside) >= kOverlapShare * double(held) && (inside_constant * 2 >= inside || blank >= 0.9)) {
    // The shared samples are blank (every feature one value): the inputs lost their content, and blank samples of
    // any two splits are equal.
    v.named = {"input"};
    v.part = "data";
    fail(v, kRankInputScale,
         "the inputs collapse to nearly blank samples, mostly zeros: " + std::to_string(inside) + " of " +
             std::to_string(held) + " held-out samples equal training samples byte for byte, and those are on average " +
             percent(blank) + " zeros (" + std::to_string(inside_constant) + " entirely constant): the preprocessing "
             "wipes out what tells the samples apart",
         "look at what the preprocessing does to the values: an integer division (uint8 // 255 is 0 for all but pure "
         "white), a threshold, or a cast that rounds them all to a few values");
    return v;
  }
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

VitalSign input_scale(const Probe& p) {
  VitalSign v = sign("input_scale");
  double sumsq = 0, max_abs = 0, spread_sum = 0;
  int64_t n = 0, non_finite = 0, batches = 0, spread_batches = 0, duplicate_samples = 0, samples = 0;
  int64_t all_zero_samples = 0;
  for (const Batch& b : p.batches) {
    if (!b.inputs.is_floating_point()) {
      v.evidence = "the inputs are " + std::string(c10::toString(b.inputs.scalar_type())) + " (ids, not values): nothing to scale";
      return v;
    }
    torch::NoGradGuard no_grad;
    const torch::Tensor x = b.inputs.detach().to(torch::kFloat64);
    const torch::Tensor finite = torch::isfinite(x);
    non_finite += x.numel() - finite.sum().item<int64_t>();
    const torch::Tensor f = torch::where(finite, x, torch::zeros_like(x));
    sumsq += f.square().sum().item<double>();
    max_abs = std::max(max_abs, f.abs().max().item<double>());
    n += x.numel();
    ++batches;
    // How much the samples differ: each input feature's std across the batch's samples, averaged.
    if (f.dim() >= 1 && f.size(0) >= 4) spread_sum += f.reshape({f.size(0), -1}).std(0).mean().item<double>(), ++spread_batches;
    // Samples byte-identical to another of the same batch.
    if (b.inputs.dim() >= 1 && b.inputs.size(0) >= 8) {
      std::set<std::pair<uint64_t, uint64_t>> seen;
      for (const Hash128& h : sample_hashes(b.inputs)) seen.insert({h.high, h.low});
      duplicate_samples += b.inputs.size(0) - int64_t(seen.size());
      samples += b.inputs.size(0);
      all_zero_samples += (x.reshape({x.size(0), -1}).abs().amax(1) == 0).sum().item<int64_t>();
    }
  }
  if (n == 0) {
    v.skipped = true;
    v.evidence = "no training batch";
    return v;
  }
  const double rms = std::sqrt(sumsq / double(std::max<int64_t>(n - non_finite, 1)));
  const double spread = spread_batches ? spread_sum / double(spread_batches) : NAN;
  v.data = {{"rms", rms}, {"max_abs", max_abs}, {"non_finite", non_finite}, {"values", n}, {"batches", batches},
            {"spread_across_samples", number(spread)}, {"duplicate_samples", duplicate_samples}, {"samples", samples}};
  v.evidence = "first " + std::to_string(batches) + " training batch(es): rms " + fmt(rms) + ", max |x| " + fmt(max_abs) +
               (non_finite ? ", " + std::to_string(non_finite) + " NaN/Inf of " + std::to_string(n) : "");
  int64_t target_non_finite = 0, target_values = 0;
  for (const Batch& b : p.batches) {
    if (!b.targets.defined() || !b.targets.is_floating_point()) continue;
    target_non_finite += b.targets.numel() - torch::isfinite(b.targets).sum().item<int64_t>();
    target_values += b.targets.numel();
  }
  v.data["target_non_finite"] = target_non_finite;
  if (target_non_finite > 0) v.evidence += "; the targets hold " + std::to_string(target_non_finite) + " NaN/Inf of " +
                                           std::to_string(target_values);
  if (target_non_finite > 0) {
    v.named = {"targets"};
    fail(v, kRankBadInputValues,
         "the training targets hold NaN/Inf: " + std::to_string(target_non_finite) + " of the " +
             std::to_string(target_values) + " target values in the first " + std::to_string(batches) +
             " batches, so the loss of any batch holding one is NaN",
         "find the missing or corrupt target values in the data (a NaN left in a table column, a division by 0 in "
         "the target's preprocessing) and drop or fill those samples");
  } else if (non_finite > 0) {
    v.named = {"input"};
    fail(v, kRankBadInputValues,
         "the training data holds " + std::to_string(non_finite) + " NaN/Inf values",
         "find them in the data pipeline (a division by a zero std, a missing value, a corrupt file) and fix or drop "
         "those samples");
  } else if (rms > 10) {
    v.named = {"input"};
    fail(v, kRankInputScale, "the inputs are not normalized: rms " + fmt(rms) + ", max |x| " + fmt(max_abs),
         max_abs >= 200 && max_abs <= 255.5 ? "they look like raw 0..255 pixels: divide by 255 (and standardize)"
                                            : "standardize them to mean 0 and std 1 (or scale to [0, 1])");
  } else if (samples > 0 && duplicate_samples * 5 >= samples) {
    v.named = {"input"};
    const bool zeros = all_zero_samples > 0;
    fail(v, kRankInputScale,
         "the inputs collapse to a few values" + std::string(zeros ? ", all zeros among them" : "") + ": " +
             std::to_string(duplicate_samples) + " of " + std::to_string(samples) + " samples in the first batches "
             "are byte-identical to another sample of their batch" +
             (zeros ? " (" + std::to_string(all_zero_samples) + " are all zeros)" : "") +
             ", where real data hardly ever repeats, so those samples carry nothing to tell them apart",
         "look at what the preprocessing does to the values: an integer division (uint8 // 255 is 0 for all but pure "
         "white), a threshold, or a cast that rounds them all to a few values");
  } else if (std::isfinite(spread) && rms >= 0.01 && spread < 0.02 * rms) {
    v.named = {"input"};
    fail(v, kRankInputScale,
         "the inputs barely differ from one sample to another: each feature's std across the samples is " + fmt(spread) +
             " (averaged) against an rms of " + fmt(rms) + ", so almost nothing in them tells the samples apart",
         "normalize with the data's own statistics in the data's own units (after ToTensor() the pixels are in 0..1: "
         "a mean and std given in 0..255 squash every image to nearly one value)");
  } else if (rms < 0.01) {
    v.named = {"input"};
    fail(v, kRankInputScale, "the inputs are tiny: rms " + fmt(rms) + ", max |x| " + fmt(max_abs),
         "they look scaled twice (divided by 255 twice?): standardize them to mean 0 and std 1");
  }
  return v;
}

// Held-out inputs must be preprocessed like the training inputs.
VitalSign heldout_inputs(const Probe& p) {
  VitalSign v = sign("heldout_inputs");
  if (!p.has_heldout) return skipped("heldout_inputs", "no held-out data");
  auto stats = [](const std::vector<Batch>& batches, double* mean, double* std) {
    double s = 0, sq = 0;
    int64_t n = 0;
    for (const Batch& b : batches) {
      if (!b.inputs.is_floating_point()) return false;
      const torch::Tensor x = b.inputs.detach().to(torch::kFloat64);
      if (!torch::isfinite(x).all().item<bool>()) return false;
      s += x.sum().item<double>(), sq += x.square().sum().item<double>(), n += x.numel();
    }
    if (n == 0) return false;
    *mean = s / double(n);
    *std = std::sqrt(std::max(0.0, sq / double(n) - *mean * *mean));
    return true;
  };
  double mt = 0, st = 0, mh = 0, sh = 0;
  if (!stats(p.batches, &mt, &st) || !stats(p.heldout, &mh, &sh)) {
    return skipped("heldout_inputs", "the inputs are not finite floating-point values");
  }
  v.data = {{"train_mean", mt}, {"train_std", st}, {"heldout_mean", mh}, {"heldout_std", sh}};
  v.evidence = "training inputs mean " + fmt(mt) + ", std " + fmt(st) + "; held-out inputs mean " + fmt(mh) + ", std " + fmt(sh);
  const double ratio = st > 0 ? sh / st : (sh > 0 ? INFINITY : 1);
  if (ratio > 2 || ratio < 0.5 || std::fabs(mh - mt) > std::max(st, 1e-12)) {
    v.named = {"heldout"};
    fail(v, kRankHeldoutInputs,
         "the held-out inputs are preprocessed differently: mean " + fmt(mh) + " and std " + fmt(sh) +
             " against the training inputs' " + fmt(mt) + " and " + fmt(st),
         "apply the same transforms (scaling, normalization mean/std) to the held-out data as to the training data");
  }
  return v;
}

}  // namespace spikehunt::doctor_detail
