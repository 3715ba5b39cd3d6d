// Tests harness/calibrate.h and `spikehunt calibrate`: rules raised only where
// healthy baselines trip them, to the stated margin; windowed rules by their
// floors; unhealthy baselines refused; the rules file taken by --rules, so
// the baseline is silent and a real failure is still flagged.
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/files.h"
#include "harness/calibrate.h"
#include "harness/health.h"
#include "test_util.h"

namespace spikehunt {
namespace {

using testing::has;
using testing::run_spikehunt;
using testing::TempDir;

// A healthy step: loss falling, a weight moving by `jump` of its norm.
StepRecord healthy_step(int64_t i, double jump = 0.01, double grad_norm = 1.0) {
  StepRecord r;
  r.step = i;
  r.loss = 2.3 / (1.0 + 0.1 * double(i));
  r.grad_norm = grad_norm;
  r.grad_max = grad_norm / 10;
  r.activation_max = 5;
  r.state_max = 0.5;
  LayerStats w;
  w.name = "fc.weight";
  w.is_weight = true;
  w.param_norm_before = 10;
  w.param_norm_after = 10 * (1 + jump);
  r.layers.push_back(w);
  return r;
}

Baseline baseline(const std::string& label, int64_t steps, double jump_at_1) {
  Baseline b{label, {}};
  for (int64_t i = 0; i < steps; ++i) b.steps.push_back(healthy_step(i, i == 1 ? jump_at_1 : 0.01));
  return b;
}

int64_t extreme_steps(const HealthRules& rules, const std::vector<Baseline>& baselines) {
  int64_t n = 0;
  for (const Baseline& b : baselines) {
    HealthJudge judge(rules, 10);
    for (StepRecord r : b.steps) {
      judge.judge(r);
      n += r.health == Health::kExtreme;
    }
  }
  return n;
}

TEST(Calibrate, RaisesOnlyTheRulesHealthyRunsTripToTheMarginAboveWhatTheyReach) {
  const std::vector<Baseline> runs = {baseline("seed 0", 30, 0.6), baseline("seed 1", 30, 0.7)};
  const HealthRules defaults;
  ASSERT_EQ(extreme_steps(defaults, runs), 2) << "each trips param_jump_limit at step 1";
  const Calibration c = derive_rules(defaults, 10, runs, 2.0, /*per_tensor=*/false);
  EXPECT_EQ(c.flagged_before, 2);
  EXPECT_EQ(c.baseline_steps, 60);
  ASSERT_EQ(c.moved.size(), 1u);
  const MovedRule& m = c.moved[0];
  EXPECT_EQ(m.field, "param_jump_limit");
  EXPECT_EQ(m.before, 0.5);
  EXPECT_NEAR(m.observed, 0.7, 1e-12);
  EXPECT_NEAR(m.after, 1.4, 1e-9) << "2x margin";
  EXPECT_EQ(m.where, "seed 1, step 1");
  EXPECT_EQ(m.steps, 2);
  EXPECT_TRUE(has(m.why, "param_jump_limit 0.5 -> 1.4")) << m.why;
  EXPECT_EQ(c.rules.param_jump_limit, m.after);
  EXPECT_EQ(extreme_steps(c.rules, runs), 0) << "the calibrated rules are silent on the baselines";
  // Everything that did not fire keeps its value: calibration never lowers.
  EXPECT_EQ(c.rules.loss_limit, defaults.loss_limit);
  EXPECT_EQ(c.rules.grad_norm_limit, defaults.grad_norm_limit);
  EXPECT_EQ(c.rules.grad_norm_growth_floor, defaults.grad_norm_growth_floor);
  // A failure past the raised rule is still flagged.
  HealthJudge judge(c.rules, 10);
  StepRecord bad = healthy_step(2, 2.0);
  judge.judge(bad);
  EXPECT_EQ(bad.health, Health::kExtreme);
}

// Per tensor (the default): only the layer that runs hot in healthy runs
// gets its own threshold; the others keep the model-wide one, so a failure
// elsewhere is still flagged where the model-wide raise would hide it.
TEST(Calibrate, APerTensorRuleIsRaisedForTheTensorsThatTripItAlone) {
  std::vector<Baseline> runs;
  for (int seed = 0; seed < 2; ++seed) {
    Baseline b{"seed " + std::to_string(seed), {}};
    for (int64_t i = 0; i < 30; ++i) {
      StepRecord r = healthy_step(i);
      LayerStats head = r.layers[0];
      head.name = "head.weight";
      head.param_norm_after = head.param_norm_before * (1 + (i == 1 ? 0.6 + 0.1 * seed : 0.01));
      r.layers.push_back(head);
      b.steps.push_back(r);
    }
    runs.push_back(std::move(b));
  }
  const Calibration c = derive_rules(HealthRules{}, 10, runs, 2.0);
  ASSERT_EQ(c.moved.size(), 1u);
  const MovedRule& m = c.moved[0];
  EXPECT_EQ(m.field, "param_jump_limit");
  EXPECT_EQ(m.tensor, "head.weight");
  EXPECT_NEAR(m.observed, 0.7, 1e-12);
  EXPECT_TRUE(has(m.why, "param_jump_limit of head.weight 0.5 -> 1.4")) << m.why;
  EXPECT_EQ(c.rules.param_jump_limit, 0.5) << "the model-wide limit stays";
  ASSERT_TRUE(c.rules.layers.count("head.weight"));
  EXPECT_NEAR(*c.rules.layers.at("head.weight").param_jump_limit, 1.4, 1e-9);
  EXPECT_EQ(extreme_steps(c.rules, runs), 0);
  HealthJudge judge(c.rules, 10);
  StepRecord elsewhere = runs[0].steps[2];
  elsewhere.layers[0].param_norm_after = elsewhere.layers[0].param_norm_before * 1.6;  // fc.weight jumps
  judge.judge(elsewhere);
  EXPECT_EQ(elsewhere.health, Health::kExtreme) << "fc.weight is still held to 0.5";
  const Calibration wide = derive_rules(HealthRules{}, 10, runs, 2.0, /*per_tensor=*/false);
  EXPECT_TRUE(wide.rules.layers.empty());
  EXPECT_NEAR(wide.rules.param_jump_limit, 1.4, 1e-9) << "model-wide: the same raise for every weight";
}

TEST(Calibrate, AWindowedRuleIsRaisedByItsFloor) {
  Baseline b{"lr 0.1", {}};
  // Healthy early training whose gradient norm grows x1.5 a step to 76, then settles.
  double g = 10;
  for (int64_t i = 0; i < 40; ++i) {
    if (i >= 1 && i <= 5) g *= 1.5;
    if (i == 6) g = 10;
    b.steps.push_back(healthy_step(i, 0.01, g));
  }
  const Calibration c = derive_rules(HealthRules{}, 10, {b}, 2.0);
  ASSERT_FALSE(c.moved.empty());
  EXPECT_EQ(c.moved[0].field, "grad_norm_growth_floor");
  EXPECT_EQ(c.moved[0].rule, "grad_norm_growth");
  EXPECT_NEAR(c.moved[0].observed, 10 * std::pow(1.5, 5), 1e-9);
  EXPECT_EQ(extreme_steps(c.rules, {b}), 0);
  EXPECT_EQ(c.rules.growth_ratio, HealthRules{}.growth_ratio) << "the rule's ratio stays: only its floor moves";
  EXPECT_THROW(derive_rules(HealthRules{}, 10, {b}, 0.5), std::invalid_argument);
}

TEST(Calibrate, AnUnhealthyBaselineIsRefusedWithWhatWentWrong) {
  EXPECT_FALSE(baseline_problem(baseline("ok", 30, 0.01), 10));
  Baseline nan = baseline("seed 2, lr 0.3", 30, 0.01);
  nan.steps[5].health = Health::kNonFinite;
  nan.steps[5].fault = Fault{"fc1_act", Stage::kForward, 1, 0, 0, 10};
  ASSERT_TRUE(baseline_problem(nan, 10));
  EXPECT_EQ(*baseline_problem(nan, 10), "step 5 is non-finite (fc1_act, forward)");
  Baseline jump = baseline("j", 30, 0.01);
  jump.steps[20].loss = 50;
  ASSERT_TRUE(baseline_problem(jump, 10));
  EXPECT_TRUE(has(*baseline_problem(jump, 10), "jumped to 50 at step 20")) << *baseline_problem(jump, 10);
  Baseline flat = baseline("f", 30, 0.01);
  for (StepRecord& r : flat.steps) r.loss = 2.3;
  ASSERT_TRUE(baseline_problem(flat, 10));
  EXPECT_TRUE(has(*baseline_problem(flat, 10), "did not fall")) << *baseline_problem(flat, 10);
}

// A user's config whose health rules (`health`, a JSON object) do not fit
// the model: by default a gradient-norm limit its healthy runs pass, so
// they are called extreme until calibrated.
std::string misfit_config(const TempDir& dir, const std::string& health = R"({"grad_norm_limit": 0.05})") {
  const std::string path = dir.file("misfit.json");
  std::ofstream(path) << R"({"name": "misfit", "model": {"kind": "mlp"}, "dataset": {"kind": "synthetic"},
    "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9}, "max_batches_per_epoch": 8,
    "protocol": {"epochs_per_phase": 1, "relaxation_epochs": 1}, "threads": 1,
    "health": )" + health + "}";
  return path;
}

