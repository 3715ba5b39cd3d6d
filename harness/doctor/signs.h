// doctor/signs.h — what the doctor's signs read (internal to harness/): the
// probe batches (Probe), the watched run (Watched, doctor/watch.cpp), the loss
// probe (LossProbe), each sign's function, and the registry (SignSpec,
// registry()) that run_doctor walks in order: one row per sign, with its
// stage, its ranks and, for a consequence, the signs of its causes. A new
// sign is its function in a file of this folder and one row in registry.cpp;
// the ranking, --json, `doctor --signs`, docs/doctor.md's table (checked by
// DoctorRegistry tests) follow from the row.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "harness/doctor/common.h"
#include "harness/warnings.h"
#include "scenarios/optimizers.h"

namespace spikehunt::doctor_detail {

inline constexpr double kDeadShare = 0.5;          // a layer is flagged when this share of its units is dead
inline constexpr double kSaturatedDerivative = 0.01;  // of the activation's largest derivative

// ---- helpers ----

inline std::string layer_of(const std::string& parameter) {
  const size_t dot = parameter.rfind('.');
  return dot == std::string::npos ? parameter : parameter.substr(0, dot);
}

inline bool has_batch_norm(torch::nn::Module& model) {
  for (const auto& b : model.named_buffers()) {
    if (b.key().find("running_mean") != std::string::npos) return true;
  }
  return false;
}

inline bool class_ids(const torch::Tensor& y) {
  return y.defined() && y.dim() == 1 && !y.is_floating_point() && y.scalar_type() != torch::kBool;
}

// Every row of (batch, classes) outputs is a probability distribution.
inline bool probability_rows(const torch::Tensor& out) {
  const torch::Tensor o = out.to(torch::kFloat64);
  return o.min().item<double>() >= -1e-6 && (o.sum(1) - 1).abs().max().item<double>() < 1e-4;
}

struct Prediction {
  int64_t label = 0, predicted = 0;
  double confidence = 0;  // softmax probability of the predicted class
};

void add_predictions(const torch::Tensor& out, const torch::Tensor& targets, std::vector<Prediction>* preds);



// A hidden tap's units judged dead (doctor/watch.cpp's UnitProbe).
struct UnitLayer {
  std::string tap;
  std::string kind;   // "rectifier", "sigmoid", "tanh"
  bool read = false;  // the kind read from the tap's module; else from its output range
  int64_t units = 0, dead = 0;
  double share() const { return units ? double(dead) / double(units) : 0.0; }
};

// ---- what the doctor learns from the scenario ----

// Batches to probe with, and the scenario's held-out data.
struct Probe {
  std::vector<Batch> batches;  // the first training batches (the first is the fixed batch)
  std::vector<Batch> heldout;  // or, when the scenario has none, the probe batches
  bool has_heldout = false;
  int64_t classes = 10;
  std::vector<int64_t> output_tail;  // the output's shape without the batch
};

// ---- the update (doctor/update.cpp) ----

struct Watched;

// What the optimizer steps of the watched run did, read around each optimizer_step().
struct UpdateRead {
  int64_t steps = 0;                // steps read
  int64_t with_gradient = 0;        // steps whose trainable parameters held a nonzero gradient before the step
  int64_t changed = 0;              // steps that changed a trainable parameter
  int64_t cleared = 0;              // steps with a gradient before, none after, and no change
  int64_t steps_changed_outside = 0;  // steps whose parameters were not what the previous optimizer step left
  std::vector<std::string> changed_outside;  // those parameters
  int64_t rule_checked = 0;         // steps whose change was compared with the optimizer's rule (the first 20)
  int64_t as_without_gradient = 0;  // of them, changes that are the rule's for a zero gradient, not the gradient's
  double applied_over_rule = NAN;   // median of |applied change| / |the rule's change|
  double lr_peak = 0;
  std::string optimizer;                   // the rule's optimizer ("sgd", "adam", "adamw"; "" when none known)
  std::map<std::string, double> settings;  // its group's settings
  double update_over_weight = NAN;         // median |change| / |weight| over the weights and checked steps
  double weight_decay = 0, decay_over_gradient = NAN;  // the decay's term over the gradient's (median)
  std::string decay_kind;                  // "L2" (added to the gradient) or "decoupled" (AdamW)
  double eps = NAN, eps_over_scale = NAN, rms_update_over_lr = NAN;  // Adam's eps against the gradients' scale
  double first_grad_norm = NAN, first_applied_grad_norm = NAN;  // SGD's first step: backward's norm, the one applied
  std::string low_precision_dtype;         // "bfloat16" or "float16" when a trained parameter is
  int64_t low_precision_elements = 0, rounded_away = 0;  // elements the rule moves, and of them unchanged
};

class UpdateProbe {
 public:
  explicit UpdateProbe(Scenario& s);
  ~UpdateProbe();
  void before();  // right before optimizer_step(): the weights, gradients and the rule's change
  void after();   // right after: the change applied
  const UpdateRead& read();

