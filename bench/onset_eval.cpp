#include "bench/onset_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "harness/health.h"
#include "harness/report.h"

namespace spikehunt {

LabelledRun load_run(const std::string& trace_path, const std::string& name, double diverge_factor) {
  std::ifstream in(trace_path);
  if (!in) throw InputError(trace_path, "", "", "cannot be read", "give the trace.jsonl of a spikehunt run");
  LabelledRun run;
  run.name = name.empty() ? trace_path : name;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(trace_path, "line " + std::to_string(n), "", std::string("is not JSON: ") + e.what());
    }
    StepRecord r = step_record_from_json(j, trace_path + ":" + std::to_string(n));
    run.classes = std::max<int64_t>(run.classes, j.value("classes", int64_t(r.label_histogram.size())));
    if (r.health == Health::kNonFinite && !run.failure_step) {
      run.failure_step = r.step;
      run.failure = "non-finite";
    }
    run.records.push_back(std::move(r));
  }
  if (run.records.empty()) throw InputError(trace_path, "", "", "has no steps");
  if (diverge_factor > 0) {  // the first step of kDivergedSteps whose losses all stand past factor x the best before them
    const std::vector<StepRecord>& rs = run.records;
    double best_loss = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i + size_t(kDivergedSteps) <= rs.size(); ++i) {
      if (run.failure_step && rs[i].step >= *run.failure_step) break;
      bool stays = true;
      for (size_t j = i; j < i + size_t(kDivergedSteps) && stays; ++j) stays = rs[j].loss > diverge_factor * best_loss;
      if (stays) {
        run.failure_step = rs[i].step;
        run.failure = "diverged";
        break;
      }
      if (std::isfinite(rs[i].loss)) best_loss = std::min(best_loss, rs[i].loss);
    }
  }
  if (!run.failure_step) run.recovers = loss_left_the_rails(run.records, run.classes).has_value();
  return run;
}

std::optional<int64_t> RunScore::lead() const {
  if (!failure || !onset) return std::nullopt;
  return std::max<int64_t>(0, *failure - *onset);  // flagged only after it failed: no warning
}

RunScore score_run(const LabelledRun& run, const HealthRules& rules) {
  HealthJudge judge(rules, run.classes);
  RunScore s;
  s.failure = run.failure_step;
  for (StepRecord r : run.records) {  // a copy: the judge rewrites health, rules and hits
    judge.judge(r);
    if (r.health == Health::kFinite) continue;
    ++s.flagged_steps;
    for (const std::string& rule : r.rules) ++s.rule_steps[rule];
    if (!s.onset) {
      s.onset = r.step;
      s.onset_hits = r.hits;
      s.movers = r.movers;
    }
  }
  return s;
}

int64_t RuleSetScore::lead_min() const { return leads.empty() ? 0 : *std::min_element(leads.begin(), leads.end()); }

double RuleSetScore::lead_median() const {
  if (leads.empty()) return 0;
  std::vector<int64_t> v = leads;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? double(v[n / 2]) : (double(v[n / 2 - 1]) + double(v[n / 2])) / 2;
}

double RuleSetScore::false_alarms_per_10k() const {
  return healthy_steps == 0 ? 0 : 1e4 * double(flagged_healthy_steps) / double(healthy_steps);
}

