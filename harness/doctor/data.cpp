// doctor/data.cpp — the data as the training code hands it over: the classes of
// each batch and the labels' balance, batches that repeat, targets against the
// inputs (copies, earlier positions, a target column among the features,
// padding), the targets' scale. Each states what it measured and what a
// correct program shows.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <set>

#include <ATen/CPUGeneratorImpl.h>

#include "base/hash.h"
#include "base/json.h"
#include "base/number_format.h"
#include "harness/doctor/signs.h"
#include "harness/trainer.h"

namespace spikehunt::doctor_detail {


VitalSign batch_composition(const std::vector<StepRecord>& records, int64_t classes) {
  VitalSign v = sign("batch_composition");
  std::vector<int64_t> total(size_t(std::max<int64_t>(classes, 0)), 0);
  int64_t batches = 0, single = 0, samples = 0;
  double present_sum = 0;
  for (const StepRecord& r : records) {
    int64_t present = 0, n = 0;
    for (size_t c = 0; c < r.label_histogram.size() && c < total.size(); ++c) {
      present += r.label_histogram[c] > 0;
      n += r.label_histogram[c];
      total[c] += r.label_histogram[c];
    }
    if (n == 0) continue;
    ++batches;
    single += present == 1;
    present_sum += double(present);
    samples += n;
  }
  if (batches < 4) return skipped("batch_composition", "fewer than 4 watched batches with class labels");
  const double per_batch = double(samples) / double(batches);
  // What random draws of that size from the run's own labels would hold: sum over classes of 1 - (1 - p)^n.
  double expected = 0;
  int64_t seen = 0;
  for (int64_t t : total) {
    if (t == 0) continue;
    ++seen;
    expected += 1 - std::pow(1 - double(t) / double(samples), per_batch);
  }
  const double mean = present_sum / double(batches);
  v.data = {{"batches", batches}, {"single_class_batches", single}, {"classes_per_batch", number(mean)},
            {"classes_per_random_batch", number(expected)}, {"classes_in_run", seen}};
  v.evidence = std::to_string(batches) + " watched batches of " + fmt(per_batch) + " labels hold " + fmt(mean) +
               " classes each on average (" + std::to_string(single) + " hold one); random draws of that size from "
               "the same " + std::to_string(seen) + " classes would hold " + fmt(expected);
  if (seen >= 2 && expected >= 2 && mean <= 0.5 * expected) {
    v.named = {"data order"};
    fail(v,
         kRankBatchComposition,
         (single * 2 >= batches ? "each training batch holds one class (" + std::to_string(single) + " of " +
                                      std::to_string(batches) + " watched batches)"
                                : "the training batches hold " + fmt(mean) + " classes each") +
             " where random draws from the same labels hold " + fmt(expected) +
             ": the data arrives in class order, not shuffled",
         "shuffle the training data (DataLoader(shuffle=True) or a random sampler): trained one class at a time, the "
         "model forgets the others and ends up predicting the last class it saw");
  }
  return v;
}

VitalSign target_leak(Scenario& s, const Batch& b) {
  VitalSign v = sign("target_leak");
  const torch::Tensor x = b.inputs, y = b.targets;
  if (!integer_tokens(x) || !y.defined() || y.is_floating_point() || y.sizes() != x.sizes() || x.size(1) < 4) {
    v.evidence = "inputs " + c10::str(x.sizes()) + ", targets " + (y.defined() ? c10::str(y.sizes()) : "none") +
                 ": not token sequences with a target per position";
    return v;
  }
  const torch::Tensor xl = x.to(torch::kCPU).to(torch::kInt64), yl = y.to(torch::kCPU).to(torch::kInt64);
  const double same = (xl == yl).to(torch::kFloat64).mean().item<double>();
  const double next = (yl.slice(1, 0, -1) == xl.slice(1, 1)).to(torch::kFloat64).mean().item<double>();
  // Targets that are inputs at earlier positions (the labels shifted the wrong way): visible to the model.
  int64_t back = 0;
  double previous = 0;
  for (int64_t k = 1; k <= 2; ++k) {
    const double share = (yl.slice(1, k) == xl.slice(1, 0, -k)).to(torch::kFloat64).mean().item<double>();
    if (share > previous) previous = share, back = k;
  }
  v.data = {{"targets_equal_inputs", same}, {"targets_equal_next_inputs", next},
            {"targets_equal_earlier_inputs", previous}, {"positions_back", back}};
  v.evidence = "targets equal the input at their position for " + percent(same) + " of positions, the next input for " +
               percent(next) + ", the input " + std::to_string(back) + " position(s) back for " + percent(previous);
  if (previous >= 0.9 && same < 0.9 && next < 0.9) {
    v.named = {"targets"};
    fail(v, kRankTargetLeak,
         "the targets are the inputs shifted the wrong way: " + percent(previous) + " of the targets at position t "
             "equal the input at t - " + std::to_string(back) + ", a token the model has already seen (an earlier "
             "position), so it learns to copy from " + std::to_string(back) + " position(s) back",
         "for next-token prediction the target at position t is the input at t + 1: shift the labels the other way");
    return v;
  }
  if (same >= 0.9) {
    // Does the loss reward copying? Outputs that copy the input at each position against outputs that
    // predict the next input: a loss that shifts the labels itself (Hugging Face's causal LMs take
    // labels = input_ids) is lowest for the second.
    torch::Tensor out;
    {
      EvalMode eval(s.model());
      torch::NoGradGuard no_grad;
      KeepRng rng;
      out = guarded("forward", [&] { return s.forward(x, Tap()); }).detach();
    }
    if (out.dim() == 3 && out.size(0) == x.size(0) && out.size(1) == x.size(1) && out.is_floating_point() &&
        xl.max().item<int64_t>() < out.size(2)) {
      torch::NoGradGuard no_grad;
      const torch::Tensor ids = x.to(out.device()).to(torch::kInt64);
      const torch::Tensor next_ids = torch::cat({ids.slice(1, 1), ids.slice(1, -1)}, 1);
      auto sharp = [&](const torch::Tensor& t) {
        return torch::nn::functional::one_hot(t, out.size(2)).to(out.scalar_type()) * 30 - 15;
      };
      const double copying = guarded("loss", [&] { return s.loss(sharp(ids), y); }).item<double>();
      const double predicting = guarded("loss", [&] { return s.loss(sharp(next_ids), y); }).item<double>();
      v.data["loss_of_copying"] = number(copying);
      v.data["loss_of_predicting_next"] = number(predicting);
      v.evidence += "; the loss of outputs that copy each input " + fmt(copying) + ", of outputs that predict the next " +
                    "input " + fmt(predicting);
      if (std::isfinite(predicting) && predicting < 1 && copying > predicting + 1) {
        v.evidence += ": the loss shifts the labels itself";
        return v;
      }
      if (std::isfinite(copying) && std::fabs(copying - predicting) <= 0.01 * (1 + std::fabs(copying))) {
        // A framework's loss computed again from the inputs (Lightning's training_step, the Trainer's
        // compute_loss) does not read the outputs it is handed.
        v.evidence += ": the loss does not follow the outputs it is given, so whether it shifts the labels "
                      "cannot be told from here";
        return v;
      }
    }
    v.named = {"targets"};
    fail(v, kRankTargetLeak,
         "the targets are the inputs: " + percent(same) + " of the targets equal the input at their own position, so "
         "the model learns to copy what it sees",
         "for next-token prediction the target at position t is the input at t + 1: shift the labels by one (or pass "
         "labels = input_ids only to models that shift them themselves)");
    return v;
  }
  if (next < 0.9) return v;
  // Next-token prediction: the output at position t must not depend on inputs after t.
  torch::Tensor changed = x.clone();
  const int64_t last = x.size(1) - 1;
  changed.select(1, last).copy_(x.select(1, last).roll(1, 0));  // another sample's token at the last position
  changed.select(1, last).masked_fill_(changed.select(1, last) == x.select(1, last), 0);
  // Each pass from the same random state (a forward left random in eval mode, eval_consistency's
  // finding, then draws the same numbers), the caller's state put back after.
  torch::Tensor a, again, c;
  {
    EvalMode eval(s.model());
    torch::NoGradGuard no_grad;
    KeepRng rng;
    auto pass = [&](const torch::Tensor& in) {
      rng.reseed(0x5eed);
      return guarded("forward", [&] { return s.forward(in, Tap()); }).detach().to(torch::kFloat64);
    };
    a = pass(x);
    again = pass(x);
    c = pass(changed);
  }
  if (a.dim() < 2 || a.size(0) != x.size(0) || a.size(1) != x.size(1) || a.sizes() != c.sizes()) {
    v.evidence += "; outputs " + c10::str(a.sizes()) + ": not one per position";
    return v;
  }
  const double scale = a.abs().max().item<double>();
  const double noise = (a - again).abs().max().item<double>();
  if (noise > 0) {
    v.evidence += "; two passes of the same input from the same random state differ (by " + fmt(noise) +
                  "): whether earlier positions see later ones cannot be told";
    return v;
  }
  const double earlier = (a.slice(1, 0, last) - c.slice(1, 0, last)).abs().max().item<double>();
  v.data["earlier_outputs_change"] = number(earlier);
  v.evidence += "; changing the last position's input changes the outputs at earlier positions by up to " +
                fmt(earlier) + " (outputs up to " + fmt(scale) + ")";
  if (earlier > 1e-5 * (1 + scale)) {
    v.named = {"forward"};
    v.part = "model";
    fail(v, kRankTargetLeak,
         "the outputs at a position depend on the inputs at later positions (up to " + fmt(earlier) +
             "), and each target is the next input: the model sees the token it is asked to predict",
         "mask attention to later positions (a causal mask: tril, is_causal=True), and keep any other mixing along "
         "the sequence one-directional");
  }
  return v;
}

VitalSign target_padding(Scenario& s, const Batch& b) {
  VitalSign v = sign("target_padding");
  const torch::Tensor x = b.inputs, y = b.targets;
  if (!integer_tokens(x) || !integer_tokens(y) || y.sizes() != x.sizes()) {
    v.evidence = "not token sequences with a target per position";
    return v;
  }
  const torch::Tensor yl = y.to(torch::kCPU).to(torch::kInt64).contiguous();
  const int64_t rows = yl.size(0), t = yl.size(1);
  // Each sequence's trailing run of one token, and the token most sequences end in.
  std::map<int64_t, int64_t> endings;
  const auto tokens = yl.accessor<int64_t, 2>();  // read in place: no tensor op per element
  for (int64_t i = 0; i < rows; ++i) ++endings[tokens[i][t - 1]];
  const auto common = std::max_element(endings.begin(), endings.end(),
                                        [](const auto& a, const auto& c) { return a.second < c.second; });
  const int64_t pad = common->first;
  torch::Tensor in_run = torch::zeros_like(yl, torch::kBool);
  int64_t padded_rows = 0;
  for (int64_t i = 0; i < rows; ++i) {
    int64_t k = t;
    while (k > 0 && tokens[i][k - 1] == pad) --k;
    if (t - k >= 2) {
      in_run[i].slice(0, k).fill_(true);
      ++padded_rows;
    }
  }
  const double share = in_run.to(torch::kFloat64).mean().item<double>();
  v.data = {{"token", pad}, {"share_of_targets", share}, {"sequences_ending_in_it", padded_rows}};
  v.evidence = percent(share) + " of the targets are trailing runs of token " + std::to_string(pad) + " (" +
               std::to_string(padded_rows) + " of " + std::to_string(rows) + " sequences end in one)";
  if (share < 0.2 || padded_rows * 4 < rows) return v;
  double with = NAN, without = NAN;
  {
    EvalMode eval(s.model());
    torch::NoGradGuard no_grad;
    KeepRng rng;
    rng.reseed(0x5eed);
    const torch::Tensor out = guarded("forward", [&] { return s.forward(x, Tap()); });
    with = guarded("loss", [&] { return s.loss(out, y); }).item<double>();
    try {
      without = s.loss(out, y.masked_fill(in_run.to(y.device()), -100)).item<double>();
    } catch (const std::exception&) {
      v.evidence += "; the loss does not take -100 (ignore_index) for them: whether it counts them cannot be told";
      return v;
    }
  }
  v.data["loss"] = number(with);
  v.data["loss_without_them"] = number(without);
  v.evidence += "; the loss is " + fmt(with) + " with them, " + fmt(without) + " with them set to -100 (ignore_index)";
  if (std::isfinite(with) && std::isfinite(without) && std::fabs(with - without) > 1e-6 * (1 + std::fabs(with))) {
    v.named = {"loss"};
    fail(v, kRankTargetLeak,
         percent(share) + " of the targets are padding (runs of token " + std::to_string(pad) + " that end " +
             std::to_string(padded_rows) + " of " + std::to_string(rows) +
             " sequences) and the loss counts them: it is " + fmt(with) + " with them and " + fmt(without) +
             " without",
         "give the loss ignore_index=<the padding token> (cross_entropy ignores -100 by default), or set the "
         "padded targets to -100");
  }
  return v;
}

}  // namespace spikehunt::doctor_detail

