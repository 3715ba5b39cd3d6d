// Tests harness/health.h: every rule fires on a planted value, stays silent
// below it, spike rules wait for a full window and respect their floors.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "harness/calibrate.h"
#include "harness/health.h"
#include "harness/trace.h"
#include "temp_dir.h"
#include "test_util.h"

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
  r.taps.push_back({"fc_act", act});
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

// A weight at exactly zero entering the first step (a zero-initialized head, LoRA's B) has no scale
// of its own: its early growth from zero is not a jump, judged against 20x its first step; a weight
// that starts non-zero is judged against its own norm, as before; a real jump of the zero-started
// one still fires; the judge's checkpoint state carries which weights started at zero.
TEST(Health, AZeroStartedWeightsGrowthFromZeroIsNotAJump) {
  auto two = [](int64_t i, double head_before, double head_after) {
    StepRecord r = step(i);
    LayerStats head;
    head.name = "head.weight";
    head.is_weight = true;
    head.param_norm_before = head_before;
    head.param_norm_after = head_after;
    r.layers.push_back(head);
    return r;
  };
  HealthJudge judge(HealthRules{});
  EXPECT_EQ(judged(judge, two(0, 0.0, 0.05)).health, Health::kFinite);
  // Momentum builds the steps up: 0.05 -> 0.13 -> 0.25 is a jump of 1.6 and 0.9 against its own norm.
  StepRecord r1 = judged(judge, two(1, 0.05, 0.13));
  EXPECT_FALSE(fired(r1, "param_jump_limit")) << (r1.hits.empty() ? "" : r1.hits[0].describe());
  EXPECT_FALSE(fired(judged(judge, two(2, 0.13, 0.25)), "param_jump_limit"));
  HealthJudge restored(HealthRules{});
  restored.restore(judge.state());
  EXPECT_EQ(judge.state().at("zero_started").at("head.weight").get<double>(), 0.05);
  // A jump past 20x its first step's 0.5 limit: 0.25 -> 1.0 is 0.75 / max(0.25, 1.0) = 0.75.
  StepRecord blow = judged(restored, two(3, 0.25, 1.0));
  ASSERT_TRUE(fired(blow, "param_jump_limit"));
  EXPECT_EQ(blow.hits[0].tensor, "head.weight");
  // The same growth on a weight that did not start at zero: a jump, as before.
  HealthJudge plain(HealthRules{});
  EXPECT_TRUE(fired(judged(plain, two(0, 0.05, 0.13)), "param_jump_limit"));
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
      {"activation_limit", [](StepRecord& r, double v) { r.activation_max = r.taps[0].max_abs = v; },
       rules.activation_limit},
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

// input_limit is off by default; set, it fires on the batch's largest |input| and names the data.
TEST(Health, TheInputLimitJudgesTheBatchOnlyWhenSet) {
  HealthJudge off((HealthRules()));
  StepRecord raw = step(0);
  raw.input_max = 255;  // raw pixels
  EXPECT_EQ(judged(off, raw).health, Health::kFinite);
  HealthRules rules;
  rules.input_limit = 10;
  HealthJudge on(rules);
  StepRecord normalized = step(0);
  normalized.input_max = 3;
  EXPECT_EQ(judged(on, normalized).health, Health::kFinite);
  const StepRecord r = judged(on, raw);
  ASSERT_EQ(r.rules, std::vector<std::string>{"input_limit"});
  EXPECT_EQ(r.hits[0].value, 255);
  EXPECT_EQ(r.hits[0].threshold, 10);
  EXPECT_EQ(default_config({"health.input_limit=10"}).health.input_limit, 10);
}

TEST(Health, ParamJumpIgnoresBiases) {
  HealthJudge judge(HealthRules{});
  StepRecord r = step(0);
  r.layers[0].is_weight = false;
  r.layers[0].param_norm_after = 100;
  EXPECT_EQ(judged(judge, r).health, Health::kFinite);
}

// A parameter of an optimizer that normalizes its steps (Adam and kin) is
// judged by its step against lr, not its jump against its own norm.
TEST(Health, AnAdaptiveOptimizersWeightIsJudgedByItsStepAgainstLr) {
  const HealthRules rules;
  HealthJudge judge(rules);
  StepRecord r = step(0);
  r.layers[0].param_norm_after = r.layers[0].param_norm_before * 1.6;  // AdamW's first step on a small weight
  r.layers[0].adaptive = true;
  r.layers[0].update_ratio = r.update_ratio = 1.0;
  r = judged(judge, r);
  EXPECT_EQ(r.health, Health::kFinite) << ::testing::PrintToString(r.rules);
  StepRecord sgd = step(1);
  sgd.layers[0].param_norm_after = sgd.layers[0].param_norm_before * 1.6;
  EXPECT_TRUE(fired(judged(judge, sgd), "param_jump_limit")) << "SGD: as before";
  StepRecord big = step(2);
  big.layers[0].adaptive = true;
  big.layers[0].update_ratio = big.update_ratio = rules.update_ratio_limit * 1.01;  // v decayed, then a gradient
  big = judged(judge, big);
  EXPECT_TRUE(fired(big, "update_ratio_limit"));
  ASSERT_EQ(big.hits.size(), 1u);
  EXPECT_EQ(big.hits[0].threshold, rules.update_ratio_limit);
  StepRecord below = step(3);
  below.layers[0].adaptive = true;
  below.layers[0].update_ratio = below.update_ratio = rules.update_ratio_limit * 0.99;
  EXPECT_FALSE(fired(judged(judge, below), "update_ratio_limit"));
}

TEST(Health, AGradientSpikeAgainstTheSecondMomentIsExtreme) {
  EXPECT_EQ(HealthRules{}.grad_spike_limit, 0.0) << "off by default";
  HealthRules rules;
  rules.grad_spike_limit = 5000;  // SPAM's threshold
  HealthJudge judge(rules);
  StepRecord calm = step(0);
  calm.layers[0].grad_spike_score = calm.grad_spike_score = 999;  // a gradient of constant size on Adam's second step (β2 0.999)
  EXPECT_EQ(judged(judge, calm).health, Health::kFinite);
  StepRecord spike = step(1);
  spike.layers[0].grad_spike_score = spike.grad_spike_score = 2.5e5;  // a coordinate 500x its RMS
  spike = judged(judge, spike);
  EXPECT_TRUE(fired(spike, "grad_spike_limit"));
  ASSERT_EQ(spike.hits.size(), 1u);
  EXPECT_EQ(spike.hits[0].value, 2.5e5);
  EXPECT_EQ(spike.hits[0].threshold, 5000.0);
  HealthRules off;
  off.grad_spike_limit = 0;
  HealthJudge no(off);
  StepRecord again = step(2);
  again.layers[0].grad_spike_score = again.grad_spike_score = 2.5e5;
  EXPECT_EQ(judged(no, again).health, Health::kFinite) << "0 disables it";
}

// health.layers: a tensor with its own threshold is judged by it, every
// other by the model-wide one; the tensor furthest past its threshold fires,
// and the hit names it.
TEST(Health, APerTensorThresholdReplacesTheModelWideOneForThatTensorAlone) {
  HealthRules rules;
  rules.layers["hot.weight"].param_jump_limit = 2.0;
  rules.layers["blocks.0.attn_logits"].attention_logit_limit = 5e3;
  rules.layers["quiet_act"].activation_limit = 0;  // 0: that tensor is not judged by the rule
  auto two_weights = [](int64_t i, double hot_jump, double fc_jump) {
    StepRecord r = step(i);
    r.layers[0].param_norm_after = r.layers[0].param_norm_before * (1 + fc_jump);
    LayerStats hot = r.layers[0];
    hot.name = "hot.weight";
    hot.param_norm_after = hot.param_norm_before * (1 + hot_jump);
    r.layers.push_back(hot);
    return r;
  };
  HealthJudge judge(rules);
  EXPECT_EQ(judged(judge, two_weights(0, 1.0, 0.01)).health, Health::kFinite) << "1.0 is inside hot.weight's 2";
  const StepRecord fc = judged(judge, two_weights(1, 1.0, 0.6));
  ASSERT_EQ(fc.hits.size(), 1u);
  EXPECT_EQ(fc.hits[0].tensor, "fc.weight");
  EXPECT_EQ(fc.hits[0].threshold, 0.5) << "the others keep the model-wide limit";
  EXPECT_EQ(fc.hits[0].describe(), "param_jump_limit 0.6 > 0.5 at fc.weight");
  const StepRecord both = judged(judge, two_weights(2, 3.0, 0.6));  // 1.5x its limit against 1.2x
  ASSERT_EQ(both.hits.size(), 1u);
  EXPECT_EQ(both.hits[0].tensor, "hot.weight");
  EXPECT_EQ(both.hits[0].threshold, 2.0);
  EXPECT_NEAR(both.hits[0].value, 3.0, 1e-12);

  StepRecord taps = step(3);
  taps.taps = {{"blocks.0.attn_logits", 3e3}, {"blocks.1.attn_logits", 900}, {"quiet_act", 9e9}};
  taps.activation_max = 9e9;
  const StepRecord calm = judged(judge, taps);
  EXPECT_EQ(calm.health, Health::kFinite) << ::testing::PrintToString(calm.rules);
  taps.step = 4;
  taps.taps[1].max_abs = 2e3;
  taps = judged(judge, taps);
  ASSERT_EQ(taps.hits.size(), 1u);
  EXPECT_EQ(taps.hits[0].rule, "attention_logit_limit");
  EXPECT_EQ(taps.hits[0].tensor, "blocks.1.attn_logits");
  EXPECT_EQ(taps.hits[0].threshold, 1e3);

  // The tensor travels with the hit through a trace line.
  const StepRecord back = step_record_from_json(to_json(fc), "trace.jsonl");
  ASSERT_EQ(back.hits.size(), 1u);
  EXPECT_EQ(back.hits[0].tensor, "fc.weight");
}

TEST(Health, PerTensorRulesThatJudgeNoTensorAreNamed) {
  HealthRules rules;
  rules.layers["fc.weight"].param_jump_limit = 2;
  EXPECT_TRUE(unused_layer_rules(rules, step(0)).empty());
  rules.layers["fc.weigth"].param_jump_limit = 2;
  rules.layers["fc_act"].attention_logit_limit = 2e3;
  const std::vector<std::string> lines = unused_layer_rules(rules, step(0));
  ASSERT_EQ(lines.size(), 2u) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0], "health.layers: \"fc.weigth\" is neither a parameter nor a tap of this model "
                      "(did you mean \"fc.weight\"?)");
  EXPECT_EQ(lines[1], "health.layers.fc_act.attention_logit_limit: that rule does not judge fc_act "
                      "(it judges taps named *attn_logits)");
}

