// doctor/loss.cpp — the outputs against the loss: what the outputs are
// against what the loss expects (loss_output_mismatch), their shapes at the
// loss (loss_shapes), and the loss's domain and numerical stability
// (probe_loss, loss_domain).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "base/error.h"
#include "base/number_format.h"
#include "harness/doctor/signs.h"

namespace spikehunt::doctor_detail {

using json = nlohmann::json;

// ---- 4. loss/output mismatch ----

VitalSign loss_output_mismatch(Scenario& s, const Batch& b) {
  VitalSign v = sign("loss_output_mismatch");
  torch::NoGradGuard no_grad;
  ErrorContext context = batch_context(b.inputs, b.targets);
  const torch::Tensor out = guarded("forward", [&] { return s.forward(b.inputs, Tap()); }, context).detach();
  context.output_shape = out.sizes().vec();
  const double loss = guarded("loss", [&] { return s.loss(out, b.targets); }, context).item<double>();
  if (out.is_floating_point() && b.targets.defined() && b.targets.is_floating_point() &&
      b.targets.sizes() == out.sizes() && out.numel() > 0 &&
      ((b.targets == 0) | (b.targets == 1)).all().item<bool>()) {
    // Binary targets: outputs that are a sigmoid's, given to a loss that applies its own?
    const torch::Tensor o = out.to(torch::kFloat64), y = b.targets.to(out.device()).to(torch::kFloat64);
    const double lo = o.min().item<double>(), hi = o.max().item<double>();
    const double with_logits = torch::nn::functional::binary_cross_entropy_with_logits(o, y).item<double>();
    v.data = {{"loss", number(loss)}, {"outputs_min", number(lo)}, {"outputs_max", number(hi)},
              {"bce_with_logits_of_outputs", number(with_logits)}};
    v.evidence = "binary targets; outputs in [" + fmt(lo) + ", " + fmt(hi) + "]; loss " + fmt(loss) +
                 ", binary_cross_entropy_with_logits of the outputs " + fmt(with_logits);
    if (lo > 0 && hi < 1) {
      const double on_probabilities = torch::nn::functional::binary_cross_entropy(o, y).item<double>();
      v.data["bce_of_outputs"] = number(on_probabilities);
      v.evidence += ", binary_cross_entropy of them " + fmt(on_probabilities);
      if (std::fabs(loss - with_logits) <= 1e-4 * (1 + std::fabs(with_logits)) &&
          std::fabs(with_logits - on_probabilities) > 1e-3) {
        v.named = {"output"};
        fail(v, kRankLossMismatch,
             "sigmoid is applied twice: every output is in (0, 1), a sigmoid's, and the loss equals "
             "binary_cross_entropy_with_logits of them, which applies its own (it cannot fall below " +
                 fmt(-std::log(1 / (1 + std::exp(-1.0)))) + " for a target of 1)",
             "return the logits from forward() (drop the final sigmoid) and keep BCEWithLogitsLoss, or keep the "
             "sigmoid and use BCELoss");
      }
    }
    return v;
  }
  if (out.dim() != 2 || !out.is_floating_point() || !class_ids(b.targets)) {
    v.evidence = "the output is " + c10::str(out.sizes()) + ": not (batch, classes) scores with class-id labels";
    return v;
  }
  const torch::Tensor o = out.to(torch::kFloat64);
  const bool probabilities = probability_rows(o);
  const bool labels_fit = b.targets.max().item<int64_t>() < out.size(1) && b.targets.min().item<int64_t>() >= 0;
  v.data = {{"probabilities", probabilities}, {"loss", number(loss)}};
  if (!labels_fit) {
    v.evidence = "labels outside the output's classes: see training_code_error";
    return v;
  }
  const torch::Tensor y = b.targets.to(out.device());
  if (!probabilities) {
    // Scores: does the loss itself take a softmax before a cross-entropy?
    const double ce = torch::nn::functional::cross_entropy(o, y).item<double>();
    const double twice = torch::nn::functional::cross_entropy(torch::softmax(o, 1), y).item<double>();
    v.data["cross_entropy"] = number(ce);
    v.data["cross_entropy_of_softmax"] = number(twice);
    v.evidence = "outputs are scores (rows do not sum to 1); loss " + fmt(loss) + ", cross-entropy " + fmt(ce) +
                 ", cross-entropy of their softmax " + fmt(twice);
    const double logsumexp = torch::logsumexp(o, 1).abs().max().item<double>();
    if (logsumexp < 1e-4 && std::fabs(loss - ce) <= 1e-4 * (1 + std::fabs(ce))) {
      // log_softmax before cross-entropy: its own log_softmax leaves log-probabilities as they are.
      v.data["log_probabilities"] = true;
      v.evidence += "; every row's logsumexp is 0 (log-probabilities) and the loss equals their cross-entropy: "
                    "log_softmax applied twice, which leaves them unchanged (harmless)";
    }
    const double smallest = o.min().item<double>();
    const double zeros = (o == 0).to(torch::kFloat64).mean().item<double>();
    // A rectifier's output: zeros beside positive values in the same row (a row all equal is another story:
    // a constant output, input_dependence's and init_symmetry's).
    const double mixed_rows = ((o == 0).any(1) & (o > 0).any(1)).to(torch::kFloat64).mean().item<double>();
    v.data["outputs_min"] = number(smallest);
    v.data["outputs_exactly_zero"] = zeros;
    if (smallest >= 0) v.evidence += "; no output is negative, " + percent(zeros) + " are exactly 0";
    if (smallest >= 0 && zeros >= 0.1 && mixed_rows >= 0.5) {
      v.named = {"output"};
      fail(v, kRankLossMismatch,
           "the logits are non-negative: none of them is below 0 and " + percent(zeros) +
               " are exactly 0, clipped by a rectifier before the loss (cross-entropy takes logits of either sign: a "
               "clipped class cannot be pushed down, and a unit stuck at 0 gets no gradient)",
           "drop the ReLU (or other rectifier) after the last layer: give the last Linear's output to the loss");
    } else if (std::fabs(loss - twice) <= 1e-5 * (1 + std::fabs(twice)) && std::fabs(twice - ce) > 1e-3) {
      v.named = {"loss"};
      fail(v, kRankLossMismatch,
           "softmax is applied twice: the loss takes a softmax of the outputs and then a cross-entropy, which applies "
           "its own",
           "give the logits to cross_entropy directly (it applies log_softmax itself), or use nll_loss on "
           "log_softmax");
    }
    return v;
  }
  const double as_logits = torch::nn::functional::cross_entropy(o, y).item<double>();
  const double as_probs = torch::nn::functional::nll_loss(torch::log(o.clamp_min(1e-300)), y).item<double>();
  v.data["cross_entropy_of_outputs"] = number(as_logits);
  v.data["nll_of_log_outputs"] = number(as_probs);
  v.evidence = "every output row sums to 1 (probabilities); loss " + fmt(loss) + ", cross-entropy taking them for "
               "logits " + fmt(as_logits) + ", -log p of the label " + fmt(as_probs);
  if (std::fabs(loss - as_logits) <= 1e-4 * (1 + std::fabs(as_logits)) && std::fabs(as_logits - as_probs) > 1e-3) {
    v.named = {"output"};
    fail(v, kRankLossMismatch,
         "softmax is applied twice: the model outputs probabilities and the loss takes them for logits",
         "return the logits from forward() (drop the final softmax) and keep cross_entropy, or apply log() and use "
         "nll_loss; the loss cannot fall below " + fmt(std::log(1 + (double(out.size(1)) - 1) / std::exp(1.0))) +
             " as it is");
  }
  return v;
}

// ---- invariants of correct training code, probed on any model ----

std::string shape_text(const torch::Tensor& t) { return c10::str(t.sizes()); }

// Binary labels: floats that are all exactly 0 or 1, shaped like the outputs
// (a regression target in [0, 1] is not one: its loss may be negative, e.g.
// a Gaussian NLL).
bool binary_targets(const torch::Tensor& out, const torch::Tensor& y) {
  if (!y.defined() || !y.is_floating_point() || y.numel() != out.numel() || y.numel() == 0) return false;
  torch::NoGradGuard no_grad;
  const torch::Tensor f = y.detach();
  return ((f == 0) | (f == 1)).all().item<bool>();
}

// Outputs and targets at the loss: a float target whose shape differs from
// the output's is broadcast ((N, 1) against (N) makes N x N pairs); and every
// LibTorch warning raised while the doctor ran the code.
VitalSign loss_shapes(const torch::Tensor& out, const Batch& b, const LossProbe& probe,
                      const std::map<std::string, int64_t>& warnings) {
  VitalSign v = sign("loss_shapes");
  const torch::Tensor& y = b.targets;
  v.data = {{"output", out.sizes().vec()}, {"target", y.defined() ? y.sizes().vec() : std::vector<int64_t>{}},
            {"warnings", warnings}};
  v.evidence = "outputs " + shape_text(out) + ", targets " + (y.defined() ? shape_text(y) : std::string("none"));
  int64_t total = 0;
  std::string shown;
  bool size_warning = false;
  for (const auto& [message, count] : warnings) {
    total += count;
    shown += "\n      " + std::to_string(count) + "x " + message;
    size_warning = size_warning || message.find("target size") != std::string::npos ||
                   message.find("broadcast") != std::string::npos;
  }
  if (total) v.evidence += "; LibTorch warned " + std::to_string(total) + " time(s), each once here:" + shown;
  // The loss's own reshape (outputs.squeeze(1) inside loss()) is fine: only a
  // loss whose value changes when the outputs take the targets' shape is broadcasting.
  const bool mismatch = probe.shapes_differ && probe.broadcast_changes_loss;
  if (mismatch || size_warning) {
    v.named = {"loss"};
    const std::string pair = "outputs " + shape_text(out) + " against targets " + shape_text(y);
    fail(v, kRankLossShapes,
         mismatch ? "the loss compares " + pair + ": they broadcast to every pair of samples, not sample to sample"
                  : "LibTorch warns about the loss's shapes (" + pair + ")",
         "make the shapes equal before the loss: outputs.squeeze(1) (or view(-1)) for a (N, 1) output, or "
         "targets.view_as(outputs)");
  }
  return v;
}



LossProbe probe_loss(Scenario& s, const torch::Tensor& out, const Batch& b) {
  LossProbe r;
  const bool ids = out.dim() == 2 && out.size(1) > 1 && class_ids(b.targets) &&
                   b.targets.max().item<int64_t>() < out.size(1) && b.targets.min().item<int64_t>() >= 0;
  const bool binary = !ids && binary_targets(out, b.targets);
  const double m = out.abs().max().item<double>();
  torch::NoGradGuard no_grad;
  const torch::Tensor& y = b.targets;
  if (y.defined() && y.is_floating_point() && out.is_floating_point() && out.sizes() != y.sizes() && out.dim() >= 1 &&
      y.dim() >= 1 && out.size(0) == y.size(0)) {
    try {
      at::infer_size(out.sizes(), y.sizes());  // broadcastable (else the loss throws: training_code_error)
      r.shapes_differ = true;
      if (out.numel() == y.numel()) {
        const double as_is = s.loss(out, y).item<double>(), aligned = s.loss(out.reshape(y.sizes()), y).item<double>();
        r.broadcast_changes_loss = !(std::fabs(as_is - aligned) <= 1e-6 * (1 + std::fabs(aligned)));
      } else {
        r.broadcast_changes_loss = true;
      }
    } catch (const std::exception&) {
      r.shapes_differ = false;
    }
  }
  if (ids) {
    if (probability_rows(out)) {
      const torch::Tensor wrong = torch::one_hot((y + 1) % out.size(1), out.size(1)).to(out.scalar_type());
      try {
        r.zero_prob = s.loss(wrong, y).item<double>();
        r.zero_ran = true;
      } catch (const std::exception&) {
      }
    }
  }
  if (!(ids || binary) || !(m > 0) || !std::isfinite(m)) return r;
  r.scale = 200;
  const torch::Tensor big = (out * (r.scale / m)).to(out.scalar_type());
  try {
    r.value = s.loss(big, b.targets).item<double>();
  } catch (const std::exception&) {
    return r;
  }
  r.ran = true;
  if (ids) {
    try {
      r.shifted = s.loss(out + 100.0, b.targets).item<double>();
      r.shift_ran = true;
    } catch (const std::exception&) {
    }
  }
  const torch::Tensor big64 = big.to(torch::kFloat64);
  r.reference = ids ? torch::nn::functional::cross_entropy(big64, b.targets).item<double>()
                    : torch::nn::functional::binary_cross_entropy_with_logits(big64, b.targets.to(torch::kFloat64).view_as(big64))
                          .item<double>();
  return r;
}

VitalSign loss_domain(const Watched& w, const LossProbe& probe, bool classification) {
  VitalSign v = sign("loss_domain");
  double lowest = INFINITY;
  int64_t at = -1;
  for (const StepRecord& r : w.records) {
    if (std::isfinite(r.loss) && r.loss < lowest) lowest = r.loss, at = r.step;
  }
  v.data = {{"min_loss", number(lowest)}, {"probe_scale", probe.scale}, {"probe_loss", number(probe.value)},
            {"probe_reference", number(probe.reference)}};
  v.evidence = (at >= 0 ? "lowest training loss " + fmt(lowest) + " (step " + std::to_string(at) + ")" : "no finite loss") +
               (probe.ran ? "; outputs scaled to max |x| " + fmt(probe.scale) + ": loss " + fmt(probe.value) +
                                " (a stable implementation: " + fmt(probe.reference) + ")"
                          : "");
  if (classification && at >= 0 && lowest < -1e-6) {
    v.named = {"loss"};
    fail(v, kRankLossDomain,
         "the loss goes below 0 (" + fmt(lowest) + " at step " + std::to_string(at) + "): a classification loss cannot",
         "nll_loss takes log-probabilities: give it log_softmax(outputs), not raw outputs or softmax; or the sign of "
         "the loss is flipped");
  } else if (probe.zero_ran && !std::isfinite(probe.zero_prob)) {
    v.named = {"loss"};
    v.evidence += "; outputs certain of a wrong class (the label's probability 0): loss " + fmt(probe.zero_prob);
    const bool after_nan = w.verdict.fault && w.verdict.fault->stage == Stage::kLoss;
    fail(v, after_nan ? kRankLossUnstableAfterNaN : kRankLossDomain,
         "the loss takes the log of a probability that can be 0: a confidently wrong prediction makes it " +
             fmt(probe.zero_prob),
         "return log_softmax from the model and use nll_loss (or return logits and use cross_entropy) instead of "
         "log(softmax(x)); or clamp the probabilities away from 0");
  } else if (probe.ran && !std::isfinite(probe.value) && std::isfinite(probe.reference)) {
    v.named = {"loss"};
    const bool after_nan = w.verdict.fault && w.verdict.fault->stage == Stage::kLoss;
    const bool overflow = probe.shift_ran && !std::isfinite(probe.shifted);
    if (probe.shift_ran) v.evidence += "; outputs + 100: loss " + fmt(probe.shifted);
    fail(v, after_nan ? kRankLossUnstableAfterNaN : kRankLossDomain,
         overflow ? "the loss overflows: exp of a large output in a hand-written softmax (adding 100 to every output, "
                    "which a softmax ignores, makes the loss " + fmt(probe.shifted) + ")"
                  : "the loss is not numerically stable: " + fmt(probe.value) + " at outputs of magnitude " +
                        fmt(probe.scale) + " (log of a probability that underflowed to 0)",
         "use log_softmax / cross_entropy (or BCEWithLogits) on the logits instead of exp, softmax or sigmoid followed "
         "by log; or subtract the row max before exp");
  }
  return v;
}

std::string output_range_miss(const torch::Tensor& out, const torch::Tensor& targets) {
  if (!out.defined() || !targets.defined() || !out.is_floating_point() || !targets.is_floating_point() ||
      out.sizes() != targets.sizes() || out.numel() == 0) {
    return {};
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor o = out.detach().to(torch::kFloat64), y = targets.detach().to(out.device()).to(torch::kFloat64);
  const double lo = o.min().item<double>(), hi = o.max().item<double>();
  const double zeros = (o == 0).to(torch::kFloat64).mean().item<double>();
  auto share = [&](const torch::Tensor& outside) { return outside.to(torch::kFloat64).mean().item<double>(); };
  const std::string span = " (targets from " + fmt(y.min().item<double>()) + " to " + fmt(y.max().item<double>()) + ")";
  if (lo >= 0 && zeros >= 0.1) {  // a rectifier's: exactly 0 beside positive values
    const double negative = share(y < 0);
    if (negative < 0.1) return {};
    return "every output is at least 0 and " + fmt(100 * zeros) + "% are exactly 0 (a rectifier's range), but " +
           fmt(100 * negative) + "% of the targets are negative" + span;
  }
  struct Range {
    double lo, hi;
    const char* what;
  };
  for (const Range r : {Range{0, 1, "(0, 1), a sigmoid's range"}, Range{-1, 1, "(-1, 1), a tanh's range"}}) {
    if (lo < r.lo || hi > r.hi) continue;
    const double outside = share((y < r.lo) | (y > r.hi));
    if (outside < 0.1) return {};
    return "every output lies in " + std::string(r.what) + ", but " + fmt(100 * outside) +
           "% of the targets are outside it" + span;
  }
  return {};
}

std::string bounded_logits(Scenario& s, const torch::Tensor& out, const Batch& b) {
  const torch::Tensor& y = b.targets;
  if (!out.defined() || out.dim() != 2 || out.size(1) < 3 || !y.defined() || y.is_floating_point() || y.dim() != 1 ||
      y.size(0) != out.size(0)) {
    return {};
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor o = out.detach().to(torch::kFloat64);
  if (o.min().item<double>() < 0 || o.max().item<double>() > 1) return {};
  if ((o.sum(1) - 1).abs().max().item<double>() < 1e-3) return {};  // distributions: softmax twice, checked apart
  const int64_t c = out.size(1);
  if (y.min().item<int64_t>() < 0 || y.max().item<int64_t>() >= c) return {};
  // The best outputs that range allows: 1 for the label, 0 for every other class.
  const torch::Tensor best = torch::one_hot(y.to(out.device()), c).to(out.scalar_type());
  const double floor = guarded("loss", [&] { return s.loss(best, y); }).item<double>();
  if (!std::isfinite(floor) || floor < 0.3) return {};
  return "every output lies in (0, 1), a sigmoid's range, and the loss takes them as logits: at the best outputs "
         "that range allows (1 for the label, 0 for the other " + std::to_string(c - 1) + " classes) it is still " +
         fmt(floor) + ", so no prediction can become confident";
}

std::string log_probability_logits(Scenario& s, const torch::Tensor& out, const Batch& b) {
  const torch::Tensor& y = b.targets;
  if (!out.defined() || !out.is_floating_point() || out.numel() == 0 || !y.defined()) return {};
  torch::NoGradGuard no_grad;
  const torch::Tensor o = out.detach().to(torch::kFloat64);
  if (o.max().item<double>() > 0) return {};
  torch::Tensor best;  // 0 where the target is, far below 0 elsewhere
  std::string where;
  if (y.is_floating_point() && y.sizes() == out.sizes() && ((y == 0) | (y == 1)).all().item<bool>()) {
    if (!(y == 1).any().item<bool>()) return {};
    best = torch::where(y.to(out.device()) == 1, torch::zeros_like(out), torch::full_like(out, -30.0));
    where = "0 for a target of 1, -30 for a target of 0";
  } else if (out.dim() == 2 && class_ids(y) && y.size(0) == out.size(0) && y.min().item<int64_t>() >= 0 &&
             y.max().item<int64_t>() < out.size(1)) {
    best = torch::full_like(out, -30.0).scatter(1, y.to(out.device()).to(torch::kInt64).unsqueeze(1), 0.0);
    where = "0 for the label, -30 for the other classes";
  } else {
    return {};
  }
  const double floor = guarded("loss", [&] { return s.loss(best, y); }).item<double>();
  if (!std::isfinite(floor) || floor < 0.05) return {};  // a loss that takes log-probabilities reaches 0 there
  return "every output is at most 0 (log-probabilities: a log-sigmoid's or log-softmax's range) and the loss takes "
         "them as logits: at the best outputs that range allows (" + where + ") it is still " + fmt(floor) +
         ", so a target of 1 can never be predicted above 0.5";
}

}  // namespace spikehunt::doctor_detail
