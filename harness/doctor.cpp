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
#include "harness/doctor/common.h"
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

namespace {

constexpr double kDeadShare = 0.5;          // a layer is flagged when this share of its units is dead
constexpr double kSaturatedDerivative = 0.01;  // of the activation's largest derivative

// ---- helpers ----

std::string layer_of(const std::string& parameter) {
  const size_t dot = parameter.rfind('.');
  return dot == std::string::npos ? parameter : parameter.substr(0, dot);
}

bool has_batch_norm(torch::nn::Module& model) {
  for (const auto& b : model.named_buffers()) {
    if (b.key().find("running_mean") != std::string::npos) return true;
  }
  return false;
}

bool class_ids(const torch::Tensor& y) {
  return y.defined() && y.dim() == 1 && !y.is_floating_point() && y.scalar_type() != torch::kBool;
}

// Every row of (batch, classes) outputs is a probability distribution.
bool probability_rows(const torch::Tensor& out) {
  const torch::Tensor o = out.to(torch::kFloat64);
  return o.min().item<double>() >= -1e-6 && (o.sum(1) - 1).abs().max().item<double>() < 1e-4;
}

struct Prediction {
  int64_t label = 0, predicted = 0;
  double confidence = 0;  // softmax probability of the predicted class
};

void add_predictions(const torch::Tensor& out, const torch::Tensor& targets, std::vector<Prediction>* preds) {
  if (out.dim() != 2 || !class_ids(targets)) return;
  const torch::Tensor probs = torch::softmax(out.detach().to(torch::kFloat64), 1).to(torch::kCPU);
  const auto [conf, pred] = probs.max(1);
  const torch::Tensor y = targets.to(torch::kCPU).to(torch::kInt64);
  const auto* yp = y.data_ptr<int64_t>();
  const torch::Tensor p = pred.contiguous();
  const torch::Tensor c = conf.contiguous();
  for (int64_t i = 0; i < y.size(0); ++i) {
    preds->push_back({yp[i], p.data_ptr<int64_t>()[i], c.data_ptr<double>()[i]});
  }
}

// ---- units: which are dead on every probe sample ----

// Per hidden tap, over every sample seen: each unit's largest value, its
// smallest, and its largest sigmoid and tanh derivative as read from the
// output (v(1 - v) and 1 - v²), and the tap's overall range and exact zeros.
class UnitProbe : public TapSink {
 public:
  void on_tap(const char* name, const torch::Tensor& t) override {
    torch::NoGradGuard no_grad;
    if (!t.is_floating_point() || t.dim() < 2 || t.numel() == 0) return;
    const int64_t unit_dim = t.dim() == 3 ? 2 : 1;
    const torch::Tensor v = t.detach().to(torch::kFloat32).movedim(unit_dim, -1).reshape({-1, t.size(unit_dim)});
    Units& u = taps_[name];
    u.shape_tail = t.sizes().vec();
    u.shape_tail.erase(u.shape_tail.begin());  // without the batch
    const torch::Tensor hi = std::get<0>(v.max(0)), lo = std::get<0>(v.min(0));
    const torch::Tensor dsig = std::get<0>((v * (1 - v)).max(0)), dtanh = std::get<0>((1 - v * v).max(0));
    auto fold = [](torch::Tensor& acc, const torch::Tensor& x, bool max) {
      acc = !acc.defined() ? x.clone() : max ? torch::maximum(acc, x) : torch::minimum(acc, x);
    };
    fold(u.max, hi, true);
    fold(u.min, lo, false);
    fold(u.dsig, dsig, true);
    fold(u.dtanh, dtanh, true);
    u.zeros += (v == 0).sum().item<int64_t>();
    u.count += v.numel();
    u.finite = u.finite && torch::isfinite(v).all().item<bool>();
    if (std::find(order_.begin(), order_.end(), name) == order_.end()) order_.push_back(name);
  }

  struct Layer {
    std::string tap;
    std::string kind;   // "rectifier", "sigmoid", "tanh"
    bool read = false;  // the kind read from the tap's module; else from its output range
    int64_t units = 0, dead = 0;
    double share() const { return units ? double(dead) / double(units) : 0.0; }
  };

  // The hidden taps (not the output's shape) and their dead units. `modules`: the class of the module
  // each tap is named after, where one is: an activation's kind is read from it, and a tap of another
  // module (a Linear, a convolution, a norm) is not an activation and its units are not judged.
  std::vector<Layer> layers(const std::vector<int64_t>& output_tail,
                            const std::map<std::string, std::string>& modules) const {
    static const std::set<std::string> kRectifiers = {"ReLU", "ReLU6", "LeakyReLU", "GELU", "ELU", "SELU", "CELU",
                                                      "SiLU", "Mish", "PReLU", "RReLU", "Softplus", "Hardswish"};
    std::vector<Layer> out;
    for (const std::string& name : order_) {
      const Units& u = taps_.at(name);
      if (u.shape_tail == output_tail || !u.finite || !u.max.defined()) continue;
      const double lo = u.min.min().item<double>(), hi = u.max.max().item<double>();
      const double zeros = double(u.zeros) / double(std::max<int64_t>(u.count, 1));
      Layer l;
      l.tap = name;
      l.units = u.max.numel();
      torch::Tensor dead;
      const auto module = modules.find(name);
      if (module != modules.end()) {
        const std::string& k = module->second;
        l.read = true;
        if (kRectifiers.count(k)) {
          l.kind = "rectifier";
          dead = u.max <= 0;
        } else if (k == "Sigmoid") {
          l.kind = "sigmoid";
          dead = u.dsig < kSaturatedDerivative * 0.25;
        } else if (k == "Tanh" || k == "Hardtanh") {
          l.kind = "tanh";
          dead = u.dtanh < kSaturatedDerivative;
        } else {
          continue;  // not an activation
        }
      } else if (lo >= 0 && hi <= 1 && zeros < 0.01) {
        l.kind = "sigmoid";
        dead = u.dsig < kSaturatedDerivative * 0.25;
      } else if (lo >= -1 && hi <= 1 && lo < 0 && zeros < 0.01 && -lo > 0.3 * hi) {
        l.kind = "tanh";
        dead = u.dtanh < kSaturatedDerivative;
      } else {
        l.kind = "rectifier";
        dead = u.max <= 0;
      }
      l.dead = dead.sum().item<int64_t>();
      out.push_back(l);
    }
    return out;
  }