// The step's statistics travel through trace.jsonl (onset_eval judges
// traces again); a trace written before they existed reads them as 0.
TEST(Health, TheUpdateStatisticsRoundTripThroughATraceLine) {
  StepRecord r = step(7);
  r.input_hash = r.label_hash = Hash128{};
  r.layers[0].adaptive = true;
  r.layers[0].update_norm = 0.25;
  r.layers[0].update_ratio = r.update_ratio = 1.5;
  r.update_norm = 0.25;
  r.layers[0].grad_spike_score = r.grad_spike_score = 812.5;
  nlohmann::json line = to_json(r);
  const StepRecord back = step_record_from_json(line, "trace.jsonl");
  ASSERT_EQ(back.layers.size(), 1u);
  EXPECT_TRUE(back.layers[0].adaptive);
  EXPECT_EQ(back.layers[0].update_norm, 0.25);
  EXPECT_EQ(back.layers[0].update_ratio, 1.5);
  EXPECT_EQ(back.update_ratio, 1.5);
  EXPECT_EQ(back.update_norm, 0.25);
  EXPECT_EQ(back.grad_spike_score, 812.5);
  EXPECT_EQ(back.layers[0].grad_spike_score, 812.5);
  line.erase("update_norm");
  line.erase("grad_spike_score");
  line["layers"][0].erase("grad_spike_score");
  line.erase("update_ratio");
  line["layers"][0].erase("update_norm");
  line["layers"][0].erase("update_ratio");
  line["layers"][0].erase("adaptive");
  const StepRecord old = step_record_from_json(line, "old.jsonl");
  EXPECT_EQ(old.update_ratio, 0.0);
  EXPECT_EQ(old.grad_spike_score, 0.0);
  EXPECT_FALSE(old.layers[0].adaptive);
}

