// planted.h — scenarios with one classic training bug planted on purpose,
// which the doctor (harness/doctor/doctor.h) must name; and a healthy control that
// must pass every vital sign. Each is an MLP on the synthetic data trained on
// all classes at once (no domain protocol), so a doctor run takes seconds.
//   healthy                 nothing planted
//   detached_logits         the model returns its logits detached (plus 0 x logits, so the
//                           loss still backpropagates): every gradient is exactly zero
//   log_zero_loss           a hand-written cross-entropy, -sum(onehot * log(softmax(10 x logits))),
//                           without epsilon: once a probability underflows, 0 x log(0) = NaN
//   shifted_labels          every training label moved by one class (held-out labels are right)
//   imbalanced_majority     95% of the data is class 0: the loss falls, the model learns nothing
//   vanishing_deep_sigmoid  a 10-layer sigmoid MLP: the first layers' gradients vanish
//   exploding_no_clip       a 4-layer MLP initialized 4x too large, lr 0.1, no clipping
//   dead_relu               the first layer's bias initialized to -10: its ReLUs never fire
// Example:
//   auto s = make_planted_scenario("dead_relu");
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "scenarios/catalog.h"

namespace spikehunt {

const std::vector<std::string>& planted_bug_names();  // "healthy" first
// The config a planted scenario trains; InputError for an unknown name.
TrainingConfig planted_config(const std::string& name);
std::unique_ptr<Scenario> make_planted_scenario(const std::string& name);

}  // namespace spikehunt
