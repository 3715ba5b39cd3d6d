#include "harness/health.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <set>

#include "base/did_you_mean.h"

namespace spikehunt {

double SpikeWindow::z(double value) const {
  if (!(value > 0) || values_.empty()) return 0;
  double mean = 0;
  for (double v : values_) mean += v;
  mean /= double(values_.size());
  double var = 0;
  for (double v : values_) var += (v - mean) * (v - mean);
  var /= double(values_.size());
  const double sd = std::max(std::sqrt(var), kMinLogStd);
  return (std::log10(value) - mean) / sd;
}

void SpikeWindow::add(double value) {
  if (!(value > 0)) value = 1e-300;  // an exact zero still counts as "small"
  values_.push_back(std::log10(value));
  if (values_.size() > capacity_) values_.pop_front();
}

void SpikeWindow::assign(const std::vector<double>& log_values) {
  values_.assign(log_values.begin(), log_values.end());
  while (values_.size() > capacity_) values_.pop_front();
}

double SigmaWindow::sigmas(double value) const {
  if (values_.empty()) return 0;
  const double n = double(values_.size());
  const double mean = sum_ / n;
  double var = 0;
  for (double v : values_) var += (v - mean) * (v - mean);
  const double sd = std::max(std::sqrt(var / n), kMinRelativeStd * std::fabs(mean));
  return sd > 0 ? (value - mean) / sd : 0;
}

void SigmaWindow::add(double value) {
  values_.push_back(value);
  sum_ += value;
  if (values_.size() > capacity_) {
    sum_ -= values_.front();
    values_.pop_front();
  }
}

void SigmaWindow::assign(const std::vector<double>& values) {
  clear();
  for (double v : values) add(v);
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + long(mid), v.end());
  return v[mid];
}

namespace {

using json = nlohmann::json;

// What a rule reads of a step (RuleQuantity): a rule on a new quantity adds its case here.
double quantity(const StepRecord& r, RuleQuantity q) {
  switch (q) {
    case RuleQuantity::kLoss: return r.loss;
    case RuleQuantity::kGradNorm: return r.grad_norm;
    case RuleQuantity::kGradMax: return r.grad_max;
    case RuleQuantity::kStateMax: return r.state_max;
    case RuleQuantity::kActivationMax: return r.activation_max;
    case RuleQuantity::kInputMax: return r.input_max;
    case RuleQuantity::kNone: break;
  }
  return 0;
}

// A spike rule's window in the judge's state() is named after its quantity ("loss" for loss_spike), a
// sigma rule's after itself.
std::string window_key(const HealthRuleSpec& rule) {
  const std::string name = rule.name;
  const std::string tail = "_spike";
  if (rule.kind == RuleKind::kSpike && name.size() > tail.size() &&
      name.compare(name.size() - tail.size(), tail.size(), tail) == 0) {
    return name.substr(0, name.size() - tail.size());
  }
  return name;
}

// A tensor rule's place in kLayerRuleFields (TensorRule), by its name.
size_t tensor_rule_of(const HealthRuleSpec& rule) {
  for (size_t k = 0; k < kLayerRuleFields.size(); ++k) {
    if (std::string(kLayerRuleFields[k].name) == rule.name) return k;
  }
  return kLayerRuleFields.size();
}

bool all_finite(const StepRecord& r) {
  auto ok = [](double v) { return std::isfinite(v); };
  if (!ok(r.loss) || !ok(r.grad_norm) || !ok(r.grad_max) || !ok(r.param_norm_after) ||
      !ok(r.state_norm) || !ok(r.state_max) || !ok(r.input_max) || !ok(r.activation_max)) {
    return false;
  }
  for (const TapStats& t : r.taps) {
    if (!ok(t.max_abs)) return false;
  }
  for (const LayerStats& l : r.layers) {
    if (!ok(l.grad_norm) || !ok(l.grad_max) || !ok(l.param_norm_after) || !ok(l.state_norm) ||
        !ok(l.state_max)) {
      return false;
    }
  }
  return true;
}

json numbers(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(number(x));
  return a;
}

std::vector<double> numbers_from(const json& a) {
  std::vector<double> v;
  for (const json& x : a) v.push_back(number_from(x));
  return v;
}

}  // namespace