// A trace line is written straight as text (TraceWriter, every step): the
// same bytes nlohmann::json dumps for it (keys in their sorted order, numbers
// in its shortest form, strings escaped as it escapes them), and every field
// comes back from it.
TEST(Health, ATraceLineIsTheTextItsJsonDumpsAndEveryFieldComesBack) {
  StepRecord r = step(12);
  r.phase_name = "B\"→A\n";
  r.input_hash = Hash128{0x0123456789abcdefULL, 42};
  r.loss = 2.0;
  r.grad_norm = std::numeric_limits<double>::quiet_NaN();
  r.grad_max = std::numeric_limits<double>::infinity();
  r.state_max = -std::numeric_limits<double>::infinity();
  r.param_norm_before = -0.0;
  r.input_max = 1e-300;
  r.output_max = 0.0001;
  r.lr = 123456789012345678.0;
  r.step_ms = 13.25;
  r.micro_batches = 3;
  r.loss_scale = 65536;
  r.skipped = true;
  r.taps = {{"zeta", 1.5}, {"alpha\x01", 2.5}, {"zeta", 3.5}, {"é", 1e20}};  // a name twice: its last value
  LayerStats odd = r.layers[0];
  odd.name = "blocks.0.\\weight";
  odd.adaptive = true;
  odd.update_ratio = std::numeric_limits<double>::quiet_NaN();
  r.layers.push_back(odd);
  r.groups = {{"opt", 0, 0.05, 1.0, 2.0}, {"opt", 1, 0.01, std::numeric_limits<double>::infinity(), 0.5}};
  r.health = Health::kNonFinite;
  r.rules = {"non_finite", "loss_limit"};
  r.hits = {{"loss_limit", 50, 40, 50, ""}, {"grad_norm_limit", 1e4, 1e3, 1e4, "fc.weight"}};
  r.movers = {{"fc.weight", "gradient", 40, 400, 10, 9}};
  r.fault = Fault{"fc_act", Stage::kForward, 2, 1, 0, 128, 1};
  for (size_t classes : {size_t{10}, kTraceHistogramClasses + 1}) {
    r.label_histogram.assign(classes, 7);
    const std::string line = trace_line(r);
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j.dump(), line) << "the text of its own dump";
    EXPECT_TRUE(j["loss"].is_number_float()) << "2.0 stays a float: " << j["loss"].dump();
    EXPECT_EQ(j["step_ms"], 13.25);
    EXPECT_EQ(j["activations"]["zeta"], 3.5);
    EXPECT_EQ(j["activations"].size(), 3u);
    EXPECT_EQ(j.contains("classes"), classes > kTraceHistogramClasses);
    const StepRecord back = step_record_from_json(j, "trace.jsonl");
    EXPECT_EQ(back.phase_name, r.phase_name);
    EXPECT_EQ(back.input_hash.hex(), r.input_hash.hex());
    EXPECT_TRUE(std::isnan(back.grad_norm));
    EXPECT_EQ(back.grad_max, r.grad_max);
    EXPECT_EQ(back.state_max, r.state_max);
    EXPECT_TRUE(std::signbit(back.param_norm_before));
    EXPECT_EQ(back.input_max, 1e-300);
    EXPECT_EQ(back.output_max, 0.0001);
    EXPECT_EQ(back.lr, r.lr);
    EXPECT_EQ(back.micro_batches, 3);
    EXPECT_EQ(back.loss_scale, 65536);
    EXPECT_TRUE(back.skipped);
    ASSERT_EQ(back.layers.size(), 2u);
    EXPECT_EQ(back.layers[1].name, odd.name);
    EXPECT_TRUE(back.layers[1].adaptive);
    EXPECT_TRUE(std::isnan(back.layers[1].update_ratio));
    EXPECT_EQ(back.layers[1].grad_norm, odd.grad_norm);
    EXPECT_EQ(back.rules, r.rules);
    ASSERT_EQ(back.hits.size(), 2u);
    EXPECT_EQ(back.hits[1].tensor, "fc.weight");
    ASSERT_EQ(back.movers.size(), 1u);
    EXPECT_EQ(back.movers[0].since, 9);
    ASSERT_TRUE(back.fault.has_value());
    EXPECT_EQ(back.fault->describe(), r.fault->describe());
    EXPECT_EQ(back.label_histogram.size(), classes > kTraceHistogramClasses ? 0u : classes);
    ASSERT_EQ(j["groups"].size(), 2u);
    EXPECT_EQ(j["groups"][1]["state_norm"], "inf");
    EXPECT_EQ(j["groups"][1]["group"], 1);
  }
  r.layers[0].name = "\xff\xfe";  // not UTF-8: refused as dump() refuses it
  EXPECT_THROW(trace_line(r), nlohmann::json::type_error);
}

