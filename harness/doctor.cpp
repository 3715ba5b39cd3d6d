#include "harness/doctor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "harness/burst.h"
#include "harness/monitor.h"
#include "harness/report.h"

namespace spikehunt {

using json = nlohmann::json;

bool DoctorReport::passed() const {
  return std::all_of(signs.begin(), signs.end(), [](const VitalSign& s) { return s.passed; });
}

const VitalSign* DoctorReport::find(const std::string& name) const {
  for (const VitalSign& s : signs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

namespace {

// ---- helpers ----

struct Prediction {
  int64_t label = 0, predicted = 0;
  double confidence = 0;  // softmax probability of the predicted class
};

std::vector<Prediction> predict(Scenario& s, const std::vector<Batch>& batches) {
  torch::NoGradGuard no_grad;
  std::vector<Prediction> out;
  for (const Batch& b : batches) {
    const torch::Tensor probs = torch::softmax(s.forward(b.inputs, Tap()).to(torch::kFloat64), 1).to(torch::kCPU);
    const auto [conf, pred] = probs.max(1);
    const torch::Tensor y = b.targets.to(torch::kCPU).to(torch::kInt64);
    for (int64_t i = 0; i < y.size(0); ++i) {
      out.push_back({y[i].item<int64_t>(), pred[i].item<int64_t>(), conf[i].item<double>()});
    }
  }
  return out;
}

std::string layer_of(const std::string& parameter) {
  const size_t dot = parameter.rfind('.');
  return dot == std::string::npos ? parameter : parameter.substr(0, dot);
}

std::vector<NamedTensor> weights_of(Scenario& s) {
  std::vector<NamedTensor> out;
  for (const NamedTensor& p : named_parameters(s.model())) {
    if (p.tensor.dim() >= 2) out.push_back(p);
  }
  return out;
}

void disable_weight_decay(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    torch::optim::OptimizerOptions& o = group.options();
    if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&o)) sgd->weight_decay(0);
    if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&o)) adam->weight_decay(0);
    if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&o)) adamw->weight_decay(0);
  }
}

std::string pct(double x) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * x);
  return buf;
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

// ---- 1. overfit one batch ----

VitalSign overfit_one_batch(const ScenarioFactory& make, const DoctorOptions& o) {
  VitalSign v;
  v.name = "overfit_one_batch";
  std::unique_ptr<Scenario> s = make();
  disable_weight_decay(s->optimizer());
  s->model().eval();  // no dropout
  const std::optional<Batch> batch = s->next_batch();
  if (!batch) {
    v.skipped = true;
    v.evidence = "the scenario has no training batch";
    return v;
  }
  double first = NAN, last = NAN;
  int64_t steps = 0;
  bool converged = false, diverged = false;
  for (; steps <= o.overfit_steps; ++steps) {
    s->optimizer().zero_grad();
    const torch::Tensor loss = s->loss(s->forward(batch->inputs, Tap()), batch->targets);
    last = loss.item<double>();
    if (steps == 0) first = last;
    if (!std::isfinite(last)) {
      diverged = true;
      break;
    }
    if (last <= o.overfit_loss) {
      converged = true;
      break;
    }
    if (steps == o.overfit_steps) break;
    loss.backward();
    if (s->grad_clip() > 0) clip_grad_norm(s->model().parameters(), s->grad_clip());
    s->optimizer_step();
  }
  v.data = {{"first_loss", number(first)}, {"final_loss", number(last)}, {"steps", steps},
            {"threshold", o.overfit_loss}, {"batch_size", batch->targets.size(0)}};
  v.evidence = "one batch of " + std::to_string(batch->targets.size(0)) + ": loss " + fmt(first) + " -> " + fmt(last) +
               (converged ? " in " + std::to_string(steps) + " steps" : " after " + std::to_string(steps) + " steps") +
               " (threshold " + fmt(o.overfit_loss) + ")";
  if (diverged) {
    v.passed = false;
    v.hint = "the loss went non-finite while memorizing one batch: lower the learning rate or check the loss";
    return v;
  }
  if (!converged) {
    v.passed = false;
    v.hint = "the model cannot memorize one batch: check that every parameter reaches the optimizer, that the "
             "loss matches the outputs, and the learning rate";
    return v;
  }
  // Now compare its predictions with held-out labels.
  const std::vector<Batch> heldout = s->heldout(o.heldout_samples);
  if (heldout.empty()) return v;
  int64_t present = 0;
  const std::map<int64_t, int64_t> shifted = shifted_classes(predict(*s, heldout), s->num_classes(), &present);
  v.data["shifted_classes"] = shifted.size();
  if (present > 0 && double(shifted.size()) >= 0.7 * double(present)) {
    v.passed = false;
    std::string map;
    for (const auto& [from, to] : shifted) {
      map += (map.empty() ? "" : ", ") + std::to_string(from) + "->" + std::to_string(to);
      v.named.push_back("class " + std::to_string(from) + " -> " + std::to_string(to));
    }
    v.evidence += "; but held-out images of " + std::to_string(shifted.size()) + " of " + std::to_string(present) +
                  " classes are confidently predicted as another class: " + map;
    v.hint = "the model fits its labels, but they disagree with held-out labels the same way every time: "
             "labels look shifted or permuted (an off-by-one, a class order mix-up)";
  }
  return v;
}