namespace {

template <typename Score>
RuleSetScore score_runs(const std::vector<LabelledRun>& runs, const std::string& name, Score score_one) {
  RuleSetScore score;
  score.name = name;
  for (const LabelledRun& run : runs) {
    const RunScore s = score_one(run);
    if (run.failure_step) {
      ++score.failing;
      const int64_t lead = s.lead().value_or(0);
      score.leads.push_back(lead);
      if (lead == 0) ++score.missed;
      if (lead < kShortLead) ++score.short_leads;
      if (!s.onset_hits.empty()) ++score.first_rules[s.onset_hits.front().rule];
    } else if (run.recovers) {
      ++score.recovering;
      score.flagged_recovering_steps += s.flagged_steps;
    } else {
      ++score.healthy;
      score.healthy_steps += int64_t(run.records.size());
      score.flagged_healthy_steps += s.flagged_steps;
      if (s.flagged_steps > 0) ++score.healthy_runs_flagged;
      for (const auto& [rule, n] : s.rule_steps) score.healthy_rules[rule] += n;
    }
  }
  return score;
}

// A score from the rule (empty: not flagged) each step of the run fired.
RunScore score_marks(const LabelledRun& run, const std::vector<std::string>& marks) {
  RunScore s;
  s.failure = run.failure_step;
  for (size_t i = 0; i < marks.size(); ++i) {
    if (marks[i].empty()) continue;
    ++s.flagged_steps;
    ++s.rule_steps[marks[i]];
    if (!s.onset) {
      s.onset = run.records[i].step;
      RuleHit hit;
      hit.rule = marks[i];
      s.onset_hits.push_back(hit);
    }
  }
  return s;
}

bool finite(double v) { return std::isfinite(v); }

struct MeanSd {
  double mean = 0, sd = 0;  // the population standard deviation
};
template <typename Values>
MeanSd mean_sd(const Values& values) {
  MeanSd m;
  if (values.empty()) return m;
  for (double x : values) m.mean += x;
  m.mean /= double(values.size());
  double var = 0;
  for (double x : values) var += (x - m.mean) * (x - m.mean);
  m.sd = std::sqrt(var / double(values.size()));
  return m;
}

// Megatron-LM's spiky-loss check (RerunStateMachine.is_unexpectedly_large,
// threshold 10, as its training loop calls it on the loss): the largest |loss|
// of the first 100 steps is the reference; a later loss at or above 10x it is
// flagged. Its NaN check (check_for_nan_in_loss) flags a non-finite loss.
RunScore megatron(const LabelledRun& run) {
  std::vector<std::string> marks(run.records.size());
  double max_seen = 0;
  int64_t samples = 0;
  for (size_t i = 0; i < run.records.size(); ++i) {
    const double v = std::fabs(run.records[i].loss);
    if (!finite(v)) {
      marks[i] = "non_finite_loss";
    } else if (samples < 100) {
      ++samples;
      max_seen = std::max(max_seen, v);
    } else if (v >= 10 * max_seen) {
      marks[i] = "loss_10x_max";
    }
  }
  return score_marks(run, marks);
}

// OLMo's spike rule: a value more than 6 standard deviations from the mean of
// the last 128 finite steps, on the loss and on the gradient norm, judged once
// the window is full (the OLMo 2 report counts spikes against a rolling
// window). A non-finite loss is flagged (OLMo's trainer stops on it).
RunScore olmo(const LabelledRun& run) {
  std::vector<std::string> marks(run.records.size());
  std::deque<double> losses, norms;
  auto z_above = [](const std::deque<double>& w, double v) {
    if (w.size() < 128) return false;
    const MeanSd m = mean_sd(w);
    return m.sd > 0 && std::fabs(v - m.mean) > 6 * m.sd;
  };
  for (size_t i = 0; i < run.records.size(); ++i) {
    const StepRecord& r = run.records[i];
    if (!finite(r.loss)) {
      marks[i] = "non_finite_loss";
      continue;
    }
    if (z_above(losses, r.loss)) marks[i] = "loss_z6";
    else if (finite(r.grad_norm) && z_above(norms, r.grad_norm)) marks[i] = "grad_norm_z6";
    losses.push_back(r.loss);
    if (finite(r.grad_norm)) norms.push_back(r.grad_norm);
    if (losses.size() > 128) losses.pop_front();
    if (norms.size() > 128) norms.pop_front();
  }
  return score_marks(run, marks);
}

// Lightning's SpikeDetection (lightning.fabric.utilities.spike) with its
// defaults: mode "min", window 10, warmup 1, rtol 2, atol off, finite_only: a
// loss that is worse than the last accepted one and at least 3x the running
// mean of the last 10 accepted losses is a spike, and so is a non-finite
// loss; a spike is not taken into the running mean.
RunScore lightning(const LabelledRun& run) {
  std::vector<std::string> marks(run.records.size());
  std::deque<double> window;
  double last = 0;
  for (size_t i = 0; i < run.records.size(); ++i) {
    const double v = run.records[i].loss;
    if (!finite(v)) {
      marks[i] = "non_finite_loss";
      continue;
    }
    if (i >= 1 && !window.empty()) {
      const double mean = mean_sd(window).mean;
      if (v > last && std::fabs(v - mean) >= 2 * std::fabs(mean)) {
        marks[i] = "loss_spike_rtol2";
        continue;
      }
    }
    window.push_back(v);
    if (window.size() > 10) window.pop_front();
    last = v;
  }
  return score_marks(run, marks);
}

// ZClip (Kumar et al. 2025, bluorion-com/ZClip) with its defaults: alpha 0.97,
// z threshold 2.5, 25 warm-up steps that set the EMA mean and variance of the
// gradient norm; a norm whose z-score is above 2.5 is flagged (ZClip clips
// it), and the EMA takes the clipped norm, as ZClip does. A non-finite norm
// is flagged.
RunScore zclip(const LabelledRun& run) {
  std::vector<std::string> marks(run.records.size());
  std::vector<double> warm;
  double mean = 0, var = 0;
  for (size_t i = 0; i < run.records.size(); ++i) {
    const double g = run.records[i].grad_norm;
    if (!finite(g)) {
      marks[i] = "non_finite_grad_norm";
      continue;
    }
    if (warm.size() < 25) {
      warm.push_back(g);
      if (warm.size() == 25) {
        const MeanSd m = mean_sd(warm);
        mean = m.mean;
        var = m.sd * m.sd;
      }
      continue;
    }
    const double sd = std::sqrt(var) + 1e-6;
    double seen = g;
    if ((g - mean) / sd > 2.5) {
      marks[i] = "grad_norm_z2.5";
      seen = mean + 2.5 * sd;
    }
    const double delta = seen - mean;
    mean = 0.97 * mean + 0.03 * seen;
    var = 0.97 * var + 0.03 * delta * delta;
  }
  return score_marks(run, marks);
}

// A candidate, not an anchor: the norm of the step itself (update_norm in the
// trace) spiking, in spikehunt's spike form (SpikeWindow: log10 of the value
// more than 8 trailing standard deviations above the mean of the last 16
// finite steps, spread at least 0.1 decade). The Marin 32B logs show update-norm spikes
// before loss and gradient-norm spikes; this row measures whether it leads
// here. Traces older than the update statistics read 0 and never fire.
RunScore update_norm_spike(const LabelledRun& run) {
  std::vector<std::string> marks(run.records.size());
  SpikeWindow window(16);
  for (size_t i = 0; i < run.records.size(); ++i) {
    const double u = run.records[i].update_norm;
    if (!finite(u)) {
      marks[i] = "non_finite_update";
    } else if (u > 0 && window.full() && window.z(u) > 8) {
      marks[i] = "update_norm_spike";
    } else if (u > 0) {
      window.add(u);
    }
  }
  return score_marks(run, marks);
}

// The last line of defence: the first non-finite step itself (what anomaly
// mode or a NaN check in the loop finds). Its lead is 0 by construction.
RunScore first_non_finite(const LabelledRun& run) {
  std::vector<std::string> marks(run.records.size());
  for (size_t i = 0; i < run.records.size(); ++i) {
    if (run.records[i].health == Health::kNonFinite) marks[i] = "non_finite";
  }
  return score_marks(run, marks);
}

}  // namespace

