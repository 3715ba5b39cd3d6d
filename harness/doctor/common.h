// doctor/common.h — what the doctor's signs share (internal to harness/):
// building a VitalSign (sign, fail, skipped), the ranking of failed signs,
// running the user's code as training code (guarded), evaluation mode while
// alive. doctor/run_doctor.cpp assembles the signs; the probes of one family
// live in a file of this folder each (data.cpp: the data and the model as
// handed over, read before training).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "harness/doctor/doctor.h"
#include "harness/record.h"
#include "harness/training_error.h"

namespace spikehunt::doctor_detail {

// How likely a failed sign is the root cause: lower first (VitalSign::rank).
// A cause found by an intervention or read from the data ranks above every
// consequence (overflow, dead units, cannot memorize, collapse, the monitor).
enum Rank {  // as docs/doctor.md's table numbers them
  // A part the experiments found faulty: the signs of that part rank first (kRankInPart below), the
  // experiment itself next.
  kRankExperiment = -50,
  kRankCodeError = 1,
  kRankBadInputValues = 2,
  kRankNanInput = 3,
  kRankLossShapes = 4,
  kRankOneClass = 5,
  kRankTargetLeak = 6,
  kRankBatchComposition = 7,
  kRankInitSymmetry = 8,
  kRankConstantOutput = 9,
  kRankEvalRandom = 10,
  kRankBatchNormBatch = 11,
  kRankCoverage = 12,
  kRankHeldoutInputs = 13,
  kRankInputScale = 14,
  kRankLossMismatch = 15,
  kRankLossScale = 16,
  kRankLossDomain = 17,
  kRankLrSchedule = 18,
  kRankGradAccumulation = 19,
  kRankFrozen = 20,
  kRankOpMakesNaN = 21,
  kRankLossUnstableAfterNaN = 22,  // the loss probe, when the run's own NaN already points at the loss
  kRankShiftedLabels = 23,
  kRankDeadUnits = 24,
  kRankOverflow = 25,
  kRankGradientFlow = 26,
  kRankCollapse = 27,
  kRankOverfit = 28,
  kRankHealth = 29,
  kRankGradRange = 30,
};
// applied_update's findings: the gradient cleared before the step (above optimizer_coverage's "never changes",
// which it explains), an update larger than the rule's (below grad_accumulation's running sum, which it is
// a consequence of).
inline constexpr int kRankUpdateCleared = 11;
// ... and parameters that something other than optimizer_step() rewrites (everything downstream, the eval
// outputs included, follows from it).
inline constexpr int kRankChangedOutside = 8;
inline constexpr int kRankUpdateScale = 20;
// ... and no change at all with the gradient still there: optimizer_coverage's fact (rank 12), just below it.
inline constexpr int kRankUpdateNotApplied = 13;
// The experiments' finding when the swap that made the program learn is a broad one (the optimizer, or the
// model with its optimizer): an optimizer that normalizes its steps also works around faults of other parts
// (a scale, a dead output unit), so every sign that found a cause ranks above it, every consequence below.
inline constexpr int kRankExperimentBroad = 23;
// Added to the rank of a failed sign (at one of its cause ranks) of a part the experiments found faulty.
inline constexpr int kRankInPart = -100;

inline std::string list(const std::vector<std::string>& names, size_t max = 6) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > max) s += " and " + std::to_string(names.size() - max) + " more";
  return s;
}

// A module's class as its name reads: "torch::nn::BatchNorm2d" or a Python class's "BatchNorm2d".
inline std::string module_kind(const std::string& name) {
  return name.substr(name.rfind(':') == std::string::npos ? 0 : name.rfind(':') + 1);
}

// The submodules whose class (as module_kind reads it) `is` accepts: "name (Kind)" each.
template <class Is>
std::vector<std::string> modules_of_kind(torch::nn::Module& model, Is&& is) {
  std::vector<std::string> out;
  for (const auto& m : model.named_modules("", /*include_self=*/false)) {
    const std::string kind = module_kind(m.value()->name());
    if (is(kind)) out.push_back(m.key() + " (" + kind + ")");
  }
  return out;
}

// Token ids of one sequence a sample: (batch, time) integers.
inline bool integer_tokens(const torch::Tensor& t) {
  return t.defined() && !t.is_floating_point() && t.scalar_type() != torch::kBool && t.dim() == 2;
}

inline VitalSign sign(const char* name) {
  VitalSign v;
  v.name = name;
  return v;
}