namespace spikehunt::doctor_detail {

VitalSign batch_repeats(const std::vector<StepRecord>& records, const Probe& probe) {
  VitalSign v = sign("batch_repeats");
  constexpr size_t kWindow = 8;  // a batch identical to one of the 8 before it
  std::vector<Hash128> distinct;
  int64_t repeats = 0, batches = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const Hash128 h = records[i].input_hash;
    if (h == Hash128{}) continue;  // no inputs hashed
    ++batches;
    bool near = false;
    for (size_t k = i >= kWindow ? i - kWindow : 0; k < i && !near; ++k) near = records[k].input_hash == h;
    repeats += near;
    if (std::find(distinct.begin(), distinct.end(), h) == distinct.end()) distinct.push_back(h);
  }
  if (batches < 8) return skipped("batch_repeats", "fewer than 8 watched batches");
  v.data = {{"batches", batches}, {"repeats_within_8", repeats}, {"distinct_batches", distinct.size()}};
  v.evidence = std::to_string(batches) + " watched batches, " + std::to_string(distinct.size()) +
               " distinct (by the hash of their inputs); " + std::to_string(repeats) +
               " repeat one of the 8 batches before them";
  // One batch every step: full-batch training of a data set that is one batch, unless the held-out data alone is
  // larger than that batch (then the training data surely is too, and the loader hands out its first batch only).
  int64_t heldout_samples = 0;
  for (const Batch& b : probe.heldout) heldout_samples += b.inputs.dim() ? b.inputs.size(0) : 0;
  const int64_t batch = probe.batches.front().inputs.dim() ? probe.batches.front().inputs.size(0) : 0;
  v.data["heldout_larger_than_batch"] = probe.has_heldout && heldout_samples > batch;
  if (distinct.size() == 1 && probe.has_heldout && heldout_samples > batch) {
    v.named = {"data loader"};
    fail(v, kRankBatchComposition,
         "every watched batch is the same batch (1 distinct in " + std::to_string(batches) +
             ", by the hash of their inputs): each step trains on the same samples",
         "a new iterator every step (next(iter(loader))) restarts an unshuffled loader at its first batch, and a seed "
         "set before every draw draws the same one: create the iterator once and keep drawing from it, seed once");
    return v;
  }
  // A data set of 8 batches or fewer cycles within the window: nothing to say.
  if (distinct.size() > kWindow && repeats * 4 >= batches) {
    v.named = {"data loader"};
    fail(v, kRankBatchComposition,
         std::to_string(repeats) + " of " + std::to_string(batches) + " watched batches are identical to one of the " +
             "8 batches before them (" + std::to_string(distinct.size()) + " distinct in " + std::to_string(batches) +
             "): the loader hands out the same batch several times before the rest of the data",
         "DataLoader workers forked with one random state (numpy's) draw the same samples: seed each worker "
         "(worker_init_fn, or torch's generator), or draw indices in the main process (a Sampler)");
  }
  return v;
}

