// doctor/outputs.cpp — the signs that read the outputs of the watched run: a
// frozen output layer, outputs that ignore the inputs, and held-out
// predictions no better than chance (with a run too short to judge said so).
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

VitalSign frozen_output(const Watched& w, const Probe& p) {
  VitalSign v = sign("frozen_output");
  if (w.records.empty()) return skipped("frozen_output", "no training step ran");
  const double log_classes = std::log(double(p.classes));
  double tail = 0;
  int n = 0;
  for (size_t i = w.records.size() > 10 ? w.records.size() - 10 : 0; i < w.records.size(); ++i) {
    if (std::isfinite(w.records[i].loss)) tail += w.records[i].loss, ++n;
  }
  tail = n ? tail / n : NAN;
  const bool still = w.outputs_moved <= 1e-7 * (1 + w.outputs_scale);
  const bool at_chance = std::fabs(tail - log_classes) < 0.25;
  v.data = {{"loss_first", number(w.records.front().loss)}, {"loss_last", number(tail)},
            {"log_classes", log_classes}, {"outputs_moved", number(w.outputs_moved)}};
  v.evidence = "loss " + fmt(w.records.front().loss) + " -> " + fmt(tail) + " (log " + std::to_string(p.classes) +
               " = " + fmt(log_classes) + "); outputs on a fixed input moved by " + fmt(w.outputs_moved) + " in " +
               std::to_string(w.records.size()) + " steps";
  if (still && at_chance) {
    v.named = {w.output_layer};
    v.evidence += ": frozen";
    // Whether the output layer's parameters held a gradient when the optimizer stepped (read, not assumed).
    bool output_grad = false;
    for (const Watched::Param& q : w.params) {
      if (layer_of(q.name) == w.output_layer && q.had_grad) output_grad = true;
    }
    v.data["output_layer_had_gradient"] = output_grad;
    if (output_grad) {
      fail(v, kRankFrozen,
           "the output is frozen: the loss stays at chance and no output moves, though the output layer (" +
               w.output_layer + ") held a gradient when the optimizer stepped",
           "the gradient reaches the output layer but no update moves it: see applied_update and lr_schedule for "
           "what the step did with it");
    } else {
      fail(v, kRankFrozen, "the output is frozen: the loss stays at chance and no output moves",
           "the output layer (" + w.output_layer + ") gets no gradient: look for a detach(), a no_grad block or a "
           "frozen requires_grad between the logits and the loss");
    }
  }
  return v;
}

// The model must use its input: at least one output differs between the
// samples of the fixed batch, at the start or after the run.
VitalSign input_dependence(const Watched& w) {
  VitalSign v = sign("input_dependence");
  auto spread = [](const torch::Tensor& o) {
    if (!o.defined() || o.dim() < 1 || o.size(0) < 2) return double(NAN);
    const torch::Tensor f = o.reshape({o.size(0), -1});
    return (f - f.slice(0, 0, 1)).abs().max().item<double>() / (1e-12 + f.abs().max().item<double>());
  };
  const double first = spread(w.outputs_before), last = spread(w.outputs_after);
  if (std::isnan(first)) return skipped("input_dependence", "no batch of two or more samples");
  v.data = {{"relative_spread_start", number(first)}, {"relative_spread_end", number(last)}};
  v.evidence = "outputs across the fixed batch's samples differ by " + fmt(first) + " (relative) at the start" +
               (std::isnan(last) ? "" : ", " + fmt(last) + " at the end");
  // Exactly the same output for every sample (a saturated or dead network comes close; dead_units tells that).
  const bool constant = first <= 1e-12 && (std::isnan(last) || last <= 1e-12);
  bool dead_layer = false;
  for (const auto& l : w.units_first) dead_layer = dead_layer || l.share() >= 0.99;
  if (constant) {
    const torch::Tensor& o = w.outputs_before;
    const bool one_unit = o.dim() == 2 && o.size(1) == 1;
    const double value = o.reshape({-1})[0].item<double>();
    v.named = {"output"};
    v.evidence += ": every sample gets the same output (" + fmt(value) + ")";
    fail(v, dead_layer ? kRankCollapse : kRankConstantOutput,
         "the output does not depend on the input: every sample gets " + fmt(value) +
             (one_unit && std::fabs(value - 1) < 1e-6 ? " (a softmax over one output unit is always 1)" : ""),
         one_unit ? "a softmax (or log_softmax) over a single unit is constant: use sigmoid with "
                    "binary_cross_entropy, or BCEWithLogits on the raw unit, or two output units"
                  : "check that forward() uses its input (not a constant, a cached tensor or the wrong variable), "
                    "and for a normalization over the wrong dimension");
  }
  return v;
}

