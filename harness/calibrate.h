// calibrate.h — health rules fitted to the user's model: from the steps of
// healthy baseline runs of one config (seeds, and optionally lower learning
// rates), raise every rule that fires on them to a stated margin above what
// they reached, and say which moved and why. `spikehunt calibrate` runs the
// baselines (cli/calibrate.cpp) and writes the result as a rules file that
// run, sweep, shrink, guard, doctor and lr-sensitivity take with --rules.
//
// How: judge every baseline step again with the rules; for each rule that
// fires, set its field (a limit, or the floor of a spike, growth or sigma
// rule, or chance_loss_factor) to margin × the largest value it fired on;
// repeat until no baseline step is extreme (a finite step that stops being
// extreme enters the windows, so the windowed rules are judged again). The
// rules that judge one tensor at a time (a parameter's jump, update ratio and
// gradient spike score, a tap's activation, attention logit and log Z) are
// raised per tensor, in health.layers: a layer that runs hot in healthy runs
// gets its own threshold, and the others keep theirs.
// Rules that never fire keep their values: calibration only removes alarms
// a healthy run of this model raises, it never lowers a threshold.
// Example:
//   Calibration c = derive_rules(config.health, classes, {baseline_a, baseline_b}, 2.0);
//   for (const MovedRule& m : c.moved) std::cout << m.why << "\n";
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/record.h"
#include "scenarios/health_rules.h"

namespace spikehunt {

// One healthy baseline run: what it was and every step it ran.
struct Baseline {
  std::string label;  // "seed 1, lr 0.05"
  std::vector<StepRecord> steps;
};

struct MovedRule {
  std::string field;     // "param_jump_limit" (under health.)
  std::string rule;      // the rule that fired on the baselines
  double before = 0;     // the config's value
  double after = 0;      // margin × observed
  double observed = 0;   // the largest value the rule fired on, in the field's terms
  std::string where;     // "seed 1, lr 0.05, step 3"
  int64_t steps = 0;     // baseline steps it fired on
  std::string why;       // one line for people
  std::string tensor;    // a per-tensor rule raised for this tensor alone (health.layers); empty: model-wide
};

struct Calibration {
  HealthRules rules;            // the calibrated rules
  std::vector<MovedRule> moved;  // in the order they were first raised
  int64_t baseline_steps = 0;
  int64_t flagged_before = 0;   // baseline steps the original rules call extreme
};

// The field a fired rule's threshold lives in, and the value that silences
// it at `quantity` (the hit's statistic): chance_loss works in factors of
// ln(classes). Empty for non_finite.
std::string rule_field(const std::string& rule);

// A finite run "recovers" (the onset corpus's label: a real instability
// that did not end in NaN) when its loss once stood at least kRecoveryFactor
// times its trailing median (over the kRecoveryWindow steps before, all in
// the same protocol phase: a domain switch is not a spike), or above
// kRecoveryChance × ln(classes). Says why ("its loss jumped to ..."), or nullopt.
constexpr double kRecoveryFactor = 10.0;
constexpr size_t kRecoveryWindow = 16;
constexpr double kRecoveryChance = 10.0;
std::optional<std::string> loss_left_the_rails(const std::vector<StepRecord>& steps, int64_t classes);

// Why a baseline is not healthy ("step 5 is non-finite (fc1_act, forward)"),
// or nullopt: a non-finite step, a loss that left the rails (above), or a
// run that did not lower its loss. `classes`: the scenario's (chance).
std::optional<std::string> baseline_problem(const Baseline& b, int64_t classes);

// The rules, raised as little as the margin allows, that call no baseline
// step extreme. `classes`: the scenario's number of classes (chance_loss).
// Throws std::invalid_argument for margin < 1.
// `per_tensor`: a rule that judges a tensor at a time (health.layers) is
// raised for each tensor past its threshold, to margin × what that tensor
// reached, and the other tensors keep theirs; false raises the model-wide
// threshold to margin × the largest any reached.
Calibration derive_rules(const HealthRules& rules, int64_t classes, const std::vector<Baseline>& baselines,
                         double margin, bool per_tensor = true);

// Sets health field `field` of `rules` (a field of HealthRules by its JSON name).
void set_rule_field(HealthRules& rules, const std::string& field, double value);
double rule_field_value(const HealthRules& rules, const std::string& field);

}  // namespace spikehunt