VitalSign target_scale(const Batch& b, const torch::Tensor& out, const std::vector<StepRecord>& records,
                       const Verdict& verdict) {
  VitalSign v = sign("target_scale");
  const torch::Tensor& y = b.targets;
  if (!y.defined() || !y.is_floating_point() || !out.defined() || out.sizes() != y.sizes() || y.numel() < 2 ||
      ((y == 0) | (y == 1)).all().item<bool>()) {
    v.evidence = "no float regression targets of the outputs' shape";
    return v;
  }
  torch::NoGradGuard no_grad;
  const double rms = y.to(torch::kFloat64).square().mean().sqrt().item<double>();
  const double out_rms = out.detach().to(torch::kFloat64).square().mean().sqrt().item<double>();
  v.data = {{"target_rms", number(rms)}, {"output_rms_at_start", number(out_rms)}};
  v.evidence = "the targets' rms is " + fmt(rms) + ", the outputs' at step 0 " + fmt(out_rms);
  if (!(rms >= 100 && rms >= 100 * std::max(out_rms, 1e-3))) return v;
  std::string consequence;
  double peak = 0;
  for (const StepRecord& r : records) peak = std::max(peak, std::isfinite(r.grad_norm) ? r.grad_norm : 0.0);
  if (verdict.failure_step) consequence = "the watched run went non-finite at step " + std::to_string(*verdict.failure_step);
  else if (verdict.onset_step) consequence = "the watched run went extreme at step " + std::to_string(*verdict.onset_step);
  else consequence = "the gradient norm reached " + fmt(peak);
  v.named = {"targets"};
  fail(v, kRankInputScale,
       "unnormalized regression targets: their rms is " + fmt(rms) + " where the outputs start at " + fmt(out_rms) +
           ", so the squared error and its gradient are of that scale at a learning rate meant for unit-scale "
           "targets; " + consequence,
       "standardize the targets ((y - mean) / std over the training set) and undo it on the predictions, or "
       "predict log(y)");
  return v;
}

}  // namespace spikehunt::doctor_detail