 private:
  struct Units {
    std::vector<int64_t> shape_tail;
    torch::Tensor max, min, dsig, dtanh;  // (units)
    int64_t zeros = 0, count = 0;
    bool finite = true;
  };
  std::map<std::string, Units> taps_;
  std::vector<std::string> order_;
};

// ---- what the doctor learns from the scenario ----

// Batches to probe with, and the scenario's held-out data.
struct Probe {
  std::vector<Batch> batches;  // the first training batches (the first is the fixed batch)
  std::vector<Batch> heldout;  // or, when the scenario has none, the probe batches
  bool has_heldout = false;
  int64_t classes = 10;
  std::vector<int64_t> output_tail;  // the output's shape without the batch
};

struct Watched {
  std::vector<StepRecord> records;
  Verdict verdict;
  std::vector<std::string> weights;  // weight parameter names, model order
  std::vector<int64_t> weight_numel;
  std::vector<bool> trainable;
  double outputs_moved = 0, outputs_scale = 0;  // on the fixed batch, start to end
  std::vector<UnitProbe::Layer> units_first, units_last;
  std::vector<Prediction> predictions;
  std::string output_layer;
  std::unique_ptr<Scenario> trained;  // the watched scenario after a finite run (null otherwise)
  torch::Tensor outputs_before, outputs_after;  // on the fixed batch, in eval mode (after: a finite run only)
  // Every parameter, model order: its name, optimizer (-1: none), whether it
  // requires grad, got a nonzero gradient, and changed during the run.
  struct Param {
    std::string name;
    int optimizer = -1;
    bool trainable = false, had_grad = false, changed = false;
  };
  std::vector<Param> params;
  std::vector<double> grads_after_step;         // per step: L2 of the gradients left after optimizer_step()
  std::map<std::string, int64_t> not_training;  // module -> steps it trained in eval mode
  int64_t optimizer_state_steps = -1;           // the first optimized parameter's step count after the run
  std::string optimizer_state_of;               // that parameter
};

// A classification loss is at least 0, and a stable one stays finite when
// the outputs are scaled to large but finite values (max |x| 200).
struct LossProbe {
  bool ran = false;
  double scale = 0;         // max |output| it was probed at
  double value = 0;         // the loss there
  double reference = 0;     // a stable implementation's value there
  bool shift_ran = false;   // class ids: the outputs + 100 (softmax is shift-invariant)
  double shifted = 0;       // the loss there (a hand-written exp overflows)
  bool zero_ran = false;    // probabilities: every row certain of a wrong class (the label's p = 0)
  double zero_prob = 0;     // the loss there (log(0) without an epsilon is Inf)
  // Outputs and targets of different shapes at the loss (float targets): the
  // loss's value as given and with the outputs viewed as the targets' shape.
  bool shapes_differ = false, broadcast_changes_loss = false;
};

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
  double sumsq = 0, max_abs = 0;
  int64_t n = 0, non_finite = 0, batches = 0;
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
  }
  if (n == 0) {
    v.skipped = true;
    v.evidence = "no training batch";
    return v;
  }
  const double rms = std::sqrt(sumsq / double(std::max<int64_t>(n - non_finite, 1)));
  v.data = {{"rms", rms}, {"max_abs", max_abs}, {"non_finite", non_finite}, {"values", n}, {"batches", batches}};
  v.evidence = "first " + std::to_string(batches) + " training batch(es): rms " + fmt(rms) + ", max |x| " + fmt(max_abs) +
               (non_finite ? ", " + std::to_string(non_finite) + " NaN/Inf of " + std::to_string(n) : "");
  if (non_finite > 0) {
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
    v.evidence += "; " + list(never_changed) + " had nonzero gradients but never changed";
    fail(v, kRankCoverage,
         "the optimizer never changes " + list(never_changed, 3) + " though they have gradients",
         "the update is not applied: is optimizer.step() called (an overridden optimizer_step() that forgets it), "
         "is the learning rate 0, or is the step undone afterwards?");
  }
  return v;
}

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

// ---- 5. overfit one batch ----

void disable_weight_decay(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    torch::optim::OptimizerOptions& o = group.options();
    if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&o)) sgd->weight_decay(0);
    if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&o)) adam->weight_decay(0);
    if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&o)) adamw->weight_decay(0);
  }
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
  for (const NamedOptimizer& opt : s->optimizers()) disable_weight_decay(*opt.optimizer);
  // No dropout; a batch-normalized model keeps training mode (its running
  // statistics would otherwise stand in for the batch's).
  if (!has_batch_norm(s->model())) s->model().eval();
  const Batch& batch = probe.batches.front();
  Trainer trainer(*s, /*schedule=*/false);  // the config's peak learning rate
  double first = NAN, last = NAN;
  int64_t steps = 0;
  bool converged = false, diverged = false;
  std::vector<double> losses;
  for (; steps < o.overfit_steps; ++steps) {
    last = trainer.step(steps, {batch}, nullptr).item<double>();
    losses.push_back(last);
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
            {"threshold", o.overfit_loss}, {"batch_size", batch.targets.size(0)}};
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

// ---- the run the other signs watch ----

// The class of every submodule by name ("ReLU", "Linear"; C++'s "torch::nn::ReLUImpl" read as "ReLU").
std::map<std::string, std::string> module_classes(torch::nn::Module& model) {
  std::map<std::string, std::string> out;
  for (const auto& m : model.named_modules("", /*include_self=*/false)) {
    std::string k = m.value()->name();
    k = k.substr(k.rfind(':') == std::string::npos ? 0 : k.rfind(':') + 1);
    if (k.size() > 4 && k.compare(k.size() - 4, 4, "Impl") == 0) k.resize(k.size() - 4);
    out[m.key()] = k;
  }
  return out;
}

std::vector<UnitProbe::Layer> probe_units(Scenario& s, const Probe& p, std::vector<Prediction>* preds) {
  UnitProbe units;
  EvalMode eval(s.model());
  torch::NoGradGuard no_grad;
  for (const Batch& b : p.heldout) {
    const torch::Tensor out = guarded("forward", [&] { return s.forward(b.inputs, Tap(&units)); });
    if (preds) add_predictions(out, b.targets, preds);
  }
  return units.layers(p.output_tail, module_classes(s.model()));
}

