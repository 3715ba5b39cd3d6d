// doctor/run_doctor.cpp — the doctor's walk: the probe batches, the registry's
// signs stage by stage (fresh scenario, shared probes, scenarios of their own,
// the watched run and the experiments), the consequences annotated, the ranks
// set by what the experiments found, and the report checked for
// contradictions (consistency.cpp) before it is returned.
#include "harness/doctor/doctor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "base/error.h"
#include "base/number_format.h"
#include "harness/burst.h"
#include "harness/doctor/signs.h"
#include "harness/report.h"
#include "harness/training_error.h"
#include "harness/warnings.h"
#include "scenarios/models.h"
#include "scenarios/optimizers.h"

namespace spikehunt {

using json = nlohmann::json;
using namespace doctor_detail;

bool DoctorReport::passed() const {
  return std::all_of(signs.begin(), signs.end(), [](const VitalSign& s) { return s.passed; });
}

const VitalSign* DoctorReport::find(const std::string& name) const {
  for (const VitalSign& s : signs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

VitalSign* DoctorReport::find_mutable(const std::string& name) {
  return const_cast<VitalSign*>(find(name));
}

const VitalSign* DoctorReport::top() const {
  const VitalSign* best = nullptr;
  for (const VitalSign& s : signs) {
    if (!s.passed && (best == nullptr || s.rank < best->rank)) best = &s;
  }
  return best;
}

namespace doctor_detail {

// ---- 1. training code error ----

VitalSign code_error_sign(const TrainingError& e) {
  VitalSign v = sign("training_code_error");
  v.evidence = "the " + e.stage() + " stage threw: " + e.message();
  v.named = {e.stage()};
  v.data = {{"stage", e.stage()}, {"message", e.message()}, {"cause", e.cause()}, {"full", e.full()}};
  fail(v, kRankCodeError,
       e.cause().empty() ? "the training code throws in the " + e.stage() + " stage: " + e.message()
                         : e.cause() + " (the " + e.stage() + " stage throws)",
       e.cause().empty() ? "read the message; --verbose shows its whole text (LibTorch's backtrace, or the Python traceback)" : e.cause());
  return v;
}

// ---- 2. input scale ----

// ---- 3. optimizer coverage ----

// ---- 5. overfit one batch ----

// ---- assembling ----

Probe probe_scenario(Scenario& s, const DoctorOptions& o, DoctorReport* report) {
  Probe p;
  report->parameters = parameter_count(s.model());
  for (const NamedOptimizer& opt : s.optimizers()) {
    const size_t groups = opt.optimizer->param_groups().size();
    report->optimizers.push_back(opt.name + (groups > 1 ? " (" + std::to_string(groups) + " groups)" : ""));
  }
  Trainer trainer(s);
  for (int i = 0; i < 4; ++i) {
    std::vector<Batch> b = trainer.next_batches();
    if (b.empty()) break;
    p.batches.insert(p.batches.end(), b.begin(), b.end());
  }
  if (p.batches.empty()) return p;
  p.heldout = guarded("data", [&] { return s.heldout(o.heldout_samples); });
  p.has_heldout = !p.heldout.empty();
  if (!p.has_heldout) p.heldout = p.batches;
  const torch::Tensor out = fixed_outputs(s, p.batches.front());
  p.output_tail = out.sizes().vec();
  if (!p.output_tail.empty()) p.output_tail.erase(p.output_tail.begin());
  p.classes = out.dim() == 2 ? out.size(1) : s.num_classes();
  return p;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A sign that sees a consequence (cannot memorize, overflow, dead units, no
// gradient, collapse, a flagged step, a grad norm out of range) says so and
// names the probes of the causes it can have (SignSpec::causes): the failed
// ones (ranked above it) and the passed ones (ruled out). Nothing is inferred
// beyond that.
void annotate_consequences(DoctorReport& report) {
  for (VitalSign& v : report.signs) {
    const SignSpec* spec = find_spec(v.name);
    if (v.passed || v.skipped || spec == nullptr || spec->consequence_rank == 0) continue;
    if (v.rank != spec->consequence_rank) continue;  // at its other ranks it found a cause
    std::vector<std::string> failed, passed;
    for (const char* c : spec->causes) {
      const VitalSign* s = report.find(c);
      if (s == nullptr || s->skipped) continue;
      (s->passed ? passed : failed).push_back(c);
    }
    v.data["consequence_of"] = failed;
    v.data["causes_ruled_out"] = passed;
    v.cause += failed.empty() ? " (a consequence, its cause not found: " + list(passed, 12) + " passed)"
                              : " (a consequence: " + list(failed) + " failed" +
                                    (passed.empty() ? "" : "; " + list(passed, 12) + " passed") + ")";
  }
}

// When the experiments found the faulty part, the failed signs of that part (at a rank where they name a
// cause) come first, and the experiment's own sign next: a cause found by swapping the part outranks
// what any probe read elsewhere. The other signs keep their ranks.
void rank_by_experiment(DoctorReport& report, const Experiments& e) {
  if (e.parts.empty() || e.winners.size() > 1) return;  // several parts each made it learn: none is named
  const VitalSign* experiment = report.find("faulty_part");
  const int found_at = experiment && !experiment->passed ? experiment->rank : kRankExperiment;
  for (VitalSign& v : report.signs) {
    if (v.passed || v.skipped || v.name == "faulty_part" || v.rank == kRankCodeError) continue;
    const bool in_part = std::find(e.parts.begin(), e.parts.end(), v.part) != e.parts.end();
    const bool scale = scale_sign(v.name) && std::find(e.parts.begin(), e.parts.end(), "optimizer") != e.parts.end();
    if (!in_part && !scale) continue;
    const SignSpec* spec = find_spec(v.name);
    const bool consequence = spec != nullptr && spec->consequence_rank != 0 && v.rank == spec->consequence_rank;
    // A cause of that part first; a consequence of that part (what the part's fault did, in numbers) just above
    // the experiment's own sign.
    v.rank = consequence ? found_at - 1 : v.rank + kRankInPart;
    v.data["found_by_experiment"] = true;
  }
}

// Runs the registry's signs of one stage, in order, timed.
void run_stage(SignStage stage, Context& c, DoctorReport& report) {
  for (const SignSpec& spec : registry()) {
    if (spec.stage != stage) continue;
    const Clock::time_point start = Clock::now();
    VitalSign v = spec.run(c);
    v.seconds = seconds_since(start);
    if (v.part.empty()) v.part = sign_part(spec.name);
    report.signs.push_back(std::move(v));
  }
}

}  // namespace
}  // namespace doctor_detail

std::vector<SignInfo> doctor_signs() {
  std::vector<SignInfo> out;
  for (const doctor_detail::SignSpec& s : doctor_detail::registry()) {
    SignInfo i;
    i.name = s.name;
    i.part = sign_part(s.name);
    i.ranks = s.ranks;
    if (s.consequence_rank != 0) {
      i.consequence_rank = s.consequence_rank;
      i.causes.assign(s.causes.begin(), s.causes.end());
    }
    out.push_back(std::move(i));
  }
  return out;
}

DoctorReport run_doctor(const ScenarioFactory& make, const DoctorOptions& o) {
  DoctorReport report;
  auto rest_skipped = [&](const std::string& why) {
    for (const SignSpec& spec : registry()) {
      if (report.find(spec.name) == nullptr) report.signs.push_back(skipped(spec.name, why));
    }
  };
  WarningCounter warnings;  // every LibTorch warning while the doctor runs the code, its bursts' too
  report.signs.push_back(sign("training_code_error"));
  try {
    std::unique_ptr<Scenario> s = guarded("setup", make);
    report.scenario = s->config().scenario;
    const Probe p = probe_scenario(*s, o, &report);
    if (p.batches.empty()) {
      rest_skipped("the scenario has no training batch");
      return report;
    }
    Context c{make, o, p, report, warnings};
    c.fresh = s.get();
    c.optimizers = s->optimizers().size();
    if (std::optional<VitalSign> foreign = foreign_optimizer_tensors(*s)) {
      report.signs.front().evidence = "the training code's setup ran without throwing";
      report.signs.push_back(*foreign);
      rest_skipped("an optimizer updates tensors that are not model()'s parameters: nothing can be watched");
      return report;
    }
    parameter_slots(*s);  // the contract: every optimized tensor is a model parameter, none in two optimizers
    run_stage(SignStage::kFresh, c, report);  // before any step changes the parameters
    c.first_out = [&] {
      torch::NoGradGuard no_grad;
      return guarded("forward", [&] { return s->forward(p.batches.front().inputs, Tap()); }).detach();
    }();
    const Clock::time_point probe_start = Clock::now();
    c.scaling = loss_batch_scaling(*s, p.batches.front());
    c.reference = compare_with_reference(*s, p.batches.front());
    c.loss = probe_loss(*s, c.first_out, p.batches.front());
    c.bounded = bounded_logits(*s, c.first_out, p.batches.front());
    c.log_probs = log_probability_logits(*s, c.first_out, p.batches.front());
    c.graph = probe_graph(*s, p.batches.front());
    c.modules = guarded("forward", [&] { return s->module_outputs(p.batches.front().inputs); });
    const double probe_seconds = seconds_since(probe_start);
    run_stage(SignStage::kProbed, c, report);
    c.fresh = nullptr;
    s.reset();
    run_stage(SignStage::kOwn, c, report);
    const Clock::time_point run_start = Clock::now();
    const Watched w = watch(make, p, o);
    report.run_seconds = seconds_since(run_start);
    if (w.verdict.outcome == Outcome::kCrashed) {
      throw TrainingError(w.verdict.crash_stage, w.verdict.message, w.verdict.crash_cause, w.verdict.message);
    }
    c.watched = &w;
    for (const SignSpec& spec : registry()) {
      if (spec.after_watch) spec.after_watch(*report.find_mutable(spec.name), c);
    }
    const Clock::time_point experiments_start = Clock::now();
    const Experiments experiments = run_experiments(make, p, w, o.steps, c.reference);
    const double experiments_seconds = seconds_since(experiments_start);
    c.experiments = &experiments;
    run_stage(SignStage::kWatched, c, report);
    report.find_mutable("loss_domain")->seconds += probe_seconds;
    report.find_mutable("faulty_part")->seconds += experiments_seconds;
    annotate_consequences(report);
    rank_by_experiment(report, experiments);
    check_consistency(report, /*repair=*/true);
    report.contradictions = check_consistency(report, /*repair=*/false);
    report.signs.front().evidence = "the training code ran " + std::to_string(w.records.size()) + " steps without throwing";
  } catch (const TrainingError& e) {
    report.signs.front() = code_error_sign(e);
    rest_skipped("the training code threw");
  } catch (const std::logic_error& e) {  // the scenario breaks its contract (scenario.h)
    report.signs.front() = code_error_sign(TrainingError("setup", e.what(), e.what(), e.what()));
    rest_skipped("the scenario breaks the contract of scenario.h");
  }
  return report;
}

}  // namespace spikehunt
