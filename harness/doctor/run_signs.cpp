// doctor/run_signs.cpp — the signs read from the watched run's steps
// (doctor/watch.cpp): gradient flow, dead units, the non-finite source, the
// grad norm range, the monitor's verdict, the learning rate applied and
// gradient accumulation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <limits>
#include <set>

#include "base/error.h"
#include "base/number_format.h"
#include "harness/doctor/signs.h"
#include "harness/burst.h"
#include "harness/report.h"

namespace spikehunt::doctor_detail {

using json = nlohmann::json;

// ---- 6. frozen output ----

// ---- 7. gradient flow ----

VitalSign gradient_flow(const Watched& w, const DoctorOptions& o, const GraphProbe& graph) {
  VitalSign v = sign("gradient_flow");
  if (w.records.empty() || w.weights.empty()) return skipped("gradient_flow", "no weights or no step");
  const size_t n = w.weights.size();
  std::vector<double> rms(n, 0.0), peak(n, 0.0);
  std::vector<bool> any(n, false);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < n; ++i) index[w.weights[i]] = i;
  int64_t flow_steps = 0;
  for (const StepRecord& r : w.records) {
    const bool flow = flow_steps < o.flow_steps;
    bool finite = true;
    for (const LayerStats& l : r.layers) finite = finite && std::isfinite(l.grad_norm);
    for (const LayerStats& l : r.layers) {
      auto it = index.find(l.name);
      if (it == index.end() || !std::isfinite(l.grad_norm)) continue;
      const size_t i = it->second;
      peak[i] = std::max(peak[i], l.grad_norm);
      any[i] = any[i] || l.grad_norm > 0;
      if (flow && finite) rms[i] += l.grad_norm / std::sqrt(double(w.weight_numel[i]));
    }
    flow_steps += flow && finite;
  }
  double largest = 0, smallest = INFINITY;
  json layers = json::object();
  std::string table;
  std::vector<std::string> zero, zero_params;
  for (size_t i = 0; i < n; ++i) {
    if (flow_steps > 0) rms[i] /= double(flow_steps);
    const std::string layer = layer_of(w.weights[i]);
    layers[layer] = {{"rms_grad", number(rms[i])}, {"peak_grad_norm", number(peak[i])}};
    if (!w.trainable[i]) continue;  // frozen on purpose
    table += (table.empty() ? "" : ", ") + layer + " " + fmt(rms[i]);
    if (!any[i]) {
      if (std::find(zero.begin(), zero.end(), layer) == zero.end()) zero.push_back(layer);
      zero_params.push_back(w.weights[i]);
      continue;
    }
    largest = std::max(largest, rms[i]);
    smallest = std::min(smallest, rms[i]);
  }
  const double spread = std::isfinite(smallest) && smallest > 0 ? largest / smallest : 1.0;
  v.data = {{"layers", layers}, {"spread", number(spread)}};
  v.evidence = "RMS gradient per weight over the first " + std::to_string(flow_steps) + " steps: " + table +
               " (spread " + fmt(spread) + "x)";
  // Exploding: a layer norm above 100, or the global norm climbing 5 steps running, 10x in all.
  std::vector<std::string> exploding;
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    if (peak[i] > 100) exploding.push_back(layer_of(w.weights[i]));
    worst = std::max(worst, peak[i]);
  }
  bool climbing = false;
  const auto& rec = w.records;
  for (size_t i = 5; i < rec.size() && !climbing; ++i) {
    bool up = true;
    for (size_t k = i - 4; k <= i; ++k) up = up && rec[k].grad_norm > rec[k - 1].grad_norm;
    climbing = up && rec[i].grad_norm >= 10 * rec[i - 5].grad_norm && rec[i].grad_norm > 1;
  }
  size_t trainable = 0;
  for (size_t i = 0; i < n; ++i) trainable += w.trainable[i];
  if (!zero.empty() && zero.size() == trainable && graph.loss_reaches_outputs == 0) {
    v.named = zero;
    v.evidence += "; exactly zero gradient: " + list(zero) + "; the loss of a batch, differentiated, gives the "
                  "outputs no gradient";
    v.part = "loss";
    fail(v, kRankCoverage,
         "no gradient reaches any of the " + std::to_string(trainable) + " trained weights (" + list(zero, 3) +
             "): the loss does not depend on the model's outputs (differentiated, it gives them no gradient), so "
             "its graph is cut between the outputs and the loss",
         "compute the loss from the output tensors: a value taken out with .item(), .detach(), .data or numpy and "
         "put into a new tensor that requires grad trains nothing");
  } else if (!zero.empty()) {
    v.named = zero;
    v.evidence += "; exactly zero gradient: " + list(zero);
    // Whether the loss's graph reaches them at all (read from it: graph.cpp).
    std::vector<std::string> cut;
    for (const std::string& layer : zero) {
      for (const std::string& name : graph.unreached) {
        if (layer_of(name) == layer && std::find(cut.begin(), cut.end(), layer) == cut.end()) cut.push_back(layer);
      }
    }
    // Only the recurrent weights (weight_hh) of an RNN: its input weights get a gradient, so the output reads
    // that direction's state, but only at its first step, before any recurrence has happened.
    const bool recurrent = std::all_of(zero_params.begin(), zero_params.end(), [](const std::string& p) {
      return p.find("weight_hh") != std::string::npos;
    });
    const bool reverse = recurrent && std::all_of(zero_params.begin(), zero_params.end(), [](const std::string& p) {
      return p.find("_reverse") != std::string::npos;
    });
    if (!zero_params.empty() && recurrent) {
      v.named = zero_params;
      fail(v, kRankCoverage,
           "no gradient reaches " + list(zero_params, 3) + ", the recurrent weights of the " +
               (reverse ? "backward direction of a bidirectional RNN" : "RNN") + ", while its input weights get one: "
               "the output reads that direction only at its first step, before any recurrence (" +
               (reverse ? "out[:, -1] holds the backward direction's first step, after the last element alone; its "
                          "summary of the sequence is at out[:, 0], or in h_n"
                        : "out[:, 0] with batch_first holds the state after the first element; the summary of the "
                          "sequence is the last step, out[:, -1], or h_n") +
               ")",
           "read each direction's summary: h_n (the final hidden states), or out[:, -1] of the forward direction "
           "with out[:, 0] of the backward one");
    } else if (graph.measured && cut.size() == zero.size()) {
      v.evidence += "; the loss's autograd graph does not reach them";
      fail(v, kRankCoverage,
           "no gradient reaches " + list(zero, 3) + ": the loss's autograd graph does not reach their parameters, "
               "so they are computed without a graph (under torch.no_grad() or detached) while an optimizer holds "
               "them",
           "compute them with autograd on (remove the no_grad() / detach() around them), or freeze them on purpose "
           "with requires_grad_(False)");
    } else {
      fail(v, kRankGradientFlow, "no gradient reaches " + list(zero, 3),
           "a detach(), a missing path from them to the loss, or units that never fire");
    }
  } else if (!exploding.empty() || climbing) {
    v.named = exploding;
    v.evidence += exploding.empty() ? "; the global grad norm climbed 5 steps running, 10x in all"
                                    : "; grad norm above 100 in " + list(exploding) + " (up to " + fmt(worst) + ")";
    fail(v, kRankGradientFlow,
         exploding.empty() ? "exploding gradients: the global norm climbs 10x in 5 steps"
                           : "exploding gradients in " + list(exploding, 3) + " (norm up to " + fmt(worst) + ")",
         "clip the global grad norm (grad_clip), lower the learning rate, or fix the init scale or the input scale");
  } else if (spread >= 1000) {
    for (size_t i = 0; i < n; ++i) {
      if (w.trainable[i] && rms[i] * 1000 <= largest) v.named.push_back(layer_of(w.weights[i]));
    }
    std::string best;
    for (size_t i = 0; i < n; ++i) {
      if (rms[i] == largest) best = layer_of(w.weights[i]);
    }
    v.evidence += "; vanishing in " + list(v.named);
    fail(v, kRankGradientFlow,
         "vanishing gradients: " + list(v.named, 3) + " get 1,000x less than " + best + " (RMS " + fmt(smallest) +
             " against " + fmt(largest) + ")",
         "use ReLU/GELU instead of saturating activations, a better init, normalization or residual connections");
  }
  return v;
}

