// doctor/watch.cpp — the run the run-based signs read (Watched): a short
// training run of a fresh scenario under the monitor, with the units of
// every hidden tap probed at its start and end (UnitProbe), the outputs on
// the fixed batch, the predictions on held-out data and what the optimizers did.
#include <algorithm>
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
#include "scenarios/optimizers.h"

namespace spikehunt::doctor_detail {

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

  using Layer = UnitLayer;

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
  w.skill_start = heldout_skill(*s, p.heldout, /*eval_mode=*/true);
  UpdateProbe update(*s);
  for (const NamedOptimizer& opt : s->optimizers()) {
    for (size_t g = 0; g < opt.optimizer->param_groups().size(); ++g) {
      const std::map<std::string, double> set = group_settings(*opt.optimizer, g);
      const auto initial = set.find("initial_lr");
      w.nominal_lr = std::max(w.nominal_lr, initial != set.end() ? initial->second
                                                                  : group_lr(opt.optimizer->param_groups()[g]));
    }
  }
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
      const torch::Tensor g = slots[i].tensor.grad();
      if (g.defined()) gsq += g.to(torch::kFloat64).square().sum().item<double>();
    }
    w.grads_after_step.push_back(std::sqrt(gsq));
  };
  // Whether each parameter had a gradient, read where the optimizer steps with it (after backward and
  // clipping, before optimizer_step(), which may clear it): one its step can register in float32, the
  // learning rate x max |g| at least 1e-6 of max |p|.
  double lr_now = 0;
  options.before_optimizer_step = [&] {
    torch::NoGradGuard no_grad;
    lr_now = 0;
    for (const NamedOptimizer& opt : s->optimizers()) {
      for (auto& group : opt.optimizer->param_groups()) lr_now = std::max(lr_now, group_lr(group));
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      const torch::Tensor g = slots[i].tensor.grad();
      if (!g.defined() || w.params[i].had_grad) continue;
      const double gmax = g.abs().max().item<double>(), pmax = slots[i].tensor.detach().abs().max().item<double>();
      w.params[i].had_grad = gmax > 0 && lr_now * gmax >= 1e-6 * pmax;
    }
    update.before();
  };
  options.after_optimizer_step = [&] { update.after(); };
  w.verdict = run_burst(*s, rules, options).verdict;
  w.update = update.read();
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
    w.skill_end = heldout_skill(*s, p.heldout, /*eval_mode=*/true);
    w.skill_end_train = heldout_skill(*s, p.heldout, /*eval_mode=*/false);
    w.trained = std::move(s);
  }
  return w;
}

}  // namespace spikehunt::doctor_detail