// With labels unrelated to the inputs, the loss on batches the model has not
// seen cannot go below the entropy of the labels: the last quarter of the
// watched run's losses below it (by 0.1 nats) shows the inputs predict them.
bool learns_from_fresh_batches(const Watched& w, const std::vector<int64_t>& labels, int64_t total) {
  if (total == 0 || w.records.size() < 8) return false;
  double entropy = 0;
  for (int64_t c : labels) {
    if (c > 0) entropy -= double(c) / double(total) * std::log(double(c) / double(total));
  }
  double tail = 0;
  size_t n = 0;
  for (size_t i = w.records.size() * 3 / 4; i < w.records.size(); ++i) {
    if (std::isfinite(w.records[i].loss)) tail += w.records[i].loss, ++n;
  }
  return n > 0 && tail / double(n) < entropy - 0.1;
}

// A run too short to judge held-out accuracy at chance: its training loss still falls over its last quarter
// (by 3% or more against the quarter before) and has not reached the labels' entropy, which labels the
// inputs predict go under. Says so, and about how many steps the loss's pace needs to get there; "" when
// the run is not still learning.
std::string too_short(const Watched& w, const std::vector<int64_t>& labels, int64_t total) {
  const size_t n = w.records.size();
  if (n < 16 || total == 0) return "";
  auto mean = [&](size_t from, size_t to) {
    double sum = 0;
    size_t k = 0;
    for (size_t i = from; i < to; ++i) {
      if (std::isfinite(w.records[i].loss)) sum += w.records[i].loss, ++k;
    }
    return k ? sum / double(k) : NAN;
  };
  const double q3 = mean(n / 2, 3 * n / 4), q4 = mean(3 * n / 4, n);
  if (!std::isfinite(q3) || !std::isfinite(q4) || q3 <= 0 || q4 > 0.97 * q3) return "";
  double entropy = 0;
  for (int64_t c : labels) {
    if (c > 0) entropy -= double(c) / double(total) * std::log(double(c) / double(total));
  }
  const double rate = (q3 - q4) / (double(n) / 4);  // per step
  const double target = entropy - 0.1;
  const int64_t more = q4 > target && rate > 0 ? int64_t(std::ceil((q4 - target) / rate)) : 0;
  const int64_t need = int64_t(n) + std::min<int64_t>(more, 100000);
  return "too short to judge: the training loss still falls (" + fmt(q3) + " -> " + fmt(q4) + " over the last two "
         "quarters of " + std::to_string(n) + " steps) and has not reached the labels' entropy (" + fmt(entropy) +
         "), below which the inputs show they predict the labels; at its pace about " + std::to_string(need) +
         " steps would get there (doctor --steps " + std::to_string(need) + ")";
}