// ---- 8. dead units ----

VitalSign dead_units(const Watched& w) {
  VitalSign v = sign("dead_units");
  if (w.units_first.empty() && w.units_last.empty()) return skipped("dead_units", "no hidden activation taps");
  std::map<std::string, std::pair<const UnitLayer*, const UnitLayer*>> by_tap;
  std::vector<std::string> order;
  for (const auto& l : w.units_first) by_tap[l.tap].first = &l, order.push_back(l.tap);
  for (const auto& l : w.units_last) {
    if (!by_tap.count(l.tap)) order.push_back(l.tap);
    by_tap[l.tap].second = &l;
  }
  std::string table, worst, worst_kind;
  double worst_share = 0;
  bool worst_read = false;
  for (const std::string& tap : order) {
    const auto [first, last] = by_tap[tap];
    const UnitLayer& any = first ? *first : *last;
    const double a = first ? first->share() : NAN, b = last ? last->share() : NAN;
    v.data[tap] = {{"kind", any.kind}, {"kind_from", any.read ? "module" : "output range"}, {"units", any.units},
                   {"dead_first", number(a)}, {"dead_last", number(b)}};
    table += (table.empty() ? "" : ", ") + tap + " " + (first ? percent(a) : "n/a") + " -> " + (last ? percent(b) : "n/a") +
             " of " + std::to_string(any.units) + (any.kind == "rectifier" ? "" : " (" + any.kind + ")");
    const double share = std::max(first ? a : 0.0, last ? b : 0.0);
    if (share >= kDeadShare) {
      v.named.push_back(tap);
      if (share > worst_share) {
        worst_share = share, worst_kind = any.kind, worst_read = any.read;
        worst = tap + " (" + any.kind + ")";
      }
    }
  }
  v.evidence = "units dead on every held-out sample, start -> end: " + table + " (flagged at " + percent(kDeadShare) + ")";
  if (!v.named.empty()) {
    // Dead from the start: what the initialization made; dead only after training: what the steps did.
    bool from_start = false;
    for (const auto& l : w.units_first) from_start = from_start || l.share() >= kDeadShare;
    v.part = from_start ? "init" : "model";
    fail(v, kRankDeadUnits,
         percent(worst_share) + " of the units of " + worst +
             (worst_kind == "rectifier" ? " are dead (never positive)" : " are saturated") + " on every held-out sample" +
             (worst_read ? "" : " (its kind read from its output range: no module of that name)"),
         "dead rectifiers: check the bias init (large negative values) or lower the learning rate, or use LeakyReLU; "
         "saturated sigmoid/tanh: scale the init down (Xavier) or normalize the pre-activations");
  }
  return v;
}

