// health.h — classifies a step as finite, extreme or non_finite from its
// statistics, with named rules, and names the layer that moved first at the
// onset. The rules are the registry's (health_rules() in
// scenarios/health_rules.h: one row a rule, what it judges, its fields); the
// judge walks the rows in order with one piece of code per kind (non-finite,
// limit, tensor, spike, growth, chance, sigma), health.cpp's quantity()
// reading what each row names of the step; docs/health.md's table lists
// them (HealthRegistry tests).
// Windows hold only finite, non-extreme steps; every rule with a memory
// starts again at each protocol phase boundary (a new domain is a new
// regime), and windowed rules stay silent until full.
//
// Onset attribution: the judge keeps each per-layer statistic (a
// parameter's gradient norm, its update |Δ‖θ‖|, its optimizer state max, and
// each tap's activation max) for the last 2 × window steps, across phases. At
// its first bad step it ranks those that stand ≥ kClimbFactor × their
// trailing median by the first step of their climb, then by how far they
// stand: the first is the first mover (StepRecord::movers).
// Example:
//   HealthJudge judge(config.health, scenario.num_classes());
//   judge.judge(record);   // sets record.health, rules, hits (and movers at the onset)
#pragma once

#include <cmath>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/record.h"
#include "scenarios/config.h"

namespace spikehunt {

// The spread of a window is at least this many decades, so a flat window
// does not turn a 2x move into a spike.
constexpr double kMinLogStd = 0.1;
// A sigma window's standard deviation is at least this fraction of its mean.
constexpr double kMinRelativeStd = 0.01;
// A statistic "climbs" while it stands at least this many times its trailing median.
constexpr double kClimbFactor = 2.0;
// Movers kept in a record and a verdict.
constexpr size_t kMaxMovers = 8;

// The tap names the transformer rules read (models.h's gpt taps them so).
bool tap_is_attention_logits(const std::string& name);
bool tap_is_logit_z(const std::string& name);

// The per-tensor rules (HealthRules::layers), as indices into kLayerRuleFields.
enum TensorRule : size_t {
  kParamJumpRule, kUpdateRatioRule, kGradSpikeRule, kActivationRule, kAttentionLogitRule, kLogitZRule
};

// Calls f(rule, tensor name, value) for every judgement the per-tensor rules
// make at step r: a weight's jump |Δ‖θ‖| / ‖θ‖ (optimizers whose step scales
// with the gradient), an adaptive parameter's update ratio, every
// parameter's gradient spike score, every tap's activation, and the
// attention-logit and log Z taps' again under their own rules.
template <class F>
void each_tensor_judged(const StepRecord& r, F&& f) {
  for (const LayerStats& l : r.layers) {
    if (l.is_weight && !l.adaptive && l.param_norm_before > 0) {
      f(kParamJumpRule, l.name, std::fabs(l.param_norm_after - l.param_norm_before) / l.param_norm_before);
    }
    if (l.adaptive) f(kUpdateRatioRule, l.name, l.update_ratio);
    f(kGradSpikeRule, l.name, l.grad_spike_score);
  }
  for (const TapStats& t : r.taps) {
    f(kActivationRule, t.name, t.max_abs);
    if (tap_is_attention_logits(t.name)) f(kAttentionLogitRule, t.name, t.max_abs);
    else if (tap_is_logit_z(t.name)) f(kLogitZRule, t.name, t.max_abs);
  }
}

// The threshold rule `rule` holds `tensor` to: its own in rules.layers, else the model-wide one.
double tensor_limit(const HealthRules& rules, TensorRule rule, const std::string& tensor);

// The entries of rules.layers that step r's tensors do not use, one line
// each: a name that is neither a parameter nor a tap of the model (with the
// nearest one), or a tap's rule set on a parameter and the reverse. Empty
// when every entry judges a tensor. (Not an error in the judge: a sweep's
// variants may lack a tensor, e.g. without qk-layernorm.)
std::vector<std::string> unused_layer_rules(const HealthRules& rules, const StepRecord& r);

// The upper median (0 for none).
double median_of(std::vector<double> v);

// A trailing window of log10 magnitudes with its z-score.
class SpikeWindow {
 public:
  explicit SpikeWindow(size_t capacity) : capacity_(capacity) {}
  bool full() const { return values_.size() >= capacity_; }
  const std::deque<double>& values() const { return values_; }  // log10, oldest first
  void assign(const std::vector<double>& log_values);
  // z-score of log10(value) against the window (0 when value <= 0).
  double z(double value) const;
  void add(double value);
  void clear() { values_.clear(); }

 private:
  size_t capacity_;
  std::deque<double> values_;  // log10 of positive values
};

// A trailing window of raw values: how many standard deviations above the
// mean a value stands (OLMo's loss and gradient-norm spike count).
class SigmaWindow {
 public:
  explicit SigmaWindow(size_t capacity) : capacity_(capacity) {}
  bool full() const { return values_.size() >= capacity_; }
  double sigmas(double value) const;
  void add(double value);
  void clear() { values_.clear(); sum_ = 0; }
  std::vector<double> values() const { return {values_.begin(), values_.end()}; }
  void assign(const std::vector<double>& values);

 private:
  size_t capacity_;
  std::deque<double> values_;
  double sum_ = 0;
};

// The current run of per-step growth of one quantity.
struct GrowthRun {
  double last = 0;              // the previous step's value (0: none yet)
  std::deque<double> factors;   // the latest consecutive factors ≥ the ratio, at most growth_steps
};

class HealthJudge {
 public:
  // `classes`: the scenario's number of classes (chance_loss; < 2 turns it off).
  explicit HealthJudge(const HealthRules& rules, int64_t classes = 0);
  void judge(StepRecord& r);

  // The phase, windows, growth runs and attribution history, for
  // checkpoints: a judge restored from them judges the next steps exactly as
  // the original would have.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  void fire(StepRecord& r, const char* rule, double value, double threshold, double quantity,
            const std::string& tensor = std::string());
  void start_phase(int64_t phase);
  std::vector<double> series_values(const StepRecord& r);
  std::vector<Mover> attribute(const StepRecord& r, const std::vector<double>& now) const;

  HealthRules rules_;
  int64_t classes_;
  // Per row of health_rules(): a spike rule's window, a sigma rule's window, a growth rule's run (the
  // other rows leave theirs empty).
  std::vector<SpikeWindow> spikes_;
  std::vector<SigmaWindow> sigmas_;
  std::vector<GrowthRun> growth_;
  int64_t phase_ = -1;             // the phase the windows describe
  int64_t phase_steps_ = 0;        // steps judged in it
  bool onset_seen_ = false;
  // Onset attribution: "tensor\tquantity" per series, and the latest rows.
  std::vector<std::string> series_;
  std::deque<std::pair<int64_t, std::vector<double>>> history_;
  // Weights at exactly zero entering the first judged step (a zero-initialized
  // output layer, LoRA's B, a residual branch meant to start at zero), with
  // the norm their first step gave them (0 until one did). Such a weight has
  // no scale of its own: its jump is judged against the larger of its norm and
  // kZeroStartScale times that first step (momentum builds steps up to 1/(1 -
  // beta) = 10x the first; at the limit 0.5 that is 20x).
  std::map<std::string, double> zero_started_;
  bool judged_any_ = false;
};

inline constexpr double kZeroStartScale = 20.0;

}  // namespace spikehunt
