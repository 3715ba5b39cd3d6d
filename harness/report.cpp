#include "harness/report.h"

#include <cmath>
#include <cstdio>

namespace spikehunt {

std::vector<const StepRecord*> story_rows(const Trace& trace, const Verdict& v, size_t context) {
  std::vector<const StepRecord*> rows;
  const auto& recent = trace.recent();
  if (!v.onset_step) {
    const size_t n = std::min(recent.size(), context + 2);
    for (size_t i = recent.size() - n; i < recent.size(); ++i) rows.push_back(&recent[i]);
    return rows;
  }
  const auto& before = trace.before_onset();
  for (size_t i = before.size() > context ? before.size() - context : 0; i < before.size(); ++i) {
    rows.push_back(&before[i]);
  }
  std::vector<const StepRecord*> after;
  for (const StepRecord& r : recent) {
    if (r.step >= *v.onset_step) after.push_back(&r);
  }
  constexpr size_t kHead = 6, kTail = 5;
  if (after.size() > kHead + kTail + 1) {
    rows.insert(rows.end(), after.begin(), after.begin() + kHead);
    rows.push_back(nullptr);
    rows.insert(rows.end(), after.end() - kTail, after.end());
  } else {
    rows.insert(rows.end(), after.begin(), after.end());
  }
  return rows;
}

std::string story_table(const Trace& trace, const Verdict& v) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%6s  %-12s %10s %10s %10s %10s %10s  %-10s %s\n", "step", "phase/ep/b",
                "loss", "grad norm", "max|grad|", "max act", "max state", "health", "rules");
  out += line;
  for (const StepRecord* r : story_rows(trace, v)) {
    if (r == nullptr) {
      out += "   ...\n";
      continue;
    }
    std::string rules;
    for (const std::string& name : r->rules) rules += (rules.empty() ? "" : ",") + name;
    const std::string where = r->phase_name + "/" + std::to_string(r->epoch) + "/" + std::to_string(r->batch);
    std::snprintf(line, sizeof line, "%6lld  %-12s %10s %10s %10s %10s %10s  %-10s %s\n",
                  static_cast<long long>(r->step), where.c_str(), fmt(r->loss).c_str(),
                  fmt(r->grad_norm).c_str(), fmt(r->grad_max).c_str(), fmt(r->activation_max).c_str(),
                  fmt(r->state_max).c_str(), to_string(r->health), rules.c_str());
    out += line;
  }
  return out;
}

std::string onset_rules_text(const Verdict& v) {
  std::string text;
  if (v.onset_hits.empty()) {  // a verdict from before rule values were kept
    for (const std::string& r : v.onset_rules) text += (text.empty() ? "" : ", ") + r;
    return text;
  }
  for (const RuleHit& h : v.onset_hits) text += (text.empty() ? "" : ", ") + h.describe();
  return text;
}

std::string verdict_text(const Verdict& v, const Trace& trace) {
  auto where = [&](int64_t step) {
    const StepRecord* r = trace.find(step);
    if (r == nullptr) return std::string();
    return " (phase " + r->phase_name + ", epoch " + std::to_string(r->epoch) + ", batch " +
           std::to_string(r->batch) + ")";
  };
  char head[160];
  std::snprintf(head, sizeof head, "verdict: %s after %lld of %lld steps (%.1f s)\n", to_string(v.outcome),
                static_cast<long long>(v.steps_run), static_cast<long long>(v.planned_steps), v.wall_seconds);
  std::string out = head;
  if (v.onset_step) {
    out += "  onset      step " + std::to_string(*v.onset_step) + where(*v.onset_step) + ", first " +
           (v.onset_rules.size() == 1 && v.onset_rules[0] == "non_finite" ? "non-finite" : "extreme") +
           " step: " + onset_rules_text(v) + "\n";
    const std::string movers = describe_movers(v.movers, *v.onset_step);
    if (!movers.empty()) out += "  moved first " + movers + "\n";
  }
  if (v.failure_step) {
    out += "  failure    step " + std::to_string(*v.failure_step) + where(*v.failure_step) +
           ", first non-finite step\n";
  }
  if (auto lead = v.lead_time()) {
    out += "  lead time  " + std::to_string(*lead) + " step(s) from onset to failure\n";
  }
  if (v.fault) out += "  fault      " + v.fault->describe() + "\n";
  const int64_t last = v.failure_step ? *v.failure_step : v.onset_step ? *v.onset_step : -1;
  if (const StepRecord* r = last >= 0 ? trace.find(last) : nullptr) {
    out += "  data       step " + std::to_string(r->step) + " input " + r->input_hash.hex() + " labels " +
           r->label_hash.hex() + "\n";
  }
  out += "  hash chain " + v.hash_chain.hex() + "\n";
  if (!v.crash_stage.empty()) out += "  stage      the training code threw in the " + v.crash_stage + " stage\n";
  if (!v.message.empty()) out += "  message    " + v.message + "\n";
  if (!v.crash_cause.empty()) out += "  cause      " + v.crash_cause + "\n";
  return out;
}

}  // namespace spikehunt
