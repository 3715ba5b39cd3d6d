// doctor/update.cpp — the update itself, read around every optimizer_step()
// of the watched run: whether the parameters change at all while backward
// gives them a gradient, whether the change is what the optimizer's rule
// computes from its learning rate, the gradient and its state (SGD, Adam,
// AdamW: torch.optim's rules), and what in that rule dominates — a weight
// decay larger than the gradient, an eps larger than the gradients' scale, a
// change that rounds away in a low-precision parameter. A fact read here
// outranks the consequences it produces.
#include <algorithm>
#include <cmath>

#include "base/number_format.h"
#include "harness/doctor/signs.h"
#include "scenarios/optimizers.h"

namespace spikehunt::doctor_detail {

namespace {

constexpr int64_t kRuleSteps = 20;  // steps whose change is compared with the optimizer's rule
// The decay's term against the gradient's at which it shapes the update: SGD's usual 5e-4 makes about
// 0.01, AdamW's usual 0.01 to 0.1 about 0.002.
constexpr double kDecayShare = 0.3;

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return NAN;
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

torch::Tensor buffer_of(const std::optional<ParamState>& s, const char* name) {
  if (!s) return {};
  for (const NamedTensor& b : s->buffers) {
    if (b.name == name) return b.tensor.detach().to(torch::kFloat64).clone();
  }
  return {};
}

double step_of(const std::optional<ParamState>& s) {
  if (!s) return 0;
  if (s->step) return double(*s->step);
  if (s->step_tensor.defined()) return s->step_tensor.item<double>();
  return 0;
}

double setting(const std::map<std::string, double>& s, const char* name, double otherwise) {
  const auto it = s.find(name);
  return it == s.end() ? otherwise : it->second;
}

}  // namespace

// One trainable parameter's view of one step.
struct UpdateProbe::Slot {
  std::string name;
  torch::Tensor param;
  torch::optim::Optimizer* optimizer = nullptr;
  size_t group = 0;
  std::string kind;  // "sgd", "adam", "adamw" (lower case), else unknown
  // Read before the step.
  torch::Tensor before, grad, rule, rule_without_grad;
  torch::Tensor after;  // as the last optimizer_step() left it
  bool had_grad = false;
  double decay_term = NAN, grad_term = NAN;
};

UpdateProbe::UpdateProbe(Scenario& s) {
  const std::vector<NamedOptimizer> optimizers = s.optimizers();
  for (const ParamSlot& p : parameter_slots(s)) {
    if (p.optimizer < 0 || !p.tensor.requires_grad()) continue;
    Slot slot;
    slot.name = p.name;
    slot.param = p.tensor;
    slot.optimizer = optimizers[size_t(p.optimizer)].optimizer;
    slot.group = size_t(std::max(p.group, 0));
    slot.kind = lower(optimizer_kind(*slot.optimizer));
    if (p.tensor.scalar_type() == torch::kBFloat16 || p.tensor.scalar_type() == torch::kHalf) {
      read_.low_precision_dtype = p.tensor.scalar_type() == torch::kBFloat16 ? "bfloat16" : "float16";
    }
    slots_.push_back(std::move(slot));
  }
}

UpdateProbe::~UpdateProbe() = default;

// The change one step of the optimizer's rule makes to `theta` with gradient `g` (torch.optim's SGD,
// Adam and AdamW; amsgrad and maximize not modelled): undefined for another optimizer.
torch::Tensor UpdateProbe::rule(const Slot& slot, const torch::Tensor& theta, const torch::Tensor& g,
                                const std::map<std::string, double>& s, const std::optional<ParamState>& state) {
  const double lr = setting(s, "lr", NAN), wd = setting(s, "weight_decay", 0);
  if (!std::isfinite(lr) || setting(s, "maximize", 0) != 0 || setting(s, "amsgrad", 0) != 0) return {};
  if (slot.kind == "sgd") {
    torch::Tensor d = wd != 0 ? g + wd * theta : g;
    const double momentum = setting(s, "momentum", 0), dampening = setting(s, "dampening", 0);
    if (momentum != 0) {
      const torch::Tensor b = buffer_of(state, "momentum_buffer");
      const torch::Tensor buf = b.defined() ? momentum * b + (1 - dampening) * d : d;
      d = setting(s, "nesterov", 0) != 0 ? d + momentum * buf : buf;
    }
    return -lr * d;
  }
  if (slot.kind == "adam" || slot.kind == "adamw") {
    const double b1 = setting(s, "beta1", 0.9), b2 = setting(s, "beta2", 0.999), eps = setting(s, "eps", 1e-8);
    const bool decoupled = slot.kind == "adamw" || setting(s, "decoupled_weight_decay", 0) != 0;
    const torch::Tensor gg = !decoupled && wd != 0 ? g + wd * theta : g;
    torch::Tensor m = buffer_of(state, "exp_avg"), v = buffer_of(state, "exp_avg_sq");
    if (!m.defined()) m = torch::zeros_like(theta);
    if (!v.defined()) v = torch::zeros_like(theta);
    const double t = step_of(state) + 1;
    m = b1 * m + (1 - b1) * gg;
    v = b2 * v + (1 - b2) * gg * gg;
    const torch::Tensor denom = v.sqrt() / std::sqrt(1 - std::pow(b2, t)) + eps;
    torch::Tensor d = -lr / (1 - std::pow(b1, t)) * m / denom;
    if (decoupled && wd != 0) d = d - lr * wd * theta;
    return d;
  }
  return {};
}

void UpdateProbe::before() {
  torch::NoGradGuard no_grad;
  const bool check = read_.steps < kRuleSteps;
  // The parameters as the last optimizer step left them, against what this step's backward ran with: a
  // trainable parameter changes in optimizer_step() and nowhere else.
  bool moved = false;
  for (Slot& slot : slots_) {
    if (!slot.after.defined()) continue;
    if (!torch::equal(slot.param.detach().to(torch::kFloat64), slot.after)) {
      moved = true;
      if (std::find(read_.changed_outside.begin(), read_.changed_outside.end(), slot.name) == read_.changed_outside.end()) {
        read_.changed_outside.push_back(slot.name);
      }
    }
  }
  read_.steps_changed_outside += moved;
  for (Slot& slot : slots_) {
    const torch::Tensor g = slot.param.grad();
    slot.had_grad = g.defined() && g.abs().max().item<double>() > 0;
    const std::map<std::string, double> s = group_settings(*slot.optimizer, slot.group);
    read_.lr_peak = std::max(read_.lr_peak, setting(s, "lr", 0));
    slot.before = slot.param.detach().to(torch::kFloat64).clone();
    slot.rule = slot.rule_without_grad = torch::Tensor();
    slot.decay_term = slot.grad_term = NAN;
    if (!check || !g.defined()) continue;
    slot.grad = g.detach().to(torch::kFloat64).clone();
    const std::optional<ParamState> state = param_state(*slot.optimizer, slot.param);
    slot.rule = rule(slot, slot.before, slot.grad, s, state);
    if (slot.rule.defined()) {
      slot.rule_without_grad = rule(slot, slot.before, torch::zeros_like(slot.grad), s, state);
      read_.optimizer = slot.kind;
      read_.settings = s;
    }
    // The weight decay's term against the gradient's, in the units the rule adds them in.
    const double wd = setting(s, "weight_decay", 0);
    if (wd > 0 && slot.param.dim() >= 2) {
      const double theta = slot.before.norm().item<double>(), grad = slot.grad.norm().item<double>();
      if (slot.kind == "adamw" || setting(s, "decoupled_weight_decay", 0) != 0) {  // decoupled: lr wd theta against Adam's own step, about lr per element
        slot.decay_term = wd * theta;
        slot.grad_term = std::sqrt(double(slot.param.numel()));
        read_.decay_kind = "decoupled";
      } else {
        slot.decay_term = wd * theta;
        slot.grad_term = grad;
        read_.decay_kind = "L2";
      }
      read_.weight_decay = wd;
    }
    // A normalizing optimizer's eps against the gradients' running scale.
    if ((slot.kind == "adam" || slot.kind == "adamw") && slot.param.dim() >= 2 && s.count("eps")) {
      const torch::Tensor v = buffer_of(state, "exp_avg_sq");
      const double scale = v.defined() && step_of(state) > 0
                               ? std::sqrt(v.mean().item<double>() / (1 - std::pow(setting(s, "beta2", 0.999), step_of(state))))
                               : slot.grad.abs().mean().item<double>();
      eps_over_scale_.push_back(scale > 0 ? s.at("eps") / scale : INFINITY);
      read_.eps = s.at("eps");
    }
  }
}

void UpdateProbe::after() {
  torch::NoGradGuard no_grad;
  const bool check = read_.steps < kRuleSteps;
  bool any_grad = false, any_changed = false, any_left = false;
  double applied_sq = 0, rule_sq = 0, miss_grad = 0, miss_nograd = 0, rule_nograd_sq = 0;
  bool rule_all = check;
  for (Slot& slot : slots_) {
    any_grad = any_grad || slot.had_grad;
    const torch::Tensor g = slot.param.grad();
    any_left = any_left || (g.defined() && g.abs().max().item<double>() > 0);
    const torch::Tensor now = slot.param.detach().to(torch::kFloat64);
    const torch::Tensor delta = now - slot.before;
    slot.after = now;
    const bool changed = delta.abs().max().item<double>() > 0;
    any_changed = any_changed || changed;
    if (slot.param.dim() >= 2) {
      const double w = slot.before.norm().item<double>();
      if (w > 0 && check) ratios_.push_back(delta.norm().item<double>() / w);
      if (check && read_.lr_peak > 0 && slot.rule.defined() && (read_.optimizer == "adam" || read_.optimizer == "adamw")) {
        rms_over_lr_.push_back(delta.square().mean().sqrt().item<double>() / setting(read_.settings, "lr", NAN));
      }
      if (std::isfinite(slot.decay_term) && slot.grad_term > 0) decay_ratio_.push_back(slot.decay_term / slot.grad_term);
    }
    if (!check || !slot.rule.defined()) {
      rule_all = rule_all && slot.rule.defined();
      continue;
    }
    applied_sq += delta.square().sum().item<double>();
    rule_sq += slot.rule.square().sum().item<double>();
    rule_nograd_sq += slot.rule_without_grad.square().sum().item<double>();
    miss_grad += (delta - slot.rule).square().sum().item<double>();
    miss_nograd += (delta - slot.rule_without_grad).square().sum().item<double>();
    if (!read_.low_precision_dtype.empty() &&
        (slot.param.scalar_type() == torch::kBFloat16 || slot.param.scalar_type() == torch::kHalf)) {
      const torch::Tensor moved_by_rule = slot.rule.abs() > 0;
      read_.low_precision_elements += moved_by_rule.sum().item<int64_t>();
      read_.rounded_away += (moved_by_rule & (delta == 0)).sum().item<int64_t>();
    }
  }
  ++read_.steps;
  read_.with_gradient += any_grad;
  read_.changed += any_changed;
  read_.cleared += any_grad && !any_left && !any_changed;
  if (rule_all && rule_sq > 0 && read_.rule_checked == 0 && read_.optimizer == "sgd") {
    // SGD's first step is linear in the gradient (no momentum buffer yet): the change over the rule's is the
    // factor the gradient was scaled by inside optimizer_step(), and times backward's norm, the norm it had.
    double g_sq = 0;
    for (const Slot& slot : slots_) {
      if (slot.grad.defined()) g_sq += slot.grad.square().sum().item<double>();
    }
    read_.first_grad_norm = std::sqrt(g_sq);
    read_.first_applied_grad_norm = std::sqrt(applied_sq / rule_sq) * read_.first_grad_norm;
  }
  if (rule_all && rule_sq > 0) {
    ++read_.rule_checked;
    applied_over_rule_.push_back(std::sqrt(applied_sq / rule_sq));
    // The change is the rule's without the gradient (a decay alone, or nothing), and not the rule's with it.
    const double apart = std::sqrt(std::max(rule_sq, rule_nograd_sq));
    // Only where the rule without a gradient moves the parameters (a weight decay): a change of 0 is also "not applied".
    if (rule_nograd_sq > 0.01 * rule_sq && std::sqrt(miss_nograd) <= 0.1 * apart &&
        std::sqrt(miss_grad) >= 0.5 * std::sqrt(rule_sq)) {
      ++read_.as_without_gradient;
    }
  }
}

const UpdateRead& UpdateProbe::read() {
  read_.applied_over_rule = median(applied_over_rule_);
  read_.update_over_weight = median(ratios_);
  read_.decay_over_gradient = median(decay_ratio_);
  read_.rms_update_over_lr = median(rms_over_lr_);
  read_.eps_over_scale = median(eps_over_scale_);
  return read_;
}

// ---- the sign ----

VitalSign applied_update(const UpdateRead& u, const Watched& w) {
  VitalSign v = sign("applied_update");
  if (u.steps == 0) return skipped("applied_update", "no optimizer step ran");
  const std::string n = std::to_string(u.steps);
  v.data = {{"steps", u.steps}, {"steps_with_gradient", u.with_gradient}, {"steps_changed", u.changed},
            {"steps_changed_outside_the_step", u.steps_changed_outside}, {"changed_outside_the_step", u.changed_outside},
            {"steps_gradient_cleared", u.cleared}, {"steps_as_without_gradient", u.as_without_gradient},
            {"rule_checked_steps", u.rule_checked}, {"optimizer", u.optimizer},
            {"applied_over_rule", number(u.applied_over_rule)}, {"lr_peak", u.lr_peak},
            {"update_over_weight", number(u.update_over_weight)}, {"weight_decay", u.weight_decay},
            {"decay_over_gradient", number(u.decay_over_gradient)}, {"eps", number(u.eps)},
            {"rms_update_over_lr", number(u.rms_update_over_lr)}, {"eps_over_gradient_scale", number(u.eps_over_scale)},
            {"low_precision", u.low_precision_dtype}, {"low_precision_elements", u.low_precision_elements},
            {"rounded_away", u.rounded_away}};
  v.evidence = n + " steps: " + std::to_string(u.with_gradient) + " with a gradient after backward, " +
               std::to_string(u.changed) + " changed the parameters; learning rate up to " + fmt(u.lr_peak);
  if (u.rule_checked > 0) {
    v.evidence += "; the change against " + u.optimizer + "'s rule (first " + std::to_string(u.rule_checked) +
                  " steps): x" + fmt(u.applied_over_rule);
  }
  if (std::isfinite(u.update_over_weight)) v.evidence += "; update/weight (median) " + fmt(u.update_over_weight);
  const double share_rounded = u.low_precision_elements ? double(u.rounded_away) / double(u.low_precision_elements) : 0;
  // A step with no change while the gradient was there is optimizer_coverage's ("never changes ... though they
  // have gradients"); this sign says what it reads in addition: the gradient gone by the time the step ended.
  if (u.steps_changed_outside * 2 >= std::max<int64_t>(u.steps - 1, 1) && u.steps > 2) {
    v.part = "model";
    v.named = u.changed_outside;
    fail(v, kRankChangedOutside,
         "the parameters change outside the optimizer's step: at " + std::to_string(u.steps_changed_outside) + " of " +
             std::to_string(u.steps - 1) + " steps, " + list(u.changed_outside, 4) + " were no longer what the last "
             "optimizer_step() left when the next backward ran, so something else (forward(), the data code, a hook) "
             "rewrites them and what the optimizer learned is not kept",
         "change trainable parameters only in the optimizer's step: an initialization (model.apply(init_weights)) or "
         "a copy into them belongs in __init__ or before training, not in forward()");
    return v;
  }
  if (u.changed == 0 && u.with_gradient > 0 && u.lr_peak > 0 && u.cleared * 2 >= u.with_gradient) {
    v.part = "step";
    v.named = {"optimizer_step"};
    fail(v, kRankUpdateCleared,
         "the gradient is cleared between backward and the optimizer's step: in " + std::to_string(u.cleared) +
             " of " + n + " steps the parameters held a gradient after backward, none after optimizer_step(), and "
             "no parameter changed (learning rate " + fmt(u.lr_peak) + ")",
         "call optimizer.zero_grad() before backward() (or after step()), never between backward() and step()");
    return v;
  }
  if (u.changed == 0 && u.with_gradient > 0 && u.lr_peak > 0) {
    // The same fact optimizer_coverage states per parameter ("never changes ... though they have gradients"),
    // ranked just below it.
    v.part = "step";
    v.named = {"optimizer_step"};
    fail(v, kRankUpdateNotApplied,
         "the update is not applied: in " + std::to_string(u.with_gradient) + " of " + n + " steps backward gave the "
             "parameters a gradient and the learning rate was " + fmt(u.lr_peak) + ", yet no trainable parameter "
             "changed, and the gradient was still there after optimizer_step()",
         "optimizer_step() must change the parameters in place: call optimizer.step(), or write a hand-written "
         "update into the tensor (p.add_(...) under torch.no_grad(), not p = p - lr * p.grad, which makes a new "
         "tensor)");
    return v;
  }
  if (u.as_without_gradient * 2 > std::max<int64_t>(u.rule_checked, 1) && u.rule_checked >= 3) {
    v.part = "step";
    v.named = {"optimizer_step"};
    fail(v, kRankUpdateCleared,
         "the optimizer steps without the gradient: in " + std::to_string(u.as_without_gradient) + " of " +
             std::to_string(u.rule_checked) + " steps the change is what " + u.optimizer + "'s rule makes from a zero "
             "gradient (its weight decay alone), not from the gradient backward produced",
         "call optimizer.zero_grad() before backward() (or after step()), never between backward() and step()");
    return v;
  }
  if (!u.low_precision_dtype.empty() && u.low_precision_elements > 0 && share_rounded >= 0.5) {
    v.part = "step";
    v.named = {u.low_precision_dtype};
    fail(v, kRankCoverage,
         "the updates round away in " + u.low_precision_dtype + ": of the parameter elements " + u.optimizer +
             "'s rule moves in the first " + std::to_string(u.rule_checked) + " steps, " + percent(share_rounded) +
             " stay exactly as they were (a change below half a " + u.low_precision_dtype + " step of the weight "
             "is lost, so training stalls)",
         "keep float32 master weights (torch.autocast for the forward with float32 parameters, or an optimizer "
         "with master weights), or a learning rate large enough for the precision");
    return v;
  }
  if (std::isfinite(u.decay_over_gradient) && u.decay_over_gradient >= kDecayShare) {
    v.part = "optimizer";
    v.named = {"weight_decay"};
    fail(v, kRankCoverage,
         "the weight decay rivals the gradient in the update: its term (weight_decay " + fmt(u.weight_decay) +
             " x the weight) is " + fmt(u.decay_over_gradient) + "x the gradient's (" + u.decay_kind + ", median over "
             "the weights and the first " + std::to_string(u.rule_checked) + " steps, where a usual decay makes it "
             "about 0.01): the weights are pulled toward 0 about as hard as the loss moves them",
         "use a weight decay of the usual size (1e-4 to 5e-4 for SGD's L2, 0.01 to 0.1 for AdamW's decoupled one); "
         "a factor 1000 off is an exponent typo");
    return v;
  }
  if (std::isfinite(u.rms_update_over_lr) && u.rms_update_over_lr < 0.05 && std::isfinite(u.eps_over_scale) &&
      u.eps_over_scale >= 1) {
    v.part = "optimizer";
    v.named = {"eps"};
    fail(v, kRankCoverage,
         "the optimizer's eps (" + fmt(u.eps) + ") is " + fmt(u.eps_over_scale) + "x the gradients' running scale, "
             "so it sets Adam's denominator: each update moves a weight by " + fmt(u.rms_update_over_lr) +
             " of the learning rate (rms), where Adam's normalized step moves it by about the learning rate",
         "use eps of the usual size (1e-8 to 1e-6); an eps of 0.1 or 1 (TensorFlow's advice for one Inception "
         "model) turns Adam into SGD with a tiny learning rate");
    return v;
  }
  if (u.rule_checked >= 5 && std::isfinite(u.applied_over_rule) && u.applied_over_rule <= 0.05 && u.changed > 0) {
    v.part = "step";
    v.named = {"optimizer_step"};
    std::string how;
    if (std::isfinite(u.first_applied_grad_norm) && u.first_grad_norm > 0) {
      how = "; its first step is SGD's for a gradient of global norm " + fmt(u.first_applied_grad_norm) +
            " where backward's had norm " + fmt(u.first_grad_norm) + ", as clipping the gradient to a max norm of " +
            fmt(u.first_applied_grad_norm) + " makes it";
    }
    fail(v, kRankCoverage,
         "each step changes the parameters by only " + fmt(u.applied_over_rule) + "x what one step of " + u.optimizer +
             "'s rule computes from the gradient backward produced (median of the first " +
             std::to_string(u.rule_checked) + " steps): optimizer_step() shrinks the update before applying it" + how,
         "look at what optimizer_step() does to the gradients before step(): gradient clipping with a max norm far "
         "below the gradients' (clip_grad_norm_'s max_norm is a norm, not a learning rate), or a scaling of them");
    return v;
  }
  if (u.rule_checked >= 5 && std::isfinite(u.applied_over_rule) && u.applied_over_rule >= 1.8) {
    v.part = "step";
    v.named = {"optimizer_step"};
    fail(v, kRankUpdateScale,
         "each step changes the parameters by " + fmt(u.applied_over_rule) + "x what one step of " + u.optimizer +
             "'s rule computes from the gradient backward produced (median of the first " +
             std::to_string(u.rule_checked) + " steps): optimizer_step() enlarges the update",
         "step each optimizer once per batch, with this step's gradient (a second step, or a gradient replaced by a "
         "running sum, does this)");
    return v;
  }
  return v;
}

}  // namespace spikehunt::doctor_detail