TEST(Calibrate, TheVerbsRulesFileSilencesTheBaselineAndStillFlagsAFailure) {
  TempDir dir;
  const std::string config = misfit_config(dir), rules = dir.file("rules.json");
  const auto before = run_spikehunt("run --config " + config + " --out " + dir.file("before"));
  ASSERT_EQ(before.exit_code, 1) << before.output;
  EXPECT_TRUE(has(before.output, "grad_norm_limit")) << before.output;

  const auto cal = run_spikehunt("calibrate --config " + config + " --seeds 2 --out " + rules);
  ASSERT_EQ(cal.exit_code, 0) << cal.output;
  EXPECT_TRUE(has(cal.output, "moved grad_norm_limit 0.05 -> ")) << cal.output;
  const nlohmann::json file = nlohmann::json::parse(read_file(rules));
  EXPECT_GT(file["health"]["grad_norm_limit"].get<double>(), 0.05);
  EXPECT_EQ(file["calibration"]["baselines"].size(), 2u);

  const auto after = run_spikehunt("run --config " + config + " --rules " + rules + " --out " + dir.file("after"));
  EXPECT_EQ(after.exit_code, 0) << after.output;
  EXPECT_TRUE(has(after.output, "verdict: healthy")) << after.output;
  const auto failing = run_spikehunt("run --config " + config + " --rules " + rules +
                                     " --set optimizer.lr=10 --out " + dir.file("failing"));
  EXPECT_EQ(failing.exit_code, 1) << failing.output;

  // The baseline must be healthy: nothing is written otherwise.
  const auto refused = run_spikehunt("calibrate --config " + config + " --set optimizer.lr=10 --seeds 1 --out " +
                                     dir.file("never.json"));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_TRUE(has(refused.output, "is not healthy")) << refused.output;
  EXPECT_FALSE(std::ifstream(dir.file("never.json")).good());
}