torch::Tensor fixed_outputs(Scenario& s, const Batch& b) {
  EvalMode eval(s.model());
  torch::NoGradGuard no_grad;
  return guarded("forward", [&] { return s.forward(b.inputs, Tap()); }).detach().to(torch::kFloat64).clone();
}

// The modules (by name) not in training mode: the model must train in training mode.
std::vector<std::string> modules_in_eval(torch::nn::Module& model) {
  std::vector<std::string> out;
  for (const auto& m : model.named_modules("model")) {
    if (!m.value()->is_training()) out.push_back(m.key());
  }
  return out;
}

Watched watch(const ScenarioFactory& make, const Probe& p, const DoctorOptions& o) {
  Watched w;
  std::unique_ptr<Scenario> s = guarded("setup", make);
  const std::vector<ParamSlot> slots = parameter_slots(*s);
  std::vector<torch::Tensor> initial;
  for (const ParamSlot& slot : slots) {
    w.params.push_back({slot.name, slot.optimizer, slot.tensor.requires_grad(), false, false});
    initial.push_back(slot.tensor.detach().clone());
    if (slot.tensor.dim() < 2) continue;
    w.weights.push_back(slot.name);
    w.weight_numel.push_back(slot.tensor.numel());
    w.trainable.push_back(slot.tensor.requires_grad());
  }
  if (!w.weights.empty()) w.output_layer = layer_of(w.weights.back());
  w.outputs_before = fixed_outputs(*s, p.batches.front());
  w.units_first = probe_units(*s, p, nullptr);
  HealthRules rules = o.rules;
  rules.stop_at = StopAt::kNonFinite;  // watch past the first extreme step
  BurstOptions options;
  options.max_steps = o.steps;
  options.on_step = [&](const StepRecord& r) {
    w.records.push_back(r);
    for (const std::string& m : modules_in_eval(s->model())) ++w.not_training[m];
    torch::NoGradGuard no_grad;
    double gsq = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
      const torch::Tensor now = slots[i].tensor.detach();
      // A gradient whose step float32 can register: lr x max |g| at least 1e-6 of max |p|.
      const torch::Tensor g = slots[i].tensor.grad();
      if (g.defined()) gsq += g.to(torch::kFloat64).square().sum().item<double>();
      if (g.defined() && !w.params[i].had_grad) {
        const double gmax = g.abs().max().item<double>(), pmax = now.abs().max().item<double>();
        w.params[i].had_grad = gmax > 0 && r.lr * gmax >= 1e-6 * pmax;
      }
    }
    w.grads_after_step.push_back(std::sqrt(gsq));
  };
  w.verdict = run_burst(*s, rules, options).verdict;
  if (w.verdict.outcome == Outcome::kCrashed) return w;
  {
    const std::vector<NamedOptimizer> optimizers = s->optimizers();
    for (const ParamSlot& slot : slots) {
      if (slot.optimizer < 0) continue;
      const std::optional<ParamState> st = param_state(*optimizers[size_t(slot.optimizer)].optimizer, slot.tensor);
      if (!st) continue;
      if (st->step) w.optimizer_state_steps = *st->step;
      else if (st->step_tensor.defined()) w.optimizer_state_steps = int64_t(st->step_tensor.item<double>());
      else continue;
      w.optimizer_state_of = slot.name;
      break;
    }
  }
  for (size_t i = 0; i < slots.size(); ++i) w.params[i].changed = !torch::equal(slots[i].tensor.detach(), initial[i]);
  const torch::Tensor after = fixed_outputs(*s, p.batches.front());
  w.outputs_moved = (after - w.outputs_before).abs().max().item<double>();
  w.outputs_scale = w.outputs_before.abs().max().item<double>();
  if (!w.verdict.failure_step) {
    w.outputs_after = after;
    w.units_last = probe_units(*s, p, &w.predictions);
    w.trained = std::move(s);
  }
  return w;
}

// ---- 6. frozen output ----

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
    fail(v, kRankFrozen, "the output is frozen: the loss stays at chance and no output moves",
         "the output layer (" + w.output_layer + ") gets no gradient: look for a detach(), a no_grad block or a "
         "frozen requires_grad between the logits and the loss");
  }
  return v;
}

// ---- 7. gradient flow ----

