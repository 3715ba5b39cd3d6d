// doctor/optimizers.cpp — probes of who updates what: tensors an optimizer
// holds that are not model()'s parameters (read before anything runs), every
// trainable parameter held by an optimizer and changed by the watched run
// (optimizer_coverage), and an optimizer's own step count against the
// training steps taken.
#include <map>
#include <optional>
#include <set>

#include "harness/doctor/signs.h"
#include "scenarios/optimizers.h"

namespace spikehunt::doctor_detail {

// The contract's check (parameter_slots) as a sign, before it throws: tensors
// an optimizer updates that are not model()'s parameters. When the
// optimizer's foreign tensors have the shapes of model()'s unheld parameters,
// one for one, that is what another instance of the model looks like.
std::optional<VitalSign> foreign_optimizer_tensors(Scenario& s) {
  std::map<const void*, std::string> own;
  std::vector<std::pair<std::string, torch::Tensor>> model_params;
  for (const auto& item : s.model().named_parameters()) {
    own[item.value().unsafeGetTensorImpl()] = item.key();
    model_params.push_back({item.key(), item.value()});
  }
  std::set<const void*> held;
  std::vector<torch::Tensor> foreign;
  std::string holder;
  for (const NamedOptimizer& o : s.optimizers()) {
    for (const auto& g : o.optimizer->param_groups()) {
      for (const torch::Tensor& t : g.params()) {
        if (own.count(t.unsafeGetTensorImpl())) {
          held.insert(t.unsafeGetTensorImpl());
        } else {
          foreign.push_back(t);
          if (holder.empty()) holder = o.name;
        }
      }
    }
  }
  if (foreign.empty()) return std::nullopt;
  std::vector<std::string> unheld;
  std::vector<torch::Tensor> unheld_tensors;
  for (const auto& [name, t] : model_params) {
    if (!held.count(t.unsafeGetTensorImpl()) && t.requires_grad()) unheld.push_back(name), unheld_tensors.push_back(t);
  }
  bool same_shapes = !unheld.empty() && unheld.size() == foreign.size();
  for (size_t i = 0; same_shapes && i < foreign.size(); ++i) same_shapes = foreign[i].sizes() == unheld_tensors[i].sizes();
  VitalSign v = sign("optimizer_coverage");
  v.data = {{"not_optimized", unheld}, {"foreign_tensors", foreign.size()}, {"same_shapes_in_order", same_shapes}};
  v.evidence = "optimizer \"" + holder + "\" updates " + std::to_string(foreign.size()) +
               " tensor(s) that are not parameters of model() (the first of shape " + c10::str(foreign.front().sizes()) +
               "); " + std::to_string(unheld.size()) + " of model()'s trainable parameters are held by no optimizer";
  if (!unheld.empty()) {
    v.named = unheld;
    fail(v, kRankCoverage,
         "no optimizer updates " + list(unheld, 3) + ": they stay at their initial values, while optimizer \"" +
             holder + "\" updates " + std::to_string(foreign.size()) + " tensor(s) that are not model()'s" +
             (same_shapes ? ", shaped exactly as model()'s unheld parameters, one for one: the parameters of another "
                            "instance of the model (one built again after its optimizer, or a copy)"
                          : ""),
         "build the optimizer over the parameters of the model that is trained, after the model's last construction "
         "(and after moving it to its device)");
  } else {
    fail(v, kRankCoverage,
         "optimizer \"" + holder + "\" updates a tensor of shape " + c10::str(foreign.front().sizes()) +
             " that is not a parameter of model()",
         "register it in the model (register_parameter / register_module) so it is monitored and checkpointed");
  }
  return v;
}

// The optimizer's own step count (Adam's, AdamW's, ...) against the steps
// watched: more optimizer steps than training steps is an update applied
// twice to one gradient. Fewer is gradient accumulation, which passes.
VitalSign optimizer_steps(int64_t counted, const std::string& of, int64_t steps) {
  VitalSign v = sign("optimizer_steps");
  if (counted < 0) return skipped("optimizer_steps", "no optimizer keeps a step count");
  v.data = {{"optimizer_steps", counted}, {"training_steps", steps}, {"parameter", of}};
  v.evidence = "the optimizer's step count of " + of + " is " + std::to_string(counted) + " after " +
               std::to_string(steps) + " training steps";
  if (counted > steps && steps > 0) {
    v.named = {of};
    fail(v, kRankCoverage,
         "the optimizer stepped " + std::to_string(counted) + " times in " + std::to_string(steps) +
             " training steps (its step count of " + of + "): an update is applied more than once "
             "to one gradient",
         "call optimizer.step() once per update: a step inside an accumulation clause and another after it applies "
         "the same gradient twice");
  }
  return v;
}

// Measured over the watched run: a trainable parameter no declared optimizer
// updates fails only when it also stayed at its initial value (something else,
// e.g. a second optimizer stepped inside optimizer_step(), may move it: then it
// is named as unmonitored); an optimized parameter that had gradients but
// never changed fails too (the step is never applied).
VitalSign optimizer_coverage(const Watched& w, size_t optimizers) {
  VitalSign v = sign("optimizer_coverage");
  std::vector<std::string> missing, moved_elsewhere, never_changed;
  int64_t trainable = 0;
  for (const Watched::Param& p : w.params) {
    if (!p.trainable) continue;
    ++trainable;
    if (p.optimizer < 0) (p.changed ? moved_elsewhere : missing).push_back(p.name);
    else if (p.had_grad && !p.changed) never_changed.push_back(p.name);
  }
  const bool measured = !w.records.empty() && w.verdict.outcome != Outcome::kCrashed;
  v.data = {{"trainable", trainable}, {"not_optimized", missing}, {"changed_by_other_code", moved_elsewhere},
            {"optimized_but_unchanged", never_changed}, {"steps", w.records.size()}};
  v.evidence = std::to_string(trainable) + " trainable parameter tensor(s), " + std::to_string(optimizers) +
               " optimizer(s)" + (measured ? ", compared before and after " + std::to_string(w.records.size()) + " steps" : "");
  if (!moved_elsewhere.empty()) {
    v.named = moved_elsewhere;
    v.evidence += "; " + list(moved_elsewhere) + " changed though no declared optimizer holds them: something else "
                  "updates them, so spikehunt neither monitors nor checkpoints their optimizer state (declare that "
                  "optimizer in optimizers())";
  }
  if (!missing.empty()) {
    v.named = missing;
    v.evidence += "; no optimizer updates " + list(missing) + (measured ? ", and they did not change" : "");
    fail(v, kRankCoverage, "no optimizer updates " + list(missing, 3) + ": they stay at their initial values",
         "pass every parameter to an optimizer (model->parameters()), or freeze them on purpose with "
         "requires_grad(false)");
  } else if (measured && !never_changed.empty()) {
    v.named = never_changed;
    v.part = "step";
    v.evidence += "; " + list(never_changed) + " had nonzero gradients but never changed";
    fail(v, kRankCoverage,
         "the optimizer never changes " + list(never_changed, 3) + " though they have gradients",
         "the update is not applied: is optimizer.step() called (an overridden optimizer_step() that forgets it), "
         "is the learning rate 0, or is the step undone afterwards?");
  }
  return v;
}

}  // namespace spikehunt::doctor_detail
