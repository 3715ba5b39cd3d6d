// doctor/modes.cpp — what changes between training and evaluation: evaluation
// as a function of its input (dropout left on, samples mixing through the
// batch), the model trained in eval mode, the scale of eval-mode outputs
// against training mode's, dropout that zeroes everything, BatchNorm's batch
// size and the weight of a new batch in its running statistics.
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

VitalSign batchnorm_batch_size(Scenario& s, const Batch& b) {
  VitalSign v = sign("batchnorm_batch_size");
  const std::vector<std::string> norms = modules_of_kind(s.model(), [](const std::string& kind) {
    return kind.rfind("BatchNorm", 0) == 0 || kind.rfind("SyncBatchNorm", 0) == 0;
  });
  const int64_t n = b.inputs.dim() ? b.inputs.size(0) : 0;
  v.data = {{"batch_norm_modules", norms}, {"batch_size", n}};
  if (norms.empty()) {
    v.evidence = "no BatchNorm module";
    return v;
  }
  v.evidence = std::to_string(norms.size()) + " BatchNorm module(s) (" + list(norms, 3) + "), training batches of " +
               std::to_string(n);
  if (n <= 2) {
    v.named = norms;
    fail(v, kRankBatchNormBatch,
         "BatchNorm is trained on batches of " + std::to_string(n) + " sample" + (n == 1 ? "" : "s") +
             ": in training it normalizes with that batch's statistics, which no running average seen in "
             "evaluation matches",
         "train with larger batches, or use a norm that does not depend on the batch (GroupNorm, LayerNorm), or "
         "freeze BatchNorm's statistics");
  }
  return v;
}

VitalSign dropout_rate(Scenario& s, const Batch& b) {
  VitalSign v = sign("dropout_rate");
  const int64_t n = b.inputs.dim() ? b.inputs.size(0) : 0;
  if (n < 2) return skipped("dropout_rate", "a batch of fewer than 2 samples");
  const std::vector<std::string> dropouts =
      modules_of_kind(s.model(), [](const std::string& kind) { return kind.find("Dropout") != std::string::npos; });
  torch::Tensor train, eval;
  {
    torch::NoGradGuard no_grad;
    KeepRng rng;
    const bool was = s.model().is_training();
    s.model().train();
    rng.reseed(0x5eed);
    train = guarded("forward", [&] { return s.forward(b.inputs, Tap()); }).detach().to(torch::kFloat64);
    s.model().train(was);
    EvalMode mode(s.model());
    eval = guarded("forward", [&] { return s.forward(b.inputs, Tap()); }).detach().to(torch::kFloat64);
  }
  if (train.dim() < 1 || train.size(0) != n || eval.sizes() != train.sizes()) {
    v.evidence = "outputs " + c10::str(train.sizes()) + ": not one per sample";
    return v;
  }
  auto spread = [](const torch::Tensor& t) { return (t - t[0]).abs().max().item<double>(); };
  const double in_training = spread(train), in_eval = spread(eval);
  v.data = {{"training_spread", number(in_training)}, {"eval_spread", number(in_eval)}, {"dropout_modules", dropouts}};
  v.evidence = "outputs across the fixed batch's samples differ by up to " + fmt(in_training) + " in training mode, " +
               fmt(in_eval) + " in eval mode" + (dropouts.empty() ? "" : " (dropout: " + list(dropouts, 3) + ")");
  if (in_training == 0 && in_eval > 0) {
    v.named = dropouts.empty() ? std::vector<std::string>{"forward"} : dropouts;
    fail(v, kRankEvalRandom,
         "in training mode every sample gets the same output (eval mode's differ by up to " + fmt(in_eval) +
             "): something zeroes every activation in training" +
             (dropouts.empty() ? std::string() : ", and the model has " + list(dropouts, 3) +
                                                     ": a Dropout's p is the probability of zeroing, so p = 1 "
                                                     "zeroes every unit (a keep probability given as p?)"),
         "give nn.Dropout the probability of dropping (TensorFlow 1's keep_prob is 1 - p)");
  }
  return v;
}