HealthJudge::HealthJudge(const HealthRules& rules, int64_t classes)
    : rules_(rules),
      classes_(classes),
      spikes_(health_rules().size(), SpikeWindow(size_t(rules.window))),
      sigmas_(health_rules().size(), SigmaWindow(size_t(rules.sigma_window))),
      growth_(health_rules().size()) {}

json HealthJudge::state() const {
  json s = json::object();
  json growth = json::array();
  const std::vector<HealthRuleSpec>& rules = health_rules();
  for (size_t i = 0; i < rules.size(); ++i) {
    if (rules[i].kind == RuleKind::kSpike) {
      s[window_key(rules[i])] = std::vector<double>(spikes_[i].values().begin(), spikes_[i].values().end());
    } else if (rules[i].kind == RuleKind::kSigma) {
      s[window_key(rules[i])] = sigmas_[i].values();
    } else if (rules[i].kind == RuleKind::kGrowth) {
      const GrowthRun& g = growth_[i];
      growth.push_back({{"last", number(g.last)}, {"factors", numbers({g.factors.begin(), g.factors.end()})}});
    }
  }
  json rows = json::array();
  for (const auto& [step, values] : history_) rows.push_back({{"step", step}, {"values", numbers(values)}});
  s["phase"] = phase_;
  s["growth"] = growth;
  s["phase_steps"] = phase_steps_;
  s["onset_seen"] = onset_seen_;
  s["series"] = series_;
  s["history"] = rows;
  s["judged_any"] = judged_any_;
  s["zero_started"] = zero_started_;
  return s;
}

// Checkpoints written before the growth, sigma and attribution state existed
// restore with those empty.
void HealthJudge::restore(const json& state) {
  phase_ = state.at("phase").get<int64_t>();
  const std::vector<HealthRuleSpec>& rules = health_rules();
  growth_.assign(rules.size(), GrowthRun{});
  const json growth = state.value("growth", json::array());
  size_t g = 0;
  for (size_t i = 0; i < rules.size(); ++i) {
    if (rules[i].kind == RuleKind::kSpike) {
      spikes_[i].assign(state.value(window_key(rules[i]), std::vector<double>{}));
    } else if (rules[i].kind == RuleKind::kSigma) {
      sigmas_[i].assign(state.value(window_key(rules[i]), std::vector<double>{}));
    } else if (rules[i].kind == RuleKind::kGrowth && g < growth.size()) {
      growth_[i].last = number_from(growth[g].at("last"));
      const std::vector<double> f = numbers_from(growth[g].at("factors"));
      growth_[i].factors.assign(f.begin(), f.end());
      ++g;
    }
  }
  phase_steps_ = state.value("phase_steps", int64_t{0});
  onset_seen_ = state.value("onset_seen", false);
  series_ = state.value("series", std::vector<std::string>{});
  history_.clear();
  for (const json& row : state.value("history", json::array())) {
    history_.emplace_back(row.at("step").get<int64_t>(), numbers_from(row.at("values")));
  }
  judged_any_ = state.value("judged_any", phase_ >= 0);
  zero_started_ = state.value("zero_started", std::map<std::string, double>{});
}

void HealthJudge::start_phase(int64_t phase) {
  phase_ = phase;
  phase_steps_ = 0;
  for (SpikeWindow& w : spikes_) w.clear();
  for (SigmaWindow& w : sigmas_) w.clear();
  growth_.assign(health_rules().size(), GrowthRun{});
}

void HealthJudge::fire(StepRecord& r, const char* rule, double value, double threshold, double quantity,
                       const std::string& tensor) {
  r.rules.push_back(rule);
  r.hits.push_back({rule, value, threshold, quantity, tensor});
}