 private:
  struct Slot;
  static torch::Tensor rule(const Slot& slot, const torch::Tensor& theta, const torch::Tensor& g,
                            const std::map<std::string, double>& settings, const std::optional<ParamState>& state);
  std::vector<Slot> slots_;
  UpdateRead read_;
  std::vector<double> applied_over_rule_, ratios_, decay_ratio_, rms_over_lr_, eps_over_scale_;
};
VitalSign applied_update(const UpdateRead& u, const Watched& w);

// How well outputs predict their targets (doctor/experiments.cpp): 0 at chance, 1 perfect, below 0
// worse than chance. Class ids: accuracy over the majority class's share, (acc - majority) / (1 -
// majority); binary or multi-label 0/1 targets: 2 AUC - 1; real targets: the outputs' correlation.
struct Skill {
  double value = NAN;  // the skill
  double raw = NAN;    // the metric itself (accuracy, AUC, correlation)
  double chance = NAN; // the metric at chance
  std::string metric;  // "accuracy", "AUC", "correlation"; "" when not measurable
};
Skill task_skill(const torch::Tensor& outputs, const torch::Tensor& targets);
// The loss any correct program of the task could use, read from the outputs' and targets' shapes and
// dtypes: cross-entropy for class ids, binary cross-entropy on logits for 0/1 targets, mean squared
// error for real ones; undefined (and "") when none fits.
torch::Tensor reference_loss(const torch::Tensor& outputs, const torch::Tensor& targets);
std::string reference_loss_name(const torch::Tensor& outputs, const torch::Tensor& targets);

struct Watched {
  std::vector<StepRecord> records;
  Skill skill_start, skill_end, skill_end_train;  // held-out: eval mode at the start and end, training mode at the end
  Verdict verdict;
  std::vector<std::string> weights;  // weight parameter names, model order
  std::vector<int64_t> weight_numel;
  std::vector<bool> trainable;
  double outputs_moved = 0, outputs_scale = 0;  // on the fixed batch, start to end
  std::vector<UnitLayer> units_first, units_last;
  std::vector<Prediction> predictions;
  std::string output_layer;
  std::unique_ptr<Scenario> trained;  // the watched scenario after a finite run (null otherwise)
  torch::Tensor outputs_before, outputs_after;  // on the fixed batch, in eval mode (after: a finite run only)
  // Every parameter, model order: its name, optimizer (-1: none), whether it
  // requires grad, got a nonzero gradient, and changed during the run.
  struct Param {
    std::string name;
    int optimizer = -1;
    bool trainable = false, had_grad = false, changed = false;
  };
  std::vector<Param> params;
  std::vector<double> grads_after_step;         // per step: L2 of the gradients left after optimizer_step()
  std::map<std::string, int64_t> not_training;  // module -> steps it trained in eval mode
  int64_t optimizer_state_steps = -1;           // the first optimized parameter's step count after the run
  std::string optimizer_state_of;               // that parameter
  UpdateRead update;                            // the update itself, read around each optimizer_step()
  double nominal_lr = 0;  // the optimizers' own learning rate: a scheduler's initial_lr, or the lr they were built with
};

// A classification loss is at least 0, and a stable one stays finite when
// the outputs are scaled to large but finite values (max |x| 200).
struct LossProbe {
  bool ran = false;
  double scale = 0;         // max |output| it was probed at
  double value = 0;         // the loss there
  double reference = 0;     // a stable implementation's value there
  bool shift_ran = false;   // class ids: the outputs + 100 (softmax is shift-invariant)
  double shifted = 0;       // the loss there (a hand-written exp overflows)
  bool zero_ran = false;    // probabilities: every row certain of a wrong class (the label's p = 0)
  double zero_prob = 0;     // the loss there (log(0) without an epsilon is Inf)
  // Outputs and targets of different shapes at the loss (float targets): the
  // loss's value as given and with the outputs viewed as the targets' shape.
  bool shapes_differ = false, broadcast_changes_loss = false;
};

// ---- the experiments (doctor/experiments.cpp) ----

// The parts the doctor swaps for a reference, one at a time.
enum class Swap { kData, kInit, kLoss, kLrDown, kStep, kOptimizer, kModel };
const char* swap_name(Swap s);
std::vector<std::string> swap_parts(Swap s);  // the parts a swap replaces ("optimizer" also replaces "step")

// One short burst of the program, as written or with one part swapped.
struct Trial {
  std::string swap;   // "" for the program as written, else swap_name()
  std::string what;   // what was put in place of the part, in words
  std::string detail; // what in the program's part differs from the reference, measured ("" when not read)
  bool ran = false;
  std::string error;  // why it could not run
  int64_t steps = 0;
  bool finite = true;
  std::string metric;
  double skill_start = NAN, skill_end = NAN, skill_end_train = NAN;  // held-out, eval mode (end also in training mode)
  double raw_start = NAN, raw_end = NAN, raw_end_train = NAN;        // the metric itself
  double loss_first = NAN, loss_last = NAN;  // its own training loss, mean of the first and last tenth of its steps
  bool extreme = false;                      // the monitor flagged a step (the watched run only)
  std::vector<double> losses;                // its own training loss, each step
  bool learned() const;       // finite, skill 0.2 or more and 0.15 above its start
  // Its own loss falls: by 3% or more from the first tenth of its steps to the last, along a trend whose
  // slope (least squares over every step) is 3 standard errors or more below 0. A slow learner falls; a
  // program that does not learn stays flat.
  bool loss_falling() const;
  std::string skill_text(bool end) const;
};
// lr_factor: the share of the learning rate a kLrDown swap steps with (a tenth, a hundredth, a thousandth).
Trial run_trial(const ScenarioFactory& make, Swap swap, const Probe& p, int64_t steps, double lr_factor = 0.1);
Skill heldout_skill(Scenario& s, const std::vector<Batch>& heldout, bool eval_mode);

struct Experiments {
  Trial baseline;             // the watched run
  std::vector<Trial> swaps;   // run only when the baseline does not learn
  bool failing = false;       // the baseline does not learn (non-finite, below chance, or flat)
  std::vector<std::string> winners;  // the smallest swaps that made it learn
  std::vector<std::string> parts;    // the parts they replace (or {"evaluation"})
  std::string unmeasured;            // why nothing could be measured
  std::string program_optimizer;     // the program's optimizers and their settings ("SGD lr 0.9 momentum 0.01")
  LossReference reference;           // the program's loss against the task's reference loss at step 0
  // One winning swap, a narrow one (not the optimizer or the model): the part is named strongly.
  bool strong() const {
    return winners.size() == 1 && winners[0] != "optimizer" && winners[0] != "model";
  }
};
Experiments run_experiments(const ScenarioFactory& make, const Probe& p, const Watched& w, int64_t steps,
                            const LossReference& reference);
VitalSign faulty_part(const Experiments& e, int64_t steps);

// ---- the signs, by file ----

// inputs.cpp, optimizers.cpp, overfit.cpp, modes.cpp, run_doctor.cpp
VitalSign code_error_sign(const TrainingError& e);
VitalSign input_scale(const Probe& p);
VitalSign optimizer_coverage(const Watched& w, size_t optimizers);
VitalSign overfit_one_batch(const ScenarioFactory& make, const Probe& probe, const DoctorOptions& o);
VitalSign eval_consistency(Scenario& s, const Probe& p, const Watched& w);
VitalSign heldout_inputs(const Probe& p);
VitalSign eval_scale(Scenario* trained, const Probe& p);
// doctor/watch.cpp: the watched run; the outputs on a batch in eval mode; the modules in eval mode;
// the class of the module each tap is named after.
Watched watch(const ScenarioFactory& make, const Probe& p, const DoctorOptions& o);
torch::Tensor fixed_outputs(Scenario& s, const Batch& b);
std::map<std::string, std::string> module_classes(torch::nn::Module& model);
// doctor/loss.cpp
VitalSign loss_output_mismatch(Scenario& s, const Batch& b);
bool binary_targets(const torch::Tensor& out, const torch::Tensor& y);
VitalSign loss_shapes(const torch::Tensor& out, const Batch& b, const LossProbe& probe,
                      const std::map<std::string, int64_t>& warnings);
LossProbe probe_loss(Scenario& s, const torch::Tensor& out, const Batch& b);
VitalSign loss_domain(const Watched& w, const LossProbe& probe, bool classification);
// outputs.cpp, run_signs.cpp, data.cpp (label_balance)
VitalSign frozen_output(const Watched& w, const Probe& p);
VitalSign gradient_flow(const Watched& w, const DoctorOptions& o, const GraphProbe& graph);
VitalSign dead_units(const Watched& w);
// `modules`: each module's output on the first batch at step 0 (Scenario::module_outputs), to name the first
// one that makes NaN/Inf from finite inputs.
VitalSign non_finite_source(const Watched& w, const LossProbe& probe, const std::vector<ModuleOutput>& modules);
VitalSign prediction_collapse(const Watched& w, const Probe& p, bool memorized);
VitalSign grad_norm_range(const Watched& w);
VitalSign monitor_health(const Watched& w);
VitalSign input_dependence(const Watched& w);
VitalSign label_balance(const Watched& w, int64_t classes, const std::vector<Batch>& batches);
VitalSign lr_schedule(const Watched& w);
VitalSign grad_accumulation(const Watched& w);

// doctor/consistency.cpp: the contradictions between a report's claims and its measurements; with
// `repair`, each contradicted claim is taken out of the sign's text and noted in report.corrections.
std::vector<std::string> check_consistency(DoctorReport& report, bool repair);

// ---- the registry ----

// When a sign runs: on the fresh scenario before the shared probes (kFresh), after them
// (kProbed: first outputs, loss scaling, loss and graph probes), on scenarios of its own
// (kOwn), or on the watched run (kWatched). Within a stage, in the registry's order.
enum class SignStage { kCode, kFresh, kProbed, kOwn, kWatched };

// What a sign's run reads. Members are set as the stages reach them.
struct Context {
  const ScenarioFactory& make;
  const DoctorOptions& options;
  const Probe& probe;
  const DoctorReport& report;  // the signs so far
  const WarningCounter& warnings;
  Scenario* fresh = nullptr;  // kFresh, kProbed
  size_t optimizers = 0;      // declared by the fresh scenario
  torch::Tensor first_out;    // the fresh scenario's outputs on the fixed batch (kProbed on)
  double scaling = NAN;       // loss_batch_scaling
  LossReference reference;    // compare_with_reference
  LossProbe loss;
  std::string bounded;        // bounded_logits
  std::string log_probs;      // log_probability_logits
  GraphProbe graph;
  std::vector<ModuleOutput> modules;  // each module's output on the fixed batch at step 0, training mode
  const Watched* watched = nullptr;  // kWatched
  const Experiments* experiments = nullptr;  // kWatched
};

struct SignSpec {
  const char* name;
  SignStage stage;
  std::vector<int> ranks;  // every rank it can fail at (Rank), as docs/doctor.md's table lists them
  // A consequence: when it fails at consequence_rank, the signs of its possible causes, named in its
  // cause as failed (ranked above it) or passed (ruled out). 0: a cause.
  int consequence_rank = 0;
  std::vector<const char*> causes;
  VitalSign (*run)(Context&) = nullptr;
  // Run again once the watched run is there (a check the start leaves open); may change the sign.
  void (*after_watch)(VitalSign&, Context&) = nullptr;
};

// Every sign, in the report's order (training_code_error first).
const std::vector<SignSpec>& registry();
const SignSpec* find_spec(const std::string& name);
// The part of the program a sign concerns by default (VitalSign::part): "data", "init", "model", "loss",
// "optimizer", "schedule", "step", "evaluation"; "" for a sign of consequences.
std::string sign_part(const std::string& name);
// A sign that reads a scale (of the inputs, the targets, the loss, the initialization): when an optimizer that
// normalizes its steps (the reference Adam) is what makes the program learn, the fault may be such a scale.
bool scale_sign(const std::string& name);

}  // namespace spikehunt::doctor_detail