// ---- 9. non-finite source ----

// The largest finite magnitude among a step's statistics.
double magnitude(const StepRecord& r) {
  double m = 0;
  for (double x : {std::fabs(r.loss), r.output_max, r.activation_max, r.grad_max, r.state_max}) {
    if (std::isfinite(x)) m = std::max(m, x);
  }
  return m;
}

VitalSign non_finite_source(const Watched& w, const LossProbe& probe, const std::vector<ModuleOutput>& modules) {
  VitalSign v = sign("non_finite_source");
  if (!w.verdict.fault) {
    v.evidence = "every step of " + std::to_string(w.records.size()) + " stayed finite";
    return v;
  }
  const Fault& f = *w.verdict.fault;
  const int64_t step = *w.verdict.failure_step;
  v.named = {f.tensor};
  v.evidence = "step " + std::to_string(step) + ": " + f.describe();
  // Overflow: finite values past 1e30 at the fault or the step before, or magnitudes grown 1,000x.
  const size_t n = w.records.size();
  const double at_fault = n ? magnitude(w.records.back()) : 0, before = n >= 2 ? magnitude(w.records[n - 2]) : 0;
  std::vector<double> early;
  for (size_t i = 0; i + 1 < n && i < 5; ++i) early.push_back(magnitude(w.records[i]));
  std::sort(early.begin(), early.end());
  const double baseline = early.empty() ? 0 : early[early.size() / 2];
  const double peak = std::max(at_fault, before);
  const bool overflow = peak >= 1e30 || (baseline > 0 && peak >= 1e3 * baseline && peak >= 1e4);
  const double output_max = n ? w.records.back().output_max : 0;
  v.data = {{"fault", to_json(f)}, {"step", step}, {"peak_finite", number(peak)},
            {"early_magnitude", number(baseline)}, {"output_max", number(output_max)}};
  if (f.tensor == "input") {
    v.part = "data";
    v.evidence += ": in the data itself";
    fail(v, kRankNanInput, "the training data holds NaN/Inf (step " + std::to_string(step) + ")",
         "find the bad samples in the data pipeline (a division by a zero std, a missing value) and fix or drop them");
  } else if (overflow) {
    v.evidence += "; finite values had reached " + fmt(peak) + " (" + fmt(baseline) + " in the first steps)";
    v.data["kind"] = "overflow";
    fail(v, kRankOverflow,
         "float32 overflow: values grew to " + fmt(peak) + " before step " + std::to_string(step) + " went non-finite",
         "the learning rate is too high or the gradients explode: lower the learning rate, clip the grad norm "
         "(grad_clip), check the init and input scale");
  } else if (f.stage == Stage::kLoss) {
    v.part = "loss";
    v.evidence += ", from finite outputs (max |output| " + fmt(output_max) + ")";
    v.data["kind"] = "loss";
    if (probe.shift_ran && !std::isfinite(probe.shifted)) {
      v.data["loss_probe"] = "exp_overflow";
      fail(v, kRankOpMakesNaN,
           "the loss itself makes NaN/Inf from finite outputs: exp overflows in a hand-written softmax (adding 100 to "
           "every output, which a softmax ignores, makes the loss " + fmt(probe.shifted) + ")",
           "subtract each row's max before exp, or use log_softmax / cross_entropy on the logits");
    } else {
      fail(v, kRankOpMakesNaN,
           "the loss itself makes NaN/Inf from finite, moderate outputs: log(0), 0 x log(0) or a division by zero",
           "add an epsilon, or use log_softmax / cross_entropy instead of log(softmax)");
    }
  } else if (f.stage == Stage::kForward) {
    v.evidence += ", from finite, moderate values before it";
    v.data["kind"] = "forward";
    v.part = "model";
    // The first module, in the order the modules finished, whose output holds NaN/Inf while its inputs did not
    // (read on the fixed batch at step 0: a fault the program makes from its first step).
    const ModuleOutput* first = nullptr;
    for (const ModuleOutput& m : modules) {
      if (m.non_finite > 0 && m.inputs_finite) {
        first = &m;
        break;
      }
    }
    if (first != nullptr) {
      const std::string where = (first->name.empty() ? std::string("the model's own forward") : first->name) +
                                (first->kind.empty() ? "" : " (" + first->kind + ")");
      v.named = {first->name.empty() ? f.tensor : first->name};
      v.data["first_module"] = {{"name", first->name}, {"kind", first->kind}, {"non_finite", first->non_finite},
                                {"numel", first->numel}};
      v.evidence += "; at step 0 the first module to output NaN/Inf from finite inputs is " + where;
      // What kind: +-Inf without NaN from moderate values is what a division by zero makes (x / 0 keeps x's
      // sign), -Inf alone what log(0) makes, NaN what 0/0, sqrt(-x), inf - inf or a softmax over -inf make.
      std::string kind;
      if (first->nan == 0 && first->pos_inf > 0 && first->neg_inf > 0) {
        kind = " (" + std::to_string(first->pos_inf) + " +Inf and " + std::to_string(first->neg_inf) + " -Inf, no NaN: "
               "what a division by zero makes, x / 0 keeping x's sign)";
      } else if (first->nan == 0 && first->neg_inf > 0 && first->pos_inf == 0) {
        kind = " (all -Inf, no NaN: what log(0) makes)";
      } else if (first->nan > 0) {
        kind = " (" + std::to_string(first->nan) + " NaN: what 0/0, sqrt of a negative number, inf - inf or a softmax "
               "over a row that is all -inf makes)";
      }
      fail(v, kRankOpMakesNaN,
           "an operation in the forward makes NaN/Inf from finite values: from the first step, " + where + " turns "
               "finite inputs into " + std::to_string(first->non_finite) + " NaN/Inf of " + std::to_string(first->numel) +
               " outputs" + kind,
           "read that module's forward for log(0), a division by zero (a zero variance or norm: an epsilon outside "
           "the sqrt), sqrt of a negative number, exp of a large one, or a softmax over a row that is all -inf (a "
           "mask that hides every position)");
    } else {
      fail(v, kRankOpMakesNaN, "an operation in the forward makes NaN/Inf at " + f.tensor + " from finite, moderate values",
           "look for log(0), a division by zero (a zero std or norm), sqrt of a negative number or exp of a large one "
           "right before that tap");
    }
  } else if (f.stage == Stage::kBackward) {
    v.evidence += ", with a finite loss";
    v.data["kind"] = "backward";
    fail(v, kRankOpMakesNaN, "the backward makes a non-finite gradient (" + f.tensor + ") from a finite loss",
         "an operation whose derivative is infinite at its input: sqrt(0), pow(x, 0.5) at 0, the norm of a zero "
         "vector, acos(1); add an epsilon inside it");
  } else {
    v.data["kind"] = "optimizer_step";
    fail(v, kRankOverflow, "the optimizer step makes " + f.tensor + " non-finite from finite gradients",
         "the update overflows (learning rate x gradient) or divides by a tiny second moment (Adam's eps): lower the "
         "learning rate, raise eps, clip");
  }
  return v;
}