// The trace file is written a buffer at a time, not a write(2) per step's
// line: lines adding up to less than the buffer are all still in it (the
// .partial file empty), and close() writes every one.
TEST(Health, TraceLinesGoToTheFileABufferAtATime) {
  testing::TempDir dir;
  const std::string path = dir.file("trace.jsonl");
  TraceWriter writer(path);
  size_t bytes = 0;
  int64_t lines = 0;
  for (;; ++lines) {
    const StepRecord r = step(lines);
    const size_t size = trace_line(r).size() + 1;
    if (bytes + size >= TraceWriter::kBufferBytes) break;
    bytes += size;
    writer.write(r);
  }
  ASSERT_GT(lines, 4) << "several lines, more than glibc's 4 KB default buffer holds";
  ASSERT_GT(bytes, size_t{4096});
  EXPECT_EQ(std::filesystem::file_size(path + ".partial"), 0u) << "written before the buffer was full";
  writer.close();
  std::ifstream in(path);
  std::string line;
  int64_t back = 0;
  while (std::getline(in, line)) EXPECT_EQ(step_record_from_json(nlohmann::json::parse(line), path).step, back++);
  EXPECT_EQ(back, lines);
  EXPECT_EQ(std::filesystem::file_size(path), bytes);
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


// ---- the rules with a trend, a chance level and OLMo's sigma ----

// Rules with only the new family on, so each test sees one rule.
HealthRules only_new_rules() {
  HealthRules h;
  h.spike_z = 0;
  h.loss_limit = h.grad_norm_limit = h.max_grad_limit = h.activation_limit = h.optimizer_state_limit = 0;
  h.param_jump_limit = 0;
  return h;
}

TEST(Health, EachGrowthRuleFiresOnSustainedGrowthAboveItsFloorOnly) {
  HealthRules rules = only_new_rules();
  rules.growth_ratio = 1.5;
  rules.growth_steps = 3;
  struct Case {
    const char* rule;
    std::function<void(StepRecord&, double)> set;
    double floor;
  } cases[] = {
      {"loss_growth", [](StepRecord& r, double v) { r.loss = v; }, rules.loss_growth_floor},
      {"grad_norm_growth", [](StepRecord& r, double v) { r.grad_norm = v; }, rules.grad_norm_growth_floor},
      {"max_grad_growth", [](StepRecord& r, double v) { r.grad_max = v; }, rules.max_grad_growth_floor},
      {"optimizer_state_growth", [](StepRecord& r, double v) { r.state_max = v; }, rules.optimizer_state_growth_floor},
      {"activation_growth", [](StepRecord& r, double v) { r.activation_max = v; }, rules.activation_growth_floor},
  };
  for (const Case& c : cases) {
    // ×1.6 per step, ending 2× above the floor: silent for two growing steps, fires on the third.
    HealthJudge judge(rules);
    const double end = 2 * std::max(c.floor, 1.0);
    for (int i = 0; i < 4; ++i) {
      StepRecord r = step(i);
      c.set(r, end / std::pow(1.6, 3 - i));
      r = judged(judge, r);
      EXPECT_EQ(fired(r, c.rule), i == 3) << c.rule << " step " << i;
      if (i == 3) {
        ASSERT_FALSE(r.hits.empty());
        EXPECT_NEAR(r.hits.back().value, 1.6, 1e-9) << "the smallest per-step factor of the run";
        EXPECT_EQ(r.hits.back().threshold, 1.5);
        EXPECT_NEAR(r.hits.back().quantity, end, 1e-9);
      }
    }
    // The same growth with one step of ×1.2 in it: not sustained.
    HealthJudge broken(rules);
    const double factors[] = {1, 1.6, 1.2, 1.6};
    double v = end / (1.6 * 1.2 * 1.6);
    for (int i = 0; i < 4; ++i) {
      v *= factors[i];
      StepRecord r = step(i);
      c.set(r, v);
      EXPECT_FALSE(fired(judged(broken, r), c.rule)) << c.rule << " step " << i;
    }
    // Sustained growth that ends below the floor is silent.
    if (c.floor > 0) {
      HealthJudge low(rules);
      for (int i = 0; i < 4; ++i) {
        StepRecord r = step(i);
        c.set(r, 0.9 * c.floor / std::pow(1.6, 3 - i));
        EXPECT_FALSE(fired(judged(low, r), c.rule)) << c.rule;
      }
    }
  }
}

TEST(Health, TheRampTheSpikeRuleMissedIsCaughtByGrowth) {
  // The run: a trailing window already holding noise spikes of 12-17,
  // then grad norm 27.9 -> 41.5 -> 67.5 and loss 6.0 -> 27.8 -> 34.5.
  const HealthRules rules;  // the defaults
  HealthJudge judge(rules);
  for (int i = 0; i < 40; ++i) {
    const double noise = (i % 7 == 3) ? 12.0 + (i % 5) : 4.0 + 0.5 * (i % 3);
    StepRecord r = step(i, 2.0 + 0.1 * (i % 4), noise);
    r.grad_max = noise / 10;
    ASSERT_EQ(judged(judge, r).health, Health::kFinite) << i;
  }
  const double norms[] = {27.9, 41.5, 67.5};
  const double losses[] = {6.0, 27.8, 34.5};
  std::vector<StepRecord> ramp;
  for (int i = 0; i < 3; ++i) {
    StepRecord r = step(40 + i, losses[i], norms[i]);
    r.grad_max = norms[i] / 10;
    ramp.push_back(judged(judge, r));
  }
  for (const StepRecord& r : ramp) {
    EXPECT_FALSE(fired(r, "grad_norm_spike")) << r.step << ": the noisy window hides it";
  }
  EXPECT_TRUE(fired(ramp.back(), "grad_norm_growth")) << "two steps of ×1.4 or more";
  EXPECT_EQ(ramp.back().health, Health::kExtreme);
}

TEST(Health, ChanceLossFiresAboveFactorTimesLnClassesOnceThePhaseIsUnderWay) {
  HealthRules rules = only_new_rules();
  rules.growth_ratio = 0;
  rules.chance_loss_factor = 3;
  rules.chance_loss_after = 5;
  const double chance = 3 * std::log(10.0);
  HealthJudge judge(rules, /*classes=*/10);
  // Early steps of a phase may sit far above chance: silent.
  EXPECT_FALSE(fired(judged(judge, step(0, chance * 2)), "chance_loss"));
  for (int i = 1; i < 5; ++i) judged(judge, step(i));
  EXPECT_FALSE(fired(judged(judge, step(5, chance * 0.99)), "chance_loss"));
  const StepRecord r = judged(judge, step(6, chance * 1.01));
  EXPECT_TRUE(fired(r, "chance_loss"));
  EXPECT_NEAR(r.hits.back().threshold, chance, 1e-12);
  // A new phase starts its count again.
  StepRecord next = step(7, chance * 2);
  next.phase = 1;
  EXPECT_FALSE(fired(judged(judge, next), "chance_loss"));
  // Without classes (a regression scenario) the rule is off.
  HealthJudge unknown(rules, /*classes=*/0);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(fired(judged(unknown, step(i, 1e3)), "chance_loss"));
}

TEST(Health, SigmaRuleCountsStandardDeviationsOverAFullWindowInOlmosForm) {
  HealthRules rules = only_new_rules();
  rules.growth_ratio = 0;
  rules.sigma = 7;
  rules.sigma_window = 32;
  HealthJudge judge(rules);
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 0.05);
  for (int i = 0; i < 31; ++i) judged(judge, step(i, 2.0 + noise(rng), 1.0 + noise(rng)));
  // 31 of 32: silent however far off.
  EXPECT_FALSE(fired(judged(judge, step(31, 2.0, 50.0)), "grad_norm_sigma")) << "silent until full";
  judged(judge, step(32, 2.0, 1.0));
  const StepRecord r = judged(judge, step(33, 5.0, 1.0));
  EXPECT_TRUE(fired(r, "loss_sigma")) << "3 above a mean of 2 with sd 0.05";
  EXPECT_GT(r.hits.back().value, 7);
  EXPECT_FALSE(fired(r, "grad_norm_sigma"));
  // A floor keeps it quiet on small values.
  rules.loss_sigma_floor = 10;
  HealthJudge floored(rules);
  for (int i = 0; i < 32; ++i) judged(floored, step(i, 2.0 + noise(rng)));
  EXPECT_FALSE(fired(judged(floored, step(32, 5.0)), "loss_sigma"));
}