const std::vector<Anchor>& anchors() {
  static const std::vector<Anchor> all = {
      {"megatron_loss_10x", megatron},     {"olmo_z6_w128", olmo},
      {"lightning_spike_detection", lightning}, {"zclip_z2.5", zclip},
      {"first_non_finite", first_non_finite},  {"update_norm_spike (candidate)", update_norm_spike},
  };
  return all;
}

RuleSetScore score_corpus(const std::vector<LabelledRun>& runs, const HealthRules& rules, const std::string& name) {
  return score_runs(runs, name, [&](const LabelledRun& run) { return score_run(run, rules); });
}

RuleSetScore score_corpus(const std::vector<LabelledRun>& runs, const Anchor& anchor) {
  return score_runs(runs, anchor.name, anchor.score);
}

std::string score_table(const std::vector<RuleSetScore>& scores) {
  std::string out =
      "| rule set | failing runs | missed | lead < 5 | lead min | lead median | healthy runs flagged | "
      "false alarms / 10k healthy steps | flagged steps on recovering runs | first rule at the onset |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  char line[512];
  for (const RuleSetScore& s : scores) {
    std::vector<std::pair<int64_t, std::string>> firsts;
    for (const auto& [rule, n] : s.first_rules) firsts.push_back({-n, rule});
    std::sort(firsts.begin(), firsts.end());
    std::string first;
    for (size_t i = 0; i < firsts.size() && i < 3; ++i) {
      first += (first.empty() ? "" : ", ") + firsts[i].second + " " + std::to_string(-firsts[i].first);
    }
    std::snprintf(line, sizeof line, "| %s | %lld | %lld | %lld | %lld | %.1f | %lld of %lld | %.1f | %lld (%lld runs) | %s |\n",
                  s.name.c_str(), static_cast<long long>(s.failing), static_cast<long long>(s.missed),
                  static_cast<long long>(s.short_leads), static_cast<long long>(s.lead_min()), s.lead_median(),
                  static_cast<long long>(s.healthy_runs_flagged), static_cast<long long>(s.healthy),
                  s.false_alarms_per_10k(), static_cast<long long>(s.flagged_recovering_steps),
                  static_cast<long long>(s.recovering), first.c_str());
    out += line;
  }
  return out;
}