// ---- 10. prediction collapse ----

// ---- 11. grad norm range ----

VitalSign grad_norm_range(const Watched& w) {
  VitalSign v = sign("grad_norm_range");
  std::vector<double> norms;
  for (const StepRecord& r : w.records) {
    if (std::isfinite(r.grad_norm)) norms.push_back(r.grad_norm);
  }
  if (norms.empty()) return skipped("grad_norm_range", "no finite gradient norm");
  std::sort(norms.begin(), norms.end());
  const double median = norms[norms.size() / 2];
  v.data = {{"median", median}, {"min", norms.front()}, {"max", norms.back()}};
  v.evidence = "global grad norm: median " + fmt(median) + ", range " + fmt(norms.front()) + " to " + fmt(norms.back()) +
               " (sane: median 0.001 to 10, peak up to 1000)";
  if (median < 1e-3) {
    fail(v, kRankGradRange, "the gradients are tiny (median norm " + fmt(median) + ")",
         "vanishing gradients, dead units or a detached path");
  } else if (median > 10 || norms.back() > 1e3) {
    fail(v, kRankGradRange,
         median > 10 ? "the gradients are large (median norm " + fmt(median) + ")"
                     : "the gradient norm spikes to " + fmt(norms.back()) + " (median " + fmt(median) + ")",
         "lower the learning rate or clip the grad norm (grad_clip)");
  }
  return v;
}