namespace spikehunt::doctor_detail {

// The target among the inputs (target leakage in tabular data): for inputs of one feature vector a sample,
// an input feature that predicts a target column perfectly (|correlation| 0.999 or more over the first
// batches) hands the model the answer, and held-out scores measure nothing of the task.
VitalSign target_in_inputs(const std::vector<Batch>& batches) {
  VitalSign v = sign("target_in_inputs");
  std::vector<torch::Tensor> xs, ys;
  for (const Batch& b : batches) {
    if (!b.inputs.defined() || !b.inputs.is_floating_point() || b.inputs.dim() != 2 || !b.targets.defined() ||
        b.targets.dim() < 1 || b.targets.size(0) != b.inputs.size(0)) {
      v.evidence = "not feature vectors with a target a sample";
      return v;
    }
    xs.push_back(b.inputs.to(torch::kCPU).to(torch::kFloat64));
    ys.push_back(b.targets.to(torch::kCPU).to(torch::kFloat64).reshape({b.targets.size(0), -1}));
  }
  if (xs.empty()) return skipped("target_in_inputs", "no training batch");
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::cat(xs), y = torch::cat(ys);
  if (x.size(0) < 16 || !torch::isfinite(x).all().item<bool>() || !torch::isfinite(y).all().item<bool>()) {
    v.evidence = "too few samples, or non-finite values";
    return v;
  }
  const torch::Tensor xc = x - x.mean(0), yc = y - y.mean(0);
  const torch::Tensor xs_norm = xc.square().sum(0).sqrt(), ys_norm = yc.square().sum(0).sqrt();  // (F), (K)
  const torch::Tensor corr = (xc.t().mm(yc)) / (xs_norm.unsqueeze(1) * ys_norm.unsqueeze(0)).clamp_min(1e-12);  // (F, K)
  const torch::Tensor valid = (xs_norm.unsqueeze(1) > 0) & (ys_norm.unsqueeze(0) > 0);
  const torch::Tensor a = torch::where(valid, corr.abs(), torch::zeros_like(corr));
  const double best = a.max().item<double>();
  const int64_t at = a.argmax().item<int64_t>(), feature = at / a.size(1), column = at % a.size(1);
  v.data = {{"best_correlation", number(best)}, {"feature", feature}, {"target_column", column}, {"samples", x.size(0)}};
  v.evidence = "the input feature closest to a target: feature " + std::to_string(feature) + ", |correlation| " +
               fmt(best) + " with target column " + std::to_string(column) + " over " + std::to_string(x.size(0)) +
               " samples";
  if (best >= 0.999) {
    v.named = {"input feature " + std::to_string(feature)};
    fail(v, kRankTargetLeak,
         "the target is among the inputs: input feature " + std::to_string(feature) + " has |correlation| " +
             fmt(best) + " with target column " + std::to_string(column) + " over the first " +
             std::to_string(x.size(0)) + " samples (target leakage): the model can read the answer, so what it "
             "learns and its held-out score say nothing about the task",
         "drop the target column (and anything computed from it) from the input features");
  }
  return v;
}

}  // namespace spikehunt::doctor_detail

