#include "harness/calibrate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "base/number_format.h"
#include "harness/health.h"

namespace spikehunt {

namespace {

// The fields calibration may raise, by their JSON names: each rule's own (health_rules.cpp).
const std::map<std::string, double HealthRules::*>& rule_fields() {
  static const std::map<std::string, double HealthRules::*> fields = [] {
    std::map<std::string, double HealthRules::*> m;
    for (const HealthRuleSpec& r : health_rules()) {
      const std::string field = r.calibrated();
      if (!field.empty()) m[field] = find_health_field(field)->number;
    }
    return m;
  }();
  return fields;
}

// Up to three significant digits, rounded up: the threshold stays above margin × observed.
double round_up(double x) {
  if (!(x > 0) || !std::isfinite(x)) return x;
  const double scale = std::pow(10.0, std::floor(std::log10(x)) - 2);
  return std::ceil(x / scale - 1e-9) * scale;
}

}  // namespace

std::string rule_field(const std::string& rule) {
  const HealthRuleSpec* spec = find_health_rule(rule);
  return spec ? spec->calibrated() : "";
}

void set_rule_field(HealthRules& rules, const std::string& field, double value) {
  const auto it = rule_fields().find(field);
  if (it == rule_fields().end()) throw std::invalid_argument("not a calibrated health field: " + field);
  rules.*(it->second) = value;
}

double rule_field_value(const HealthRules& rules, const std::string& field) {
  const auto it = rule_fields().find(field);
  if (it == rule_fields().end()) throw std::invalid_argument("not a calibrated health field: " + field);
  return rules.*(it->second);
}

std::optional<std::string> loss_left_the_rails(const std::vector<StepRecord>& steps, int64_t classes) {
  for (size_t t = kRecoveryWindow; t < steps.size(); ++t) {
    std::vector<double> before;
    for (size_t k = t - kRecoveryWindow; k < t; ++k) {
      if (steps[k].phase == steps[t].phase) before.push_back(steps[k].loss);
    }
    if (before.size() < kRecoveryWindow) continue;
    const double median = median_of(before);
    if (steps[t].loss >= kRecoveryFactor * median) {
      return "its loss jumped to " + significant_named(steps[t].loss, 3) + " at step " + std::to_string(steps[t].step) +
             ", " + significant_named(kRecoveryFactor, 3) + "x its trailing median " + significant_named(median, 3);
    }
  }
  const double chance = classes >= 2 ? kRecoveryChance * std::log(double(classes)) : 0;
  for (const StepRecord& r : steps) {
    if (chance > 0 && r.loss > chance) {
      return "its loss reached " + significant_named(r.loss, 3) + " at step " + std::to_string(r.step) + ", above " +
             significant_named(kRecoveryChance, 3) + " x ln(" + std::to_string(classes) + " classes)";
    }
  }
  return std::nullopt;
}

std::optional<std::string> baseline_problem(const Baseline& b, int64_t classes) {
  if (b.steps.empty()) return std::string("it ran no step");
  for (const StepRecord& r : b.steps) {
    if (r.health == Health::kNonFinite) {
      return "step " + std::to_string(r.step) + " is non-finite" +
             (r.fault ? " (" + r.fault->tensor + ", " + to_string(r.fault->stage) + ")" : std::string());
    }
  }
  if (auto why = loss_left_the_rails(b.steps, classes)) return why;
  const double first = b.steps.front().loss, last = b.steps.back().loss;
  if (b.steps.size() >= 4 && !(last < first)) {
    return "its loss did not fall (" + significant_named(first, 3) + " at step 0, " +
           significant_named(last, 3) + " at the end)";
  }
  return std::nullopt;
}

Calibration derive_rules(const HealthRules& rules, int64_t classes, const std::vector<Baseline>& baselines,
                         double margin, bool per_tensor) {
  if (!(margin >= 1)) throw std::invalid_argument("the margin must be at least 1");
  Calibration out;
  out.rules = rules;
  const double ln_classes = classes >= 2 ? std::log(double(classes)) : 1.0;
  for (int pass = 0; pass < 20; ++pass) {
    struct Seen {
      double observed = 0;
      std::string where;
      int64_t steps = 0;
      std::string rule;
    };
    // By field and, for a per-tensor rule calibrated per tensor, the tensor.
    std::map<std::pair<std::string, std::string>, Seen> fired;
    auto see = [&](const std::string& field, const std::string& tensor, const std::string& rule, double value,
                   const std::string& where) {
      Seen& s = fired[{field, tensor}];
      ++s.steps;
      s.rule = rule;
      if (!(value <= s.observed)) {  // also takes the first
        s.observed = value;
        s.where = where;
      }
    };
    int64_t flagged = 0, steps = 0;
    for (const Baseline& b : baselines) {
      HealthJudge judge(out.rules, classes);
      for (StepRecord r : b.steps) {
        judge.judge(r);
        ++steps;
        if (r.health == Health::kExtreme) ++flagged;
        const std::string where = b.label + ", step " + std::to_string(r.step);
        for (const RuleHit& h : r.hits) {
          const std::string field = rule_field(h.rule);
          if (field.empty() || !rule_fields().count(field)) continue;
          if (per_tensor && !h.tensor.empty()) continue;  // every tensor past its threshold, below
          see(field, "", h.rule, h.rule == "chance_loss" ? h.quantity / ln_classes : h.quantity, where);
        }
        if (!per_tensor || r.health != Health::kExtreme) continue;
        // A step a per-tensor rule fired on: each tensor past its own threshold, not only the worst.
        each_tensor_judged(r, [&](TensorRule rule, const std::string& tensor, double value) {
          const double lim = tensor_limit(out.rules, rule, tensor);
          if (lim > 0 && value > lim) see(kLayerRuleFields[rule].name, tensor, kLayerRuleFields[rule].name, value, where);
        });
      }
    }
    if (pass == 0) out.flagged_before = flagged, out.baseline_steps = steps;
    if (fired.empty()) return out;
    for (const auto& [key, s] : fired) {
      const auto& [field, tensor] = key;
      const auto rule = std::find_if(kLayerRuleFields.begin(), kLayerRuleFields.end(),
                                     [&](const LayerRuleField& f) { return field == f.name; });
      const double before = tensor.empty() ? rule_field_value(out.rules, field)
                                           : tensor_limit(out.rules, TensorRule(rule - kLayerRuleFields.begin()), tensor);
      const double after = std::max(round_up(margin * s.observed), before);
      if (tensor.empty()) set_rule_field(out.rules, field, after);
      else out.rules.layers[tensor].*(rule->layer) = after;
      auto it = std::find_if(out.moved.begin(), out.moved.end(),
                             [&](const MovedRule& m) { return m.field == field && m.tensor == tensor; });
      if (it == out.moved.end()) {
        out.moved.push_back({field, s.rule, before, after, s.observed, s.where, s.steps, "", tensor});
        it = out.moved.end() - 1;
      } else {
        it->after = after;
        it->observed = std::max(it->observed, s.observed);
        it->steps += s.steps;
      }
      const std::string unit = field == "chance_loss_factor" ? " x ln(classes)" : "";
      const std::string of = tensor.empty() ? "" : " of " + tensor;
      it->why = field + of + " " + significant_named(it->before, 3) + " -> " + significant_named(it->after, 3) + ": " +
                it->rule + " fired on " + std::to_string(it->steps) + " healthy step" + (it->steps == 1 ? "" : "s") +
                ", which reach " + significant_named(it->observed, 3) + unit + (tensor.empty() ? "" : " there") +
                " (" + it->where + "); " + significant_named(margin, 3) + "x margin";
    }
  }
  throw std::logic_error("calibration did not settle in 20 passes");
}

}  // namespace spikehunt
