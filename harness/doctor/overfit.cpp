// doctor/overfit.cpp — overfit one batch: the program's own model, loss and
// optimizer on one batch, in training mode with its dropout modules off and
// its optimizers' weight decay off, at the config's peak learning rate; then
// held-out predictions against held-out labels (shifted or permuted labels).
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

// The dropout modules (by class: Dropout, Dropout1d/2d/3d, AlphaDropout, FeatureAlphaDropout) in eval
// mode, the rest of the model as it was; returns their names.
std::vector<std::string> dropout_off(torch::nn::Module& model) {
  std::vector<std::string> off;
  for (const auto& [name, kind] : module_classes(model)) {
    if (kind.find("Dropout") == std::string::npos) continue;
    for (const auto& m : model.named_modules("", /*include_self=*/false)) {
      if (m.key() == name) m.value()->eval(), off.push_back(name);
    }
  }
  return off;
}

// Held-out classes whose predictions consistently name one other class.
std::map<int64_t, int64_t> shifted_classes(const std::vector<Prediction>& preds, int64_t classes, int64_t* present) {
  std::vector<std::vector<int64_t>> counts(size_t(classes), std::vector<int64_t>(size_t(classes), 0));
  std::vector<std::vector<double>> confidence(size_t(classes), std::vector<double>(size_t(classes), 0));
  for (const Prediction& p : preds) {
    if (p.label < 0 || p.label >= classes || p.predicted < 0 || p.predicted >= classes) continue;
    ++counts[p.label][p.predicted];
    confidence[p.label][p.predicted] += p.confidence;
  }
  std::map<int64_t, int64_t> shifted;
  *present = 0;
  for (int64_t c = 0; c < classes; ++c) {
    int64_t total = 0, best = 0;
    for (int64_t k = 0; k < classes; ++k) {
      total += counts[c][k];
      if (counts[c][k] > counts[c][best]) best = k;
    }
    if (total == 0) continue;
    ++*present;
    const double share = double(counts[c][best]) / double(total);
    const double mean_confidence = confidence[c][best] / double(std::max<int64_t>(counts[c][best], 1));
    if (best != c && share >= 0.5 && mean_confidence >= 0.5) shifted[c] = best;
  }
  return shifted;
}

