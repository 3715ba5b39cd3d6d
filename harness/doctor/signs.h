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

struct Watched {
  std::vector<StepRecord> records;
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

// ---- the signs, by file ----

// doctor.cpp
VitalSign code_error_sign(const TrainingError& e);
VitalSign input_scale(const Probe& p);
VitalSign optimizer_coverage(const Watched& w, size_t optimizers);
VitalSign overfit_one_batch(const ScenarioFactory& make, const Probe& probe, const DoctorOptions& o);
VitalSign eval_consistency(Scenario& s, const Probe& p, const Watched& w);
VitalSign heldout_inputs(const Probe& p);
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
// doctor/run.cpp
VitalSign frozen_output(const Watched& w, const Probe& p);
VitalSign gradient_flow(const Watched& w, const DoctorOptions& o, const GraphProbe& graph);
VitalSign dead_units(const Watched& w);
VitalSign non_finite_source(const Watched& w, const LossProbe& probe);
VitalSign prediction_collapse(const Watched& w, const Probe& p, bool memorized);
VitalSign grad_norm_range(const Watched& w);
VitalSign monitor_health(const Watched& w);
VitalSign input_dependence(const Watched& w);
VitalSign label_balance(const Watched& w, int64_t classes);
VitalSign lr_schedule(const Watched& w);
VitalSign grad_accumulation(const Watched& w);

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
  LossProbe loss;
  std::string bounded;        // bounded_logits
  std::string log_probs;      // log_probability_logits
  GraphProbe graph;
  const Watched* watched = nullptr;  // kWatched
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

}  // namespace spikehunt::doctor_detail