TEST(Health, HealthyNoiseRaisesNoAlarmUnderTheDefaults) {
  // 3,000 steps of multiplicative noise around a slowly falling loss: the
  // statistics of a healthy run wobble by up to 2x from step to step.
  HealthJudge judge(HealthRules{}, 10);
  std::mt19937 rng(11);
  std::lognormal_distribution<double> wobble(0, 0.3);
  for (int i = 0; i < 3000; ++i) {
    const double trend = 2.3 * std::exp(-i / 800.0) + 0.2;
    StepRecord r = step(i, trend * wobble(rng), 3.0 * wobble(rng), 50 * wobble(rng));
    r.grad_max = 0.5 * wobble(rng);
    r.state_max = 0.8 * wobble(rng);
    r.phase = i / 1000;
    r = judged(judge, r);
    ASSERT_EQ(r.health, Health::kFinite) << "step " << i << ": " << (r.hits.empty() ? "" : r.hits[0].describe());
  }
}

TEST(Health, EveryHitCarriesItsValueAndThreshold) {
  HealthJudge judge(HealthRules{});
  StepRecord r = step(0, 2.0, 250.0);
  r = judged(judge, r);
  ASSERT_TRUE(fired(r, "grad_norm_limit"));
  ASSERT_EQ(r.hits.size(), r.rules.size());
  for (size_t i = 0; i < r.hits.size(); ++i) EXPECT_EQ(r.hits[i].rule, r.rules[i]);
  EXPECT_EQ(r.hits[0].value, 250.0);
  EXPECT_EQ(r.hits[0].threshold, 100.0);
  EXPECT_EQ(r.hits[0].describe(), "grad_norm_limit 250 > 100");
}

