// onset_eval.h — scores health rules on recorded runs: each run's trace is
// judged again, step by step, by a fresh HealthJudge with the rules under
// test, and the onsets are compared with the run's label (its first
// non-finite step, which no rule set changes). bench/onset_corpus.sh runs the
// project's labelled corpus and bench/onset_eval prints this table.
// Example:
//   std::vector<LabelledRun> runs = {load_run("corpus/cnn_lr0.2_s1/trace.jsonl")};
//   RuleSetScore s = score_corpus(runs, config.health, "defaults");
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/calibrate.h"
#include "harness/record.h"
#include "scenarios/config.h"

namespace spikehunt {

// A run that never went non-finite "recovers" when its loss left the rails
// (loss_left_the_rails, harness/calibrate.h: what calibrate refuses as a
// baseline too); the other runs that never went non-finite are healthy.
// A lead below this many steps is too short to act on (the bar).
constexpr int64_t kShortLead = 5;

struct LabelledRun {
  std::string name;                     // where it came from
  std::vector<StepRecord> records;      // every step, in order
  int64_t classes = 0;                  // from the records' label histograms
  std::optional<int64_t> failure_step;  // the label: the first non-finite (or diverged) step
  std::string failure;                  // "non-finite" or "diverged" (empty when it did not fail)
  bool recovers = false;                // loss_left_the_rails (false for failing runs)
};

// A divergence that stays finite (the transformer corpus's criterion): the
// loss stands past diverge_factor x the lowest loss before it for this many
// steps in a row; the run fails at the first of them. A spike that comes back
// sooner is not a divergence.
constexpr int64_t kDivergedSteps = 10;

// Reads a trace.jsonl (every step of a run); InputError naming the file and
// line on a bad record, or when the file has no steps. A run fails at its
// first non-finite step; with diverge_factor > 0 also where it diverged
// (kDivergedSteps), whichever comes first.
LabelledRun load_run(const std::string& trace_path, const std::string& name = "", double diverge_factor = 0);

struct RunScore {
  std::optional<int64_t> onset;      // the first step these rules flag (non-finite included)
  std::vector<RuleHit> onset_hits;   // what fired there
  std::vector<Mover> movers;         // the onset attribution
  int64_t flagged_steps = 0;         // steps flagged extreme or non-finite
  std::map<std::string, int64_t> rule_steps;  // steps each rule fired on
  std::optional<int64_t> lead() const;  // failing runs: failure - onset
  std::optional<int64_t> failure;
};
RunScore score_run(const LabelledRun& run, const HealthRules& rules);

// The anchors: published detectors as their projects run them, replayed on
// the same traces (bench/onset_eval.cpp says where each comes from). Each
// flags steps by its own statistic; a non-finite loss is flagged only where
// the detector itself checks for it.
struct Anchor {
  std::string name;
  RunScore (*score)(const LabelledRun& run);
};
const std::vector<Anchor>& anchors();

struct RuleSetScore {
  std::string name;
  int64_t failing = 0;            // runs that went non-finite
  int64_t missed = 0;             // ... with no flag before the non-finite step
  std::vector<int64_t> leads;     // failing runs, in run order
  int64_t short_leads = 0;        // failing runs with a lead under kShortLead
  int64_t healthy = 0;            // runs that never went non-finite and do not recover
  int64_t healthy_steps = 0;
  int64_t flagged_healthy_steps = 0;
  int64_t healthy_runs_flagged = 0;
  int64_t recovering = 0;                // runs that recover (loss_left_the_rails)
  int64_t flagged_recovering_steps = 0;
  std::map<std::string, int64_t> first_rules;  // failing runs: the first rule listed at the onset
  std::map<std::string, int64_t> healthy_rules;  // healthy runs: steps each rule fired on
  int64_t lead_min() const;
  double lead_median() const;
  double false_alarms_per_10k() const;  // flagged steps per 10,000 healthy steps
};
RuleSetScore score_corpus(const std::vector<LabelledRun>& runs, const HealthRules& rules, const std::string& name);
RuleSetScore score_corpus(const std::vector<LabelledRun>& runs, const Anchor& anchor);

// The table (Markdown): one row per rule set.
std::string score_table(const std::vector<RuleSetScore>& scores);
// Per rule set, the rules that fired on healthy runs and on how many steps ("none").
std::string healthy_rules_text(const std::vector<RuleSetScore>& scores);
// Per rule set, the lead on each failing run, in run order (0: missed).
std::string leads_text(const std::vector<RuleSetScore>& scores);
// The failing runs a rule set warns late (lead under kShortLead) or misses,
// each with its last steps: loss, grad norm, max |grad|, max |activation|,
// max |state| — to say why there was no earlier warning.
std::string late_runs_text(const std::vector<LabelledRun>& runs, const HealthRules& rules);

}  // namespace spikehunt