VitalSign gradient_flow(const Watched& w, const DoctorOptions& o, const GraphProbe& graph) {
  VitalSign v = sign("gradient_flow");
  if (w.records.empty() || w.weights.empty()) return skipped("gradient_flow", "no weights or no step");
  const size_t n = w.weights.size();
  std::vector<double> rms(n, 0.0), peak(n, 0.0);
  std::vector<bool> any(n, false);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < n; ++i) index[w.weights[i]] = i;
  int64_t flow_steps = 0;
  for (const StepRecord& r : w.records) {
    const bool flow = flow_steps < o.flow_steps;
    bool finite = true;
    for (const LayerStats& l : r.layers) finite = finite && std::isfinite(l.grad_norm);
    for (const LayerStats& l : r.layers) {
      auto it = index.find(l.name);
      if (it == index.end() || !std::isfinite(l.grad_norm)) continue;
      const size_t i = it->second;
      peak[i] = std::max(peak[i], l.grad_norm);
      any[i] = any[i] || l.grad_norm > 0;
      if (flow && finite) rms[i] += l.grad_norm / std::sqrt(double(w.weight_numel[i]));
    }
    flow_steps += flow && finite;
  }
  double largest = 0, smallest = INFINITY;
  json layers = json::object();
  std::string table;
  std::vector<std::string> zero;
  for (size_t i = 0; i < n; ++i) {
    if (flow_steps > 0) rms[i] /= double(flow_steps);
    const std::string layer = layer_of(w.weights[i]);
    layers[layer] = {{"rms_grad", number(rms[i])}, {"peak_grad_norm", number(peak[i])}};
    if (!w.trainable[i]) continue;  // frozen on purpose
    table += (table.empty() ? "" : ", ") + layer + " " + fmt(rms[i]);
    if (!any[i]) {
      zero.push_back(layer);
      continue;
    }
    largest = std::max(largest, rms[i]);
    smallest = std::min(smallest, rms[i]);
  }
  const double spread = std::isfinite(smallest) && smallest > 0 ? largest / smallest : 1.0;
  v.data = {{"layers", layers}, {"spread", number(spread)}};
  v.evidence = "RMS gradient per weight over the first " + std::to_string(flow_steps) + " steps: " + table +
               " (spread " + fmt(spread) + "x)";
  // Exploding: a layer norm above 100, or the global norm climbing 5 steps running, 10x in all.
  std::vector<std::string> exploding;
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    if (peak[i] > 100) exploding.push_back(layer_of(w.weights[i]));
    worst = std::max(worst, peak[i]);
  }
  bool climbing = false;
  const auto& rec = w.records;
  for (size_t i = 5; i < rec.size() && !climbing; ++i) {
    bool up = true;
    for (size_t k = i - 4; k <= i; ++k) up = up && rec[k].grad_norm > rec[k - 1].grad_norm;
    climbing = up && rec[i].grad_norm >= 10 * rec[i - 5].grad_norm && rec[i].grad_norm > 1;
  }
  size_t trainable = 0;
  for (size_t i = 0; i < n; ++i) trainable += w.trainable[i];
  if (!zero.empty() && zero.size() == trainable && graph.loss_reaches_outputs == 0) {
    v.named = zero;
    v.evidence += "; exactly zero gradient: " + list(zero) + "; the loss of a batch, differentiated, gives the "
                  "outputs no gradient";
    fail(v, kRankCoverage,
         "no gradient reaches any of the " + std::to_string(trainable) + " trained weights (" + list(zero, 3) +
             "): the loss does not depend on the model's outputs (differentiated, it gives them no gradient), so "
             "its graph is cut between the outputs and the loss",
         "compute the loss from the output tensors: a value taken out with .item(), .detach(), .data or numpy and "
         "put into a new tensor that requires grad trains nothing");
  } else if (!zero.empty()) {
    v.named = zero;
    v.evidence += "; exactly zero gradient: " + list(zero);
    // Whether the loss's graph reaches them at all (read from it: graph.cpp).
    std::vector<std::string> cut;
    for (const std::string& layer : zero) {
      for (const std::string& name : graph.unreached) {
        if (layer_of(name) == layer && std::find(cut.begin(), cut.end(), layer) == cut.end()) cut.push_back(layer);
      }
    }
    if (graph.measured && cut.size() == zero.size()) {
      v.evidence += "; the loss's autograd graph does not reach them";
      fail(v, kRankCoverage,
           "no gradient reaches " + list(zero, 3) + ": the loss's autograd graph does not reach their parameters, "
               "so they are computed without a graph (under torch.no_grad() or detached) while an optimizer holds "
               "them",
           "compute them with autograd on (remove the no_grad() / detach() around them), or freeze them on purpose "
           "with requires_grad_(False)");
    } else {
      fail(v, kRankGradientFlow, "no gradient reaches " + list(zero, 3),
           "a detach(), a missing path from them to the loss, or units that never fire");
    }
  } else if (!exploding.empty() || climbing) {
    v.named = exploding;
    v.evidence += exploding.empty() ? "; the global grad norm climbed 5 steps running, 10x in all"
                                    : "; grad norm above 100 in " + list(exploding) + " (up to " + fmt(worst) + ")";
    fail(v, kRankGradientFlow,
         exploding.empty() ? "exploding gradients: the global norm climbs 10x in 5 steps"
                           : "exploding gradients in " + list(exploding, 3) + " (norm up to " + fmt(worst) + ")",
         "clip the global grad norm (grad_clip), lower the learning rate, or fix the init scale or the input scale");
  } else if (spread >= 1000) {
    for (size_t i = 0; i < n; ++i) {
      if (w.trainable[i] && rms[i] * 1000 <= largest) v.named.push_back(layer_of(w.weights[i]));
    }
    std::string best;
    for (size_t i = 0; i < n; ++i) {
      if (rms[i] == largest) best = layer_of(w.weights[i]);
    }
    v.evidence += "; vanishing in " + list(v.named);
    fail(v, kRankGradientFlow,
         "vanishing gradients: " + list(v.named, 3) + " get 1,000x less than " + best + " (RMS " + fmt(smallest) +
             " against " + fmt(largest) + ")",
         "use ReLU/GELU instead of saturating activations, a better init, normalization or residual connections");
  }
  return v;
}

// ---- 8. dead units ----

VitalSign dead_units(const Watched& w) {
  VitalSign v = sign("dead_units");
  if (w.units_first.empty() && w.units_last.empty()) return skipped("dead_units", "no hidden activation taps");
  std::map<std::string, std::pair<const UnitProbe::Layer*, const UnitProbe::Layer*>> by_tap;
  std::vector<std::string> order;
  for (const auto& l : w.units_first) by_tap[l.tap].first = &l, order.push_back(l.tap);
  for (const auto& l : w.units_last) {
    if (!by_tap.count(l.tap)) order.push_back(l.tap);
    by_tap[l.tap].second = &l;
  }
  std::string table, worst, worst_kind;
  double worst_share = 0;
  bool worst_read = false;
  for (const std::string& tap : order) {
    const auto [first, last] = by_tap[tap];
    const UnitProbe::Layer& any = first ? *first : *last;
    const double a = first ? first->share() : NAN, b = last ? last->share() : NAN;
    v.data[tap] = {{"kind", any.kind}, {"kind_from", any.read ? "module" : "output range"}, {"units", any.units},
                   {"dead_first", number(a)}, {"dead_last", number(b)}};
    table += (table.empty() ? "" : ", ") + tap + " " + (first ? percent(a) : "n/a") + " -> " + (last ? percent(b) : "n/a") +
             " of " + std::to_string(any.units) + (any.kind == "rectifier" ? "" : " (" + any.kind + ")");
    const double share = std::max(first ? a : 0.0, last ? b : 0.0);
    if (share >= kDeadShare) {
      v.named.push_back(tap);
      if (share > worst_share) {
        worst_share = share, worst_kind = any.kind, worst_read = any.read;
        worst = tap + " (" + any.kind + ")";
      }
    }
  }
  v.evidence = "units dead on every held-out sample, start -> end: " + table + " (flagged at " + percent(kDeadShare) + ")";
  if (!v.named.empty()) {
    fail(v, kRankDeadUnits,
         percent(worst_share) + " of the units of " + worst +
             (worst_kind == "rectifier" ? " are dead (never positive)" : " are saturated") + " on every held-out sample" +
             (worst_read ? "" : " (its kind read from its output range: no module of that name)"),
         "dead rectifiers: check the bias init (large negative values) or lower the learning rate, or use LeakyReLU; "
         "saturated sigmoid/tanh: scale the init down (Xavier) or normalize the pre-activations");
  }
  return v;
}