// ---- 12. the monitor's verdict ----

VitalSign monitor_health(const Watched& w) {
  VitalSign v = sign("monitor_health");
  const Verdict& r = w.verdict;
  v.data = to_json(r);
  if (!r.onset_step) {
    v.evidence = "no extreme or non-finite step in " + std::to_string(r.steps_run) + " (the config's health rules)";
    return v;
  }
  const std::string rules = onset_rules_text(r);
  v.named = r.onset_rules;
  v.evidence = "step " + std::to_string(*r.onset_step) + " went " +
               (r.onset_rules.size() == 1 && r.onset_rules[0] == "non_finite" ? "non-finite" : "extreme") + ": " + rules;
  if (r.failure_step) v.evidence += "; non-finite at step " + std::to_string(*r.failure_step);
  const std::string movers = describe_movers(r.movers, *r.onset_step);
  if (!movers.empty()) v.evidence += "; moved first: " + movers;
  fail(v, kRankHealth, "the monitor flags step " + std::to_string(*r.onset_step) + " (" + rules + ")",
       "see `spikehunt run` on this config for the steps around it; the rules are under health.* in the config");
  return v;
}

// The applied learning rate must not fall to a negligible share of its peak early.
VitalSign lr_schedule(const Watched& w) {
  VitalSign v = sign("lr_schedule");
  if (w.records.size() < 3) return skipped("lr_schedule", "fewer than 3 steps");
  double peak = 0, last = 0;
  int64_t fell = -1;
  const int64_t planned = std::max<int64_t>(w.verdict.planned_steps, int64_t(w.records.size()));
  for (const StepRecord& r : w.records) {
    peak = std::max(peak, r.lr);
    last = r.lr;
    if (fell < 0 && peak > 0 && r.lr < 0.01 * peak) fell = r.step;
  }
  // A warm-up that starts over: a one-step drop back to the first step's learning rate from twice it or more.
  int64_t restart = -1;
  double before = 0;
  const double first = w.records.front().lr;
  for (size_t i = 1; i < w.records.size() && restart < 0 && first > 0; ++i) {
    const double prev = w.records[i - 1].lr, now = w.records[i].lr;
    if (prev >= 2 * first && std::fabs(now - first) <= 0.01 * first) restart = w.records[i].step, before = prev;
  }
  // A rise too slow to reach the optimizers' own learning rate within the program's plan: the slope of the
  // last half of the steps, extrapolated.
  int64_t reaches = -1;
  if (w.nominal_lr > 0 && peak > 0 && peak < 0.1 * w.nominal_lr && w.records.size() >= 20) {
    const size_t half = w.records.size() / 2;
    const StepRecord &a = w.records[half], &z = w.records.back();
    const double slope = z.step > a.step ? (z.lr - a.lr) / double(z.step - a.step) : 0;
    reaches = slope > 0 ? z.step + int64_t((w.nominal_lr - z.lr) / slope) : std::numeric_limits<int64_t>::max();
  }
  v.data = {{"peak", peak}, {"last", last}, {"fell_below_1pct_at", fell}, {"planned_steps", planned},
            {"restarted_at", restart}, {"nominal_lr", w.nominal_lr}, {"reaches_nominal_at", reaches}};
  v.evidence = "applied learning rate: peak " + fmt(peak) + ", " + fmt(last) + " at step " +
               std::to_string(w.records.back().step) + " of " + std::to_string(planned) + " planned";
  if (peak == 0) {
    v.named = {"schedule"};
    fail(v, kRankLrSchedule,
         "the learning rate applied is 0 at every one of the " + std::to_string(w.records.size()) +
             " watched steps: no step can change a parameter",
         "a warm-up whose factor starts at 0 and whose scheduler is never stepped (scheduler.step() missing), a "
         "factor or learning rate of 0, or a schedule that has already ended");
  } else if (reaches > planned) {
    v.named = {"schedule"};
    fail(v, kRankLrSchedule,
         "the learning rate applied stays far below the optimizers' own (" + fmt(w.nominal_lr) + "): it reached " +
             fmt(peak) + " (" + percent(peak / w.nominal_lr) + ") by step " + std::to_string(w.records.back().step) +
             (reaches == std::numeric_limits<int64_t>::max()
                  ? ", and it is not rising"
                  : ", and at its pace it reaches " + fmt(w.nominal_lr) + " at step " + std::to_string(reaches)) +
             ", after the " + std::to_string(planned) + " steps planned: a warm-up (or schedule) longer than the run",
         "count the warm-up in optimizer steps of this run (a few percent of the planned steps), not in samples or "
         "in another run's steps");
  } else if (restart >= 0) {
    v.named = {"schedule"};
    fail(v, kRankLrSchedule,
         "the learning rate goes back to its starting value at step " + std::to_string(restart) + " (from " +
             fmt(before) + " to " + fmt(first) + ", its value at step " + std::to_string(w.records.front().step) +
             "): the warm-up starts over instead of finishing (the highest it reached: " + fmt(peak) + ")",
         "count the warm-up by the global step, not the step within the epoch");
  } else if (fell >= 0 && double(fell) < 0.25 * double(planned)) {
    v.named = {"schedule"};
    fail(v, kRankLrSchedule,
         "the learning rate falls to under 1% of its peak (" + fmt(peak) + ") by step " + std::to_string(fell) +
             " of " + std::to_string(planned) + " planned",
         "a scheduler stepped per batch where it was meant per epoch, a decay factor or step size off by orders "
         "of magnitude: training stops learning early");
  }
  return v;
}