inline void fail(VitalSign& v, int rank, std::string cause, std::string hint) {
  v.passed = false;
  v.rank = rank;
  v.cause = std::move(cause);
  v.hint = std::move(hint);
}

inline VitalSign skipped(const char* name, const std::string& why) {
  VitalSign v = sign(name);
  v.skipped = true;
  v.evidence = why;
  return v;
}

// Scenario code that is not a training step (a forward on a probe batch,
// held-out data, construction): what it throws is a TrainingError.
template <class F>
auto guarded(const char* stage, F&& f, const ErrorContext& context = {}) -> decltype(f()) {
  return in_training_code(stage, context, std::forward<F>(f));
}

// Evaluation mode (no dropout) while alive.
struct EvalMode {
  explicit EvalMode(torch::nn::Module& m) : model(m), was(m.is_training()) { m.eval(); }
  ~EvalMode() { model.train(was); }
  torch::nn::Module& model;
  bool was;
};

// Keeps the default CPU generator's state: restored when it dies (a probe's
// forward in training mode draws dropout masks).
class KeepRng {
 public:
  KeepRng();
  ~KeepRng();
  KeepRng(const KeepRng&) = delete;
  KeepRng& operator=(const KeepRng&) = delete;
  void reseed(uint64_t seed);  // the same numbers for each pass that reseeds alike

 private:
  torch::Tensor saved_;
};

// The probes of the family files (data.cpp, inputs.cpp, model.cpp, modes.cpp, loss.cpp, loss_weights.cpp,
// optimizers.cpp, graph.cpp). Each reads a fresh scenario (or the
// watched run's records) and says what it measured.
//   batch_composition  the labels of each watched batch against all of them: one class a batch
//   target_leak        targets that are the inputs; outputs at a position that change with the
//                      inputs at later positions (a decoder that sees what it predicts)
//   init_symmetry      at step 0, a weight whose units (rows) are identical and not zero
//   batchnorm_batch_size  BatchNorm trained on batches too small to estimate its statistics
//   loss_scale         the loss of a batch against its halves' losses: a sum over samples, where
//                      the run shows what it did with a mean's learning rate
// The batch's loss over the mean of its halves' losses, in eval mode: 1 for a mean
// over samples, 2 for a sum; NAN when it cannot be measured.
double loss_batch_scaling(Scenario& fresh, const Batch& batch);
// The program's loss against the task's reference loss (doctor/experiments.cpp's reference_loss) on the same
// outputs and targets, at step 0 in eval mode: on the batch, and on each of its halves (consistent: the same
// ratio within 1% on both).
struct LossReference {
  std::string name;  // "cross-entropy", ...; "" when none fits
  double program = NAN, reference = NAN;
  bool consistent = false;
  bool measured() const { return !name.empty() && std::isfinite(program) && std::isfinite(reference) && reference > 0; }
  double ratio() const { return program / reference; }
};
LossReference compare_with_reference(Scenario& fresh, const Batch& batch);
VitalSign loss_scale(double scaling, int64_t batch_size, const std::vector<StepRecord>& records, const Verdict& verdict,
                     const LossReference& reference);