// ---- 9. non-finite source ----

// The largest finite magnitude among a step's statistics.
double magnitude(const StepRecord& r) {
  double m = 0;
  for (double x : {std::fabs(r.loss), r.output_max, r.activation_max, r.grad_max, r.state_max}) {
    if (std::isfinite(x)) m = std::max(m, x);
  }
  return m;
}

VitalSign non_finite_source(const Watched& w, const LossProbe& probe) {
  VitalSign v = sign("non_finite_source");
  if (!w.verdict.fault) {
    v.evidence = "every step of " + std::to_string(w.records.size()) + " stayed finite";
    return v;
  }
  const Fault& f = *w.verdict.fault;
  const int64_t step = *w.verdict.failure_step;
  v.named = {f.tensor};
  v.evidence = "step " + std::to_string(step) + ": " + f.describe();
  // Overflow: finite values past 1e30 at the fault or the step before, or magnitudes grown 1,000x.
  const size_t n = w.records.size();
  const double at_fault = n ? magnitude(w.records.back()) : 0, before = n >= 2 ? magnitude(w.records[n - 2]) : 0;
  std::vector<double> early;
  for (size_t i = 0; i + 1 < n && i < 5; ++i) early.push_back(magnitude(w.records[i]));
  std::sort(early.begin(), early.end());
  const double baseline = early.empty() ? 0 : early[early.size() / 2];
  const double peak = std::max(at_fault, before);
  const bool overflow = peak >= 1e30 || (baseline > 0 && peak >= 1e3 * baseline && peak >= 1e4);
  const double output_max = n ? w.records.back().output_max : 0;
  v.data = {{"fault", to_json(f)}, {"step", step}, {"peak_finite", number(peak)},
            {"early_magnitude", number(baseline)}, {"output_max", number(output_max)}};
  if (f.tensor == "input") {
    v.evidence += ": in the data itself";
    fail(v, kRankNanInput, "the training data holds NaN/Inf (step " + std::to_string(step) + ")",
         "find the bad samples in the data pipeline (a division by a zero std, a missing value) and fix or drop them");
  } else if (overflow) {
    v.evidence += "; finite values had reached " + fmt(peak) + " (" + fmt(baseline) + " in the first steps)";
    v.data["kind"] = "overflow";
    fail(v, kRankOverflow,
         "float32 overflow: values grew to " + fmt(peak) + " before step " + std::to_string(step) + " went non-finite",
         "the learning rate is too high or the gradients explode: lower the learning rate, clip the grad norm "
         "(grad_clip), check the init and input scale");
  } else if (f.stage == Stage::kLoss) {
    v.evidence += ", from finite outputs (max |output| " + fmt(output_max) + ")";
    v.data["kind"] = "loss";
    if (probe.shift_ran && !std::isfinite(probe.shifted)) {
      v.data["loss_probe"] = "exp_overflow";
      fail(v, kRankOpMakesNaN,
           "the loss itself makes NaN/Inf from finite outputs: exp overflows in a hand-written softmax (adding 100 to "
           "every output, which a softmax ignores, makes the loss " + fmt(probe.shifted) + ")",
           "subtract each row's max before exp, or use log_softmax / cross_entropy on the logits");
    } else {
      fail(v, kRankOpMakesNaN,
           "the loss itself makes NaN/Inf from finite, moderate outputs: log(0), 0 x log(0) or a division by zero",
           "add an epsilon, or use log_softmax / cross_entropy instead of log(softmax)");
    }
  } else if (f.stage == Stage::kForward) {
    v.evidence += ", from finite, moderate values before it";
    v.data["kind"] = "forward";
    fail(v, kRankOpMakesNaN, "an operation in the forward makes NaN/Inf at " + f.tensor + " from finite, moderate values",
         "look for log(0), a division by zero (a zero std or norm), sqrt of a negative number or exp of a large one "
         "right before that tap");
  } else if (f.stage == Stage::kBackward) {
    v.evidence += ", with a finite loss";
    v.data["kind"] = "backward";
    fail(v, kRankOpMakesNaN, "the backward makes a non-finite gradient (" + f.tensor + ") from a finite loss",
         "an operation whose derivative is infinite at its input: sqrt(0), pow(x, 0.5) at 0, the norm of a zero "
         "vector, acos(1); add an epsilon inside it");
  } else {
    v.data["kind"] = "optimizer_step";
    fail(v, kRankOverflow, "the optimizer step makes " + f.tensor + " non-finite from finite gradients",
         "the update overflows (learning rate x gradient) or divides by a tiny second moment (Adam's eps): lower the "
         "learning rate, raise eps, clip");
  }
  return v;
}

// ---- 10. prediction collapse ----

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

// ---- 11. grad norm range ----

VitalSign grad_norm_range(const Watched& w) {
  VitalSign v = sign("grad_norm_range");
  std::vector<double> norms;
  for (const StepRecord& r : w.records) {
    if (std::isfinite(r.grad_norm)) norms.push_back(r.grad_norm);
  }
  if (norms.empty()) return skipped("grad_norm_range", "no finite gradient norm");
  std::sort(norms.begin(), norms.end());
  const double median = norms[norms.size() / 2];
  v.data = {{"median", median}, {"min", norms.front()}, {"max", norms.back()}};
  v.evidence = "global grad norm: median " + fmt(median) + ", range " + fmt(norms.front()) + " to " + fmt(norms.back()) +
               " (sane: median 0.001 to 10, peak up to 1000)";
  if (median < 1e-3) {
    fail(v, kRankGradRange, "the gradients are tiny (median norm " + fmt(median) + ")",
         "vanishing gradients, dead units or a detached path");
  } else if (median > 10 || norms.back() > 1e3) {
    fail(v, kRankGradRange,
         median > 10 ? "the gradients are large (median norm " + fmt(median) + ")"
                     : "the gradient norm spikes to " + fmt(norms.back()) + " (median " + fmt(median) + ")",
         "lower the learning rate or clip the grad norm (grad_clip)");
  }
  return v;
}