namespace spikehunt::doctor_detail {

// Every training label one class: nothing to learn.
VitalSign label_balance(const Watched& w, int64_t classes, const std::vector<Batch>& batches) {
  VitalSign v = sign("label_balance");
  std::vector<int64_t> count;
  for (const StepRecord& r : w.records) {
    if (count.size() < r.label_histogram.size()) count.resize(r.label_histogram.size(), 0);
    for (size_t k = 0; k < r.label_histogram.size(); ++k) count[k] += r.label_histogram[k];
  }
  const int64_t total = std::accumulate(count.begin(), count.end(), int64_t{0});
  if (total == 0 || classes < 2) return skipped("label_balance", "no class-id labels");
  const int64_t top = std::max_element(count.begin(), count.end()) - count.begin();
  int64_t present = 0;
  for (int64_t c : count) present += c > 0;
  v.data = {{"classes_present", present}, {"labels", total}, {"top_class", top},
            {"top_share", double(count[size_t(top)]) / double(total)}};
  v.evidence = std::to_string(present) + " of " + std::to_string(classes) + " classes in " + std::to_string(total) +
               " training labels; class " + std::to_string(top) + " has " + percent(double(count[size_t(top)]) / double(total));
  // Targets below 0 (an ignore index, -100) are left out of the count, as the loss leaves them out.
  int64_t ignored = 0, targets = 0;
  for (const Batch& b : batches) {
    if (!b.targets.defined() || b.targets.is_floating_point()) continue;
    ignored += (b.targets < 0).sum().item<int64_t>();
    targets += b.targets.numel();
  }
  const std::string of_counted = ignored > 0 ? " the loss counts (" + percent(double(ignored) / double(targets)) +
                                                   " of the targets in the first batches are negative, an ignore index)"
                                             : "";
  v.data["ignored_share"] = targets ? double(ignored) / double(targets) : 0.0;
  if (present == 1) {
    v.named = {"class " + std::to_string(top)};
    fail(v, kRankOneClass,
         "every training label" + of_counted + " is class " + std::to_string(top) + " (" + std::to_string(total) + " labels)",
         "the labels are lost in the data pipeline: a constant, a wrong column, an overwritten or zero-initialized "
         "label tensor, or a filter that keeps one class");
  }
  return v;
}

}  // namespace spikehunt::doctor_detail
