#include "harness/doctor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "base/error.h"
#include "base/number_format.h"
#include "harness/burst.h"
#include "harness/doctor/signs.h"
#include "harness/report.h"
#include "harness/training_error.h"
#include "harness/warnings.h"
#include "scenarios/models.h"
#include "scenarios/optimizers.h"

namespace spikehunt {

using json = nlohmann::json;
using namespace doctor_detail;

bool DoctorReport::passed() const {
  return std::all_of(signs.begin(), signs.end(), [](const VitalSign& s) { return s.passed; });
}

const VitalSign* DoctorReport::find(const std::string& name) const {
  for (const VitalSign& s : signs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

VitalSign* DoctorReport::find_mutable(const std::string& name) {
  return const_cast<VitalSign*>(find(name));
}

const VitalSign* DoctorReport::top() const {
  const VitalSign* best = nullptr;
  for (const VitalSign& s : signs) {
    if (!s.passed && (best == nullptr || s.rank < best->rank)) best = &s;
  }
  return best;
}

namespace doctor_detail {

// ---- 1. training code error ----

VitalSign code_error_sign(const TrainingError& e) {
  VitalSign v = sign("training_code_error");
  v.evidence = "the " + e.stage() + " stage threw: " + e.message();
  v.named = {e.stage()};
  v.data = {{"stage", e.stage()}, {"message", e.message()}, {"cause", e.cause()}, {"full", e.full()}};
  fail(v, kRankCodeError,
       e.cause().empty() ? "the training code throws in the " + e.stage() + " stage: " + e.message()
                         : e.cause() + " (the " + e.stage() + " stage throws)",
       e.cause().empty() ? "read the message; --verbose shows its whole text (LibTorch's backtrace, or the Python traceback)" : e.cause());
  return v;
}

// ---- 2. input scale ----

VitalSign input_scale(const Probe& p) {
  VitalSign v = sign("input_scale");
  double sumsq = 0, max_abs = 0, spread_sum = 0;
  int64_t n = 0, non_finite = 0, batches = 0, spread_batches = 0;
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
  }
  if (n == 0) {
    v.skipped = true;
    v.evidence = "no training batch";
    return v;
  }
  const double rms = std::sqrt(sumsq / double(std::max<int64_t>(n - non_finite, 1)));
  const double spread = spread_batches ? spread_sum / double(spread_batches) : NAN;
  v.data = {{"rms", rms}, {"max_abs", max_abs}, {"non_finite", non_finite}, {"values", n}, {"batches", batches},
            {"spread_across_samples", number(spread)}};
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

// ---- 3. optimizer coverage ----

// Measured over the watched run: a trainable parameter no declared optimizer
// updates fails only when it also stayed at its initial value (something else,
// e.g. a second optimizer stepped inside optimizer_step(), may move it: then it
// is named as unmonitored); an optimized parameter that had gradients but
// never changed fails too (the step is never applied).
VitalSign optimizer_coverage(const Watched& w, size_t optimizers) {
  VitalSign v = sign("optimizer_coverage");
  std::vector<std::string> missing, moved_elsewhere, never_changed;
  int64_t trainable = 0;
  for (const Watched::Param& p : w.params) {
    if (!p.trainable) continue;
    ++trainable;
    if (p.optimizer < 0) (p.changed ? moved_elsewhere : missing).push_back(p.name);
    else if (p.had_grad && !p.changed) never_changed.push_back(p.name);
  }
  const bool measured = !w.records.empty() && w.verdict.outcome != Outcome::kCrashed;
  v.data = {{"trainable", trainable}, {"not_optimized", missing}, {"changed_by_other_code", moved_elsewhere},
            {"optimized_but_unchanged", never_changed}, {"steps", w.records.size()}};
  v.evidence = std::to_string(trainable) + " trainable parameter tensor(s), " + std::to_string(optimizers) +
               " optimizer(s)" + (measured ? ", compared before and after " + std::to_string(w.records.size()) + " steps" : "");
  if (!moved_elsewhere.empty()) {
    v.named = moved_elsewhere;
    v.evidence += "; " + list(moved_elsewhere) + " changed though no declared optimizer holds them: something else "
                  "updates them, so spikehunt neither monitors nor checkpoints their optimizer state (declare that "
                  "optimizer in optimizers())";
  }
  if (!missing.empty()) {
    v.named = missing;
    v.evidence += "; no optimizer updates " + list(missing) + (measured ? ", and they did not change" : "");
    fail(v, kRankCoverage, "no optimizer updates " + list(missing, 3) + ": they stay at their initial values",
         "pass every parameter to an optimizer (model->parameters()), or freeze them on purpose with "
         "requires_grad(false)");
  } else if (measured && !never_changed.empty()) {
    v.named = never_changed;
    v.part = "step";
    v.evidence += "; " + list(never_changed) + " had nonzero gradients but never changed";
    fail(v, kRankCoverage,
         "the optimizer never changes " + list(never_changed, 3) + " though they have gradients",
         "the update is not applied: is optimizer.step() called (an overridden optimizer_step() that forgets it), "
         "is the learning rate 0, or is the step undone afterwards?");
  }
  return v;
}

// ---- 5. overfit one batch ----

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


// Evaluation is a function of its input: two eval passes of the same batch
// agree, and a sample's output does not change when the rest of its batch
// does. During training every module is in training mode.
VitalSign eval_consistency(Scenario& s, const Probe& p, const Watched& w) {
  VitalSign v = sign("eval_consistency");
  const Batch& b = p.batches.front();
  const int64_t n = b.inputs.dim() ? b.inputs.size(0) : 0;
  const torch::Tensor a = fixed_outputs(s, b), again = fixed_outputs(s, b);
  torch::Tensor part, reversed;
  double alone_effect = 0;  // each of the first 32 samples evaluated alone, against its row in the batch
  int64_t alone_samples = 0;
  if (n >= 4 && a.dim() >= 1 && a.size(0) == n) {
    for (int64_t i = 0; i < std::min<int64_t>(n, 32); ++i) {
      Batch one;
      one.inputs = b.inputs.slice(0, i, i + 1);
      const torch::Tensor o = fixed_outputs(s, one);
      if (o.dim() == 0 || o.size(0) != 1 || o.sizes().slice(1) != a.sizes().slice(1)) break;
      alone_effect = std::max(alone_effect, (o[0] - a[i]).abs().max().item<double>());
      ++alone_samples;
    }
    Batch half;
    half.inputs = b.inputs.slice(0, 0, n / 2);
    part = fixed_outputs(s, half);
    // The batch in reverse order: every sample's output must come back, reversed. (The first half
    // alone misses mixing that runs one way along the batch: an RNN fed the batch as its time axis.)
    Batch flipped;
    flipped.inputs = b.inputs.flip(0);
    reversed = fixed_outputs(s, flipped);
  }
  // The train/eval gap, on this throwaway scenario (a training-mode forward
  // moves batch norm's running statistics), and the modules whose output
  // depends on the mode, by their class.
  torch::Tensor in_training;
  {
    torch::NoGradGuard no_grad;
    const bool was = s.model().is_training();
    s.model().train();
    in_training = guarded("forward", [&] { return s.forward(b.inputs, Tap()); }).detach().to(torch::kFloat64);
    s.model().train(was);
  }
  const double gap = in_training.sizes() == a.sizes() ? (in_training - a).abs().max().item<double>() : 0;
  std::vector<std::string> mode_dependent;
  for (const auto& m : s.model().named_modules("", /*include_self=*/false)) {
    std::string kind = m.value()->name();  // "torch::nn::Dropout", or a Python module's class: "BatchNorm2d"
    kind = kind.substr(kind.rfind(':') == std::string::npos ? 0 : kind.rfind(':') + 1);
    for (const char* k : {"Dropout", "AlphaDropout", "FeatureAlphaDropout", "BatchNorm", "SyncBatchNorm", "InstanceNorm"}) {
      if (kind.rfind(k, 0) == 0) {
        mode_dependent.push_back(m.key() + " (" + kind + ")");
        break;
      }
    }
  }
  const double scale = a.abs().max().item<double>();
  const double repeat = (a - again).abs().max().item<double>();
  double predictions_differ = 0;
  if (a.dim() == 2 && a.size(1) > 1) predictions_differ = (a.argmax(1) != again.argmax(1)).to(torch::kFloat64).mean().item<double>();
  const double half_effect =
      part.defined() && part.sizes() == a.slice(0, 0, n / 2).sizes() ? (part - a.slice(0, 0, n / 2)).abs().max().item<double>() : 0;
  const double order_effect =
      reversed.defined() && reversed.sizes() == a.sizes() ? (reversed.flip(0) - a).abs().max().item<double>() : 0;
  const double batch_effect = std::max({half_effect, order_effect, alone_effect});
  v.data = {{"repeat_max_diff", number(repeat)}, {"predictions_differ", predictions_differ},
            {"batch_effect_max_diff", number(batch_effect)}, {"half_batch_max_diff", number(half_effect)},
            {"reversed_batch_max_diff", number(order_effect)}, {"alone_max_diff", number(alone_effect)},
            {"alone_samples", alone_samples}, {"output_scale", number(scale)},
            {"train_eval_gap", number(gap)}, {"mode_dependent_modules", mode_dependent}};
  std::vector<std::string> eval_modules;  // the whole model, or the submodules in eval mode
  for (const auto& [m, steps] : w.not_training) {
    if (!w.not_training.count("model") || m == "model") eval_modules.push_back(m + " (" + std::to_string(steps) + " steps)");
  }
  v.data["eval_mode_during_training"] = eval_modules;
  v.evidence = "two eval passes of one batch: max difference " + fmt(repeat) +
               (predictions_differ > 0 ? " (" + percent(predictions_differ) + " of predicted classes differ)" : "") +
               "; half of the batch alone: max difference " + fmt(half_effect) + "; the batch reversed: " +
               fmt(order_effect) + "; each of " + std::to_string(alone_samples) + " samples alone: " +
               fmt(alone_effect) + " (outputs up to " + fmt(scale) +
               "); train/eval gap " + fmt(gap) +
               (mode_dependent.empty() ? std::string(" (no Dropout or norm module)")
                                       : " (mode-dependent: " + list(mode_dependent, 4) + ")");
  if (!eval_modules.empty()) v.evidence += "; in eval mode during training steps: " + list(eval_modules);
  if (repeat > 1e-5 * (1 + scale)) {
    v.named = {"forward"};
    fail(v, kRankEvalRandom,
         "evaluation is random: two eval passes of the same batch differ by up to " + fmt(repeat) +
             (predictions_differ > 0 ? " and disagree on " + percent(predictions_differ) + " of the predicted classes" : ""),
         "dropout or noise stays on in eval mode: use Dropout modules (model.eval() turns them off), or pass "
         "training=self.training (is_training()) to the functional dropout, whose default is on");
  } else if (batch_effect > 1e-3 * (1e-3 + scale)) {
    v.named = {"forward"};
    fail(v, kRankEvalRandom,
         "a sample's eval output depends on the other samples of its batch (up to " + fmt(batch_effect) +
             (order_effect >= std::max(half_effect, alone_effect) ? ", measured by reversing the batch"
              : half_effect >= alone_effect                       ? ", measured on half of the batch alone"
                                                                  : ", measured on each sample alone") +
             ")",
         "something mixes the batch dimension: softmax/mean/std over dim 0, a batch norm that uses batch statistics "
         "in eval, inputs standardized per batch, or a recurrent layer that takes dim 0 for time (nn.LSTM without "
         "batch_first=True given (batch, time, features))");
  } else if (w.not_training.count("model")) {
    // The whole model (a submodule alone may be frozen in eval mode on purpose).
    v.named = {"model"};
    v.part = "step";
    fail(v, kRankEvalRandom,
         "the model trains in eval mode (" + std::to_string(w.not_training.at("model")) + " of " +
             std::to_string(w.records.size()) + " steps): dropout is off and batch norm uses its running statistics",
         "call model.train() before the training steps: an eval() for validation is never undone");
  }
  return v;
}


// Evaluation sees the activations training sees, on average: without batch statistics in the model, the
// eval-mode output of a batch matches the mean of its training-mode outputs over dropout's draws (inverted
// dropout scales by 1 / (1 - p) in training so that it does); a ratio of their spreads far from 1 is
// something that scales activations in one mode only (dropout's (1 - p) applied again at evaluation).
VitalSign eval_scale(Scenario* trained, const Probe& p) {
  VitalSign v = sign("eval_scale");
  if (trained == nullptr) return skipped("eval_scale", "the watched run did not end finite");
  if (has_batch_norm(trained->model())) return skipped("eval_scale", "batch statistics differ between the modes by design");
  const Batch& b = p.heldout.empty() ? p.batches.front() : p.heldout.front();
  torch::NoGradGuard no_grad;
  const torch::Tensor eval = fixed_outputs(*trained, b);
  torch::Tensor mean;
  constexpr int kDraws = 16;
  {
    const bool was = trained->model().is_training();
    trained->model().train();
    KeepRng rng;
    for (int k = 0; k < kDraws; ++k) {
      rng.reseed(uint64_t(1000 + k));
      const torch::Tensor o = guarded("forward", [&] { return trained->forward(b.inputs, Tap()); }).detach().to(torch::kFloat64);
      mean = mean.defined() ? mean + o : o;
    }
    trained->model().train(was);
  }
  mean = mean / double(kDraws);
  if (mean.sizes() != eval.sizes() || eval.dim() < 1) return skipped("eval_scale", "the two modes' outputs differ in shape");
  auto spread = [](const torch::Tensor& o) {  // per-sample spread around the sample's own mean, for class scores
    const torch::Tensor f = o.reshape({o.size(0), -1});
    return (f.size(1) > 1 ? f - f.mean(1, true) : f - f.mean()).square().mean().sqrt().item<double>();
  };
  const double e = spread(eval), m = spread(mean);
  const double ratio = m > 0 ? e / m : (e > 0 ? INFINITY : 1);
  v.data = {{"eval_spread", number(e)}, {"train_mean_spread", number(m)}, {"ratio", number(ratio)}, {"draws", kDraws}};
  v.evidence = "after the watched run, the eval-mode outputs' spread against the mean of " + std::to_string(kDraws) +
               " training-mode passes': " + fmt(e) + " against " + fmt(m) + " (x" + fmt(ratio) + ")";
  if (m > 0 && (ratio < 0.5 || ratio > 2)) {
    v.named = {"eval mode"};
    fail(v, kRankEvalRandom,
         "the model evaluates at another scale than it trains: its eval-mode outputs spread " + fmt(ratio) +
             "x as wide as the average of its training-mode outputs on the same held-out batch, where dropout done "
             "as PyTorch does keeps them equal",
         "something scales the activations in one mode only: inverted dropout already divides by (1 - p) in "
         "training, so multiplying by (1 - p) at evaluation (the non-inverted convention) scales them twice");
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

// ---- assembling ----

Probe probe_scenario(Scenario& s, const DoctorOptions& o, DoctorReport* report) {
  Probe p;
  report->parameters = parameter_count(s.model());
  for (const NamedOptimizer& opt : s.optimizers()) {
    const size_t groups = opt.optimizer->param_groups().size();
    report->optimizers.push_back(opt.name + (groups > 1 ? " (" + std::to_string(groups) + " groups)" : ""));
  }
  Trainer trainer(s);
  for (int i = 0; i < 4; ++i) {
    std::vector<Batch> b = trainer.next_batches();
    if (b.empty()) break;
    p.batches.insert(p.batches.end(), b.begin(), b.end());
  }
  if (p.batches.empty()) return p;
  p.heldout = guarded("data", [&] { return s.heldout(o.heldout_samples); });
  p.has_heldout = !p.heldout.empty();
  if (!p.has_heldout) p.heldout = p.batches;
  const torch::Tensor out = fixed_outputs(s, p.batches.front());
  p.output_tail = out.sizes().vec();
  if (!p.output_tail.empty()) p.output_tail.erase(p.output_tail.begin());
  p.classes = out.dim() == 2 ? out.size(1) : s.num_classes();
  return p;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A sign that sees a consequence (cannot memorize, overflow, dead units, no
// gradient, collapse, a flagged step, a grad norm out of range) says so and
// names the probes of the causes it can have (SignSpec::causes): the failed
// ones (ranked above it) and the passed ones (ruled out). Nothing is inferred
// beyond that.
void annotate_consequences(DoctorReport& report) {
  for (VitalSign& v : report.signs) {
    const SignSpec* spec = find_spec(v.name);
    if (v.passed || v.skipped || spec == nullptr || spec->consequence_rank == 0) continue;
    if (v.rank != spec->consequence_rank) continue;  // at its other ranks it found a cause
    std::vector<std::string> failed, passed;
    for (const char* c : spec->causes) {
      const VitalSign* s = report.find(c);
      if (s == nullptr || s->skipped) continue;
      (s->passed ? passed : failed).push_back(c);
    }
    v.data["consequence_of"] = failed;
    v.data["causes_ruled_out"] = passed;
    v.cause += failed.empty() ? " (a consequence, its cause not found: " + list(passed, 12) + " passed)"
                              : " (a consequence: " + list(failed) + " failed" +
                                    (passed.empty() ? "" : "; " + list(passed, 12) + " passed") + ")";
  }
}

// When the experiments found the faulty part, the failed signs of that part (at a rank where they name a
// cause) come first, and the experiment's own sign next: a cause found by swapping the part outranks
// what any probe read elsewhere. The other signs keep their ranks.
void rank_by_experiment(DoctorReport& report, const Experiments& e) {
  if (e.parts.empty() || e.winners.size() > 1) return;  // several parts each made it learn: none is named
  for (VitalSign& v : report.signs) {
    if (v.passed || v.skipped || v.name == "faulty_part" || v.rank == kRankCodeError) continue;
    const SignSpec* spec = find_spec(v.name);
    if (spec != nullptr && spec->consequence_rank != 0 && v.rank == spec->consequence_rank) continue;
    const bool in_part = std::find(e.parts.begin(), e.parts.end(), v.part) != e.parts.end();
    const bool scale = scale_sign(v.name) && std::find(e.parts.begin(), e.parts.end(), "optimizer") != e.parts.end();
    if (!in_part && !scale) continue;
    v.rank += kRankInPart;
    v.data["found_by_experiment"] = true;
  }
}

// Runs the registry's signs of one stage, in order, timed.
void run_stage(SignStage stage, Context& c, DoctorReport& report) {
  for (const SignSpec& spec : registry()) {
    if (spec.stage != stage) continue;
    const Clock::time_point start = Clock::now();
    VitalSign v = spec.run(c);
    v.seconds = seconds_since(start);
    if (v.part.empty()) v.part = sign_part(spec.name);
    report.signs.push_back(std::move(v));
  }
}

}  // namespace
}  // namespace doctor_detail

std::vector<SignInfo> doctor_signs() {
  std::vector<SignInfo> out;
  for (const doctor_detail::SignSpec& s : doctor_detail::registry()) {
    SignInfo i;
    i.name = s.name;
    i.ranks = s.ranks;
    if (s.consequence_rank != 0) {
      i.consequence_rank = s.consequence_rank;
      i.causes.assign(s.causes.begin(), s.causes.end());
    }
    out.push_back(std::move(i));
  }
  return out;
}

DoctorReport run_doctor(const ScenarioFactory& make, const DoctorOptions& o) {
  DoctorReport report;
  auto rest_skipped = [&](const std::string& why) {
    for (const SignSpec& spec : registry()) {
      if (report.find(spec.name) == nullptr) report.signs.push_back(skipped(spec.name, why));
    }
  };
  WarningCounter warnings;  // every LibTorch warning while the doctor runs the code, its bursts' too
  report.signs.push_back(sign("training_code_error"));
  try {
    std::unique_ptr<Scenario> s = guarded("setup", make);
    report.scenario = s->config().scenario;
    const Probe p = probe_scenario(*s, o, &report);
    if (p.batches.empty()) {
      rest_skipped("the scenario has no training batch");
      return report;
    }
    Context c{make, o, p, report, warnings};
    c.fresh = s.get();
    c.optimizers = s->optimizers().size();
    if (std::optional<VitalSign> foreign = foreign_optimizer_tensors(*s)) {
      report.signs.front().evidence = "the training code's setup ran without throwing";
      report.signs.push_back(*foreign);
      rest_skipped("an optimizer updates tensors that are not model()'s parameters: nothing can be watched");
      return report;
    }
    parameter_slots(*s);  // the contract: every optimized tensor is a model parameter, none in two optimizers
    run_stage(SignStage::kFresh, c, report);  // before any step changes the parameters
    c.first_out = [&] {
      torch::NoGradGuard no_grad;
      return guarded("forward", [&] { return s->forward(p.batches.front().inputs, Tap()); }).detach();
    }();
    const Clock::time_point probe_start = Clock::now();
    c.scaling = loss_batch_scaling(*s, p.batches.front());
    c.loss = probe_loss(*s, c.first_out, p.batches.front());
    c.bounded = bounded_logits(*s, c.first_out, p.batches.front());
    c.log_probs = log_probability_logits(*s, c.first_out, p.batches.front());
    c.graph = probe_graph(*s, p.batches.front());
    c.modules = guarded("forward", [&] { return s->module_outputs(p.batches.front().inputs); });
    const double probe_seconds = seconds_since(probe_start);
    run_stage(SignStage::kProbed, c, report);
    c.fresh = nullptr;
    s.reset();
    run_stage(SignStage::kOwn, c, report);
    const Clock::time_point run_start = Clock::now();
    const Watched w = watch(make, p, o);
    report.run_seconds = seconds_since(run_start);
    if (w.verdict.outcome == Outcome::kCrashed) {
      throw TrainingError(w.verdict.crash_stage, w.verdict.message, w.verdict.crash_cause, w.verdict.message);
    }
    c.watched = &w;
    for (const SignSpec& spec : registry()) {
      if (spec.after_watch) spec.after_watch(*report.find_mutable(spec.name), c);
    }
    const Clock::time_point experiments_start = Clock::now();
    const Experiments experiments = run_experiments(make, p, w, o.steps);
    const double experiments_seconds = seconds_since(experiments_start);
    c.experiments = &experiments;
    run_stage(SignStage::kWatched, c, report);
    report.find_mutable("loss_domain")->seconds += probe_seconds;
    report.find_mutable("faulty_part")->seconds += experiments_seconds;
    annotate_consequences(report);
    rank_by_experiment(report, experiments);
    check_consistency(report, /*repair=*/true);
    report.contradictions = check_consistency(report, /*repair=*/false);
    report.signs.front().evidence = "the training code ran " + std::to_string(w.records.size()) + " steps without throwing";
  } catch (const TrainingError& e) {
    report.signs.front() = code_error_sign(e);
    rest_skipped("the training code threw");
  } catch (const std::logic_error& e) {  // the scenario breaks its contract (scenario.h)
    report.signs.front() = code_error_sign(TrainingError("setup", e.what(), e.what(), e.what()));
    rest_skipped("the scenario breaks the contract of scenario.h");
  }
  return report;
}

std::string doctor_text(const DoctorReport& report, bool verbose) {
  std::string out;
  if (const VitalSign* top = report.top()) {
    out += "most likely cause: " + top->cause + "  [" + top->name + "]\n";
  } else {
    out += "no vital sign failed: nothing points at a classic training bug\n";
  }
  int failed = 0, skipped_n = 0;
  for (const VitalSign& s : report.signs) {
    char head[64];
    std::snprintf(head, sizeof head, "  %-4s  %-20s ", s.skipped ? "skip" : s.passed ? "pass" : "FAIL", s.name.c_str());
    out += head + s.evidence + "\n";
    if (!s.passed) {
      ++failed;
      out += "        hint: " + s.hint + "\n";
      if (verbose && s.data.contains("full")) out += "        full text:\n" + s.data["full"].get<std::string>() + "\n";
    }
    skipped_n += s.skipped;
  }
  if (verbose) {
    auto secs = [](double x) {
      char b[32];
      std::snprintf(b, sizeof b, "%.2f s", x);
      return std::string(b);
    };
    std::string times = "the watched run " + secs(report.run_seconds);
    for (const VitalSign& s : report.signs) {
      if (s.seconds >= 0.005) times += ", " + s.name + " " + secs(s.seconds);
    }
    out += "  time: " + times + " (signs under 5 ms not listed)\n";
  }
  out += std::to_string(report.signs.size()) + " vital signs: " +
         std::to_string(report.signs.size() - size_t(failed) - size_t(skipped_n)) + " passed, " +
         std::to_string(failed) + " failed, " + std::to_string(skipped_n) + " skipped\n";
  return out;
}

json doctor_json(const DoctorReport& report) {
  json signs = json::array();
  for (const VitalSign& s : report.signs) {
    json j = {{"name", s.name}, {"passed", s.passed}, {"skipped", s.skipped}, {"evidence", s.evidence},
              {"hint", s.hint}, {"named", s.named},   {"data", s.data}, {"seconds", s.seconds}, {"part", s.part}};
    if (!s.passed) j["cause"] = s.cause, j["rank"] = s.rank;
    signs.push_back(j);
  }
  json top = nullptr;
  if (const VitalSign* t = report.top()) top = {{"sign", t->name}, {"cause", t->cause}, {"hint", t->hint}, {"part", t->part}};
  return {{"passed", report.passed()}, {"most_likely_cause", top}, {"signs", signs},
          {"scenario", report.scenario}, {"parameters", report.parameters}, {"optimizers", report.optimizers},
          {"run_seconds", report.run_seconds}, {"corrections", report.corrections},
          {"contradictions", report.contradictions}};
}

}  // namespace spikehunt