// ---- 12. the monitor's verdict ----

VitalSign monitor_health(const Watched& w) {
  VitalSign v = sign("monitor_health");
  const Verdict& r = w.verdict;
  v.data = to_json(r);
  if (!r.onset_step) {
    v.evidence = "no extreme or non-finite step in " + std::to_string(r.steps_run) + " (the config's health rules)";
    return v;
  }
  const std::string rules = onset_rules_text(r);
  v.named = r.onset_rules;
  v.evidence = "step " + std::to_string(*r.onset_step) + " went " +
               (r.onset_rules.size() == 1 && r.onset_rules[0] == "non_finite" ? "non-finite" : "extreme") + ": " + rules;
  if (r.failure_step) v.evidence += "; non-finite at step " + std::to_string(*r.failure_step);
  const std::string movers = describe_movers(r.movers, *r.onset_step);
  if (!movers.empty()) v.evidence += "; moved first: " + movers;
  fail(v, kRankHealth, "the monitor flags step " + std::to_string(*r.onset_step) + " (" + rules + ")",
       "see `spikehunt run` on this config for the steps around it; the rules are under health.* in the config");
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
    fail(v, kRankEvalRandom,
         "the model trains in eval mode (" + std::to_string(w.not_training.at("model")) + " of " +
             std::to_string(w.records.size()) + " steps): dropout is off and batch norm uses its running statistics",
         "call model.train() before the training steps: an eval() for validation is never undone");
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

// Every training label one class: nothing to learn.
VitalSign label_balance(const Watched& w, int64_t classes) {
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
  if (present == 1) {
    v.named = {"class " + std::to_string(top)};
    fail(v, kRankOneClass,
         "every training label is class " + std::to_string(top) + " (" + std::to_string(total) + " labels)",
         "the labels are lost in the data pipeline: a constant, a wrong column, an overwritten or zero-initialized "
         "label tensor, or a filter that keeps one class");
  }
  return v;
}

// The applied learning rate must not fall to a negligible share of its peak early.
VitalSign lr_schedule(const Watched& w) {
  VitalSign v = sign("lr_schedule");
  if (w.records.size() < 3) return skipped("lr_schedule", "fewer than 3 steps");
  double peak = 0, last = 0;
  int64_t fell = -1;
  const int64_t planned = std::max<int64_t>(w.verdict.planned_steps, int64_t(w.records.size()));
  for (const StepRecord& r : w.records) {
    peak = std::max(peak, r.lr);
    last = r.lr;
    if (fell < 0 && peak > 0 && r.lr < 0.01 * peak) fell = r.step;
  }
  // A warm-up that starts over: a one-step drop back to the first step's learning rate from twice it or more.
  int64_t restart = -1;
  double before = 0;
  const double first = w.records.front().lr;
  for (size_t i = 1; i < w.records.size() && restart < 0 && first > 0; ++i) {
    const double prev = w.records[i - 1].lr, now = w.records[i].lr;
    if (prev >= 2 * first && std::fabs(now - first) <= 0.01 * first) restart = w.records[i].step, before = prev;
  }
  v.data = {{"peak", peak}, {"last", last}, {"fell_below_1pct_at", fell}, {"planned_steps", planned},
            {"restarted_at", restart}};
  v.evidence = "applied learning rate: peak " + fmt(peak) + ", " + fmt(last) + " at step " +
               std::to_string(w.records.back().step) + " of " + std::to_string(planned) + " planned";
  if (restart >= 0) {
    v.named = {"schedule"};
    fail(v, kRankLrSchedule,
         "the learning rate goes back to its starting value at step " + std::to_string(restart) + " (from " +
             fmt(before) + " to " + fmt(first) + ", its value at step " + std::to_string(w.records.front().step) +
             "): the warm-up starts over instead of finishing (the highest it reached: " + fmt(peak) + ")",
         "count the warm-up by the global step, not the step within the epoch");
  } else if (fell >= 0 && double(fell) < 0.25 * double(planned)) {
    v.named = {"schedule"};
    fail(v, kRankLrSchedule,
         "the learning rate falls to under 1% of its peak (" + fmt(peak) + ") by step " + std::to_string(fell) +
             " of " + std::to_string(planned) + " planned",
         "a scheduler stepped per batch where it was meant per epoch, a decay factor or step size off by orders "
         "of magnitude: training stops learning early");
  }
  return v;
}

// The gradient the optimizer applies is the gradient of this step's loss:
// what optimizer_step() leaves in .grad, against what backward computed (the
// monitor's grad norm). A ratio that keeps growing step after step is a sum
// of gradients that is never reset (a missing zero_grad() in the user's own
// step, a running sum); clipping or weight decay keep it flat.
VitalSign grad_accumulation(const Watched& w) {
  VitalSign v = sign("grad_accumulation");
  const size_t n = std::min(w.grads_after_step.size(), w.records.size());
  if (n < 8) return skipped("grad_accumulation", "fewer than 8 steps");
  std::vector<double> ratio;
  for (size_t i = 0; i < n; ++i) {
    const double g = w.records[i].grad_norm;
    ratio.push_back(g > 0 && std::isfinite(g) ? w.grads_after_step[i] / g : 1.0);
  }
  auto mean = [&](size_t from, size_t to) {
    double s = 0;
    for (size_t i = from; i < to; ++i) s += ratio[i];
    return s / double(std::max<size_t>(to - from, 1));
  };
  const double first = ratio[0], last = mean(n - n / 4, n);
  v.data = {{"ratio_first_step", number(first)}, {"ratio_last_quarter", number(last)}};
  v.evidence = "gradient left after optimizer_step() / gradient of the step's loss: x" + fmt(first) +
               " at the first step, x" + fmt(last) + " over the last quarter of " + std::to_string(n) + " steps";
  if (last >= 2 && last >= 1.5 * first) {
    v.named = {"optimizer_step"};
    fail(v, kRankGradAccumulation,
         "the gradients applied keep growing against the loss's own (x" + fmt(first) + " -> x" + fmt(last) +
             "): gradients are summed across steps and never reset",
         "zero the gradients (or the running sum) every step: optimizer.zero_grad() before backward, or clear "
         "the accumulator after it is applied");
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

}  // namespace

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::map<std::string, int64_t> warning_map(const std::vector<WarningCount>& counts) {
  std::map<std::string, int64_t> m;
  for (const WarningCount& w : counts) m[w.message] += w.count;
  return m;
}

}  // namespace

namespace {

// A sign that sees a consequence (cannot memorize, overflow, dead units, no
// gradient, collapse, a flagged step, a grad norm out of range) says so and
// names the probes of the causes it can have: the failed ones (ranked above
// it) and the passed ones (ruled out). Nothing is inferred beyond that.
void annotate_consequences(DoctorReport& report) {
  static const std::map<std::string, std::vector<const char*>> kCauses = {
      {"overfit_one_batch", {"loss_output_mismatch", "loss_shapes", "target_leak", "target_padding", "init_symmetry",
                             "dropout_rate", "shared_modules", "optimizer_coverage", "batchnorm_batch_size",
                             "frozen_output", "input_scale", "loss_scale", "frozen_parameters", "target_scale"}},
      {"non_finite_source", {"loss_scale", "input_scale", "loss_output_mismatch", "init_symmetry", "target_scale"}},
      {"dead_units", {"init_symmetry", "input_scale", "loss_scale"}},
      {"gradient_flow", {"init_symmetry", "loss_scale", "input_scale", "dropout_rate", "shared_modules",
                         "optimizer_coverage", "target_scale", "unregistered_parameters"}},
      {"prediction_collapse", {"batch_composition", "batch_repeats", "batchnorm_momentum", "label_balance", "target_leak", "init_symmetry",
                               "dropout_rate", "batchnorm_batch_size", "loss_output_mismatch", "monitor_health"}},
      {"grad_norm_range", {"loss_scale", "input_scale", "init_symmetry", "target_scale"}},
      {"monitor_health", {"loss_scale", "input_scale", "batch_composition", "loss_output_mismatch", "init_symmetry",
                          "target_scale"}},
  };
  for (VitalSign& v : report.signs) {
    const auto it = kCauses.find(v.name);
    if (v.passed || v.skipped || it == kCauses.end()) continue;
    if (v.name == "non_finite_source" && v.rank != kRankOverflow) continue;  // an operation making NaN is a cause
    if (v.name == "overfit_one_batch" && v.rank != kRankOverfit) continue;   // shifted labels are a cause
    if (v.name == "gradient_flow" && v.rank != kRankGradientFlow) continue;  // a graph that does not reach them is a cause
    std::vector<std::string> failed, passed;
    for (const char* c : it->second) {
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

}  // namespace

DoctorReport run_doctor(const ScenarioFactory& make, const DoctorOptions& o) {
  DoctorReport report;
  static const char* const kAll[] = {"input_scale",       "loss_shapes",       "label_balance",      "input_dependence",
                                     "eval_consistency",  "optimizer_coverage", "heldout_inputs",    "loss_output_mismatch",
                                     "loss_domain",       "lr_schedule",       "grad_accumulation",      "overfit_one_batch",
                                     "frozen_output",     "gradient_flow",     "dead_units",         "non_finite_source",
                                     "prediction_collapse", "grad_norm_range", "monitor_health", "target_leak",
                                     "batch_composition", "init_symmetry",  "batchnorm_batch_size", "loss_scale", "dropout_rate", "target_padding",
                                     "shared_modules", "frozen_parameters", "batch_repeats", "target_scale", "batchnorm_momentum",
                                     "unregistered_parameters", "ignored_class", "heldout_overlap", "optimizer_steps"};
  auto rest_skipped = [&](const std::string& why) {
    for (const char* name : kAll) {
      if (report.find(name) == nullptr) report.signs.push_back(skipped(name, why));
    }
  };
  WarningCounter warnings;  // every LibTorch warning while the doctor runs the code, its bursts' too
  auto timed = [](const auto& probe) {
    const Clock::time_point start = Clock::now();
    VitalSign v = probe();
    v.seconds = seconds_since(start);
    return v;
  };
  VitalSign code = sign("training_code_error");
  report.signs.push_back(code);
  try {
    std::unique_ptr<Scenario> s = guarded("setup", make);
    report.scenario = s->config().scenario;
    const Probe p = probe_scenario(*s, o, &report);
    if (p.batches.empty()) {
      rest_skipped("the scenario has no training batch");
      return report;
    }
    const size_t optimizers = s->optimizers().size();
    if (std::optional<VitalSign> foreign = foreign_optimizer_tensors(*s)) {
      report.signs.front().evidence = "the training code's setup ran without throwing";
      report.signs.push_back(*foreign);
      rest_skipped("an optimizer updates tensors that are not model()'s parameters: nothing can be watched");
      return report;
    }
    parameter_slots(*s);  // the contract: every optimized tensor is a model parameter, none in two optimizers
    report.signs.push_back(timed([&] { return input_scale(p); }));
    report.signs.push_back(timed([&] { return target_leak(*s, p.batches.front()); }));
    report.signs.push_back(timed([&] { return init_symmetry(*s); }));  // before any step changes the parameters
    report.signs.push_back(timed([&] { return frozen_parameters(*s); }));
    report.signs.push_back(timed([&] { return batchnorm_batch_size(*s, p.batches.front()); }));
    report.signs.push_back(timed([&] { return batchnorm_momentum(*s, p.batches.front()); }));
    report.signs.push_back(timed([&] { return dropout_rate(*s, p.batches.front()); }));
    report.signs.push_back(timed([&] { return shared_modules(*s); }));
    report.signs.push_back(timed([&] { return target_padding(*s, p.batches.front()); }));
    report.signs.push_back(timed([&] { return loss_output_mismatch(*s, p.batches.front()); }));
    const torch::Tensor first_out = [&] {
      torch::NoGradGuard no_grad;
      return guarded("forward", [&] { return s->forward(p.batches.front().inputs, Tap()); }).detach();
    }();
    const Clock::time_point probe_start = Clock::now();
    const double scaling = loss_batch_scaling(*s, p.batches.front());
    const LossProbe probe = probe_loss(*s, first_out, p.batches.front());
    const std::string bounded = bounded_logits(*s, first_out, p.batches.front());
    const GraphProbe graph = probe_graph(*s, p.batches.front());
    report.signs.push_back(timed([&] { return unregistered_parameters(graph); }));
    report.signs.push_back(timed([&] { return ignored_class(*s, p.batches.front()); }));
    const double probe_seconds = seconds_since(probe_start);
    s.reset();
    report.signs.push_back(timed([&] { return overfit_one_batch(make, p, o); }));
    const Clock::time_point run_start = Clock::now();
    Watched w = watch(make, p, o);
    report.run_seconds = seconds_since(run_start);
    if (w.verdict.outcome == Outcome::kCrashed) {
      throw TrainingError(w.verdict.crash_stage, w.verdict.message, w.verdict.crash_cause, w.verdict.message);
    }
    VitalSign& m = *std::find_if(report.signs.begin(), report.signs.end(),
                                 [](const VitalSign& x) { return x.name == "loss_output_mismatch"; });
    if (m.passed && w.trained) {
      // At the start, small logits may make softmax twice look like once: check the trained model too.
      VitalSign again = loss_output_mismatch(*w.trained, p.batches.front());
      if (!again.passed) again.evidence += " (after " + std::to_string(w.records.size()) + " steps)", m = again;
    }
    if (m.passed && w.outputs_after.defined()) {
      // Bounded outputs against targets outside their bound, at the start and still after the run (a
      // linear output that merely starts small moves toward its targets).
      const std::string start = output_range_miss(first_out, p.batches.front().targets);
      const std::string end = start.empty() ? std::string() : output_range_miss(w.outputs_after, p.batches.front().targets);
      const bool still_bounded = !bounded.empty() && w.outputs_after.min().item<double>() >= 0 &&
                                 w.outputs_after.max().item<double>() <= 1;
      if (still_bounded) {
        m.evidence += "; " + bounded + " (at step 0, and every output still in (0, 1) after " +
                      std::to_string(w.records.size()) + " steps)";
        m.named = {"output activation"};
        fail(m, kRankLossMismatch, bounded,
             "give the loss the raw scores (logits): cross-entropy applies its own softmax, so drop the sigmoid "
             "(or use it only to read probabilities outside the loss)");
      } else if (!end.empty()) {
        m.evidence += "; at step 0 " + start + "; after " + std::to_string(w.records.size()) + " steps " + end;
        m.named = {"output activation"};
        fail(m, kRankLossMismatch,
             "the targets lie outside the outputs' range: " + end + " (after " + std::to_string(w.records.size()) +
                 " steps; at step 0 too): the output can never reach them",
             "end the model in an activation whose range holds the targets (none for regression), or map the "
             "targets into the output's range (e.g. (y + 1) / 2 for -1/+1 labels)");
      }
    }
    report.signs.push_back(timed([&] {
      std::unique_ptr<Scenario> fresh = guarded("setup", make);  // its probes change batch norm's statistics
      return eval_consistency(*fresh, p, w);
    }));
    report.signs.push_back(timed([&] { return loss_shapes(first_out, p.batches.front(), probe, warning_map(warnings.counts())); }));
    report.signs.push_back(timed([&] { return label_balance(w, p.classes); }));
    report.signs.push_back(timed([&] { return batch_composition(w.records, p.classes); }));
    report.signs.push_back(timed([&] { return batch_repeats(w.records); }));
    report.signs.push_back(timed([&] { return target_scale(p.batches.front(), first_out, w.records, w.verdict); }));
    report.signs.push_back(timed([&] { return input_dependence(w); }));
    report.signs.push_back(timed([&] { return optimizer_coverage(w, optimizers); }));
    report.signs.push_back(timed([&] { return heldout_inputs(p); }));
    report.signs.push_back(timed([&] { return heldout_overlap(p.batches, p.heldout, p.has_heldout); }));
    report.signs.push_back(timed([&] { return optimizer_steps(w.optimizer_state_steps, w.optimizer_state_of, int64_t(w.records.size())); }));
    const bool classification = first_out.dim() == 2 && first_out.size(1) > 1 && class_ids(p.batches.front().targets);
    report.signs.push_back(timed([&] { return loss_domain(w, probe, classification || binary_targets(first_out, p.batches.front().targets)); }));
    report.signs.push_back(loss_scale(scaling, p.batches.front().inputs.size(0), w.records, w.verdict));
    report.signs.push_back(timed([&] { return lr_schedule(w); }));
    report.signs.push_back(timed([&] { return grad_accumulation(w); }));
    report.signs.push_back(timed([&] { return frozen_output(w, p); }));
    report.signs.push_back(timed([&] { return gradient_flow(w, o, graph); }));
    report.signs.push_back(timed([&] { return dead_units(w); }));
    report.signs.push_back(timed([&] { return non_finite_source(w, probe); }));
    const VitalSign* overfit = report.find("overfit_one_batch");
    const bool memorized = overfit && overfit->passed && !overfit->skipped;
    report.signs.push_back(timed([&] { return prediction_collapse(w, p, memorized); }));
    report.signs.push_back(timed([&] { return grad_norm_range(w); }));
    report.signs.push_back(timed([&] { return monitor_health(w); }));
    report.find_mutable("loss_domain")->seconds += probe_seconds;
    annotate_consequences(report);
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
              {"hint", s.hint}, {"named", s.named},   {"data", s.data}, {"seconds", s.seconds}};
    if (!s.passed) j["cause"] = s.cause, j["rank"] = s.rank;
    signs.push_back(j);
  }
  json top = nullptr;
  if (const VitalSign* t = report.top()) top = {{"sign", t->name}, {"cause", t->cause}, {"hint", t->hint}};
  return {{"passed", report.passed()}, {"most_likely_cause", top}, {"signs", signs},
          {"scenario", report.scenario}, {"parameters", report.parameters}, {"optimizers", report.optimizers},
          {"run_seconds", report.run_seconds}};
}

}  // namespace spikehunt
