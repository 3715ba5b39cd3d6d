// doctor.h — the vital signs: cheap checks that catch most training bugs
// before anyone tunes a knob, right on code spikehunt has never seen. Runs on
// any Scenario (the built-in ones, a planted-bug one, or the user's own) and
// reports each sign as pass / fail with its evidence, the layers, taps or
// tensors it names and a hint, then ranks the failed ones: the top one is
// the most likely cause.
//   training_code_error   the scenario's code (or LibTorch on its behalf) threw: the stage
//                         (setup, data, forward, loss, backward, optimizer_step), the message,
//                         and the cause where spikehunt can tell ("the output has 5 classes but
//                         a label is 8")
//   input_scale           the first training batches: non-finite values, or a scale far from
//                         unit (rms above 10, e.g. raw 0..255 pixels, or below 0.01)
//   optimizer_coverage    a trainable model parameter that no optimizer updates
//   loss_output_mismatch  softmax applied twice: the outputs already are probabilities (rows
//                         sum to 1) and the loss takes them for logits, or the loss is the
//                         cross-entropy of the outputs' softmax (at the start; again after
//                         the run when small logits leave it open)
//   overfit_one_batch     one batch, weight decay off, the config's peak learning rate, up to
//                         1,000 steps: the loss must reach 0.05 (or fall below a quarter of
//                         the first loss and of log(classes)); then
//                         held-out predictions that consistently name another class point at
//                         shifted or mislabeled targets
//   frozen_output         loss stuck at log(classes) while the outputs on a fixed input do not
//                         move: the output layer gets no gradient (named)
//   gradient_flow         RMS gradient per weight over the first 20 steps: a weight with exactly
//                         zero gradient; exploding (a layer norm above 100, the global norm
//                         climbing 10x over 5 steps); vanishing (a spread of 1,000x or more,
//                         the starved layers named)
//   dead_units            per hidden tap, the share of units dead on every held-out sample, at
//                         the start and the end: a rectifier unit (ReLU, LeakyReLU, GELU) never
//                         positive, a sigmoid or tanh unit whose derivative is below 1% of its
//                         maximum; a layer is flagged at half its units or more
//   non_finite_source     the run went non-finite: overflow (finite values past 1e30, or
//                         magnitudes grown 1,000x, before the fault) told from an operation that
//                         makes NaN/Inf out of moderate values (log(0), 0/0 in the loss or the
//                         forward; an infinite derivative in the backward) and from NaN inputs
//   prediction_collapse   held-out accuracy no better than always predicting the majority class
//                         (+2 points), with the confusion matrix and a hint that fits the
//                         training data's class balance
//   grad_norm_range       the median global grad norm outside [0.001, 10], or a peak above 1,000
//   monitor_health        the monitor's verdict of the watched run: an extreme or non-finite
//                         step (onset step and rules), with the config's health rules
// Taps count as hidden layers unless they have the output's shape. Units are
// dimension 1 of a (B, C) or (B, C, H, W) tap and the last of a (B, T, C) one.
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
  bool skipped = false;            // nothing to check (no held-out data, the code threw, ...)
  std::string evidence;            // what was measured
  std::string hint;                // what to try, when failed
  std::vector<std::string> named;  // the layers, taps or tensors it points at
  nlohmann::json data;             // the numbers, for --json
  // When failed: the one-line diagnosis, and how likely it is the root cause
  // (lower first: a throw, bad input values, uncovered parameters, the input
  // scale, a loss/output mismatch, a frozen output, an op making NaN, shifted
  // labels, dead units, overflow, gradient flow, collapse, overfitting, the
  // monitor's verdict, the grad norm range).
  std::string cause;
  int rank = 100;
  // The part of the training program it concerns: "data", "init", "model",
  // "loss", "optimizer", "schedule", "step", "evaluation" ("" when none); the
  // registry's, unless the sign's finding names another.
  std::string part;
  double seconds = 0;  // its own probe's time (the watched run they share is DoctorReport::run_seconds)
};

struct DoctorOptions {
  int64_t overfit_steps = 1000;    // budget for overfitting one batch
  double overfit_loss = 0.05;      // "near zero"
  int64_t steps = 100;             // the short training run the other signs watch
  int64_t flow_steps = 20;         // steps averaged for gradient flow
  int64_t heldout_samples = 1000;  // held-out samples for predictions and dead units
  HealthRules rules;               // for the monitor during the run
};

struct DoctorReport {
  std::vector<VitalSign> signs;
  // The scenario as built: what the header describes.
  std::string scenario;                 // its config name ("standard" or a registered one)
  int64_t parameters = 0;               // trainable and frozen, in model()
  std::vector<std::string> optimizers;  // "body (sgd, 2 groups)", ...
  double run_seconds = 0;               // the watched training run the run-based signs read
  // What the consistency check took out of a sign's text, and why (doctor/consistency.cpp), and the
  // contradictions it could not repair (empty in a sound report).
  nlohmann::json corrections = nlohmann::json::array();
  std::vector<std::string> contradictions;
  bool passed() const;
  const VitalSign* find(const std::string& name) const;
  VitalSign* find_mutable(const std::string& name);
  // The most likely cause: the failed sign of lowest rank (null when none failed).
  const VitalSign* top() const;
};

using ScenarioFactory = std::function<std::unique_ptr<Scenario>()>;

// One vital sign as the doctor's registry holds it: its name, every rank it
// can fail at (docs/doctor.md's table), and, for a sign that sees a
// consequence, the rank at which it does and the signs of the causes it names.
struct SignInfo {
  std::string name;
  std::string part;  // the part of the program it concerns by default ("" for a sign of consequences)
  std::vector<int> ranks;
  int consequence_rank = 0;         // 0: a cause at every rank
  std::vector<std::string> causes;  // a consequence's: failed ones are named, passed ones ruled out
};

// Every sign the doctor runs, in its report's order.
std::vector<SignInfo> doctor_signs();

// Builds fresh scenarios from `make` (one to probe the data and outputs, one
// for the overfit check, one for the watched run). Whatever the scenario's
// code throws becomes the training_code_error sign; bad input (InputError)
// still throws.
DoctorReport run_doctor(const ScenarioFactory& make, const DoctorOptions& options);

// The most likely cause first, then every sign. `verbose`: a thrown error's
// whole text (LibTorch's backtrace or the Python traceback) and the time each
// probe took.
std::string doctor_text(const DoctorReport& report, bool verbose = false);
nlohmann::json doctor_json(const DoctorReport& report);

}  // namespace spikehunt