// Per-tensor thresholds travel in the rules file as health.layers, and a
// name no tensor has is said, not silently kept.
TEST(Calibrate, TheRulesFileCarriesPerTensorThresholds) {
  TempDir dir;
  const std::string config = misfit_config(dir, R"({"activation_limit": 0.5})"), rules = dir.file("rules.json");
  const auto before = run_spikehunt("run --config " + config + " --out " + dir.file("before"));
  ASSERT_EQ(before.exit_code, 1) << before.output;
  EXPECT_TRUE(has(before.output, "activation_limit")) << before.output;

  const auto cal = run_spikehunt("calibrate --config " + config + " --seeds 1 --out " + rules);
  ASSERT_EQ(cal.exit_code, 0) << cal.output;
  EXPECT_TRUE(has(cal.output, "moved activation_limit of ")) << cal.output;
  const nlohmann::json file = nlohmann::json::parse(read_file(rules));
  EXPECT_FALSE(file["health"].contains("activation_limit")) << "the model-wide limit stays: " << file.dump();
  ASSERT_TRUE(file["health"].contains("layers")) << file.dump();
  for (const auto& [tensor, fields] : file["health"]["layers"].items()) {
    EXPECT_GT(fields.at("activation_limit").get<double>(), 0.5) << tensor;
  }
  for (const nlohmann::json& m : file["calibration"]["moved"]) {
    EXPECT_TRUE(file["health"]["layers"].contains(m.at("tensor").get<std::string>())) << m.dump();
  }

  const auto after = run_spikehunt("run --config " + config + " --rules " + rules +
                                   " --set health.layers.fc9.weight.param_jump_limit=1 --out " + dir.file("after"));
  EXPECT_EQ(after.exit_code, 0) << after.output;
  EXPECT_TRUE(has(after.output, "verdict: healthy")) << after.output;
  EXPECT_TRUE(has(after.output, "warning: health.layers: \"fc9.weight\" is neither a parameter nor a tap"))
      << after.output;
}

TEST(Calibrate, ABadRulesFileNamesTheFileTheFieldAndTheValue) {
  TempDir dir;
  const std::string bad = dir.file("bad.json");
  std::ofstream(bad) << R"({"health": {"grad_norm_limit": -1}})";
  const auto r = run_spikehunt("run --rules " + bad + " --out " + dir.file("out"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, bad) && has(r.output, "health.grad_norm_limit") && has(r.output, "-1")) << r.output;
  std::ofstream(dir.file("unknown.json")) << R"({"health": {"grad_norm_limt": 5}})";
  const auto u = run_spikehunt("doctor --rules " + dir.file("unknown.json"));
  EXPECT_EQ(u.exit_code, 2) << u.output;
  EXPECT_TRUE(has(u.output, "grad_norm_limt")) << u.output;
  std::ofstream(dir.file("other.json")) << R"({"optimizer": {"lr": 0.1}})";  // a config given as rules
  const auto o = run_spikehunt("run --rules " + dir.file("other.json") + " --out " + dir.file("out"));
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_TRUE(has(o.output, "other.json: optimizer is not a key of a rules file (health, calibration)\n"
                            "hint: a rules file holds only health rules"))
      << o.output;
  const auto c = run_spikehunt("calibrate --out " + dir.file("other.json") + "/rules.json");  // before training
  EXPECT_EQ(c.exit_code, 2) << c.output;
  EXPECT_TRUE(has(c.output, "--out = " + dir.file("other.json") + "/rules.json is inside " + dir.file("other.json") +
                            ", a file, not a folder"))
      << c.output;
  EXPECT_FALSE(has(c.output, "calibrating")) << c.output;
}

}  // namespace
}  // namespace spikehunt