// ---- the run the other signs watch ----

struct Run {
  std::vector<StepRecord> records;
  std::vector<std::string> weights;               // weight parameter names
  std::vector<double> mean_abs_grad;              // per weight, over the flow steps
  std::vector<bool> any_grad;                     // per weight: some nonzero gradient seen
  std::map<std::string, double> zero_first, zero_last;  // hidden tap -> share of exact zeros
  double logits_moved = 0, logits_scale = 0;      // on a fixed input, start to end
  std::vector<Prediction> heldout;
  bool has_heldout = false;
  int64_t classes = 10;
  std::string output_layer;
  Verdict verdict;
};

class Tee : public TapSink {
 public:
  Tee(Monitor& m, std::map<std::string, double>& zeros) : m_(m), zeros_(zeros) {}
  void on_tap(const char* name, const torch::Tensor& t) override {
    m_.on_tap(name, t);
    const std::string n = name;
    if (n.size() >= 7 && n.compare(n.size() - 7, 7, "_logits") == 0) return;  // outputs are not units
    torch::NoGradGuard no_grad;
    zeros_[n] = t.numel() ? (t.detach() == 0).sum().item<double>() / double(t.numel()) : 0.0;
  }

 private:
  Monitor& m_;
  std::map<std::string, double>& zeros_;
};

Run watch(const ScenarioFactory& make, const DoctorOptions& o) {
  Run run;
  std::unique_ptr<Scenario> s = make();
  run.classes = s->num_classes();
  for (const NamedTensor& w : weights_of(*s)) run.weights.push_back(w.name);
  if (!run.weights.empty()) run.output_layer = layer_of(run.weights.back());
  run.mean_abs_grad.assign(run.weights.size(), 0.0);
  run.any_grad.assign(run.weights.size(), false);
  const std::vector<NamedTensor> weights = weights_of(*s);
  Monitor monitor(*s, o.rules);
  std::optional<Batch> fixed = s->next_batch();
  if (!fixed) return run;
  torch::Tensor before;
  {
    torch::NoGradGuard no_grad;
    before = s->forward(fixed->inputs, Tap()).detach().clone();
  }
  std::optional<Batch> batch = fixed;
  for (int64_t step = 0; step < o.steps && batch; ++step) {
    std::map<std::string, double> zeros;
    Tee tee(monitor, zeros);
    monitor.begin_step(*batch);
    s->optimizer().zero_grad();
    const torch::Tensor loss = s->loss(s->forward(batch->inputs, Tap(&tee)), batch->targets);
    monitor.after_loss(loss);
    loss.backward();
    monitor.after_backward();
    if (step < o.flow_steps) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < weights.size(); ++i) {
        const torch::Tensor& g = weights[i].tensor.grad();
        if (!g.defined()) continue;
        const double m = g.abs().mean().item<double>();
        if (!std::isfinite(m)) continue;  // the failing step: the non-finite sign tells that story
        run.mean_abs_grad[i] += m / double(o.flow_steps);
        run.any_grad[i] = run.any_grad[i] || m != 0;
      }
    }
    if (s->grad_clip() > 0) clip_grad_norm(s->model().parameters(), s->grad_clip());
    s->optimizer_step();
    StepRecord r = monitor.finish_step();
    if (step == 0) run.zero_first = zeros;
    run.zero_last = zeros;
    const bool bad = r.health == Health::kNonFinite;
    if (bad) {
      run.verdict.outcome = Outcome::kNonFinite;
      run.verdict.fault = r.fault;
      run.verdict.failure_step = r.step;
    }
    run.records.push_back(std::move(r));
    if (bad) break;
    batch = s->next_batch();
  }
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor after = s->forward(fixed->inputs, Tap()).detach();
    run.logits_moved = (after - before).abs().max().item<double>();
    run.logits_scale = before.abs().max().item<double>();
  }
  const std::vector<Batch> heldout = s->heldout(o.heldout_samples);
  run.has_heldout = !heldout.empty();
  if (run.has_heldout && !run.verdict.failure_step) run.heldout = predict(*s, heldout);
  return run;
}