// ---- onset attribution ----

// A record with three layers and two taps, each statistic near 1 with noise.
StepRecord layered(int64_t i, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0.8, 1.25);
  StepRecord r = step(i);
  r.layers.clear();
  for (const char* name : {"a.weight", "b.weight", "c.weight"}) {
    LayerStats l;
    l.name = name;
    l.is_weight = true;
    l.grad_norm = u(rng);
    l.param_norm_before = 10;
    l.param_norm_after = 10 + 0.01 * u(rng);
    l.state_max = 0.1 * u(rng);
    r.layers.push_back(l);
  }
  r.taps = {{"a_act", 3 * u(rng)}, {"c_logits", 5 * u(rng)}};
  return r;
}

TEST(Health, TheLayerWhoseGradientClimbedFirstIsNamedFirst) {
  for (const std::string planted : {"a.weight", "b.weight", "c.weight"}) {
    HealthJudge judge(HealthRules{});
    std::mt19937 rng(3);
    std::vector<StepRecord> out;
    for (int i = 0; i < 40; ++i) {
      StepRecord r = layered(i, rng);
      for (LayerStats& l : r.layers) {
        if (l.name == planted && i >= 30) l.grad_norm *= std::pow(3.0, i - 29);  // climbs from step 30
      }
      if (i >= 33) r.taps[1].max_abs *= std::pow(3.0, i - 32);  // the logits follow at step 33
      if (i == 35) r.grad_norm = 500;                          // the onset: grad_norm_limit
      out.push_back(judged(judge, r));
    }
    for (int i = 0; i < 35; ++i) ASSERT_EQ(out[size_t(i)].health, Health::kFinite) << planted << " " << i;
    const StepRecord& onset = out[35];
    ASSERT_EQ(onset.health, Health::kExtreme);
    ASSERT_GE(onset.movers.size(), 2u) << planted;
    EXPECT_EQ(onset.movers[0].tensor, planted);
    EXPECT_EQ(onset.movers[0].quantity, "gradient");
    EXPECT_EQ(onset.movers[0].since, 30) << "the first step of its climb";
    EXPECT_GT(onset.movers[0].ratio, 100);
    EXPECT_EQ(onset.movers[1].tensor, "c_logits");
    EXPECT_EQ(onset.movers[1].quantity, "activation");
    EXPECT_EQ(onset.movers[1].since, 33);
    EXPECT_EQ(describe_movers(onset.movers, 35).rfind(planted + " gradient ", 0), 0u) << describe_movers(onset.movers, 35);
    EXPECT_TRUE(out[36].movers.empty()) << "only the onset is attributed";
  }
}

