// health_rules.cpp — the registry of health rules: one row a rule, in the
// order the judge fires them (health_rules.h says what each column means).
#include "scenarios/health_rules.h"

#include <cstring>

namespace spikehunt {

namespace {

using H = HealthRules;
using K = RuleKind;
using Q = RuleQuantity;

constexpr const char* kOffHint = "0 disables this rule";
constexpr const char* kNoFloorHint = "0: no floor";

HealthField rule_limit(const char* name, double H::*field) { return {name, field, nullptr, kOffHint}; }
HealthField rule_floor(const char* name, double H::*field, const char* hint = kNoFloorHint) {
  return {name, field, nullptr, hint};
}
HealthField no_field() { return {nullptr}; }

const HealthField kSpikeZ{"spike_z", &H::spike_z, nullptr, "0 disables the spike rules"};
const HealthField kGrowthRatio{"growth_ratio", &H::growth_ratio, nullptr,
                               "0 disables the growth rules; 1.4 is the default"};
const HealthField kSigma{"sigma", &H::sigma, nullptr, "0 disables the sigma rules; OLMo uses 7"};

// The settings the kinds share that no row names: windows and step counts.
const HealthField kWindow{"window", nullptr, &H::window, "", 2, 10000};
const HealthField kGrowthSteps{"growth_steps", nullptr, &H::growth_steps, "", 1, 1000};
const HealthField kChanceAfter{"chance_loss_after", nullptr, &H::chance_loss_after, "", 0, 1000000000};
const HealthField kSigmaWindow{"sigma_window", nullptr, &H::sigma_window, "", 2, 100000};

}  // namespace

const std::vector<HealthRuleSpec>& health_rules() {
  static const std::vector<HealthRuleSpec> kRules = {
      {"non_finite", K::kNonFinite, Q::kNone, no_field(), no_field(), "any statistic of the step is NaN or ±Inf"},
      {"loss_limit", K::kLimit, Q::kLoss, rule_limit("loss_limit", &H::loss_limit), no_field(), "loss > limit"},
      {"grad_norm_limit", K::kLimit, Q::kGradNorm, rule_limit("grad_norm_limit", &H::grad_norm_limit), no_field(),
       "global L2 grad norm (before clipping) > limit"},
      {"max_grad_limit", K::kLimit, Q::kGradMax, rule_limit("max_grad_limit", &H::max_grad_limit), no_field(),
       "largest |grad| element > limit"},
      {"input_limit", K::kLimit, Q::kInputMax, rule_limit("input_limit", &H::input_limit), no_field(),
       "largest |input| of the batch > limit (a corrupt or unscaled batch); off by default"},
      {"activation_limit", K::kTensor, Q::kNone, rule_limit("activation_limit", &H::activation_limit), no_field(),
       "largest |activation| at any tap > limit"},
      {"optimizer_state_limit", K::kLimit, Q::kStateMax, rule_limit("optimizer_state_limit", &H::optimizer_state_limit),
       no_field(), "largest |momentum| or |Adam moment| > limit"},
      {"attention_logit_limit", K::kTensor, Q::kNone, rule_limit("attention_logit_limit", &H::attention_logit_limit),
       no_field(), "largest |attention logit| over taps named *attn_logits > limit"},
      {"logit_z_limit", K::kTensor, Q::kNone, rule_limit("logit_z_limit", &H::logit_z_limit), no_field(),
       "largest |log Z| of the output logits over taps named *_z > limit"},
      {"param_jump_limit", K::kTensor, Q::kNone, rule_limit("param_jump_limit", &H::param_jump_limit), no_field(),
       "a weight of an optimizer whose step scales with the gradient changed its norm by more than limit x its "
       "norm in one step"},
      {"update_ratio_limit", K::kTensor, Q::kNone, rule_limit("update_ratio_limit", &H::update_ratio_limit), no_field(),
       "a parameter of an optimizer that normalizes its steps moved by an RMS per coordinate above limit x lr"},
      {"grad_spike_limit", K::kTensor, Q::kNone, rule_limit("grad_spike_limit", &H::grad_spike_limit), no_field(),
       "SPAM's score: some coordinate's g^2 above limit x its second moment before the step"},
      {"loss_spike", K::kSpike, Q::kLoss, kSpikeZ, rule_floor("loss_spike_floor", &H::loss_spike_floor, kOffHint),
       "log10 loss more than spike_z standard deviations above the trailing window, above the floor"},
      {"grad_norm_spike", K::kSpike, Q::kGradNorm, kSpikeZ,
       rule_floor("grad_norm_spike_floor", &H::grad_norm_spike_floor, kOffHint),
       "log10 grad norm more than spike_z standard deviations above the trailing window, above the floor"},
      {"activation_spike", K::kSpike, Q::kActivationMax, kSpikeZ,
       rule_floor("activation_spike_floor", &H::activation_spike_floor, kOffHint),
       "log10 largest activation more than spike_z standard deviations above the trailing window, above the floor"},
      {"loss_growth", K::kGrowth, Q::kLoss, kGrowthRatio, rule_floor("loss_growth_floor", &H::loss_growth_floor),
       "loss multiplied by growth_ratio or more on growth_steps consecutive steps, above the floor"},
      {"grad_norm_growth", K::kGrowth, Q::kGradNorm, kGrowthRatio,
       rule_floor("grad_norm_growth_floor", &H::grad_norm_growth_floor),
       "grad norm multiplied by growth_ratio or more on growth_steps consecutive steps, above the floor"},
      {"max_grad_growth", K::kGrowth, Q::kGradMax, kGrowthRatio,
       rule_floor("max_grad_growth_floor", &H::max_grad_growth_floor),
       "largest |grad| multiplied by growth_ratio or more on growth_steps consecutive steps, above the floor"},
      {"optimizer_state_growth", K::kGrowth, Q::kStateMax, kGrowthRatio,
       rule_floor("optimizer_state_growth_floor", &H::optimizer_state_growth_floor),
       "largest |optimizer state| multiplied by growth_ratio or more on growth_steps consecutive steps, above the "
       "floor"},
      {"activation_growth", K::kGrowth, Q::kActivationMax, kGrowthRatio,
       rule_floor("activation_growth_floor", &H::activation_growth_floor),
       "largest |activation| multiplied by growth_ratio or more on growth_steps consecutive steps, above the floor"},
      {"chance_loss", K::kChance, Q::kLoss,
       {"chance_loss_factor", &H::chance_loss_factor, nullptr, "0 disables the chance rule"}, no_field(),
       "loss > chance_loss_factor x ln(classes) once chance_loss_after steps of the phase have run"},
      {"loss_sigma", K::kSigma, Q::kLoss, kSigma, rule_floor("loss_sigma_floor", &H::loss_sigma_floor),
       "loss more than sigma standard deviations above the mean of the last sigma_window steps, above the floor"},
      {"grad_norm_sigma", K::kSigma, Q::kGradNorm, kSigma,
       rule_floor("grad_norm_sigma_floor", &H::grad_norm_sigma_floor),
       "grad norm more than sigma standard deviations above the mean of the last sigma_window steps, above the "
       "floor"},
  };
  return kRules;
}

const char* HealthRuleSpec::calibrated() const {
  if (floor.name != nullptr) return floor.name;
  if (threshold.name == nullptr || kind == K::kSpike || kind == K::kGrowth || kind == K::kSigma) return "";
  return threshold.name;
}

const HealthRuleSpec* find_health_rule(const std::string& name) {
  for (const HealthRuleSpec& r : health_rules()) {
    if (name == r.name) return &r;
  }
  return nullptr;
}

const std::vector<HealthField>& health_fields() {
  static const std::vector<HealthField> kFields = [] {
    std::vector<HealthField> fields = {kWindow};
    auto add = [&](const HealthField& f) {
      if (f.name == nullptr) return;
      for (const HealthField& g : fields) {
        if (std::strcmp(g.name, f.name) == 0) return;
      }
      fields.push_back(f);
    };
    for (const HealthRuleSpec& r : health_rules()) {
      add(r.threshold);
      if (r.kind == K::kGrowth) add(kGrowthSteps);
      if (r.kind == K::kChance) add(kChanceAfter);
      if (r.kind == K::kSigma) add(kSigmaWindow);
      add(r.floor);
    }
    return fields;
  }();
  return kFields;
}

const HealthField* find_health_field(const std::string& name) {
  for (const HealthField& f : health_fields()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

}  // namespace spikehunt