// ---- 2. frozen output ----

VitalSign frozen_output(const Run& run) {
  VitalSign v;
  v.name = "frozen_output";
  if (run.records.empty()) {
    v.skipped = true;
    v.evidence = "no training step ran";
    return v;
  }
  const double log_classes = std::log(double(run.classes));
  double tail = 0;
  int n = 0;
  for (size_t i = run.records.size() > 10 ? run.records.size() - 10 : 0; i < run.records.size(); ++i) {
    if (std::isfinite(run.records[i].loss)) tail += run.records[i].loss, ++n;
  }
  tail = n ? tail / n : NAN;
  const bool still = run.logits_moved <= 1e-7 * (1 + run.logits_scale);
  const bool at_chance = std::fabs(tail - log_classes) < 0.25;
  v.data = {{"loss_first", number(run.records.front().loss)}, {"loss_last", number(tail)},
            {"log_classes", log_classes}, {"logits_moved", number(run.logits_moved)}};
  v.evidence = "loss " + fmt(run.records.front().loss) + " -> " + fmt(tail) + " (log " + std::to_string(run.classes) +
               " = " + fmt(log_classes) + "); logits on a fixed input moved by " + fmt(run.logits_moved) + " in " +
               std::to_string(run.records.size()) + " steps";
  if (still && at_chance) {
    v.passed = false;
    v.named = {run.output_layer};
    v.evidence += ": frozen";
    v.hint = "the output layer (" + run.output_layer + ") gets no gradient: look for a detach(), a no_grad block or a "
             "frozen requires_grad between the logits and the loss";
  }
  return v;
}

// ---- 3. gradient flow ----

VitalSign gradient_flow(const Run& run, const DoctorOptions& o) {
  VitalSign v;
  v.name = "gradient_flow";
  if (run.records.empty() || run.weights.empty()) {
    v.skipped = true;
    v.evidence = "no weights or no step";
    return v;
  }
  std::vector<std::string> zero;
  double largest = 0, smallest = INFINITY;
  json layers = json::object();
  std::string table;
  for (size_t i = 0; i < run.weights.size(); ++i) {
    const std::string layer = layer_of(run.weights[i]);
    layers[layer] = number(run.mean_abs_grad[i]);
    table += (table.empty() ? "" : ", ") + layer + " " + fmt(run.mean_abs_grad[i]);
    if (!run.any_grad[i]) {
      zero.push_back(layer);
      continue;
    }
    largest = std::max(largest, run.mean_abs_grad[i]);
    smallest = std::min(smallest, run.mean_abs_grad[i]);
  }
  const double spread = std::isfinite(smallest) && smallest > 0 ? largest / smallest : 1.0;
  v.data = {{"mean_abs_grad", layers}, {"spread", number(spread)}};
  v.evidence = "mean |grad| over the first " + std::to_string(std::min<int64_t>(o.flow_steps, run.records.size())) +
               " steps: " + table + " (spread " + fmt(spread) + "x)";
  // Exploding: a layer norm above 100, or the global norm climbing 5 steps running by 10x in all.
  std::set<std::string> exploding;
  for (const StepRecord& r : run.records) {
    for (const LayerStats& l : r.layers) {
      if (l.grad_norm > 100) exploding.insert(layer_of(l.name));
    }
  }
  bool climbing = false;
  for (size_t i = 5; i < run.records.size() && !climbing; ++i) {
    bool up = true;
    for (size_t k = i - 4; k <= i; ++k) up = up && run.records[k].grad_norm > run.records[k - 1].grad_norm;
    climbing = up && run.records[i].grad_norm >= 10 * run.records[i - 5].grad_norm && run.records[i].grad_norm > 1;
  }
  if (!zero.empty()) {
    v.passed = false;
    v.named = zero;
    std::string list;
    for (const std::string& z : zero) list += (list.empty() ? "" : ", ") + z;
    v.evidence += "; exactly zero gradient: " + list;
    v.hint = "these layers get no gradient: a detach(), a missing path from them to the loss, or units that never fire";
  } else if (spread >= 1000) {
    v.passed = false;
    for (size_t i = 0; i < run.weights.size(); ++i) {
      if (run.mean_abs_grad[i] * 1000 <= largest) v.named.push_back(layer_of(run.weights[i]));
    }
    v.hint = "vanishing gradients: the named layers get 1,000x less than the best-fed one; use ReLU/GELU instead of "
             "saturating activations, a better init, normalization or residual connections";
  } else if (!exploding.empty() || climbing) {
    v.passed = false;
    v.named.assign(exploding.begin(), exploding.end());
    std::string list;
    for (const std::string& e : exploding) list += (list.empty() ? "" : ", ") + e;
    v.evidence += exploding.empty() ? "; the global grad norm climbed 5 steps running, 10x in all"
                                    : "; grad norm above 100 in " + list;
    v.hint = "exploding gradients: clip the global grad norm (grad_clip), lower the learning rate, or fix the init scale";
  }
  return v;
}