VitalSign batchnorm_momentum(Scenario& s, const Batch& b) {
  VitalSign v = sign("batchnorm_momentum");
  torch::nn::Module& model = s.model();
  struct Stat {
    std::string layer;
    torch::Tensor mean, saved;
  };
  std::vector<Stat> stats;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> restore;  // every buffer the probe touches, and its value
  for (const auto& item : model.named_buffers()) {
    const std::string& name = item.key();
    const torch::Tensor& t = item.value();
    const bool mean = name.size() > 13 && name.compare(name.size() - 13, 13, ".running_mean") == 0;
    const bool var = name.size() > 12 && name.compare(name.size() - 12, 12, ".running_var") == 0;
    const bool tracked = name.size() > 20 && name.compare(name.size() - 20, 20, ".num_batches_tracked") == 0;
    if (!mean && !var && !tracked) continue;
    restore.push_back({t, t.detach().clone()});
    if (mean) stats.push_back({name.substr(0, name.size() - 13), t, {}});
  }
  if (stats.empty()) {
    v.evidence = "no BatchNorm running statistics";
    return v;
  }
  torch::NoGradGuard no_grad;
  const bool was = model.is_training();
  std::vector<double> measured;
  std::vector<std::string> high, frozen;
  try {
    KeepRng keep;
    model.train();
    for (auto& [t, saved] : restore) {
      if (t.scalar_type() == torch::kLong) t.fill_(1000);  // a cumulative average (momentum None) moves by 1/1000
    }
    for (Stat& st : stats) st.mean.zero_();
    std::vector<torch::Tensor> first;
    for (int pass = 0; pass < 2; ++pass) {  // the same batch twice, with the same dropout masks
      keep.reseed(4321);
      guarded("forward", [&] { return s.forward(b.inputs, Tap()); });
      if (pass == 0) {
        for (Stat& st : stats) first.push_back(st.mean.detach().to(torch::kFloat64).clone());
      }
    }
    // From a zero mean: m1 = momentum * mu, m2 = (1 - momentum) * m1 + momentum * mu = (2 - momentum) * m1.
    for (size_t i = 0; i < stats.size(); ++i) {
      const torch::Tensor m1 = first[i], m2 = stats[i].mean.detach().to(torch::kFloat64);
      const torch::Tensor ok = m1.abs() > 1e-6;
      if (!ok.any().item<bool>()) {
        // Two training passes left the running mean at exactly 0: the new batch's weight is 0.
        if (m2.abs().max().item<double>() == 0) measured.push_back(0), frozen.push_back(stats[i].layer);
        continue;
      }
      const double momentum = (2 - m2.masked_select(ok) / m1.masked_select(ok)).median().item<double>();
      measured.push_back(momentum);
      if (momentum >= 0.5) high.push_back(fmt(momentum) + " in " + stats[i].layer);
    }
  } catch (...) {
    for (auto& [t, saved] : restore) t.copy_(saved);
    model.train(was);
    throw;
  }
  for (auto& [t, saved] : restore) t.copy_(saved);
  model.train(was);
  v.data = {{"layers", stats.size()}, {"momentum_measured", measured}};
  v.evidence = std::to_string(stats.size()) + " BatchNorm layer(s); the weight of a new batch in their running "
               "statistics, measured from the running mean after one and two training passes of one batch:";
  for (size_t i = 0; i < measured.size() && i < 6; ++i) v.evidence += (i ? ", " : " ") + fmt(measured[i]);
  if (!frozen.empty()) {
    v.named = frozen;
    fail(v, kRankBatchNormBatch,
         "BatchNorm's running statistics never update in " + list(frozen, 3) + ": the new batch's weight (momentum) "
             "is 0 (measured: the running mean stays at 0 through two training passes of one batch), so evaluation "
             "normalizes with the initial mean 0 and variance 1, not the data's",
         "PyTorch's momentum is the new batch's weight in the running statistics: 0.1 by default, never 0 (momentum="
         "None for a cumulative average)");
  } else if (!high.empty()) {
    v.named = high;
    fail(v, kRankBatchNormBatch,
         "BatchNorm's running statistics follow the last batch: the new batch's weight (momentum) is " + list(high, 3) +
             " (measured: the running mean after one and two passes of one batch), where PyTorch's default is 0.1: "
             "its momentum is the new batch's weight, so TensorFlow's 0.99 is PyTorch's 0.01, and evaluation "
             "normalizes with the statistics of the last few training batches",
         "give BatchNorm momentum = 1 - (the TensorFlow/Keras value), e.g. 0.01 for 0.99");
  }
  return v;
}

}  // namespace spikehunt::doctor_detail
