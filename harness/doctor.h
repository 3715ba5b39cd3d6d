// doctor.h — the vital signs: cheap checks that catch most training bugs
// before anyone tunes a knob. Runs on any Scenario (the built-in ones, a
// planted-bug one, or the user's own) and reports each sign as pass / fail
// with its evidence, the layers or taps it names, and a hint.
//   overfit_one_batch    one batch, regularization off, up to 1,000 steps: the loss must fall
//                        to 0.05; then held-out predictions that consistently name another
//                        class point at shifted or mislabeled targets
//   frozen_output        loss stuck at log(classes) while the logits on a fixed input do not
//                        move: the output layer gets no gradient (named)
//   gradient_flow        mean |grad| per weight over the first 20 steps: a layer with exactly
//                        zero gradient, a spread of 1,000x or more (vanishing: the starved
//                        layers are named), a layer norm above 100 or a global norm climbing
//                        5 steps running by 10x (exploding)
//   dead_units           share of exactly-zero activations per hidden tap (ReLU outputs), at
//                        the start and the end of the run: 70% or more is dead
//   non_finite_source    a non-finite loss with finite logits is the loss itself (log(0));
//                        non-finite elsewhere after a climbing grad norm is an explosion
//   prediction_collapse  on held-out data, accuracy no better than always predicting the
//                        majority class (+2 points) is a collapse; with the confusion matrix
//   grad_norm_range      the median global grad norm against the sane range [0.001, 10]
// Example:
//   DoctorReport r = run_doctor([] { return make_planted_scenario("dead_relu"); }, DoctorOptions{});
//   std::cout << doctor_text(r);
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/config.h"
#include "scenarios/scenario.h"

namespace spikehunt {

struct VitalSign {
  std::string name;                // e.g. "dead_units"
  bool passed = true;
  bool skipped = false;            // nothing to check (no held-out data, ...)
  std::string evidence;            // what was measured
  std::string hint;                // what to try, when failed
  std::vector<std::string> named;  // the layers, taps or tensors it points at
  nlohmann::json data;             // the numbers, for --json
};

struct DoctorOptions {
  int64_t overfit_steps = 1000;    // budget for overfitting one batch
  double overfit_loss = 0.05;      // "near zero"
  int64_t steps = 100;             // the short training run the other signs watch
  int64_t flow_steps = 20;         // steps averaged for gradient flow
  int64_t heldout_samples = 1000;  // held-out samples for predictions
  HealthRules rules;               // for the monitor during the run
};

struct DoctorReport {
  std::vector<VitalSign> signs;
  bool passed() const;
  const VitalSign* find(const std::string& name) const;
};

using ScenarioFactory = std::function<std::unique_ptr<Scenario>()>;

// Builds a fresh scenario for the overfit check and another for the run.
DoctorReport run_doctor(const ScenarioFactory& make, const DoctorOptions& options);

std::string doctor_text(const DoctorReport& report);
nlohmann::json doctor_json(const DoctorReport& report);

}  // namespace spikehunt