// ---- 4. dead units ----

VitalSign dead_units(const Run& run) {
  VitalSign v;
  v.name = "dead_units";
  if (run.zero_first.empty()) {
    v.skipped = true;
    v.evidence = "no hidden activation taps";
    return v;
  }
  std::string table;
  for (const auto& [tap, first] : run.zero_first) {
    const double last = run.zero_last.count(tap) ? run.zero_last.at(tap) : first;
    v.data[tap] = {{"zero_first", first}, {"zero_last", last}};
    table += (table.empty() ? "" : ", ") + tap + " " + pct(first) + " -> " + pct(last);
    if (std::max(first, last) >= 0.7) v.named.push_back(tap);
  }
  v.evidence = "share of exactly-zero activations, first step -> last: " + table + " (dead at 70%)";
  if (!v.named.empty()) {
    v.passed = false;
    v.hint = "units that never fire pass no gradient: check the bias init (large negative values), lower the learning "
             "rate, or use LeakyReLU";
  }
  return v;
}

// ---- 5. non-finite source ----

VitalSign non_finite_source(const Run& run) {
  VitalSign v;
  v.name = "non_finite_source";
  if (!run.verdict.fault) {
    v.evidence = "every step of " + std::to_string(run.records.size()) + " stayed finite";
    return v;
  }
  const Fault& f = *run.verdict.fault;
  v.passed = false;
  v.named = {f.tensor};
  v.data = {{"fault", to_json(f)}, {"step", *run.verdict.failure_step}};
  v.evidence = "step " + std::to_string(*run.verdict.failure_step) + ": " + f.describe();
  if (f.stage == Stage::kLoss) {
    v.evidence += ", with every logit finite";
    v.hint = "the loss itself makes the non-finite value (log(0), 0 x log(0)): add an epsilon, or use log_softmax / "
             "cross_entropy instead of log(softmax)";
    return v;
  }
  const size_t n = run.records.size();
  bool climbed = n >= 3;
  for (size_t i = n >= 3 ? n - 3 : 0; climbed && i + 2 < n; ++i) {
    climbed = run.records[i + 1].grad_norm > run.records[i].grad_norm;
  }
  v.hint = climbed ? "the gradients climbed before the failure: an explosion; clip the global grad norm, lower the "
                     "learning rate"
                   : "it appeared in the " + std::string(to_string(f.stage)) + " stage without a climb: check that "
                     "stage's arithmetic (divisions, sqrt, exp)";
  return v;
}

// ---- 6. prediction collapse ----

