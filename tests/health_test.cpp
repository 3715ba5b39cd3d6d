// Tests harness/health.h: every rule fires on a planted value, stays silent
// below it, spike rules wait for a full window and respect their floors.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "harness/health.h"

namespace spikehunt {
namespace {

bool fired(const StepRecord& r, const std::string& rule) {
  return std::find(r.rules.begin(), r.rules.end(), rule) != r.rules.end();
}

// An ordinary healthy step.
StepRecord step(int64_t i, double loss = 2.0, double grad_norm = 1.0, double act = 5.0) {
  StepRecord r;
  r.step = i;
  r.loss = loss;
  r.grad_norm = grad_norm;
  r.grad_max = grad_norm / 10;
  r.activation_max = act;
  r.state_max = 0.5;
  LayerStats w;
  w.name = "fc.weight";
  w.is_weight = true;
  w.param_norm_before = 10;
  w.param_norm_after = 10.1;
  r.layers.push_back(w);
  return r;
}

StepRecord judged(HealthJudge& judge, StepRecord r) {
  judge.judge(r);
  return r;
}

TEST(Health, OrdinaryStepsAreFinite) {
  HealthJudge judge(HealthRules{});
  for (int i = 0; i < 100; ++i) {
    const StepRecord r = judged(judge, step(i, 2.0 + 0.1 * (i % 3), 1.0 + 0.2 * (i % 5)));
    EXPECT_EQ(r.health, Health::kFinite) << i;
    EXPECT_TRUE(r.rules.empty());
  }
}

TEST(Health, EachLimitRuleFiresAboveItsLimitOnly) {
  const HealthRules rules;
  struct Case {
    const char* rule;
    std::function<void(StepRecord&, double)> set;
    double limit;
  } cases[] = {
      {"loss_limit", [](StepRecord& r, double v) { r.loss = v; }, rules.loss_limit},
      {"grad_norm_limit", [](StepRecord& r, double v) { r.grad_norm = v; }, rules.grad_norm_limit},
      {"max_grad_limit", [](StepRecord& r, double v) { r.grad_max = v; }, rules.max_grad_limit},
      {"activation_limit", [](StepRecord& r, double v) { r.activation_max = v; }, rules.activation_limit},
      {"optimizer_state_limit", [](StepRecord& r, double v) { r.state_max = v; }, rules.optimizer_state_limit},
      {"param_jump_limit",
       [](StepRecord& r, double v) { r.layers[0].param_norm_after = r.layers[0].param_norm_before * (1 + v); },
       rules.param_jump_limit},
  };
  for (const Case& c : cases) {
    HealthJudge judge(rules);  // fresh: spike windows empty, only the limit can fire
    StepRecord below = step(0);
    c.set(below, c.limit * 0.99);
    below = judged(judge, below);
    EXPECT_FALSE(fired(below, c.rule)) << c.rule;
    StepRecord above = step(1);
    c.set(above, c.limit * 1.01);
    above = judged(judge, above);
    EXPECT_TRUE(fired(above, c.rule)) << c.rule;
    EXPECT_EQ(above.health, Health::kExtreme) << c.rule;
  }
}

TEST(Health, ParamJumpIgnoresBiases) {
  HealthJudge judge(HealthRules{});
  StepRecord r = step(0);
  r.layers[0].is_weight = false;
  r.layers[0].param_norm_after = 100;
  EXPECT_EQ(judged(judge, r).health, Health::kFinite);
}

TEST(Health, ZeroDisablesALimit) {
  HealthRules rules;
  rules.grad_norm_limit = 0;
  rules.spike_z = 0;
  HealthJudge judge(rules);
  EXPECT_EQ(judged(judge, step(0, 2.0, /*grad_norm=*/1e6)).health, Health::kExtreme);  // max_grad fires
  StepRecord r = step(1, 2.0, 1e6);
  r.grad_max = 1;
  EXPECT_EQ(judged(judge, r).health, Health::kFinite);
}

TEST(Health, SpikeIsSilentUntilTheWindowIsFullThenFires) {
  HealthRules rules;  // window 16, z 8, grad norm floor 10, limit 100
  HealthJudge judge(rules);
  for (int i = 0; i < rules.window - 1; ++i) judged(judge, step(i));
  // 15 steps in the window: a 60x grad norm spike (under the limit of 100) stays silent.
  EXPECT_FALSE(fired(judged(judge, step(15, 2.0, 60.0)), "grad_norm_spike"));
  HealthJudge judge2(rules);
  for (int i = 0; i < rules.window; ++i) judged(judge2, step(i, 2.0, 1.0 + 0.01 * i));
  const StepRecord r = judged(judge2, step(16, 2.0, 60.0));
  EXPECT_TRUE(fired(r, "grad_norm_spike")) << "z-score of a 60x jump in a flat window";
  EXPECT_FALSE(fired(r, "grad_norm_limit"));
  EXPECT_EQ(r.health, Health::kExtreme);
}

TEST(Health, SpikeBelowItsFloorIsSilent) {
  // Late in healthy training the grad norm jumps 10x, 0.05 -> 0.5: not extreme.
  HealthJudge judge(HealthRules{});
  for (int i = 0; i < 40; ++i) judged(judge, step(i, 0.05, 0.05, 2.0));
  const StepRecord r = judged(judge, step(40, 0.6, 0.5, 2.0));
  EXPECT_EQ(r.health, Health::kFinite) << "rules: " << (r.rules.empty() ? "" : r.rules[0]);
}

TEST(Health, EverySpikeRuleFires) {
  HealthRules rules;
  rules.loss_limit = rules.grad_norm_limit = rules.activation_limit = 0;  // only spikes
  for (const char* rule : {"loss_spike", "grad_norm_spike", "activation_spike"}) {
    HealthJudge judge(rules);
    for (int i = 0; i < 20; ++i) judged(judge, step(i));
    StepRecord r = step(20);
    if (std::string(rule) == "loss_spike") r.loss = 500;
    if (std::string(rule) == "grad_norm_spike") r.grad_norm = 500, r.grad_max = 0;
    if (std::string(rule) == "activation_spike") r.activation_max = 5e4;
    r = judged(judge, r);
    EXPECT_TRUE(fired(r, rule)) << rule;
    EXPECT_EQ(r.rules.size(), 1u) << rule;
  }
}

TEST(Health, WindowsRestartAtAPhaseBoundary) {
  HealthRules rules;
  rules.grad_norm_limit = 0;
  HealthJudge judge(rules);
  for (int i = 0; i < 20; ++i) judged(judge, step(i));
  StepRecord switch_step = step(20, 2.0, 60.0);
  switch_step.grad_max = 1;
  switch_step.phase = 1;  // a new domain: the old window says nothing about it
  EXPECT_EQ(judged(judge, switch_step).health, Health::kFinite);
}

TEST(Health, ExtremeStepsDoNotEnterTheWindow) {
  HealthRules rules;
  rules.grad_norm_limit = 0;
  rules.max_grad_limit = 0;
  HealthJudge judge(rules);
  for (int i = 0; i < 16; ++i) judged(judge, step(i));
  // A run of spikes: each is judged against the healthy window, so all stay extreme.
  for (int i = 16; i < 40; ++i) {
    EXPECT_EQ(judged(judge, step(i, 2.0, 80.0)).health, Health::kExtreme) << i;
  }
}

TEST(Health, AnyNonFiniteStatisticIsNonFinite) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::function<void(StepRecord&)>> plants = {
      [&](StepRecord& r) { r.loss = nan; },
      [&](StepRecord& r) { r.grad_norm = inf; },
      [&](StepRecord& r) { r.activation_max = -inf; },
      [&](StepRecord& r) { r.layers[0].state_norm = nan; },
      [&](StepRecord& r) { r.layers[0].param_norm_after = inf; },
  };
  for (size_t i = 0; i < plants.size(); ++i) {
    HealthJudge judge(HealthRules{});
    StepRecord r = step(0);
    plants[i](r);
    r = judged(judge, r);
    EXPECT_EQ(r.health, Health::kNonFinite) << i;
    EXPECT_EQ(r.rules, std::vector<std::string>{"non_finite"});
  }
}

TEST(Health, ZScoreOfAFlatWindowUsesTheMinimumSpread) {
  SpikeWindow w(4);
  for (int i = 0; i < 4; ++i) w.add(1.0);
  EXPECT_TRUE(w.full());
  EXPECT_NEAR(w.z(10.0), 1.0 / kMinLogStd, 1e-12);  // one decade above, spread floored
  EXPECT_EQ(w.z(0.0), 0.0);
}

}  // namespace
}  // namespace spikehunt
