// doctor/loss_weights.cpp — how the loss weighs what it is given: the batch
// against its halves (a sum, or a mean divided again), against the task's
// reference loss (a factor), each class's samples alone (an ignore index
// that is a real class) and each class's weight against its frequency.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "base/hash.h"
#include "base/number_format.h"
#include "harness/doctor/signs.h"
#include "harness/trainer.h"

namespace spikehunt::doctor_detail {

double loss_batch_scaling(Scenario& s, const Batch& b) {
  const int64_t n = b.inputs.dim() ? b.inputs.size(0) : 0;
  if (n < 4 || !b.targets.defined() || b.targets.dim() == 0 || b.targets.size(0) != n) return NAN;
  EvalMode eval(s.model());
  torch::NoGradGuard no_grad;
  auto loss_of = [&](int64_t from, int64_t to) {
    const torch::Tensor x = b.inputs.slice(0, from, to), y = b.targets.slice(0, from, to);
    const torch::Tensor out = guarded("forward", [&] { return s.forward(x, Tap()); });
    return guarded("loss", [&] { return s.loss(out, y); }).item<double>();
  };
  const double whole = loss_of(0, n), halves = 0.5 * (loss_of(0, n / 2) + loss_of(n / 2, n));
  if (!std::isfinite(whole) || !std::isfinite(halves) || std::fabs(halves) < 1e-8) return NAN;
  return whole / halves;
}

VitalSign loss_scale(double scaling, int64_t n, const std::vector<StepRecord>& records, const Verdict& verdict,
                     const LossReference& reference) {
  VitalSign v = sign("loss_scale");
  if (!std::isfinite(scaling)) return skipped("loss_scale", "the loss of the batch's halves could not be compared");
  double peak = 0;
  for (const StepRecord& r : records) peak = std::max(peak, std::isfinite(r.grad_norm) ? r.grad_norm : INFINITY);
  const bool summed = scaling > 1.8 && scaling < 2.2;
  const bool divided = scaling > 0.4 && scaling < 0.6;  // a mean divided by the batch size again
  v.data = {{"batch_over_halves", number(scaling)}, {"batch_size", n}, {"peak_grad_norm", number(peak)}};
  v.evidence = "the batch's loss is " + fmt(scaling) + "x the mean of its halves' losses (a mean over samples gives 1, "
               "a sum 2)";
  const double lr = records.empty() ? NAN : records.front().lr;
  if (divided) {
    // What that did: the training loss over the watched run, its first quarter against its last.
    double head = 0, tail = 0;
    size_t nh = 0, nt = 0;
    for (size_t i = 0; i < records.size(); ++i) {
      if (!std::isfinite(records[i].loss)) continue;
      if (i < records.size() / 4) head += records[i].loss, ++nh;
      if (i >= records.size() * 3 / 4) tail += records[i].loss, ++nt;
    }
    // No API divides a mean by the batch size again: a bug whatever the run did, which is stated.
    const double fell = nh == 0 || nt == 0 || head <= 0 ? NAN : 1 - (tail / double(nt)) / (head / double(nh));
    const std::string run = std::isfinite(fell) ? "the training loss fell " + fmt(100 * fell) +
                                                      "% from the first quarter of the watched run to the last"
                                                : std::string("the watched run's losses are not finite");
    v.evidence += ": divided by the batch size on top of the mean; " + run;
    v.named = {"loss"};
    fail(v, kRankLossScale,
         "the loss is divided by the batch size on top of its mean: a batch's loss is " + fmt(scaling) +
             "x the mean of its halves', so its gradient and each step are 1/" + std::to_string(n) +
             " of a mean's at the same learning rate (" + fmt(lr) + "); " + run,
         "drop the extra division: reduction=\"mean\" (the default) already averages over the batch");
    return v;
  }
  // The loss against the task's reference loss on the same outputs and targets: a constant factor far from 1.
  if (reference.measured()) {
    v.data["reference_loss"] = reference.name;
    v.data["loss_over_reference"] = number(reference.ratio());
    v.evidence += "; the loss is " + fmt(reference.ratio()) + "x " + reference.name + " of the same outputs (" +
                  fmt(reference.program) + " against " + fmt(reference.reference) + ")";
  }
  if (!summed && reference.measured() && reference.ratio() >= 10 && reference.consistent) {
    v.named = {"loss"};
    fail(v, kRankLossScale,
         "the loss is " + fmt(reference.ratio()) + "x " + reference.name + " of the same outputs and targets (" +
             fmt(reference.program) + " against " + fmt(reference.reference) + ", the same factor on each half of the "
             "batch): it is scaled up, so its gradient and each step are that many times a plain " + reference.name +
             "'s at the same learning rate (" + fmt(lr) + ")",
         "drop the factor (a loss scaled by hand for precision must be unscaled before the step; torch.amp's "
         "GradScaler does both), or divide the learning rate by it");
    return v;
  }
  if (!summed) return v;
  std::string consequence;
  if (verdict.outcome == Outcome::kNonFinite && verdict.failure_step) {
    consequence = "the run went non-finite at step " + std::to_string(*verdict.failure_step);
  } else if (peak > 100) {
    consequence = "the gradient norm reached " + fmt(peak);
  } else if (verdict.outcome == Outcome::kExtreme && verdict.onset_step) {
    consequence = "the run went extreme at step " + std::to_string(*verdict.onset_step);
  }
  v.evidence += ": summed over the batch" + (consequence.empty() ? "; the watched run stayed within bounds" : "; " + consequence);
  if (consequence.empty()) return v;
  v.named = {"loss"};
  fail(v, kRankLossScale,
       "the loss is summed over the batch, not averaged: a batch's loss is " + fmt(scaling) +
           "x the mean of its halves', so its gradient and each step are " + std::to_string(n) +
           "x a mean's at the same learning rate (" + fmt(lr) + "), and " + consequence,
       "average the loss over the batch (reduction=\"mean\", the default), or divide the learning rate by the batch "
       "size: with a sum, the step grows with the batch");
  return v;
}

// The loss of some rows of a batch, each part through forward and loss as the code runs them (a scenario's
// loss may read its forward's batch).
double loss_of_rows(Scenario& s, const Batch& b, const torch::Tensor& rows) {
  const torch::Tensor x = b.inputs.index_select(0, rows.to(b.inputs.device()));
  const torch::Tensor out = guarded("forward", [&] { return s.forward(x, Tap()); });
  return guarded("loss", [&] { return s.loss(out, b.targets.index_select(0, rows.to(b.targets.device()))); }).item<double>();
}

// What the per-class probes read: integer class ids, one a sample, at least 4 samples.
bool class_id_targets(const torch::Tensor& y) {
  return y.defined() && !y.is_floating_point() && y.dim() == 1 && y.size(0) >= 4;
}

VitalSign ignored_class(Scenario& s, const Batch& b) {
  VitalSign v = sign("ignored_class");
  const torch::Tensor& y = b.targets;
  if (!class_id_targets(y)) {
    v.evidence = "no class-id targets of one dimension";
    return v;
  }
  EvalMode eval(s.model());
  torch::NoGradGuard no_grad;
  auto loss_of = [&](const torch::Tensor& rows) { return loss_of_rows(s, b, rows); };
  const torch::Tensor first_out = guarded("forward", [&] { return s.forward(b.inputs, Tap()); });
  if (first_out.dim() != 2 || first_out.size(0) != y.size(0)) {
    v.evidence = "the outputs are not one row of class scores a sample";
    return v;
  }
  const torch::Tensor labels = y.to(torch::kCPU);
  std::vector<std::string> ignored;
  nlohmann::json per_class = nlohmann::json::object();
  std::string example;
  const torch::Tensor classes = std::get<0>(at::_unique(labels)).to(torch::kLong).contiguous();
  if (classes.numel() > 32) {
    v.evidence = "more than 32 classes in the batch: not probed";
    return v;
  }
  for (const int64_t c : std::vector<int64_t>(classes.data_ptr<int64_t>(), classes.data_ptr<int64_t>() + classes.numel())) {
    const torch::Tensor in = labels == c;
    const int64_t n = in.sum().item<int64_t>();
    if (n == 0 || n == labels.size(0)) continue;
    const double alone = loss_of(in.nonzero().flatten()), others = loss_of((~in).nonzero().flatten());
    per_class[std::to_string(c)] = {{"samples", n}, {"loss_alone", number(alone)}};
    if ((std::isnan(alone) || alone == 0) && std::isfinite(others) && others > 0) {
      ignored.push_back("class " + std::to_string(c));
      if (example.empty()) {
        example = "on the batch's " + std::to_string(n) + " samples of class " + std::to_string(c) + " alone it is " +
                  fmt(alone) + (std::isnan(alone) ? " (no sample counted)" : "") + ", on the other " +
                  std::to_string(labels.size(0) - n) + " " + fmt(others);
      }
    }
  }
  v.data = {{"classes", per_class}, {"ignored", ignored}};
  v.evidence = "the loss of each class's samples alone, in eval mode: every class counted";
  if (ignored.empty()) return v;
  v.named = ignored;
  v.evidence = "the loss ignores " + list(ignored) + ": " + example;
  fail(v, kRankTargetLeak,
       "the loss ignores " + list(ignored, 3) + ": " + example + ", so " + list(ignored, 3) +
           " is never trained",
       "an ignore_index (or a class weight of 0) equal to a real class: give the padding its own index (-100, the "
       "default) and keep the real classes out of it");
  return v;
}

// The loss's weight of each class, read from the loss of single samples and of pairs (in eval mode):
// for a weighted mean, the pair (i, r) gives L = (w_i l_i + w_r l_r) / (w_i + w_r), so
// w_i / w_r = (L - l_r) / (l_i - L). Weights that grow with the classes' frequency in the training
// labels (counts where their inverse was meant) push every prediction toward the majority.
VitalSign class_weights(Scenario& s, const std::vector<Batch>& batches) {
  VitalSign v = sign("class_weights");
  const Batch& b = batches.front();
  const torch::Tensor& y = b.targets;
  if (!class_id_targets(y)) {
    v.evidence = "no class-id targets of one dimension";
    return v;
  }
  EvalMode eval(s.model());
  torch::NoGradGuard no_grad;
  const torch::Tensor out = guarded("forward", [&] { return s.forward(b.inputs, Tap()); }).detach();
  if (out.dim() != 2 || out.size(0) != y.size(0) || out.size(1) < 2) {
    v.evidence = "the outputs are not one row of class scores a sample";
    return v;
  }
  const torch::Tensor labels = y.to(torch::kCPU).to(torch::kInt64);
  const torch::Tensor reference = torch::nn::functional::cross_entropy(
      out.to(torch::kCPU).to(torch::kFloat64), labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  auto loss_of = [&](const std::vector<int64_t>& rows) { return loss_of_rows(s, b, torch::tensor(rows, torch::kInt64)); };
  const int64_t* lab = labels.data_ptr<int64_t>();
  const double* ref = reference.data_ptr<double>();
  // A sample of each class present, and whether the loss of one sample is its cross-entropy.
  std::map<int64_t, int64_t> sample_of;
  for (int64_t i = 0; i < labels.size(0); ++i) sample_of.emplace(lab[i], i);
  if (sample_of.size() < 2 || sample_of.size() > 32) {
    v.evidence = std::to_string(sample_of.size()) + " classes in the first batch: not probed";
    return v;
  }
  for (const auto& [c, i] : sample_of) {
    const double alone = loss_of({i});
    if (!std::isfinite(alone) || std::fabs(alone - ref[i]) > 1e-3 * (1 + ref[i])) {
      v.evidence = "the loss of one sample is not its cross-entropy (" + fmt(alone) + " against " + fmt(ref[i]) +
                   "): not a weighted cross-entropy, not probed";
      return v;
    }
  }
  const int64_t r = sample_of.begin()->second;
  std::map<int64_t, double> weight;
  for (const auto& [c, i] : sample_of) {
    if (i == r) {
      weight[c] = 1;
      continue;
    }
    if (std::fabs(ref[i] - ref[r]) < 1e-4) continue;
    const double pair = loss_of({i, r});
    const double ratio = (pair - ref[r]) / (ref[i] - pair);
    if (std::isfinite(ratio) && ratio > 0) weight[c] = ratio;
  }
  std::map<int64_t, int64_t> count;
  int64_t total = 0;
  for (const Batch& x : batches) {
    if (!x.targets.defined() || x.targets.is_floating_point()) continue;
    const torch::Tensor t = x.targets.to(torch::kCPU).to(torch::kInt64).flatten();
    for (int64_t k = 0; k < t.numel(); ++k) ++count[t.data_ptr<int64_t>()[k]], ++total;
  }
  double lo = INFINITY, hi = 0, mean = 0;
  for (const auto& [c, w] : weight) lo = std::min(lo, w), hi = std::max(hi, w), mean += w;
  mean /= double(std::max<size_t>(weight.size(), 1));
  nlohmann::json per_class = nlohmann::json::object();
  std::vector<std::pair<double, double>> pairs;  // (weight, share)
  for (const auto& [c, w] : weight) {
    const double share = total ? double(count[c]) / double(total) : 0;
    per_class[std::to_string(c)] = {{"weight", w / mean}, {"share", share}};
    pairs.emplace_back(w, share);
  }
  // The correlation of log weight with log share: 1 when the weights are proportional to the counts, -1 for
  // their inverse, undefined (0) for equal weights.
  double mw = 0, ms = 0;
  int used = 0;
  for (auto& [w, share] : pairs) {
    if (share <= 0) {
      share = NAN;
      continue;
    }
    w = std::log(w), share = std::log(share);
    mw += w, ms += share, ++used;
  }
  double sxy = 0, sxx = 0, syy = 0;
  for (const auto& [w, share] : pairs) {
    if (!std::isfinite(share)) continue;
    sxy += (w - mw / used) * (share - ms / used), sxx += (w - mw / used) * (w - mw / used);
    syy += (share - ms / used) * (share - ms / used);
  }
  const double rho = used > 2 && sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0;
  int64_t top = -1, major = -1;
  double top_w = 0, major_share = 0;
  for (const auto& [c, w] : weight) {
    if (w > top_w) top_w = w, top = c;
    const double share = total ? double(count[c]) / double(total) : 0;
    if (share > major_share) major_share = share, major = c;
  }
  v.data = {{"classes", per_class}, {"spread", number(hi / lo)}, {"log_correlation_with_share", number(rho)}};
  v.evidence = "the loss's weight of each class (read from single samples and pairs, mean 1): from " + fmt(lo / mean) +
               " to " + fmt(hi / mean) + "; correlation of log weight with log share of the training labels " + fmt(rho);
  if (hi / lo >= 3 && rho >= 0.5 && top == major && major_share >= 2.0 / double(std::max<size_t>(sample_of.size(), 2))) {
    v.named = {"class " + std::to_string(top)};
    fail(v, kRankLossMismatch,
         "the loss's class weights grow with the classes' frequency: class " + std::to_string(top) + ", " +
             percent(major_share) + " of the training labels, weighs " + fmt(top_w / lo) + "x the least weighted "
             "class (log weight against log share: correlation " + fmt(rho) + "), which pushes every prediction "
             "further toward the majority",
         "weight each class by the inverse of its frequency (total / count), not by its count");
  }
  return v;
}

}  // namespace spikehunt::doctor_detail