// The gradient the optimizer applies is the gradient of this step's loss:
// what optimizer_step() leaves in .grad, against what backward computed (the
// monitor's grad norm). A ratio that keeps growing step after step is a sum
// of gradients that is never reset (a missing zero_grad() in the user's own
// step, a running sum); clipping or weight decay keep it flat.
VitalSign grad_accumulation(const Watched& w) {
  VitalSign v = sign("grad_accumulation");
  const size_t n = std::min(w.grads_after_step.size(), w.records.size());
  if (n < 8) return skipped("grad_accumulation", "fewer than 8 steps");
  std::vector<double> ratio;
  for (size_t i = 0; i < n; ++i) {
    const double g = w.records[i].grad_norm;
    ratio.push_back(g > 0 && std::isfinite(g) ? w.grads_after_step[i] / g : 1.0);
  }
  auto mean = [&](size_t from, size_t to) {
    double s = 0;
    for (size_t i = from; i < to; ++i) s += ratio[i];
    return s / double(std::max<size_t>(to - from, 1));
  };
  const double first = ratio[0], last = mean(n - n / 4, n);
  v.data = {{"ratio_first_step", number(first)}, {"ratio_last_quarter", number(last)}};
  v.evidence = "gradient left after optimizer_step() / gradient of the step's loss: x" + fmt(first) +
               " at the first step, x" + fmt(last) + " over the last quarter of " + std::to_string(n) + " steps";
  if (last >= 2 && last >= 1.5 * first) {
    v.named = {"optimizer_step"};
    fail(v, kRankGradAccumulation,
         "the gradients applied keep growing against the loss's own (x" + fmt(first) + " -> x" + fmt(last) +
             "): gradients are summed across steps and never reset",
         "zero the gradients (or the running sum) every step: optimizer.zero_grad() before backward, or clear "
         "the accumulator after it is applied");
  }
  return v;
}

}  // namespace spikehunt::doctor_detail