std::string healthy_rules_text(const std::vector<RuleSetScore>& scores) {
  std::string out;
  for (const RuleSetScore& s : scores) {
    if (s.healthy_rules.empty()) continue;
    out += s.name + ":";
    for (const auto& [rule, n] : s.healthy_rules) out += " " + rule + " " + std::to_string(n);
    out += "\n";
  }
  return out.empty() ? "none\n" : out;
}

std::string leads_text(const std::vector<RuleSetScore>& scores) {
  std::string out;
  for (const RuleSetScore& s : scores) {
    out += s.name + ":";
    for (int64_t lead : s.leads) out += " " + std::to_string(lead);
    out += "\n";
  }
  return out;
}

std::string late_runs_text(const std::vector<LabelledRun>& runs, const HealthRules& rules) {
  std::string out;
  char line[256];
  for (const LabelledRun& run : runs) {
    if (!run.failure_step) continue;
    const RunScore s = score_run(run, rules);
    const int64_t lead = s.lead().value_or(0);
    if (lead >= kShortLead) continue;
    out += run.name + ": lead " + std::to_string(lead) + " (" + run.failure + " at step " + std::to_string(*run.failure_step) + ")";
    if (s.onset && !s.onset_hits.empty()) {
      std::string rules_text;
      for (const RuleHit& h : s.onset_hits) rules_text += (rules_text.empty() ? "" : ", ") + h.describe();
      out += ", onset " + rules_text;
    }
    out += "\n    step       loss  grad norm  max |grad|   max |act| max |state|\n";
    for (const StepRecord& r : run.records) {
      if (r.step < *run.failure_step - 6 || r.step > *run.failure_step) continue;
      std::snprintf(line, sizeof line, "  %6lld %10s %10s %10s %10s %10s\n", static_cast<long long>(r.step),
                    fmt(r.loss).c_str(), fmt(r.grad_norm).c_str(), fmt(r.grad_max).c_str(),
                    fmt(r.activation_max).c_str(), fmt(r.state_max).c_str());
      out += line;
    }
  }
  return out;
}

}  // namespace spikehunt