TEST(Health, ANonFiniteOnsetWithoutPrecursorNamesTheNonFiniteTensorsInForwardOrder) {
  HealthJudge judge(HealthRules{});
  std::mt19937 rng(5);
  for (int i = 0; i < 20; ++i) judged(judge, layered(i, rng));
  StepRecord r = layered(20, rng);
  r.taps[1].max_abs = std::numeric_limits<double>::infinity();
  r.layers[2].grad_norm = std::numeric_limits<double>::quiet_NaN();
  r = judged(judge, r);
  ASSERT_EQ(r.health, Health::kNonFinite);
  ASSERT_EQ(r.movers.size(), 2u);
  EXPECT_EQ(r.movers[0].tensor, "c_logits") << "a tap comes before the gradients it causes";
  EXPECT_EQ(r.movers[0].since, 20);
  EXPECT_EQ(r.movers[1].tensor, "c.weight");
  EXPECT_EQ(describe_movers(r.movers, 20), "c_logits activation non-finite at the onset, then c.weight gradient (non-finite, at the onset)");
}

}  // namespace
}  // namespace spikehunt

namespace spikehunt {
namespace {

TEST(Health, TransformerRulesReadAttentionLogitAndLogZTapsByName) {
  const HealthRules rules;
  auto with_taps = [](std::vector<TapStats> taps) {
    StepRecord r = step(0);
    r.taps = std::move(taps);
    for (const TapStats& t : r.taps) r.activation_max = std::max(r.activation_max, t.max_abs);
    return r;
  };
  HealthJudge judge(rules);
  const StepRecord calm = judged(judge, with_taps({{"block0_attn_logits", 30}, {"out_z", 9}, {"out_z_mean", 6}}));
  EXPECT_EQ(calm.health, Health::kFinite) << calm.rules.size();

  const StepRecord attn = judged(judge, with_taps({{"block0_attn_logits", 20}, {"block1_attn_logits", 2 * rules.attention_logit_limit}}));
  EXPECT_TRUE(fired(attn, "attention_logit_limit"));
  ASSERT_FALSE(attn.hits.empty());
  EXPECT_EQ(attn.hits[0].value, 2 * rules.attention_logit_limit) << "the largest over every layer's tap";
  EXPECT_EQ(attn.hits[0].threshold, rules.attention_logit_limit);

  const StepRecord z = judged(judge, with_taps({{"out_z", 2 * rules.logit_z_limit}}));
  EXPECT_TRUE(fired(z, "logit_z_limit"));
  EXPECT_FALSE(fired(z, "attention_logit_limit"));

  // The same magnitudes under other names are activations, not attention logits or log Z.
  const StepRecord other = judged(judge, with_taps({{"fc1_act", 2 * rules.attention_logit_limit}, {"out_z_mean", 2 * rules.logit_z_limit}}));
  EXPECT_FALSE(fired(other, "attention_logit_limit"));
  EXPECT_FALSE(fired(other, "logit_z_limit"));

  HealthRules off;
  off.attention_logit_limit = 0;
  off.logit_z_limit = 0;
  HealthJudge quiet(off);
  EXPECT_EQ(judged(quiet, with_taps({{"block0_attn_logits", 5000}, {"out_z", 500}})).health, Health::kFinite);
}

}  // namespace
}  // namespace spikehunt

