#include "bench/onset_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "harness/health.h"
#include "harness/report.h"

namespace spikehunt {

LabelledRun load_run(const std::string& trace_path, const std::string& name) {
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
    if (r.health == Health::kNonFinite && !run.failure_step) run.failure_step = r.step;
    run.records.push_back(std::move(r));
  }
  if (run.records.empty()) throw InputError(trace_path, "", "", "has no steps");
  if (!run.failure_step) run.recovers = loss_left_the_rails(run.records, run.classes).has_value();
  return run;
}

std::optional<int64_t> RunScore::lead() const {
  if (!failure || !onset) return std::nullopt;
  return *failure - *onset;
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

RuleSetScore score_corpus(const std::vector<LabelledRun>& runs, const HealthRules& rules, const std::string& name) {
  RuleSetScore score;
  score.name = name;
  for (const LabelledRun& run : runs) {
    const RunScore s = score_run(run, rules);
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

std::string late_runs_text(const std::vector<LabelledRun>& runs, const HealthRules& rules) {
  std::string out;
  char line[256];
  for (const LabelledRun& run : runs) {
    if (!run.failure_step) continue;
    const RunScore s = score_run(run, rules);
    const int64_t lead = s.lead().value_or(0);
    if (lead >= kShortLead) continue;
    out += run.name + ": lead " + std::to_string(lead) + " (non-finite at step " + std::to_string(*run.failure_step) + ")";
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
