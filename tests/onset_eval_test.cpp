// Tests bench/onset_eval.h: traces read back as the judge wrote them, runs
// labelled by what they did, and each rule set scored on lead time and false
// alarms — on small traces planted with a ramp, a recovering spike and noise.
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>

#include "base/error.h"
#include "bench/onset_eval.h"
#include "temp_dir.h"

namespace spikehunt {
namespace {

using testing::has;
using testing::TempDir;

StepRecord calm(int64_t i, double loss = 1.0, double grad_norm = 2.0) {
  StepRecord r;
  r.step = i;
  r.phase = i < 30 ? 0 : 1;
  r.phase_name = i < 30 ? "A" : "B";
  r.loss = loss * (1 + 0.05 * double(i % 3));
  r.grad_norm = grad_norm * (1 + 0.1 * double(i % 4));
  r.grad_max = r.grad_norm / 10;
  r.activation_max = 4;
  r.state_max = 0.5;
  r.label_histogram.assign(10, 6);
  LayerStats l;
  l.name = "fc.weight";
  l.is_weight = true;
  l.grad_norm = r.grad_norm;
  l.param_norm_before = 10;
  l.param_norm_after = 10.01;
  r.layers = {l};
  r.taps = {{"fc_act", 4}};
  return r;
}

void write_trace(const std::string& path, const std::vector<StepRecord>& records) {
  std::ofstream out(path);
  for (const StepRecord& r : records) out << to_json(r).dump() << "\n";
}

// Steps 0-59; a ramp in the grad norm from step 50 (×3 a step, under every
// limit for three steps) and NaN at step 56.
std::vector<StepRecord> failing_run() {
  std::vector<StepRecord> v;
  for (int64_t i = 0; i < 56; ++i) {
    StepRecord r = calm(i);
    if (i >= 50) r.grad_norm = r.layers[0].grad_norm = 2.0 * std::pow(3.0, double(i - 49));
    v.push_back(r);
  }
  StepRecord nan = calm(56);
  nan.loss = std::nan("");
  nan.health = Health::kNonFinite;
  v.push_back(nan);
  return v;
}

TEST(OnsetEval, ATraceReadsBackAsTheJudgeWroteIt) {
  TempDir dir;
  StepRecord r = calm(7);
  r.hits = {{"grad_norm_growth", 1.6, 1.4, 67.5, ""}};
  r.rules = {"grad_norm_growth"};
  r.movers = {{"fc.weight", "gradient", 40, 80, 2, 5}};
  r.health = Health::kExtreme;
  write_trace(dir.file("trace.jsonl"), {r});
  const LabelledRun run = load_run(dir.file("trace.jsonl"), "one");
  ASSERT_EQ(run.records.size(), 1u);
  const StepRecord& back = run.records[0];
  EXPECT_EQ(to_json(back), to_json(r)) << "every field the trace holds comes back";
  EXPECT_EQ(back.phase, 0);
  EXPECT_TRUE(back.layers[0].is_weight) << "param_jump_limit needs it";
  EXPECT_EQ(run.classes, 10);
  EXPECT_FALSE(run.failure_step);
}

TEST(OnsetEval, RunsAreLabelledByWhatTheyDidAndScoredPerRuleSet) {
  TempDir dir;
  write_trace(dir.file("fail.jsonl"), failing_run());
  std::vector<StepRecord> healthy;
  for (int64_t i = 0; i < 200; ++i) healthy.push_back(calm(i, 1.0 / (1 + 0.01 * double(i))));
  write_trace(dir.file("healthy.jsonl"), healthy);
  std::vector<StepRecord> recovering = healthy;
  recovering[100].loss = 30;  // 30x its trailing median, then back
  write_trace(dir.file("recovering.jsonl"), recovering);

  const std::vector<LabelledRun> runs = {load_run(dir.file("fail.jsonl")), load_run(dir.file("healthy.jsonl")),
                                         load_run(dir.file("recovering.jsonl"))};
  EXPECT_EQ(runs[0].failure_step, 56);
  EXPECT_FALSE(runs[1].recovers);
  EXPECT_TRUE(runs[2].recovers);

  HealthRules today;  // the rules before growth and chance
  today.growth_ratio = 0;
  today.chance_loss_factor = 0;
  const RuleSetScore before = score_corpus(runs, today, "today");
  const RuleSetScore now = score_corpus(runs, HealthRules{}, "defaults");
  EXPECT_EQ(before.failing, 1);
  EXPECT_EQ(before.healthy, 1);
  EXPECT_EQ(before.recovering, 1);
  // Steps 50-53: 6, 18, 54 (grad_norm_growth: ×3 twice, above 30), 162 (over the limit of 100); NaN at 56.
  ASSERT_EQ(now.leads.size(), 1u);
  EXPECT_EQ(now.leads[0], 4) << "grad_norm_growth fires at step 52";
  EXPECT_EQ(before.leads[0], 3) << "only grad_norm_limit, at step 53";
  EXPECT_EQ(now.short_leads, 1);
  EXPECT_EQ(now.missed, 0);
  EXPECT_EQ(now.first_rules.at("grad_norm_growth"), 1);
  EXPECT_EQ(now.flagged_healthy_steps, 0);
  EXPECT_EQ(now.false_alarms_per_10k(), 0.0);
  EXPECT_GE(now.flagged_recovering_steps, 1) << "the 30x loss trips chance_loss";

  HealthRules off = today;  // nothing but non_finite
  off.spike_z = off.loss_limit = off.grad_norm_limit = off.max_grad_limit = off.activation_limit = 0;
  off.optimizer_state_limit = off.param_jump_limit = 0;
  EXPECT_EQ(score_corpus(runs, off, "off").missed, 1) << "a NaN with no warning before it is missed";

  const std::string table = score_table({before, now});
  EXPECT_TRUE(has(table, "| today | 1 | 0 | 1 | 3 | 3.0 | 0 of 1 | 0.0 |")) << table;
  EXPECT_TRUE(has(late_runs_text(runs, HealthRules{}), "lead 4 (non-finite at step 56), onset grad_norm_growth"))
      << late_runs_text(runs, HealthRules{});
}

TEST(OnsetEval, AFiniteDivergenceFailsOnlyWhenTheLossStaysPastTheFactor) {
  TempDir dir;
  std::vector<StepRecord> falling;  // loss 5 -> about 1 over 200 steps
  for (int64_t i = 0; i < 200; ++i) falling.push_back(calm(i, 5.0 / (1 + 0.02 * double(i))));
  const double best = 5.0 / (1 + 0.02 * 99);  // about 1.68, well under every loss before step 100
  std::vector<StepRecord> spike = falling, diverged = falling;
  for (int64_t i = 100; i < 100 + kDivergedSteps - 1; ++i) spike[size_t(i)].loss = 3 * best;  // back a step too soon
  for (int64_t i = 100; i < 200; ++i) diverged[size_t(i)].loss = 3 * best;
  diverged[105].grad_norm = 500;  // grad_norm_limit, but five steps after the divergence
  write_trace(dir.file("spike.jsonl"), spike);
  write_trace(dir.file("diverged.jsonl"), diverged);

  EXPECT_FALSE(load_run(dir.file("spike.jsonl"), "", 2).failure_step) << "a spike that comes back is not a divergence";
  EXPECT_FALSE(load_run(dir.file("diverged.jsonl")).failure_step) << "no factor: only a non-finite step fails";
  const LabelledRun run = load_run(dir.file("diverged.jsonl"), "", 2);
  EXPECT_EQ(run.failure_step, 100);
  EXPECT_EQ(run.failure, "diverged");
  EXPECT_FALSE(load_run(dir.file("diverged.jsonl"), "", 4).failure_step) << "3x the best is not past 4x";

  const RuleSetScore score = score_corpus({run}, HealthRules{}, "defaults");
  ASSERT_EQ(score.leads.size(), 1u);
  EXPECT_EQ(score.leads[0], 0) << "flagged at step 105, after it had failed: no warning";
  EXPECT_EQ(score.missed, 1);
  EXPECT_TRUE(has(late_runs_text({run}, HealthRules{}), "lead 0 (diverged at step 100)"));
}

// The first step an anchor flags on these records (-1: none).
int64_t anchor_onset(const std::string& name, const std::vector<StepRecord>& records) {
  LabelledRun run;
  run.records = records;
  for (const Anchor& a : anchors()) {
    if (a.name == name) return a.score(run).onset.value_or(-1);
  }
  ADD_FAILURE() << "no anchor " << name;
  return -1;
}

TEST(OnsetEval, TheAnchorsFlagWhatTheirProjectsFlag) {
  std::vector<StepRecord> steps;  // loss 1-1.1, grad norm 2-2.6, for 200 steps
  for (int64_t i = 0; i < 200; ++i) steps.push_back(calm(i));
  for (const Anchor& a : anchors()) {
    if (a.name != "update_norm_spike (candidate)") {
      EXPECT_EQ(anchor_onset(a.name, steps), -1) << a.name << " on calm steps";
    }
  }

  // Megatron: 10x the largest |loss| of the first 100 steps (1.1), no sooner than step 100.
  std::vector<StepRecord> v = steps;
  v[60].loss = 50;   // within the first 100: it only raises the reference
  v[150].loss = 400; // under 10 x 50
  v[170].loss = 600;
  EXPECT_EQ(anchor_onset("megatron_loss_10x", v), 170);

  // Lightning: worse than the last loss and at least 3x the running mean of 10.
  v = steps;
  v[50].loss = 2.9;  // 2.9 - 1.05 < 2 x 1.05
  v[80].loss = 3.5;
  EXPECT_EQ(anchor_onset("lightning_spike_detection", v), 80);
  v = steps;
  v[40].loss = std::nan("");
  EXPECT_EQ(anchor_onset("lightning_spike_detection", v), 40) << "finite_only: a NaN loss is a spike";

  // ZClip: the gradient norm's z-score against its EMA above 2.5, after 25 warm-up steps.
  v = steps;
  v[10].grad_norm = 50;  // in the warm-up: it only widens the statistics
  v[120].grad_norm = 60;
  EXPECT_EQ(anchor_onset("zclip_z2.5", v), 120);

  // OLMo: 6 sigma from the mean of the last 128 steps, once the window is full.
  v = steps;
  v[100].loss = 1.6;  // 13 sigma, but only 100 steps in the window
  v[150].loss = 1.6;
  EXPECT_EQ(anchor_onset("olmo_z6_w128", v), 150);

  v = steps;
  v[30].health = Health::kNonFinite;
  EXPECT_EQ(anchor_onset("first_non_finite", v), 30);
}

TEST(OnsetEval, ABadTraceLineNamesTheFileAndLine) {
  TempDir dir;
  write_trace(dir.file("t.jsonl"), {calm(0)});
  { std::ofstream(dir.file("t.jsonl"), std::ios::app) << "{\"step\": 1}\n"; }
  try {
    load_run(dir.file("t.jsonl"));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), dir.file("t.jsonl") + ":2")) << e.what();
  }
  { std::ofstream(dir.file("empty.jsonl")); }
  EXPECT_THROW(load_run(dir.file("empty.jsonl")), InputError);
}

}  // namespace
}  // namespace spikehunt