namespace spikehunt {
namespace {

// docs/health.md's table of rules is the registry's: every rule once, a single limit's default as the code's.
TEST(HealthRegistry, TheDocsTableListsEveryRuleWithItsDefault) {
  std::map<std::string, std::string> defaults;  // rule -> its row's default column ("" for a row of several)
  const auto rows = testing::markdown_table("docs/health.md", "| rule | default | fires when |");
  ASSERT_FALSE(rows.empty()) << "docs/health.md has no table of rules";
  for (const std::vector<std::string>& row : rows) {
    ASSERT_GE(row.size(), 3u);
    const std::string& names = row[0];
    for (size_t at = names.find('`'); at != std::string::npos; at = names.find('`', names.find('`', at + 1) + 1)) {
      const std::string name = names.substr(at + 1, names.find('`', at + 1) - at - 1);
      EXPECT_EQ(defaults.count(name), 0u) << name << " is in the table twice";
      defaults[name] = names.find(',') == std::string::npos ? row[1] : "";
    }
  }
  const HealthRules fresh;
  EXPECT_EQ(defaults.size(), health_rules().size());
  for (const HealthRuleSpec& r : health_rules()) {
    ASSERT_TRUE(defaults.count(r.name)) << r.name << " is not in docs/health.md's table";
    if ((r.kind == RuleKind::kLimit || r.kind == RuleKind::kTensor) && !defaults[r.name].empty()) {
      const double d = fresh.*r.threshold.number;
      char text[32];
      std::snprintf(text, sizeof text, "%g", d);
      EXPECT_EQ(defaults[r.name].rfind(d == 0 ? "off (0)" : text, 0), 0u) << r.name << ": " << defaults[r.name];
    }
  }
}

// The config's parser walks the registry's fields: each lands in its member, and a bad one names its path.
TEST(HealthRegistry, EveryFieldIsAConfigFieldAndEveryRuleHasWhatItReads) {
  for (const HealthField& f : health_fields()) {
    const std::string path = std::string("health.") + f.name;
    const TrainingConfig c = default_config({path + "=" + (f.integer ? std::to_string(f.lo + 1) : "123.5")});
    if (f.integer) EXPECT_EQ(c.health.*f.integer, f.lo + 1) << path;
    else EXPECT_EQ(c.health.*f.number, 123.5) << path;
    try {
      default_config({path + "=-1"});
      ADD_FAILURE() << path << " = -1 was accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  for (const HealthRuleSpec& r : health_rules()) {
    EXPECT_EQ(find_health_rule(r.name), &r);
    if (r.kind == RuleKind::kNonFinite) continue;
    EXPECT_NE(r.threshold.name, nullptr) << r.name;
    EXPECT_EQ(r.kind == RuleKind::kTensor, r.quantity == RuleQuantity::kNone) << r.name;
    const bool windowed = r.kind == RuleKind::kSpike || r.kind == RuleKind::kGrowth || r.kind == RuleKind::kSigma;
    EXPECT_EQ(windowed, r.floor.name != nullptr) << r.name << ": a rule with a memory has a floor of its own";
  }
}

// Calibration raises each rule's own field (its floor, else its threshold), one field per rule.
TEST(HealthRegistry, CalibrationRaisesEachRulesOwnField) {
  std::set<std::string> fields;
  for (const HealthRuleSpec& r : health_rules()) {
    const std::string field = rule_field(r.name);
    if (r.kind == RuleKind::kNonFinite) {
      EXPECT_EQ(field, "");
      continue;
    }
    EXPECT_TRUE(fields.insert(field).second) << field << " is raised for two rules";
    HealthRules rules;
    set_rule_field(rules, field, 77.0);
    EXPECT_EQ(rule_field_value(rules, field), 77.0) << field;
    EXPECT_EQ(rules.*find_health_field(field)->number, 77.0) << field;
  }
  EXPECT_EQ(rule_field("loss_spike"), "loss_spike_floor");
  EXPECT_EQ(rule_field("chance_loss"), "chance_loss_factor");
  EXPECT_EQ(rule_field("grad_norm_limit"), "grad_norm_limit");
  EXPECT_EQ(rule_field("no_such_rule"), "");
}

}  // namespace
}  // namespace spikehunt