VitalSign batch_composition(const std::vector<StepRecord>& records, int64_t classes);
VitalSign target_leak(Scenario& fresh, const Batch& batch);
VitalSign init_symmetry(Scenario& fresh);
VitalSign batchnorm_batch_size(Scenario& fresh, const Batch& batch);
//   dropout_rate       in training mode every sample gets the same output where eval mode's differ:
//                      something zeroes every activation in training (Dropout with p = 1)
//   target_padding     token targets ending in runs of one token (padding) that the loss counts
VitalSign dropout_rate(Scenario& fresh, const Batch& batch);
//   shared_modules     one module registered under several indexed names of one container
//                      ("layers.0", "layers.1", ...): the layers the code lays out share one set of weights
VitalSign shared_modules(Scenario& fresh);
VitalSign target_padding(Scenario& fresh, const Batch& batch);
//   batch_repeats      watched batches identical (by their inputs' hash) to one of the 8 before them,
//                      in a run of more than 8 distinct batches: the loader repeats batches
//   frozen_parameters  at step 0, every weight (2 or more dimensions) has requires_grad false
//   target_scale       float regression targets whose rms is 100 or more, and 100x the outputs' at step 0
// output_range_miss: every output in (0, 1) or (-1, 1) while 10% or more of the float targets (of the
// outputs' shape) lie outside that range; what was measured, or "" when not.
struct Probe;
VitalSign batch_repeats(const std::vector<StepRecord>& records, const Probe& probe);
VitalSign frozen_parameters(Scenario& fresh);
std::string output_range_miss(const torch::Tensor& outputs, const torch::Tensor& targets);
// bounded_logits: every output of a (B, C) classification in (0, 1) without summing to 1, and the loss
// at the best outputs that range allows (one-hot) still 0.3 or more: what was measured, or "".
std::string bounded_logits(Scenario& fresh, const torch::Tensor& outputs, const Batch& batch);
// log_probability_logits: every output at most 0 (log-probabilities) and the loss at the best outputs that
// range allows (0 where the target is) still 0.05 or more: a loss that applies its own sigmoid or softmax
// given log-probabilities; what was measured, or "". log_softmax before cross-entropy reaches 0 and is not one.
std::string log_probability_logits(Scenario& fresh, const torch::Tensor& outputs, const Batch& batch);
//   batchnorm_momentum  the new batch's weight in BatchNorm's running statistics, measured from the
//                       running mean after one and two training passes of one batch: 0.5 or more
VitalSign batchnorm_momentum(Scenario& fresh, const Batch& batch);
//   init_scale         at step 0, a layer whose weights' std x sqrt(fan-in) is 8 or more and whose output
//                      is that much its input's, with the model's outputs at rms 30 or more (or non-finite)
VitalSign init_scale(Scenario& fresh, const std::vector<ModuleOutput>& modules, const torch::Tensor& outputs);
//   ignored_class      a class whose samples alone give the loss NaN (none counted) or exactly 0 while the
//                      rest's is positive: an ignore_index (or a class weight of 0) equal to a real class
//   heldout_overlap    held-out samples byte-identical to samples of the first training batches
VitalSign ignored_class(Scenario& fresh, const Batch& batch);
//   class_weights      the loss's weight of each class grows with the class's share of the training labels
VitalSign class_weights(Scenario& fresh, const std::vector<Batch>& batches);
//   position_dependence  a sequence input of which the output reads only the first positions
VitalSign position_dependence(Scenario& fresh, const Batch& batch);
//   target_in_inputs   an input feature (of feature-vector inputs) correlated 0.999 or more with a target column
VitalSign target_in_inputs(const std::vector<Batch>& batches);
VitalSign heldout_overlap(const std::vector<Batch>& training, const std::vector<Batch>& heldout, bool has_heldout);
// Each row (sample) of x hashed (XXH3-128 of its bytes).
std::vector<Hash128> sample_hashes(const torch::Tensor& x);
//   label_pairing      across the batches of `steps` steps of a fresh scenario, inputs seen more than once
//                      (8 or more) came with another target each time for half or more of them: inputs and
//                      labels shuffled or sampled apart; skipped when no input repeats
VitalSign label_pairing(const ScenarioFactory& make, int64_t steps);

// doctor/graph.cpp: the autograd graph of a batch's loss (two training-mode passes, same dropout masks).
struct GraphProbe {
  bool measured = false;
  std::vector<std::string> unreached;       // trainable parameters of model() the graph does not reach
  std::vector<std::string> foreign_shapes;  // leaves of the outputs' graph requiring grad, not model()'s parameters
  int64_t foreign_numel = 0;
  bool foreign_rebuilt = false;  // the foreign leaves differ between the two passes (built in forward)
  // 1 when the loss, differentiated, gives the outputs a gradient; 0 when it does not depend on them
  // (it does not require grad, or the gradient is absent or zero); -1 when not measured.
  int loss_reaches_outputs = -1;
};
GraphProbe probe_graph(Scenario& fresh, const Batch& batch);
//   unregistered_parameters  the outputs depend on trainable tensors that are not model()'s parameters
VitalSign unregistered_parameters(const GraphProbe& graph);

// doctor/optimizers.cpp.
// foreign_optimizer_tensors: optimizer_coverage failed, when an optimizer updates tensors that are not
// model()'s parameters (the contract's check, as a sign); nothing otherwise.
std::optional<VitalSign> foreign_optimizer_tensors(Scenario& fresh);
//   optimizer_steps    an optimizer's own step count (`counted`, of parameter `of`; -1: none kept)
//                      above the training steps taken: an update applied twice to one gradient
VitalSign optimizer_steps(int64_t counted, const std::string& of, int64_t steps);
VitalSign target_scale(const Batch& batch, const torch::Tensor& outputs, const std::vector<StepRecord>& records,
                       const Verdict& verdict);

}  // namespace spikehunt::doctor_detail
