// health_rules.h — HealthRules: the thresholds that call a finite step
// "extreme", as a plain struct, and the registry of the rules that read them
// (health_rules(): one row a rule, in the order the judge fires them). Part of
// every config (config.h's "health" section: the config's parser walks
// health_fields(), which the rows give), applied by harness/health.h (the
// judge walks the rows, one piece of code per kind), raised by `calibrate`
// (each row names the field it raises), listed by the fuzzer and by
// docs/health.md's table (HealthRegistry tests compare them). A new rule is
// its field in HealthRules and one row; a rule on a quantity no rule reads yet
// also needs that quantity's case in harness/health.cpp's quantity().
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace spikehunt {

enum class StopAt { kNonFinite, kExtreme };

// One tensor's own thresholds for the rules that judge a tensor at a time
// (HealthRules::layers): a parameter's jump, update ratio and gradient spike
// score, a tap's activation, attention logit and log Z. An unset field takes
// the model-wide value.
struct LayerRules {
  std::optional<double> param_jump_limit, update_ratio_limit, grad_spike_limit;
  std::optional<double> activation_limit, attention_logit_limit, logit_z_limit;
};

// The health rules (harness/health.h applies them). Each rule is named after its field;
// a limit, ratio, factor or sigma of 0 disables it. Rules with a memory
// (spike windows, sigma windows, growth runs, the chance rule's start) begin
// again at each protocol phase boundary: a new domain is a new regime. The
// defaults were chosen on the onset corpus (docs/health.md, "Choosing the rules").
struct HealthRules {
  int64_t window = 16;                  // trailing steps for spike rules and onset attribution, [2, 10000]
  double spike_z = 8.0;                 // z-score of log10 magnitude; 0 disables spikes
  double loss_limit = 1e3;              // loss above this is extreme
  double grad_norm_limit = 1e2;         // global L2 grad norm (before clipping)
  double max_grad_limit = 1e2;          // largest |grad| element
  double activation_limit = 1e4;        // largest |activation| at any tap
  double optimizer_state_limit = 1e2;   // largest |momentum| or |Adam moment|
  double param_jump_limit = 0.5;        // per layer |Δ‖θ‖| / ‖θ‖ over one step (SGD-like optimizers)
  double update_ratio_limit = 4.0;      // per layer RMS(Δθ) / lr (optimizers that normalize updates: Adam and kin)
  // Per coordinate g² / v, v the second moment before the step (SPAM's
  // score; SPAM clips at 5000). Off: healthy runs reach 1e7 and more (docs/health.md).
  double grad_spike_limit = 0.0;
  double loss_spike_floor = 10.0;       // loss_spike fires only above this loss
  double grad_norm_spike_floor = 10.0;  // grad_norm_spike fires only above this norm
  double activation_spike_floor = 1e2;  // activation_spike fires only above this
  // Sustained growth: a quantity multiplied by at least growth_ratio on each
  // of growth_steps consecutive steps, and above its floor now.
  double growth_ratio = 1.4;                 // per-step factor; 0 disables the growth rules
  int64_t growth_steps = 2;                  // consecutive growing steps, [1, 1000]
  double loss_growth_floor = 20.0;           // loss_growth: loss
  double grad_norm_growth_floor = 50.0;      // grad_norm_growth: global grad norm
  double max_grad_growth_floor = 20.0;       // max_grad_growth: largest |grad|
  double optimizer_state_growth_floor = 20.0; // optimizer_state_growth: largest |state|
  double activation_growth_floor = 500.0;    // activation_growth: largest |activation|
  // Loss against chance: loss > chance_loss_factor × ln(classes), once
  // chance_loss_after steps of the phase have run (classification only).
  double chance_loss_factor = 6.0;      // 0 disables
  int64_t chance_loss_after = 20;       // [0, 10^9]
  // Rolling sigma in OLMo's form: value > mean + sigma × std of the last
  // sigma_window finite, non-extreme steps (raw values), silent until full.
  double sigma = 0.0;                   // 0 disables loss_sigma and grad_norm_sigma
  int64_t sigma_window = 128;           // [2, 100000]
  double loss_sigma_floor = 0.0;        // loss_sigma fires only above this loss
  double grad_norm_sigma_floor = 0.0;   // grad_norm_sigma fires only above this norm
  // Transformers: taps named "*attn_logits" (max |q·k/√d| before the
  // softmax) and "*_z" (log-sum-exp of the output logits, per token).
  double attention_logit_limit = 1e3;   // max |attention logit| (Wortsman: every run past 1e4 diverged)
  double logit_z_limit = 50.0;          // max |log Z| of the output logits (output-logit divergence)
  StopAt stop_at = StopAt::kNonFinite;  // stop the burst at the first such step
  // Per tensor, by its name (a parameter "block0_qkv.weight" or a tap
  // "block0_attn_logits"): thresholds that replace the model-wide ones for
  // that tensor alone (what `spikehunt calibrate` writes for the layers its
  // healthy runs push past a rule). Empty: every tensor by the model-wide rules.
  std::map<std::string, LayerRules> layers;
  double input_limit = 0.0;             // largest |input| of the batch; 0 (the default) disables it
};

// ---- the registry ----

// How a rule judges a step (harness/health.cpp has one piece of code for each):
//   kNonFinite  any statistic is NaN or ±Inf
//   kLimit      the quantity > the threshold
//   kTensor     a tensor's statistic > its own threshold (health.layers) or the model-wide one
//               (kLayerRuleFields, by the rule's name)
//   kSpike      log10 of the quantity is more than the threshold (spike_z) standard deviations above
//               the trailing window (window steps), and the quantity is above the floor
//   kGrowth     the quantity multiplied by ≥ the threshold (growth_ratio) on each of growth_steps
//               consecutive steps, and above the floor now
//   kChance     the loss > the threshold × ln(classes), once chance_loss_after steps of the phase ran
//   kSigma      the quantity is more than the threshold (sigma) standard deviations above the mean of
//               the last sigma_window steps (raw values), and above the floor
enum class RuleKind { kNonFinite, kLimit, kTensor, kSpike, kGrowth, kChance, kSigma };

// What a rule reads of a step (harness/health.cpp's quantity()).
enum class RuleQuantity { kNone, kLoss, kGradNorm, kGradMax, kStateMax, kActivationMax, kInputMax };

// One field of HealthRules: its JSON name under "health", its member, and what a bad value's error says.
// Integers (window sizes and step counts) carry their range; numbers are at least 0.
struct HealthField {
  const char* name;
  double HealthRules::*number = nullptr;
  int64_t HealthRules::*integer = nullptr;
  const char* hint = "";
  int64_t lo = 0, hi = 0;
};

struct HealthRuleSpec {
  const char* name;            // as a step's rules and hits name it
  RuleKind kind;
  RuleQuantity quantity;       // kNone for non_finite and the tensor rules
  HealthField threshold;       // its limit, or its kind's shared setting (spike_z, growth_ratio, sigma); no name: none
  HealthField floor;           // its own floor (spike, growth and sigma rules); no name: none
  const char* judges;          // what it judges, in words
  // The field `calibrate` raises when healthy runs fire it: its floor where it has one, else its
  // threshold ("" for non_finite, and for the shared settings).
  const char* calibrated() const;
};

// Every rule, in the order the judge fires them.
const std::vector<HealthRuleSpec>& health_rules();
const HealthRuleSpec* find_health_rule(const std::string& name);
// Every field of HealthRules but stop_at and layers, once, in the config's order: the rules' thresholds
// and floors and the settings their kinds share (window, growth_steps, chance_loss_after, sigma_window).
const std::vector<HealthField>& health_fields();
const HealthField* find_health_field(const std::string& name);

// The per-tensor fields of LayerRules: the JSON name (the model-wide field it
// replaces), its place in LayerRules and in HealthRules, and whether it
// judges taps (activations) or parameters.
struct LayerRuleField {
  const char* name;
  std::optional<double> LayerRules::*layer;
  double HealthRules::*model;
  bool tap;
};
inline constexpr std::array<LayerRuleField, 6> kLayerRuleFields = {{
    {"param_jump_limit", &LayerRules::param_jump_limit, &HealthRules::param_jump_limit, false},
    {"update_ratio_limit", &LayerRules::update_ratio_limit, &HealthRules::update_ratio_limit, false},
    {"grad_spike_limit", &LayerRules::grad_spike_limit, &HealthRules::grad_spike_limit, false},
    {"activation_limit", &LayerRules::activation_limit, &HealthRules::activation_limit, true},
    {"attention_logit_limit", &LayerRules::attention_logit_limit, &HealthRules::attention_logit_limit, true},
    {"logit_z_limit", &LayerRules::logit_z_limit, &HealthRules::logit_z_limit, true},
}};

}  // namespace spikehunt
