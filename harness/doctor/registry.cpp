// doctor/registry.cpp — every vital sign, one row each, in the report's order:
// when it runs (Stage), the ranks it can fail at, whether it is a consequence
// (and of which signs' causes), and how it reads the Context. run_doctor walks
// this table; annotate_consequences, `doctor --signs`, --json's sign list and
// the DoctorRegistry tests (docs/doctor.md's table) read it. A new sign is its
// function in a file of this folder and one row here.
#include <cmath>
#include <map>

#include "harness/doctor/signs.h"

namespace spikehunt::doctor_detail {

namespace {

std::map<std::string, int64_t> warning_map(const std::vector<WarningCount>& counts) {
  std::map<std::string, int64_t> m;
  for (const WarningCount& w : counts) m[w.message] += w.count;
  return m;
}

const Batch& first(const Context& c) { return c.probe.batches.front(); }

// The start may leave it open (small logits make softmax twice look like once; a bounded output
// that merely starts small): checked on the trained model and against the outputs after the run.
void recheck_outputs(VitalSign& m, Context& c) {
  const Watched& w = *c.watched;
  if (m.passed && w.trained) {
    VitalSign again = loss_output_mismatch(*w.trained, first(c));
    if (!again.passed) again.evidence += " (after " + std::to_string(w.records.size()) + " steps)", m = again;
  }
  if (!m.passed || !w.outputs_after.defined()) return;
  const std::string steps = std::to_string(w.records.size());
  const std::string start = output_range_miss(c.first_out, first(c).targets);
  const std::string end = start.empty() ? std::string() : output_range_miss(w.outputs_after, first(c).targets);
  const bool still_bounded = !c.bounded.empty() && w.outputs_after.min().item<double>() >= 0 &&
                             w.outputs_after.max().item<double>() <= 1;
  const bool still_log_probs = !c.log_probs.empty() && w.outputs_after.max().item<double>() <= 0;
  if (still_log_probs) {
    m.evidence += "; " + c.log_probs + " (at step 0, and every output still at most 0 after " + steps + " steps)";
    m.named = {"output activation"};
    fail(m, kRankLossMismatch, c.log_probs,
         "give the loss the raw scores (logits): drop the log-sigmoid (or log-softmax) before a loss that applies its "
         "own sigmoid (binary_cross_entropy_with_logits), or give the log-probabilities to a loss that takes them "
         "(nll_loss)");
  } else if (still_bounded) {
    m.evidence += "; " + c.bounded + " (at step 0, and every output still in (0, 1) after " + steps + " steps)";
    m.named = {"output activation"};
    fail(m, kRankLossMismatch, c.bounded,
         "give the loss the raw scores (logits): cross-entropy applies its own softmax, so drop the sigmoid "
         "(or use it only to read probabilities outside the loss)");
  } else if (!end.empty()) {
    m.evidence += "; at step 0 " + start + "; after " + steps + " steps " + end;
    m.named = {"output activation"};
    fail(m, kRankLossMismatch,
         "the targets lie outside the outputs' range: " + end + " (after " + steps +
             " steps; at step 0 too): the output can never reach them",
         "end the model in an activation whose range holds the targets (none for regression), or map the "
         "targets into the output's range (e.g. (y + 1) / 2 for -1/+1 labels)");
  }
}

bool classification(const Context& c) {
  const torch::Tensor& out = c.first_out;
  const torch::Tensor& y = first(c).targets;
  return (out.dim() == 2 && out.size(1) > 1 && class_ids(y)) || binary_targets(out, y);
}

bool memorized(const Context& c) {
  const VitalSign* overfit = c.report.find("overfit_one_batch");
  return overfit && overfit->passed && !overfit->skipped;
}

}  // namespace

const std::vector<SignSpec>& registry() {
  using S = SignStage;
  static const std::vector<SignSpec> kSigns = {
      {"training_code_error", S::kCode, {kRankCodeError}},
      {"input_scale", S::kFresh, {kRankBadInputValues, kRankInputScale}, 0, {},
       [](Context& c) { return input_scale(c.probe); }},
      {"target_leak", S::kFresh, {kRankTargetLeak}, 0, {}, [](Context& c) { return target_leak(*c.fresh, first(c)); }},
      {"target_in_inputs", S::kFresh, {kRankTargetLeak}, 0, {}, [](Context& c) { return target_in_inputs(c.probe.batches); }},
      {"init_symmetry", S::kFresh, {kRankInitSymmetry}, 0, {}, [](Context& c) { return init_symmetry(*c.fresh); }},
      {"frozen_parameters", S::kFresh, {kRankCoverage}, 0, {}, [](Context& c) { return frozen_parameters(*c.fresh); }},
      {"batchnorm_batch_size", S::kFresh, {kRankBatchNormBatch}, 0, {},
       [](Context& c) { return batchnorm_batch_size(*c.fresh, first(c)); }},
      {"batchnorm_momentum", S::kFresh, {kRankBatchNormBatch}, 0, {},
       [](Context& c) { return batchnorm_momentum(*c.fresh, first(c)); }},
      {"dropout_rate", S::kFresh, {kRankEvalRandom}, 0, {}, [](Context& c) { return dropout_rate(*c.fresh, first(c)); }},
      {"shared_modules", S::kFresh, {kRankInitSymmetry}, 0, {}, [](Context& c) { return shared_modules(*c.fresh); }},
      {"target_padding", S::kFresh, {kRankTargetLeak}, 0, {},
       [](Context& c) { return target_padding(*c.fresh, first(c)); }},
      {"loss_output_mismatch", S::kFresh, {kRankLossMismatch}, 0, {},
       [](Context& c) { return loss_output_mismatch(*c.fresh, first(c)); }, recheck_outputs},
      {"position_dependence", S::kProbed, {kRankConstantOutput}, 0, {},
       [](Context& c) { return position_dependence(*c.fresh, first(c)); }},
      {"init_scale", S::kProbed, {kRankInitSymmetry}, 0, {},
       [](Context& c) { return init_scale(*c.fresh, c.modules, c.first_out); }},
      {"unregistered_parameters", S::kProbed, {kRankInitSymmetry}, 0, {},
       [](Context& c) { return unregistered_parameters(c.graph); }},
      {"ignored_class", S::kProbed, {kRankTargetLeak}, 0, {},
       [](Context& c) { return ignored_class(*c.fresh, first(c)); }},
      {"class_weights", S::kProbed, {kRankLossMismatch}, 0, {},
       [](Context& c) { return class_weights(*c.fresh, c.probe.batches); }},
      {"overfit_one_batch", S::kOwn, {kRankShiftedLabels, kRankOverfit}, kRankOverfit,
       {"loss_output_mismatch", "loss_shapes", "target_leak", "target_padding", "init_symmetry", "dropout_rate",
        "shared_modules", "optimizer_coverage", "batchnorm_batch_size", "frozen_output", "input_scale", "loss_scale",
        "frozen_parameters", "target_scale", "init_scale", "applied_update"},
       [](Context& c) { return overfit_one_batch(c.make, c.probe, c.options); }},
      {"label_pairing", S::kOwn, {kRankBatchComposition}, 0, {},
       [](Context& c) { return label_pairing(c.make, c.options.steps); }},
      {"eval_consistency", S::kWatched, {kRankEvalRandom}, 0, {},
       [](Context& c) {
         std::unique_ptr<Scenario> fresh = guarded("setup", c.make);  // its probes change batch norm's statistics
         return eval_consistency(*fresh, c.probe, *c.watched);
       }},
      {"eval_scale", S::kWatched, {kRankEvalRandom}, 0, {},
       [](Context& c) { return eval_scale(c.watched->trained.get(), c.probe); }},
      {"loss_shapes", S::kWatched, {kRankLossShapes}, 0, {},
       [](Context& c) { return loss_shapes(c.first_out, first(c), c.loss, warning_map(c.warnings.counts())); }},
      {"label_balance", S::kWatched, {kRankOneClass}, 0, {},
       [](Context& c) { return label_balance(*c.watched, c.probe.classes, c.probe.batches); }},
      {"batch_composition", S::kWatched, {kRankBatchComposition}, 0, {},
       [](Context& c) { return batch_composition(c.watched->records, c.probe.classes); }},
      {"batch_repeats", S::kWatched, {kRankBatchComposition}, 0, {},
       [](Context& c) { return batch_repeats(c.watched->records, c.probe); }},
      {"target_scale", S::kWatched, {kRankInputScale}, 0, {},
       [](Context& c) { return target_scale(first(c), c.first_out, c.watched->records, c.watched->verdict); }},
      {"input_dependence", S::kWatched, {kRankConstantOutput, kRankCollapse}, 0, {},
       [](Context& c) { return input_dependence(*c.watched); }},
      {"applied_update", S::kWatched, {kRankChangedOutside, kRankUpdateCleared, kRankCoverage, kRankUpdateNotApplied,
                                        kRankUpdateScale}, 0, {},
       [](Context& c) { return applied_update(c.watched->update, *c.watched); }},
      {"optimizer_coverage", S::kWatched, {kRankCoverage}, 0, {},
       [](Context& c) { return optimizer_coverage(*c.watched, c.optimizers); }},
      {"heldout_inputs", S::kWatched, {kRankHeldoutInputs}, 0, {}, [](Context& c) { return heldout_inputs(c.probe); }},
      {"heldout_overlap", S::kWatched, {kRankHeldoutInputs, kRankInputScale}, 0, {},
       [](Context& c) { return heldout_overlap(c.probe.batches, c.probe.heldout, c.probe.has_heldout); }},
      {"optimizer_steps", S::kWatched, {kRankCoverage}, 0, {},
       [](Context& c) {
         const Watched& w = *c.watched;
         return optimizer_steps(w.optimizer_state_steps, w.optimizer_state_of, int64_t(w.records.size()));
       }},
      {"loss_domain", S::kWatched, {kRankLossDomain, kRankLossUnstableAfterNaN}, 0, {},
       [](Context& c) { return loss_domain(*c.watched, c.loss, classification(c)); }},
      {"loss_scale", S::kWatched, {kRankLossScale}, 0, {},
       [](Context& c) {
         return loss_scale(c.scaling, first(c).inputs.size(0), c.watched->records, c.watched->verdict, c.reference);
       }},
      {"lr_schedule", S::kWatched, {kRankLrSchedule}, 0, {}, [](Context& c) { return lr_schedule(*c.watched); }},
      {"grad_accumulation", S::kWatched, {kRankGradAccumulation}, 0, {},
       [](Context& c) { return grad_accumulation(*c.watched); }},
      {"frozen_output", S::kWatched, {kRankFrozen}, 0, {},
       [](Context& c) { return frozen_output(*c.watched, c.probe); }},
      {"gradient_flow", S::kWatched, {kRankCoverage, kRankGradientFlow}, kRankGradientFlow,
       {"init_symmetry", "init_scale", "loss_scale", "input_scale", "dropout_rate", "shared_modules",
        "optimizer_coverage", "target_scale", "unregistered_parameters", "position_dependence"},
       [](Context& c) { return gradient_flow(*c.watched, c.options, c.graph); }},
      {"dead_units", S::kWatched, {kRankDeadUnits}, kRankDeadUnits, {"init_symmetry", "init_scale", "input_scale", "loss_scale"},
       [](Context& c) { return dead_units(*c.watched); }},
      {"non_finite_source", S::kWatched, {kRankNanInput, kRankOpMakesNaN, kRankOverflow}, kRankOverflow,
       {"loss_scale", "input_scale", "loss_output_mismatch", "init_symmetry", "init_scale", "target_scale", "applied_update"},
       [](Context& c) { return non_finite_source(*c.watched, c.loss, c.modules); }},
      {"prediction_collapse", S::kWatched, {kRankCollapse}, kRankCollapse,
       {"batch_composition", "batch_repeats", "label_pairing", "batchnorm_momentum", "label_balance", "class_weights", "target_leak", "init_symmetry",
        "dropout_rate", "batchnorm_batch_size", "loss_output_mismatch", "monitor_health"},
       [](Context& c) { return prediction_collapse(*c.watched, c.probe, memorized(c)); }},
      {"grad_norm_range", S::kWatched, {kRankGradRange}, kRankGradRange,
       {"loss_scale", "input_scale", "init_symmetry", "init_scale", "target_scale"},
       [](Context& c) { return grad_norm_range(*c.watched); }},
      {"faulty_part", S::kWatched, {kRankExperiment, kRankExperimentBroad}, 0, {},
       [](Context& c) { return faulty_part(*c.experiments, c.options.steps); }},
      {"monitor_health", S::kWatched, {kRankHealth}, kRankHealth,
       {"loss_scale", "input_scale", "batch_composition", "loss_output_mismatch", "init_symmetry", "init_scale",
        "target_scale", "lr_schedule", "class_weights"},
       [](Context& c) { return monitor_health(*c.watched); }},
  };
  return kSigns;
}

std::string sign_part(const std::string& name) {
  static const std::map<std::string, std::string> kParts = {
      {"input_scale", "data"}, {"target_leak", "data"}, {"label_balance", "data"}, {"batch_composition", "data"},
      {"batch_repeats", "data"}, {"target_in_inputs", "data"}, {"label_pairing", "data"}, {"target_scale", "data"}, {"heldout_overlap", "data"},
      {"heldout_inputs", "data"}, {"batchnorm_batch_size", "data"},
      {"init_symmetry", "init"}, {"init_scale", "init"},
      {"frozen_parameters", "model"}, {"batchnorm_momentum", "model"}, {"dropout_rate", "model"},
      {"shared_modules", "model"}, {"unregistered_parameters", "model"}, {"eval_consistency", "model"},
      {"input_dependence", "model"}, {"position_dependence", "model"}, {"frozen_output", "model"}, {"gradient_flow", "model"},
      {"loss_output_mismatch", "loss"}, {"loss_shapes", "loss"}, {"target_padding", "loss"}, {"ignored_class", "loss"},
      {"loss_domain", "loss"}, {"loss_scale", "loss"}, {"class_weights", "loss"},
      {"optimizer_coverage", "optimizer"}, {"lr_schedule", "schedule"}, {"eval_scale", "evaluation"},
      {"optimizer_steps", "step"}, {"grad_accumulation", "step"}, {"applied_update", "step"},
  };
  const auto it = kParts.find(name);
  return it == kParts.end() ? std::string() : it->second;
}

bool scale_sign(const std::string& name) {
  return name == "input_scale" || name == "target_scale" || name == "loss_scale" || name == "init_scale";
}

const SignSpec* find_spec(const std::string& name) {
  for (const SignSpec& s : registry()) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

}  // namespace spikehunt::doctor_detail