// `memorized`: the overfit check memorized one batch and saw no shifted labels.
VitalSign prediction_collapse(const Watched& w, const Probe& p, bool memorized) {
  VitalSign v = sign("prediction_collapse");
  if (w.predictions.empty()) {
    return skipped("prediction_collapse", w.verdict.failure_step ? "the run went non-finite: nothing to predict with"
                                                                 : "no labeled probe data (class ids) to predict");
  }
  const int64_t c = p.classes;
  std::vector<std::vector<int64_t>> confusion(size_t(c), std::vector<int64_t>(size_t(c), 0));
  std::vector<int64_t> label_count(size_t(c), 0), predicted_count(size_t(c), 0);
  int64_t correct = 0, n = 0, outside = 0;
  for (const Prediction& x : w.predictions) {
    if (x.label < 0 || x.label >= c) {  // a label the output cannot name: wrong, not dropped
      ++outside, ++n;
      continue;
    }
    if (x.predicted < 0 || x.predicted >= c) continue;
    ++confusion[x.label][x.predicted];
    ++label_count[x.label];
    ++predicted_count[x.predicted];
    correct += x.label == x.predicted;
    ++n;
  }
  if (n == outside) return skipped("prediction_collapse", "no probe label is a class of the output");
  const int64_t majority = std::max_element(label_count.begin(), label_count.end()) - label_count.begin();
  const int64_t top = std::max_element(predicted_count.begin(), predicted_count.end()) - predicted_count.begin();
  const double accuracy = double(correct) / double(n), baseline = double(label_count[majority]) / double(n);
  const double top_share = double(predicted_count[top]) / double(n);
  // The training data's balance, from the labels the monitor counted.
  std::vector<int64_t> train(size_t(c), 0);
  for (const StepRecord& r : w.records) {
    for (size_t k = 0; k < r.label_histogram.size() && k < size_t(c); ++k) train[k] += r.label_histogram[k];
  }
  const int64_t train_total = std::accumulate(train.begin(), train.end(), int64_t{0});
  const int64_t train_major = std::max_element(train.begin(), train.end()) - train.begin();
  const double train_share = train_total ? double(train[size_t(train_major)]) / double(train_total) : 0;
  const bool imbalanced = train_total > 0 && train_share >= std::max(2.0 / double(c), 0.3);
  v.data = {{"accuracy", accuracy}, {"majority_baseline", baseline}, {"majority_class", majority},
            {"most_predicted_class", top}, {"most_predicted_share", top_share},
            {"training_majority_class", train_major}, {"training_majority_share", train_share},
            {"labels_outside_output", outside}, {"confusion", confusion}};
  std::string matrix = "\n      confusion (rows: label, columns: prediction):";
  for (int64_t i = 0; i < c && c <= 20; ++i) {
    if (label_count[i] == 0) continue;
    matrix += "\n      " + std::to_string(i) + ":";
    for (int64_t k = 0; k < c; ++k) {
      char cell[16];
      std::snprintf(cell, sizeof cell, " %4lld", static_cast<long long>(confusion[i][k]));
      matrix += cell;
    }
  }
  v.evidence = std::string(p.has_heldout ? "held-out" : "training-batch") + " accuracy " + percent(accuracy) + " over " +
               std::to_string(n) + " samples; always predicting the majority class " + std::to_string(majority) +
               " scores " + percent(baseline) + "; class " + std::to_string(top) + " gets " + percent(top_share) +
               " of the predictions" +
               (outside ? " (" + std::to_string(outside) + " labels lie outside the output's " + std::to_string(c) +
                              " classes: counted wrong)"
                        : std::string()) +
               "; the training labels are " +
               (train_total ? percent(train_share) + " class " + std::to_string(train_major) : std::string("unknown")) +
               matrix;
  if (accuracy <= baseline + 0.02) {
    v.named = {"class " + std::to_string(top)};
    if (imbalanced) {
      fail(v, kRankCollapse,
           "the predictions collapse to the training data's majority: " + percent(train_share) + " of its labels are class " +
               std::to_string(train_major),
           "the model learned the class frequencies, not the inputs: rebalance the data (resample) or weight the loss "
           "by inverse class frequency");
    } else if (w.verdict.onset_step) {
      fail(v, kRankCollapse,
           "the predictions collapse to class " + std::to_string(top) + " (" + percent(top_share) +
               ") after the watched run went extreme at step " + std::to_string(*w.verdict.onset_step),
           "the collapse follows the instability monitor_health names: see its onset and first movers (a lower "
           "learning rate, warm-up, or clipping)");
    } else if (const std::string wait = too_short(w, train, train_total); !wait.empty()) {
      VitalSign short_run = skipped("prediction_collapse", v.evidence + "; " + wait);
      short_run.data = v.data;
      short_run.data["too_short"] = true;
      return short_run;
    } else if (memorized && p.has_heldout && learns_from_fresh_batches(w, train, train_total)) {
      v.evidence += "; the training loss on fresh batches fell below the labels' entropy: the inputs predict the "
                    "labels, the held-out accuracy is not yet above chance";
      return v;
    } else if (memorized && p.has_heldout) {
      fail(v, kRankCollapse,
           "the training labels look unrelated to the inputs: one batch is memorized, yet held-out accuracy stays "
           "at chance (" + percent(accuracy) + ")",
           "check that inputs and labels stay paired through the data pipeline (shuffled or sorted apart, an "
           "index off, labels from another file)");
    } else {
      fail(v, kRankCollapse,
           "the predictions are no better than chance on balanced data (" + percent(top_share) + " go to class " +
               std::to_string(top) + ")",
           "the model is not using its inputs: check that the inputs reach the model, the labels match the inputs, "
           "the learning rate, and dead or saturated layers");
    }
  }
  return v;
}

}  // namespace spikehunt::doctor_detail