// Taps in forward order, then each parameter's gradient, update and state.
// The names are built only when the record's tensors are not the ones the
// history describes (its first step): judging a step allocates no strings.
std::vector<double> HealthJudge::series_values(const StepRecord& r) {
  std::vector<double> values;
  values.reserve(r.taps.size() + 3 * r.layers.size());
  for (const TapStats& t : r.taps) values.push_back(t.max_abs);
  for (const LayerStats& l : r.layers) {
    values.push_back(l.grad_norm);
    values.push_back(std::fabs(l.param_norm_after - l.param_norm_before));
    values.push_back(l.state_max);
  }
  auto names = [&](size_t i) -> const std::string& {  // the tensor of series i
    return i < r.taps.size() ? r.taps[i].name : r.layers[(i - r.taps.size()) / 3].name;
  };
  bool same = series_.size() == values.size();
  for (size_t i = 0; same && i < series_.size(); ++i) {
    const std::string& n = names(i);
    same = series_[i].compare(0, n.size(), n) == 0 && series_[i].size() > n.size() && series_[i][n.size()] == '\t';
  }
  if (!same) {  // another set of tensors (never within one scenario): start again
    static const char* const kQuantities[] = {"\tgradient", "\tupdate", "\toptimizer state"};
    series_.clear();
    for (size_t i = 0; i < values.size(); ++i) {
      series_.push_back(names(i) + (i < r.taps.size() ? "\tactivation" : kQuantities[(i - r.taps.size()) % 3]));
    }
    history_.clear();
  }
  return values;
}

std::vector<Mover> HealthJudge::attribute(const StepRecord& r, const std::vector<double>& now) const {
  const size_t window = size_t(rules_.window);
  std::vector<Mover> movers;
  for (size_t i = 0; i < series_.size() && i < now.size(); ++i) {
    std::vector<double> hist;  // oldest first
    std::vector<int64_t> steps;
    for (const auto& [step, values] : history_) {
      if (i < values.size()) {
        hist.push_back(values[i]);
        steps.push_back(step);
      }
    }
    // The climb is the run of steps at ≥ kClimbFactor × the median of the
    // window before it, ending at the onset; the baseline moves back with it.
    const size_t end = hist.size();
    size_t start = end;
    double base = 0;
    for (int iteration = 0; iteration < 4; ++iteration) {
      std::vector<double> before;
      for (size_t k = start > window ? start - window : 0; k < start; ++k) {
        if (std::isfinite(hist[k]) && hist[k] > 0) before.push_back(hist[k]);
      }
      if (before.size() < 3) break;
      base = median_of(before);
      size_t s = end;
      while (s > 0 && std::isfinite(hist[s - 1]) && hist[s - 1] >= kClimbFactor * base) --s;
      if (s == start) break;
      start = s;
    }
    const double value = now[i];
    const bool finite = std::isfinite(value);
    if (finite && !(base > 0)) continue;
    const double ratio = finite ? value / base : std::numeric_limits<double>::infinity();
    if (!(ratio >= kClimbFactor)) continue;
    const size_t tab = series_[i].find('\t');
    movers.push_back({series_[i].substr(0, tab), series_[i].substr(tab + 1), ratio, value, base,
                      start < end ? steps[start] : r.step});
  }
  std::stable_sort(movers.begin(), movers.end(), [](const Mover& a, const Mover& b) {
    if (a.since != b.since) return a.since < b.since;
    return a.ratio > b.ratio;
  });
  if (movers.size() > kMaxMovers) movers.resize(kMaxMovers);
  return movers;
}

bool tap_is_attention_logits(const std::string& name) {
  static const std::string kEnd = "attn_logits";
  return name.size() >= kEnd.size() && name.compare(name.size() - kEnd.size(), kEnd.size(), kEnd) == 0;
}

