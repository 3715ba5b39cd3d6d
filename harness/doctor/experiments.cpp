// doctor/experiments.cpp — the doctor as a shrinker of the program: when the
// program as written does not learn, short bursts with one part of it swapped
// for a reference that any correct program of its kind could use (the data,
// the initialization, the loss, the step, the optimizer, the model), and the
// smallest swap that makes it learn names the faulty part. Learning is read
// the way a user reads it, on held-out data in eval mode without gradients,
// by a task skill that is 0 at chance (task_skill); the evaluation is a part
// too: a model that learns in training mode and not in eval mode.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include <ATen/CPUGeneratorImpl.h>

#include "base/number_format.h"
#include "harness/doctor/signs.h"
#include "harness/trainer.h"
#include "scenarios/models.h"
#include "scenarios/optimizers.h"

namespace spikehunt::doctor_detail {

using json = nlohmann::json;

namespace {

bool failing(const Trial& b) {
  if (!b.finite) return true;
  if (!std::isfinite(b.skill_end)) return false;
  if (b.skill_end <= -0.2) return true;  // it learns the opposite
  if (b.extreme) return true;  // the monitor flagged a step: what does a swap do to it?
  // It unlearns what it could, its own loss rising with it (a loss that falls while the held-out skill drops
  // optimizes something the task's skill does not measure: a framework's labels shifted inside its loss).
  if (std::isfinite(b.skill_start) && b.skill_end < b.skill_start - 0.2 && !b.loss_falling()) return true;
  return b.skill_end < 0.2 && b.skill_end - (std::isfinite(b.skill_start) ? b.skill_start : 0) < 0.1 && !b.loss_falling();
}

std::string learning_text(const Trial& t, int64_t steps) {
  std::string s = "held-out " + t.metric + " " + t.skill_text(false) + " -> " + t.skill_text(true);
  if (std::isfinite(t.loss_first) && std::isfinite(t.loss_last)) s += ", its loss " + fmt(t.loss_first) + " -> " + fmt(t.loss_last);
  if (!t.finite) s += ", non-finite after " + std::to_string(t.steps) + " steps";
  else s += " in " + std::to_string(steps) + " steps";
  return s;
}

}  // namespace

Experiments run_experiments(const ScenarioFactory& make, const Probe& p, const Watched& w, int64_t steps,
                            const LossReference& reference) {
  Experiments e;
  e.reference = reference;
  Trial& b = e.baseline;
  b.swap = "";
  b.what = "the program as written";
  b.ran = !w.records.empty();
  b.steps = int64_t(w.records.size());
  b.finite = !w.verdict.failure_step;
  b.extreme = w.verdict.onset_step.has_value();
  b.metric = w.skill_start.metric;
  b.skill_start = w.skill_start.value, b.raw_start = w.skill_start.raw;
  b.skill_end = w.skill_end.value, b.raw_end = w.skill_end.raw;
  b.skill_end_train = w.skill_end_train.value, b.raw_end_train = w.skill_end_train.raw;
  for (const StepRecord& r : w.records) b.losses.push_back(r.loss);
  if (!w.records.empty()) {
    const size_t n = w.records.size(), tenth = std::max<size_t>(n / 10, 1);
    double first = 0, last = 0;
    for (size_t i = 0; i < tenth; ++i) first += w.records[i].loss, last += w.records[n - 1 - i].loss;
    b.loss_first = first / double(tenth), b.loss_last = last / double(tenth);
  }
  if (b.metric.empty() || (!std::isfinite(b.skill_start) && b.finite)) {
    e.unmeasured = "no held-out skill to read: the outputs and targets are not class ids, binary targets or real "
                   "values of the outputs' size";
    return e;
  }
  // The evaluation: learned in training mode, not in eval mode.
  if (b.finite && std::isfinite(b.skill_end_train) && std::isfinite(b.skill_end) && b.skill_end_train >= 0.3 &&
      b.skill_end <= b.skill_end_train - 0.25) {
    e.parts = {"evaluation"};
    return e;
  }
  e.failing = failing(b);
  if (!e.failing) return e;
  {  // The program's optimizers as they are set, for the text.
    std::unique_ptr<Scenario> s = guarded("setup", make);
    for (const NamedOptimizer& o : s->optimizers()) {
      const std::map<std::string, double> set = group_settings(*o.optimizer, 0);
      std::string d = optimizer_kind(*o.optimizer);
      for (const char* k : {"lr", "momentum", "weight_decay", "eps", "beta1", "beta2"}) {
        if (set.count(k) && (set.at(k) != 0 || std::string(k) == "lr")) d += std::string(" ") + k + " " + fmt(set.at(k));
      }
      e.program_optimizer += (e.program_optimizer.empty() ? "" : "; ") + d;
    }
  }
  for (Swap s : {Swap::kData, Swap::kInit, Swap::kLoss, Swap::kLrDown, Swap::kStep, Swap::kOptimizer, Swap::kModel}) {
    if (s == Swap::kLrDown && b.finite && !b.extreme) continue;  // for a run that blew up or went extreme
    e.swaps.push_back(run_trial(make, s, p, std::max<int64_t>(b.steps, steps)));
    // A learning rate off by orders of magnitude (in the wrong units): a hundredth, then a thousandth.
    for (double factor : {0.01, 0.001}) {
      if (s != Swap::kLrDown || e.swaps.back().learned() || e.swaps.back().finite) break;
      e.swaps.back() = run_trial(make, s, p, std::max<int64_t>(b.steps, steps), factor);
    }
  }
  // The winning swaps, then the smallest of them: none whose parts hold another winner's.
  std::vector<const Trial*> winners;
  for (const Trial& t : e.swaps) {
    const bool better = !b.finite || !std::isfinite(b.skill_end) || t.skill_end >= b.skill_end + 0.15;
    if (t.learned() && better) winners.push_back(&t);
  }
  auto parts_of = [](const Trial& t) {
    for (Swap s : {Swap::kData, Swap::kInit, Swap::kLoss, Swap::kLrDown, Swap::kStep, Swap::kOptimizer, Swap::kModel}) {
      if (t.swap == swap_name(s)) return swap_parts(s);
    }
    return std::vector<std::string>{};
  };
  for (const Trial* t : winners) {
    const std::vector<std::string> mine = parts_of(*t);
    bool minimal = true;
    for (const Trial* o : winners) {
      if (o == t) continue;
      const std::vector<std::string> theirs = parts_of(*o);
      minimal = minimal && !(theirs.size() < mine.size() &&
                             std::all_of(theirs.begin(), theirs.end(), [&](const std::string& x) {
                               return std::find(mine.begin(), mine.end(), x) != mine.end();
                             }));
    }
    if (minimal) e.winners.push_back(t->swap);
  }
  for (const std::string& w2 : e.winners) {
    for (const Trial& t : e.swaps) {
      if (t.swap != w2) continue;
      for (const std::string& part : parts_of(t)) {
        if (std::find(e.parts.begin(), e.parts.end(), part) == e.parts.end()) e.parts.push_back(part);
      }
    }
  }
  return e;
}

// ---- the sign ----

VitalSign faulty_part(const Experiments& e, int64_t steps) {
  VitalSign v = sign("faulty_part");
  const Trial& b = e.baseline;
  json trials = json::array();
  for (const Trial* t : [&] {
         std::vector<const Trial*> all = {&b};
         for (const Trial& s : e.swaps) all.push_back(&s);
         return all;
       }()) {
    trials.push_back({{"swap", t->swap.empty() ? "none" : t->swap}, {"what", t->what}, {"ran", t->ran}, {"error", t->error},
                      {"steps", t->steps}, {"finite", t->finite}, {"metric", t->metric},
                      {"skill_start", number(t->skill_start)}, {"skill_end", number(t->skill_end)},
                      {"skill_end_train_mode", number(t->skill_end_train)}, {"metric_start", number(t->raw_start)},
                      {"metric_end", number(t->raw_end)}, {"loss_first", number(t->loss_first)},
                      {"loss_last", number(t->loss_last)}, {"learned", t->learned()}});
  }
  v.data = {{"trials", trials}, {"failing", e.failing}, {"parts", e.parts}, {"winners", e.winners}};
  if (!e.unmeasured.empty()) return skipped("faulty_part", e.unmeasured);
  v.evidence = "the program as written: " + learning_text(b, b.steps);
  if (e.parts == std::vector<std::string>{"evaluation"}) {
    v.part = "evaluation";
    v.named = {"evaluation"};
    v.evidence += "; in training mode (without gradients) the held-out " + b.metric + " is " +
                  (b.metric == "accuracy" ? percent(b.raw_end_train) : fmt(b.raw_end_train));
    fail(v, kRankExperiment,
         "the faulty part is the evaluation: after " + std::to_string(b.steps) + " steps the model predicts the held-out "
             "data with " + b.metric + " " + (b.metric == "accuracy" ? percent(b.raw_end_train) : fmt(b.raw_end_train)) +
             " in training mode but " + b.skill_text(true) + " in eval mode, as users evaluate it (model.eval(), no "
             "gradients): what runs only in eval mode (another copy of the weights such as an EMA, a branch on "
             "self.training, a mode-dependent layer) does not follow the training",
         "evaluate the weights that train, or check what forward() does when self.training is False");
    return v;
  }
  if (!e.failing) {
    v.evidence += b.loss_falling() && b.skill_end < 0.2 ? ": it learns (its loss falls), no part swapped"
                                                        : ": it learns, no part swapped";
    return v;
  }
  std::string tried;
  for (const Trial& t : e.swaps) {
    tried += "; " + t.what + ": " + (t.ran ? learning_text(t, t.steps) : "not run (" + t.error + ")");
  }
  v.evidence += tried;
  if (e.winners.empty()) {
    // Nothing swapped made it learn either: too short for the experiment to tell, or two parts at once.
    VitalSign none = skipped("faulty_part", v.evidence + ": no single part swapped for a reference makes it learn in " +
                                                std::to_string(b.steps) + " steps either, so the experiment names no part "
                                                "(a longer run, doctor --steps, or two faulty parts at once)");
    none.data = v.data;
    return none;
  }
  const Trial* win = nullptr;
  for (const Trial& t : e.swaps) {
    if (t.swap == e.winners.front()) win = &t;
  }
  std::vector<std::string> stay;
  for (const Trial& t : e.swaps) {
    if (t.ran && !t.learned()) stay.push_back(t.swap);
  }
  v.part = win->swap;
  v.named = e.winners;
  const bool inverted = b.finite && std::isfinite(b.skill_end) && b.skill_end <= -0.2;
  // One narrow swap names the part; a broad one (an optimizer that normalizes its steps works around faults
  // elsewhere), or several parts each making it learn (a fragile run that any change tips), name it weakly.
  const bool broad = !e.strong();
  std::vector<std::string> parts;
  for (const std::string& w : e.winners) parts.push_back(w == "learning_rate" ? "optimizer's learning rate" : w);
  std::string cause;
  if (e.winners.size() == 1) {
    cause = "the faulty part is the " + parts[0] + ": with " + win->what + ", " + learning_text(*win, win->steps) +
            ", where the program as written gives " + learning_text(b, b.steps);
  } else {
    // Several swaps each make it learn: say each, and name none alone.
    cause = "the program learns with any one of " + std::to_string(e.winners.size()) + " parts swapped (" +
            list(parts, 4) + "), where as written it gives " + learning_text(b, b.steps);
    for (const Trial& t : e.swaps) {
      if (std::find(e.winners.begin(), e.winners.end(), t.swap) == e.winners.end()) continue;
      cause += "; with " + t.what + ", " + learning_text(t, t.steps);
    }
  }
  if (!e.program_optimizer.empty() &&
      (std::find(e.winners.begin(), e.winners.end(), "optimizer") != e.winners.end() ||
       std::find(e.winners.begin(), e.winners.end(), "learning_rate") != e.winners.end())) {
    cause += " (the program's optimizer: " + e.program_optimizer + ")";
  }
  if (inverted) cause += " (below chance: its outputs rank the classes the opposite way, as if its targets were inverted)";
  // What in the part differs from the reference, measured.
  for (const Trial& t : e.swaps) {
    if (std::find(e.winners.begin(), e.winners.end(), t.swap) != e.winners.end() && !t.detail.empty()) cause += "; " + t.detail;
  }
  if (std::find(e.winners.begin(), e.winners.end(), "loss") != e.winners.end() && e.reference.measured()) {
    const LossReference& r = e.reference;
    const std::string numbers = "at step 0 it is " + fmt(r.program) + " where " + r.name + " of the same outputs and "
                                "targets is " + fmt(r.reference);
    if (r.program < 0) cause += "; the program's loss goes below 0: " + numbers;
    else if (r.ratio() >= 5 && r.consistent) cause += "; the program's loss is scaled, " + fmt(r.ratio()) + "x " + r.name + ": " + numbers;
    else if (r.program - r.reference > 0.5 * r.reference) {
      cause += "; the program's loss holds a term besides the outputs' error (" + fmt(r.program - r.reference) +
               " more): " + numbers;
    } else if (std::fabs(r.ratio() - 1) < 0.05) {
      cause += "; the program's loss equals " + r.name + " at step 0 (" + fmt(r.program) + "): they part in training";
    } else {
      cause += "; the program's loss differs from " + r.name + ": " + numbers;
    }
  }
  if (!stay.empty()) cause += "; swapping the " + list(stay, 6) + " does not make it learn";
  v.data["broad"] = broad;
  fail(v, broad ? kRankExperimentBroad : kRankExperiment, cause,
       "compare that part of the program with the reference that worked: the other signs say what in it differs");
  return v;
}

}  // namespace spikehunt::doctor_detail