VitalSign overfit_one_batch(const ScenarioFactory& make, const Probe& probe, const DoctorOptions& o) {
  VitalSign v = sign("overfit_one_batch");
  std::unique_ptr<Scenario> s = guarded("setup", make);
  int decay_off = 0;
  for (const NamedOptimizer& opt : s->optimizers()) decay_off += set_weight_decay_off(*opt.optimizer);
  // The model trains in training mode, as the program trains it, with its dropout modules off (a
  // functional dropout in forward() stays: nothing outside the code can turn it off).
  const std::vector<std::string> no_dropout = dropout_off(s->model());
  const Batch& batch = probe.batches.front();
  Trainer trainer(*s, /*schedule=*/false);  // the config's peak learning rate
  double first = NAN, last = NAN;
  int64_t steps = 0;
  bool converged = false, diverged = false;
  std::vector<double> losses;
  int64_t zero_lr_steps = 0, zero_lr_from = -1;  // steps in a row the optimizers' learning rate was 0
  for (; steps < o.overfit_steps; ++steps) {
    last = trainer.step(steps, {batch}, nullptr).item<double>();
    losses.push_back(last);
    double lr = 0;
    for (const NamedOptimizer& opt : s->optimizers()) {
      for (auto& group : opt.optimizer->param_groups()) lr = std::max(lr, group_lr(group));
    }
    if (lr > 0) zero_lr_steps = 0;
    else if (zero_lr_steps++ == 0) zero_lr_from = steps;
    if (zero_lr_steps >= 20 && last > o.overfit_loss) {
      // The scenario steps a schedule of its own (a framework's scheduler in optimizer_step) that has ended:
      // nothing moves past it, so memorizing cannot be judged.
      return skipped("overfit_one_batch",
                     "the learning rate the scenario's optimizers hold is 0 from step " + std::to_string(zero_lr_from) +
                         " of one batch (loss " + fmt(losses.front()) + " -> " + fmt(last) +
                         "): it steps a schedule of its own that has ended, so memorizing one batch is not judged");
    }
    if (steps == 0) first = last;
    if (!std::isfinite(last)) {
      diverged = true;
      break;
    }
    if (last <= o.overfit_loss) {
      converged = true;
      break;
    }
  }
  // Falling, if slowly: below a quarter of the first loss and of chance level
  // (log classes); or below 70% of the first loss and still falling over the
  // last tenth of the budget (a low learning rate, a larger model).
  const size_t tenth = losses.size() / 10;
  auto mean = [&](size_t from, size_t to) {
    double sum = 0;
    for (size_t i = from; i < to; ++i) sum += losses[i];
    return sum / double(std::max<size_t>(to - from, 1));
  };
  const bool still_falling = tenth >= 5 && last <= 0.7 * first &&
                             mean(losses.size() - tenth, losses.size()) < 0.99 * mean(losses.size() - 2 * tenth, losses.size() - tenth);
  const bool fell = std::isfinite(last) &&
                    (last <= 0.25 * std::min(first, std::log(double(probe.classes))) || still_falling);
  v.data = {{"first_loss", number(first)}, {"final_loss", number(last)}, {"steps", steps},
            {"threshold", o.overfit_loss}, {"batch_size", batch.targets.size(0)},
            {"weight_decay_turned_off", decay_off}, {"dropout_turned_off", no_dropout}};
  v.evidence = "one batch of " + std::to_string(batch.targets.size(0)) + ": loss " + fmt(first) + " -> " + fmt(last) +
               (converged ? " in " + std::to_string(steps) + " steps" : " after " + std::to_string(steps) + " steps") +
               " (threshold " + fmt(o.overfit_loss) + ")";
  if (diverged) {
    fail(v, kRankOverfit, "the loss goes non-finite while memorizing one batch",
         "lower the learning rate, or check the loss for log(0) and divisions");
    return v;
  }
  if (!converged && !fell) {
    fail(v, kRankOverfit, "the model cannot memorize one batch (loss " + fmt(first) + " -> " + fmt(last) + ")",
         "check that every parameter reaches the optimizer, that the loss matches the outputs, and the learning rate");
    return v;
  }
  if (!converged) v.evidence += ": not there yet, but falling (a low learning rate)";
  // Now compare its predictions with held-out labels.
  if (!probe.has_heldout) return v;
  std::vector<Prediction> preds;
  {
    EvalMode eval(s->model());
    torch::NoGradGuard no_grad;
    for (const Batch& b : probe.heldout) add_predictions(guarded("forward", [&] { return s->forward(b.inputs, Tap()); }), b.targets, &preds);
  }
  int64_t present = 0;
  const std::map<int64_t, int64_t> shifted = shifted_classes(preds, probe.classes, &present);
  v.data["shifted_classes"] = shifted.size();
  std::set<int64_t> targets_of_shift;
  for (const auto& [from, to] : shifted) targets_of_shift.insert(to);
  v.data["shift_targets"] = targets_of_shift.size();
  if (present > 0 && double(shifted.size()) >= 0.7 * double(present) &&
      double(targets_of_shift.size()) >= 0.7 * double(shifted.size())) {
    std::string map;
    for (const auto& [from, to] : shifted) {
      map += (map.empty() ? "" : ", ") + std::to_string(from) + "->" + std::to_string(to);
      v.named.push_back("class " + std::to_string(from) + " -> " + std::to_string(to));
    }
    v.evidence += "; but held-out samples of " + std::to_string(shifted.size()) + " of " + std::to_string(present) +
                  " classes are confidently predicted as another class: " + map;
    fail(v, kRankShiftedLabels, "the training labels are shifted or permuted against the held-out ones (" + map + ")",
         "the model fits its labels, but they disagree with held-out labels the same way every time: labels look "
         "shifted or permuted (an off-by-one, a class order mix-up)");
  }
  return v;
}

}  // namespace spikehunt::doctor_detail