bool tap_is_logit_z(const std::string& name) {
  return name == "z" || (name.size() > 2 && name.compare(name.size() - 2, 2, "_z") == 0);
}

// The rule names of TensorRule, in kLayerRuleFields' order.
static_assert(kParamJumpRule == 0 && kLogitZRule == kLayerRuleFields.size() - 1, "TensorRule follows kLayerRuleFields");

double tensor_limit(const HealthRules& rules, TensorRule rule, const std::string& tensor) {
  const LayerRuleField& f = kLayerRuleFields[rule];
  if (!rules.layers.empty()) {
    const auto it = rules.layers.find(tensor);
    if (it != rules.layers.end() && it->second.*f.layer) return *(it->second.*f.layer);
  }
  return rules.*f.model;
}

std::vector<std::string> unused_layer_rules(const HealthRules& rules, const StepRecord& r) {
  static const char* const kJudges[] = {
      "weights of optimizers whose step scales with the gradient (SGD)", "parameters of Adam-like optimizers",
      "parameters", "taps", "taps named *attn_logits", "taps named *_z (log Z)"};
  std::set<std::pair<size_t, std::string>> judged;
  std::vector<std::string> names;
  each_tensor_judged(r, [&](TensorRule rule, const std::string& tensor, double) { judged.insert({rule, tensor}); });
  for (const LayerStats& l : r.layers) names.push_back(l.name);
  for (const TapStats& t : r.taps) names.push_back(t.name);
  std::vector<std::string> out;
  for (const auto& [name, l] : rules.layers) {
    const bool exists = std::find(names.begin(), names.end(), name) != names.end();
    if (!exists) {
      const std::string near = closest(name, names);
      out.push_back("health.layers: \"" + name + "\" is neither a parameter nor a tap of this model" +
                    (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
      continue;
    }
    for (size_t k = 0; k < kLayerRuleFields.size(); ++k) {
      if ((l.*kLayerRuleFields[k].layer) && !judged.count({k, name})) {
        out.push_back("health.layers." + name + "." + kLayerRuleFields[k].name + ": that rule does not judge " +
                      name + " (it judges " + kJudges[k] + ")");
      }
    }
  }
  return out;
}

void HealthJudge::judge(StepRecord& r) {
  r.rules.clear();
  r.hits.clear();
  r.movers.clear();
  if (r.phase != phase_) start_phase(r.phase);
  for (const LayerStats& l : r.layers) {  // zero-started weights, and the size of their first step
    if (!judged_any_ && l.is_weight && !l.adaptive && l.param_norm_before == 0) zero_started_[l.name] = 0;
    const auto it = zero_started_.find(l.name);
    if (it != zero_started_.end() && it->second == 0 && std::isfinite(l.param_norm_after)) it->second = l.param_norm_after;
  }
  judged_any_ = true;
  const std::vector<double> series = series_values(r);
  const HealthRules& h = rules_;
  const bool finite = !r.fault && all_finite(r);
  if (!finite) {
    fire(r, "non_finite", 0, 0, 0);
  } else {
    // The rules that judge a tensor at a time (each_tensor_judged), each
    // tensor against its own threshold (health.layers) or the model-wide
    // one: the tensor furthest past its threshold fires, and the hit names
    // it. (A weight's jump is judged where the optimizer's step scales with
    // the gradient; where it normalizes its steps, Adam and kin, a step of
    // about lr per coordinate is what it always makes, however large against
    // a small weight: there the step is judged against lr, update_ratio.)
    struct Worst {
      double ratio = 0, value = 0, limit = 0;
      const std::string* tensor = nullptr;
    };
    std::array<Worst, kLayerRuleFields.size()> worst{};
    each_tensor_judged(r, [&](TensorRule rule, const std::string& tensor, double value) {
      if (rule == kParamJumpRule) {
        const auto zero = zero_started_.find(tensor);
        if (zero != zero_started_.end()) {
          const LayerStats& l = *std::find_if(r.layers.begin(), r.layers.end(), [&](const LayerStats& x) { return x.name == tensor; });
          value = std::fabs(l.param_norm_after - l.param_norm_before) /
                  std::max(l.param_norm_before, kZeroStartScale * zero->second);
        }
      }
      const double lim = tensor_limit(h, rule, tensor);
      if (lim > 0 && value > lim && value / lim > worst[rule].ratio) worst[rule] = {value / lim, value, lim, &tensor};
    });
    // A windowed rule: silent until its window is full and below its floor;
    // fires when the window's score of the value passes the threshold.
    auto windowed = [&](const char* name, const auto& w, double value, double floor, double threshold, auto score) {
      if (threshold <= 0 || !w.full() || !(value > floor)) return;
      const double s = score(w, value);
      if (s > threshold) fire(r, name, s, threshold, value);
    };
    // Every rule of the registry, in its order: one piece of code a kind.
    const std::vector<HealthRuleSpec>& rules = health_rules();
    for (size_t i = 0; i < rules.size(); ++i) {
      const HealthRuleSpec& rule = rules[i];
      const double threshold = rule.threshold.number ? h.*rule.threshold.number : 0;
      const double floor = rule.floor.number ? h.*rule.floor.number : 0;
      const double x = quantity(r, rule.quantity);
      switch (rule.kind) {
        case RuleKind::kNonFinite:
          break;
        case RuleKind::kLimit:
          if (threshold > 0 && x > threshold) fire(r, rule.name, x, threshold, x);
          break;
        case RuleKind::kTensor: {
          const size_t k = tensor_rule_of(rule);
          const Worst& w = worst[k];
          if (w.tensor != nullptr) fire(r, rule.name, w.value, w.limit, w.value, *w.tensor);
          break;
        }
        case RuleKind::kSpike:
          windowed(rule.name, spikes_[i], x, floor, threshold,
                   [](const SpikeWindow& w, double v) { return w.z(v); });
          break;
        case RuleKind::kGrowth: {
          GrowthRun& g = growth_[i];
          if (threshold > 0 && g.last > 0 && x >= threshold * g.last) {
            g.factors.push_back(x / g.last);
            while (g.factors.size() > size_t(h.growth_steps)) g.factors.pop_front();
          } else {
            g.factors.clear();
          }
          g.last = x;
          if (threshold > 0 && g.factors.size() >= size_t(h.growth_steps) && x > floor) {
            fire(r, rule.name, *std::min_element(g.factors.begin(), g.factors.end()), threshold, x);
          }
          break;
        }
        case RuleKind::kChance:
          if (threshold > 0 && classes_ >= 2 && phase_steps_ >= h.chance_loss_after) {
            const double chance = threshold * std::log(double(classes_));
            if (x > chance) fire(r, rule.name, x, chance, x);
          }
          break;
        case RuleKind::kSigma:
          windowed(rule.name, sigmas_[i], x, floor, threshold,
                   [](const SigmaWindow& w, double v) { return w.sigmas(v); });
          break;
      }
    }
  }
  r.health = !finite ? Health::kNonFinite : r.rules.empty() ? Health::kFinite : Health::kExtreme;
  if (r.health != Health::kFinite && !onset_seen_) {
    onset_seen_ = true;
    r.movers = attribute(r, series);
  }
  history_.emplace_back(r.step, series);
  while (history_.size() > 2 * size_t(h.window)) history_.pop_front();
  ++phase_steps_;
  if (r.health == Health::kFinite) {
    const std::vector<HealthRuleSpec>& rules = health_rules();
    for (size_t i = 0; i < rules.size(); ++i) {
      if (rules[i].kind == RuleKind::kSpike) spikes_[i].add(quantity(r, rules[i].quantity));
      if (rules[i].kind == RuleKind::kSigma) sigmas_[i].add(quantity(r, rules[i].quantity));
    }
  }
}

}  // namespace spikehunt