VitalSign prediction_collapse(const Run& run) {
  VitalSign v;
  v.name = "prediction_collapse";
  if (!run.has_heldout || run.heldout.empty()) {
    v.skipped = true;
    v.evidence = run.has_heldout ? "the run went non-finite: nothing to predict with" : "the scenario has no held-out data";
    return v;
  }
  const int64_t c = run.classes;
  std::vector<std::vector<int64_t>> confusion(size_t(c), std::vector<int64_t>(size_t(c), 0));
  std::vector<int64_t> label_count(size_t(c), 0), predicted_count(size_t(c), 0);
  int64_t correct = 0, n = 0;
  for (const Prediction& p : run.heldout) {
    if (p.label < 0 || p.label >= c || p.predicted < 0 || p.predicted >= c) continue;
    ++confusion[p.label][p.predicted];
    ++label_count[p.label];
    ++predicted_count[p.predicted];
    correct += p.label == p.predicted;
    ++n;
  }
  const int64_t majority = std::max_element(label_count.begin(), label_count.end()) - label_count.begin();
  const int64_t top = std::max_element(predicted_count.begin(), predicted_count.end()) - predicted_count.begin();
  const double accuracy = double(correct) / double(n), baseline = double(label_count[majority]) / double(n);
  const double top_share = double(predicted_count[top]) / double(n);
  v.data = {{"accuracy", accuracy}, {"majority_baseline", baseline}, {"majority_class", majority},
            {"most_predicted_class", top}, {"most_predicted_share", top_share}, {"confusion", confusion}};
  std::string matrix = "\n      confusion (rows: label, columns: prediction):";
  for (int64_t i = 0; i < c; ++i) {
    if (label_count[i] == 0) continue;
    matrix += "\n      " + std::to_string(i) + ":";
    for (int64_t k = 0; k < c; ++k) {
      char cell[16];
      std::snprintf(cell, sizeof cell, " %4lld", static_cast<long long>(confusion[i][k]));
      matrix += cell;
    }
  }
  v.evidence = "held-out accuracy " + pct(accuracy) + " over " + std::to_string(n) + " images; always predicting the "
               "majority class " + std::to_string(majority) + " scores " + pct(baseline) + "; class " +
               std::to_string(top) + " gets " + pct(top_share) + " of the predictions" + matrix;
  if (accuracy <= baseline + 0.02) {
    v.passed = false;
    v.named = {"class " + std::to_string(top)};
    v.hint = top_share >= 0.9 ? "predictions collapsed to one class: the model learned the class frequencies, not "
                                "the images; rebalance the data or weight the loss"
                              : "the model is no better than the majority baseline: check the labels and that the "
                                "inputs reach the model";
  }
  return v;
}

// ---- 7. grad norm range ----

VitalSign grad_norm_range(const Run& run) {
  VitalSign v;
  v.name = "grad_norm_range";
  std::vector<double> norms;
  for (const StepRecord& r : run.records) {
    if (std::isfinite(r.grad_norm)) norms.push_back(r.grad_norm);
  }
  if (norms.empty()) {
    v.skipped = true;
    v.evidence = "no finite gradient norm";
    return v;
  }
  std::sort(norms.begin(), norms.end());
  const double median = norms[norms.size() / 2];
  v.data = {{"median", median}, {"min", norms.front()}, {"max", norms.back()}};
  v.evidence = "global grad norm: median " + fmt(median) + ", range " + fmt(norms.front()) + " to " + fmt(norms.back()) +
               " (sane: 0.001 to 10)";
  if (median < 1e-3 || median > 10) {
    v.passed = false;
    v.hint = median < 1e-3 ? "gradients are tiny: vanishing, dead units or a detached path"
                           : "gradients are large: lower the learning rate or clip";
  }
  return v;
}

}  // namespace

DoctorReport run_doctor(const ScenarioFactory& make, const DoctorOptions& o) {
  DoctorReport report;
  report.signs.push_back(overfit_one_batch(make, o));
  const Run run = watch(make, o);
  report.signs.push_back(frozen_output(run));
  report.signs.push_back(gradient_flow(run, o));
  report.signs.push_back(dead_units(run));
  report.signs.push_back(non_finite_source(run));
  report.signs.push_back(prediction_collapse(run));
  report.signs.push_back(grad_norm_range(run));
  return report;
}

std::string doctor_text(const DoctorReport& report) {
  std::string out;
  int failed = 0, skipped = 0;
  for (const VitalSign& s : report.signs) {
    char head[64];
    std::snprintf(head, sizeof head, "  %-4s  %-20s ", s.skipped ? "skip" : s.passed ? "pass" : "FAIL", s.name.c_str());
    out += head + s.evidence + "\n";
    if (!s.passed) {
      ++failed;
      out += "        hint: " + s.hint + "\n";
    }
    skipped += s.skipped;
  }
  out += std::to_string(report.signs.size()) + " vital signs: " + std::to_string(report.signs.size() - failed - skipped) +
         " passed, " + std::to_string(failed) + " failed, " + std::to_string(skipped) + " skipped\n";
  return out;
}

json doctor_json(const DoctorReport& report) {
  json signs = json::array();
  for (const VitalSign& s : report.signs) {
    signs.push_back({{"name", s.name}, {"passed", s.passed}, {"skipped", s.skipped}, {"evidence", s.evidence},
                     {"hint", s.hint}, {"named", s.named}, {"data", s.data}});
  }
  return {{"passed", report.passed()}, {"signs", signs}};
}

}  // namespace spikehunt
