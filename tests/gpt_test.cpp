// Tests the transformer path: the gpt model (shape, causality, taps, sizes),
// the byte-level text dataset and its scenario (split, windows, order,
// skipping), bf16 autocast (active, deterministic, faults still named),
// dynamic loss scaling against a planted overflow, independent weight decay,
// and a GPT burst's determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "base/error.h"
#include "harness/burst.h"
#include "harness/monitor.h"
#include "scenarios/catalog.h"
#include "scenarios/models.h"
#include "scenarios/optimizers.h"
#include "test_util.h"

namespace spikehunt {
namespace {

namespace fs = std::filesystem;
using testing::has;
using testing::TempDir;

// A GPT small enough for a test: width 16, one block, context 16, 6 steps of 4 sequences.
TrainingConfig tiny_gpt(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"model.kind=gpt", "dataset.kind=text", "model.gpt.width=16", "model.gpt.layers=1",
                                   "model.gpt.heads=2", "model.gpt.context=16", "batch_size=4",
                                   "max_batches_per_epoch=6", "optimizer.kind=adamw", "optimizer.lr=0.01",
                                   "optimizer.betas=[0.9,0.95]", "grad_clip=1.0"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return parse_config(nlohmann::json::object(), "tiny_gpt", sets);
}

struct NameSink : TapSink {
  std::vector<std::string> names;
  std::map<std::string, torch::Tensor> tensors;
  void on_tap(const char* name, const torch::Tensor& t) override {
    names.push_back(name);
    tensors[name] = t.detach().clone();
  }
};

TEST(Gpt, DefaultSizeTapsAndShape) {
  TrainingConfig c = tiny_gpt();
  c.model.gpt = GptConfig{};  // width 128, 2 layers, 4 heads, context 64
  torch::manual_seed(0);
  Gpt gpt(c.model.gpt);
  const int64_t C = 128, T = 64, V = 256, L = 2;
  const int64_t block = 2 * 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * 4 * C + 4 * C) + (4 * C * C + C);
  EXPECT_EQ(parameter_count(gpt), V * C + T * C + L * block + 2 * C + C * V);
  EXPECT_EQ(parameter_count(gpt), 470528);

  GptConfig qk = c.model.gpt;
  qk.qk_layernorm = true;
  EXPECT_EQ(parameter_count(*std::make_shared<Gpt>(qk)), 470528 + L * 2 * 2 * (C / 4)) << "a LayerNorm on q and on k per head width";
  GptConfig tied = c.model.gpt;
  tied.tied_embeddings = true;
  EXPECT_EQ(parameter_count(*std::make_shared<Gpt>(tied)), 470528 - C * V) << "the head reuses the token embedding";

  NameSink sink;
  const torch::Tensor x = torch::randint(0, 256, {2, T}, torch::kInt64);
  const torch::Tensor y = gpt.forward(x, Tap(&sink));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, T, V}));
  EXPECT_EQ(sink.names, gpt.tap_names());
  EXPECT_EQ(sink.tensors["out_z"].sizes(), (std::vector<int64_t>{2, T})) << "log Z per token";
  EXPECT_TRUE(torch::allclose(sink.tensors["out_z"], torch::logsumexp(y, -1)));
  EXPECT_NEAR(sink.tensors["out_z_mean"].item<double>(), torch::logsumexp(y, -1).mean().item<double>(), 1e-5);
  // At init (weights N(0, 0.02)) the logits are near 0: log Z is near ln 256.
  EXPECT_NEAR(sink.tensors["out_z_mean"].item<double>(), std::log(256.0), 0.1);
}

TEST(Gpt, AttentionIsCausalAndItsTapIsTheScaledDotProduct) {
  TrainingConfig c = tiny_gpt();
  torch::manual_seed(1);
  Gpt gpt(c.model.gpt);
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randint(0, 256, {1, 16}, torch::kInt64);
  torch::Tensor x2 = x.clone();
  x2[0][10] = (x[0][10].item<int64_t>() + 1) % 256;
  const torch::Tensor a = gpt.forward(x, Tap()), b = gpt.forward(x2, Tap());
  EXPECT_TRUE(torch::equal(a.slice(1, 0, 10), b.slice(1, 0, 10))) << "a later token never changes an earlier logit";
  EXPECT_FALSE(torch::equal(a.slice(1, 10, 11), b.slice(1, 10, 11)));

  // The tapped attention logits are q·k/√d with the future at 0: scaling the
  // query weights by s scales every logit by s.
  NameSink before, after;
  gpt.forward(x, Tap(&before));
  for (auto& p : gpt.named_parameters()) {
    if (p.key() == "block0_qkv.weight") p.value().slice(0, 0, 16).mul_(3.0);
    if (p.key() == "block0_qkv.bias") p.value().slice(0, 0, 16).mul_(3.0);
  }
  gpt.forward(x, Tap(&after));
  const torch::Tensor la = before.tensors["block0_attn_logits"], lb = after.tensors["block0_attn_logits"];
  EXPECT_EQ(la.sizes(), (std::vector<int64_t>{1, 2, 16, 16}));
  EXPECT_TRUE(torch::allclose(lb, 3.0 * la, 1e-4, 1e-5));
  EXPECT_EQ(la.triu(1).abs().max().item<double>(), 0.0) << "future positions are 0, not -inf";
}

// A sink that reads only the max (the monitor) gets the attention tap's max
// from the lower triangles without the masked copy: the same bits as the max
// of the copy other sinks get; and the copy itself once the max is not finite.
struct MaxOnlySink : NameSink {
  std::map<std::string, double> max;
  void on_tap_max(const char* name, const torch::Tensor& t, double max_abs) override {
    names.push_back(name);
    tensors[name] = t.detach().clone();
    max[name] = max_abs;
  }
  bool reads_max_only() const override { return true; }
};

TEST(Gpt, AMaxOnlySinkGetsTheMaskedAttentionMaxWithoutTheCopyUnlessItIsNotFinite) {
  TrainingConfig c = tiny_gpt({"model.gpt.layers=2"});
  torch::manual_seed(2);
  Gpt gpt(c.model.gpt);
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randint(0, 256, {3, 16}, torch::kInt64);
  NameSink all;
  MaxOnlySink fast;
  gpt.forward(x, Tap(&all));
  gpt.forward(x, Tap(&fast));
  EXPECT_EQ(fast.names, gpt.tap_names());
  for (const char* name : {"block0_attn_logits", "block1_attn_logits"}) {
    ASSERT_EQ(fast.max.count(name), 1u) << name;
    EXPECT_EQ(fast.max[name], all.tensors[name].abs().max().item<double>()) << name;
    EXPECT_NE(fast.tensors[name].triu(1).abs().max().item<double>(), 0.0) << name << ": the unmasked scores, no copy";
  }
  EXPECT_EQ(fast.max.count("block0_mlp_act"), 0u) << "other taps are unchanged";

  // A NaN query bias makes head 0's visible scores NaN: the masked copy, as before.
  for (auto& p : gpt.named_parameters()) {
    if (p.key() == "block0_qkv.bias") p.value()[0] = std::nan("");
  }
  MaxOnlySink bad;
  gpt.forward(x, Tap(&bad));
  EXPECT_EQ(bad.max.count("block0_attn_logits"), 0u) << "a non-finite max: the copy, read by on_tap";
  ASSERT_EQ(bad.tensors.count("block0_attn_logits"), 1u);
  EXPECT_EQ(bad.tensors["block0_attn_logits"].triu(1).abs().max().item<double>(), 0.0) << "masked";
}

TEST(TextData, EveryTwentiethBlockIsHeldOut) {
  std::string bytes;
  for (int i = 0; i < 45 * 1024; ++i) bytes.push_back(char('a' + (i / 1024) % 26));
  const TextSet t = split_text(bytes);
  EXPECT_EQ(t.heldout.size(), 2u * 1024) << "blocks 19 and 39 of 45";
  EXPECT_EQ(t.train.size(), 43u * 1024);
  EXPECT_EQ(t.heldout.front(), uint8_t('a' + 19));
  EXPECT_EQ(t.heldout.back(), uint8_t('a' + 39 % 26));
  EXPECT_EQ(t.train[19 * 1024], uint8_t('a' + 20)) << "the training stream skips the held-out block";
}

TEST(TextData, ReadsADirectorysTextFilesAndNamesBadPaths) {
  TempDir dir;
  fs::create_directories(dir.file("texts"));
  testing::write_bytes(dir.file("texts/b"), std::string(15000, 'b'));
  testing::write_bytes(dir.file("texts/a"), std::string(15000, 'a'));
  testing::write_bytes(dir.file("texts/a.dat"), std::string(5000, 'x'));  // fortune's index
  fs::create_symlink(dir.file("texts/a"), dir.file("texts/a.u8"));
  const Dataset d = load_text_dataset(dir.file("texts"));
  ASSERT_EQ(d.text.files.size(), 2u);
  EXPECT_EQ(fs::path(d.text.files[0]).filename(), "a");
  EXPECT_EQ(d.text.bytes(), 30000) << "no index, no symlinked copy";
  EXPECT_EQ(d.text.train.front(), 'a');
  EXPECT_EQ(d.text.train.back(), 'b');

  try {
    load_text_dataset(dir.file("missing"));
    ADD_FAILURE() << "a missing path loads";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "dataset.text_path")) << e.what();
    EXPECT_TRUE(has(e.what(), "does not exist")) << e.what();
  }
  testing::write_bytes(dir.file("small.txt"), "just a line\n");
  try {
    load_text_dataset(dir.file("small.txt"));
    ADD_FAILURE() << "12 bytes load";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "holds 12 bytes")) << e.what();
    EXPECT_TRUE(has(e.what(), "small.txt")) << e.what();
  }
}

TEST(TextData, TheFortunesAreRealEnglishText) {
  const Dataset d = load_text_dataset(DatasetConfig{}.text_path);
  EXPECT_GT(d.text.bytes(), 2'000'000) << "the fortunes package ships about 2.5 MB";
  EXPECT_GT(d.text.files.size(), 30u);
  int64_t letters = 0;
  for (uint8_t b : d.text.train) letters += (b >= 'a' && b <= 'z') || b == ' ';
  EXPECT_GT(double(letters) / double(d.text.train.size()), 0.7) << "mostly lower-case letters and spaces";
}

TEST(TextScenario, BatchesAreShiftedWindowsInASeededOrder) {
  const TrainingConfig c = tiny_gpt();
  auto data = std::make_shared<const Dataset>(load_dataset(c.dataset));
  TextScenario s(c, data);
  EXPECT_EQ(s.planned_steps(), 6);
  EXPECT_EQ(s.num_classes(), 256);
  EXPECT_EQ(s.phase_names(), std::vector<std::string>{"text"});
  std::vector<Batch> batches;
  while (std::optional<Batch> b = s.next_batch()) batches.push_back(std::move(*b));
  ASSERT_EQ(batches.size(), 6u);
  const Batch& b0 = batches[0];
  EXPECT_EQ(b0.inputs.sizes(), (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(b0.inputs.scalar_type(), torch::kInt64);
  EXPECT_TRUE(torch::equal(b0.inputs.slice(1, 1), b0.targets.slice(1, 0, 15))) << "targets are the next byte";
  EXPECT_EQ(batches[5].step, 5);
  EXPECT_EQ(batches[5].batch, 5);

  TextScenario same(c, data), skipped(c, data);
  EXPECT_TRUE(torch::equal(same.next_batch()->inputs, b0.inputs)) << "the same seed, the same order";
  EXPECT_EQ(skipped.skip_batches(3), 3);
  const std::optional<Batch> fourth = skipped.next_batch();
  ASSERT_TRUE(fourth);
  EXPECT_TRUE(torch::equal(fourth->inputs, batches[3].inputs)) << "skipping lands on the same data";
  TrainingConfig other = c;
  other.seed = 1;
  TextScenario reseeded(other, data);
  EXPECT_FALSE(torch::equal(reseeded.next_batch()->inputs, b0.inputs)) << "another seed, another order";

  const std::vector<Batch> held = s.heldout(10);
  ASSERT_EQ(held.size(), 3u) << "10 windows in batches of 4";
  EXPECT_EQ(held[2].inputs.size(0), 2);
  EXPECT_EQ(held[0].inputs[0][0].item<int64_t>(), data->text.heldout[0]);
}

TEST(TextScenario, ABatchLargerThanTheTextIsAClearError) {
  TempDir dir;
  testing::write_bytes(dir.file("t.txt"), std::string(21000, 'x'));
  const TrainingConfig c = tiny_gpt({"dataset.text_path=" + dir.file("t.txt"), "batch_size=5000"});
  try {
    make_scenario(c);
    ADD_FAILURE() << "5000 windows of 17 bytes fit in 20 KB";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "batch_size")) << e.what();
    EXPECT_TRUE(has(e.what(), "windows")) << e.what();
  }
}

TEST(TextScenario, ATraceLineKeepsAByteHistogramOutButSaysHowManyClasses) {
  StepRecord r;
  r.label_histogram.assign(256, 4);
  const nlohmann::json text = to_json(r);
  EXPECT_FALSE(text.contains("label_histogram")) << "256 counts per line would bury the rest";
  EXPECT_EQ(text["classes"], 256);
  r.label_histogram.assign(10, 4);
  EXPECT_EQ(to_json(r)["label_histogram"].size(), 10u) << "an image model's histogram stays";
}

std::vector<torch::Tensor> parameters_of(Scenario& s) {
  std::vector<torch::Tensor> out;
  for (const auto& p : s.model().parameters()) out.push_back(p.detach().clone());
  return out;
}

struct GptRun {
  Verdict verdict;
  std::vector<double> losses;
  std::vector<torch::Tensor> params;
};

GptRun run(const TrainingConfig& c) {
  configure_runtime(c);
  auto s = make_scenario(c);
  GptRun r;
  BurstOptions o;
  o.on_step = [&](const StepRecord& rec) { r.losses.push_back(rec.loss); };
  r.verdict = run_burst(*s, c.health, o).verdict;
  r.params = parameters_of(*s);
  return r;
}

void expect_same(const GptRun& a, const GptRun& b) {
  EXPECT_EQ(a.verdict.hash_chain, b.verdict.hash_chain);
  EXPECT_EQ(a.losses, b.losses) << "losses, bitwise";
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(torch::equal(a.params[i], b.params[i])) << "parameter " << i;
}

TEST(GptBurst, LearnsAndIsBitIdenticalTwiceInFp32AndBf16) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    const TrainingConfig c = tiny_gpt({std::string("precision=") + precision, "max_batches_per_epoch=12", "optimizer.lr=0.02"});
    const GptRun a = run(c), b = run(c);
    EXPECT_EQ(a.verdict.outcome, Outcome::kHealthy) << a.verdict.message;
    ASSERT_EQ(a.losses.size(), 12u);
    EXPECT_NEAR(a.losses.front(), std::log(256.0), 0.1) << "chance at init";
    EXPECT_LT(a.losses.back(), a.losses.front() - 0.5) << "it learns";
    expect_same(a, b);
  }
}

// AdamW moves every coordinate by about lr whatever the gradient: at a high
// peak lr its first steps change small weights' norms by more than half, which
// is what Adam always does, not a precursor (issue 28: the healthy GPT at lr
// 0.3 with qk-layernorm was extreme at step 1 on param_jump_limit). Such a
// parameter is judged by its step against lr instead: about 1, and exactly
// 1 on the first, bias-corrected, step.
TEST(GptBurst, AdamWsFirstStepsAtAHighPeakLrAreJudgedAgainstLrNotTheWeight) {
  const TrainingConfig c = tiny_gpt({"model.gpt.qk_layernorm=true", "optimizer.lr=0.3", "schedule.kind=cosine",
                                     "schedule.warmup_steps=2", "max_batches_per_epoch=4"});
  configure_runtime(c);
  auto s = make_scenario(c);
  std::vector<StepRecord> steps;
  BurstOptions o;
  o.on_step = [&](const StepRecord& r) { steps.push_back(r); };
  const Verdict v = run_burst(*s, c.health, o).verdict;
  ASSERT_EQ(steps.size(), 4u);
  double jump = 0;
  for (const StepRecord& r : steps) {
    for (const LayerStats& l : r.layers) {
      EXPECT_TRUE(l.adaptive) << l.name;
      if (l.is_weight) jump = std::max(jump, std::fabs(l.param_norm_after - l.param_norm_before) / l.param_norm_before);
    }
    if (r.lr > 0) {  // the cosine ends at lr 0: no ratio
      EXPECT_GT(r.update_ratio, 0.3) << "step " << r.step;
    }
    EXPECT_LE(r.update_ratio, 1.0 + 1e-6) << "step " << r.step;
  }
  EXPECT_NEAR(steps[0].update_ratio, 1.0, 1e-3) << "Adam's first step is lr × sign(gradient)";
  EXPECT_GT(jump, c.health.param_jump_limit) << "the weight-relative rule would have fired";
  EXPECT_EQ(v.outcome, Outcome::kHealthy) << v.message;
}

TEST(GptBurst, Bf16AutocastIsActiveAndTheWeightsStayFp32) {
  // qk-layernorm too: its LayerNorms meet bf16 queries and keys.
  const TrainingConfig fp32 = tiny_gpt({"model.gpt.qk_layernorm=true"});
  const TrainingConfig bf16 = tiny_gpt({"model.gpt.qk_layernorm=true", "precision=bf16"});
  configure_runtime(fp32);
  auto a = make_scenario(fp32), b = make_scenario(bf16);
  const double la = heldout_loss(*a, 32), lb = heldout_loss(*b, 32);
  EXPECT_NE(la, lb) << "bf16 matmuls round differently";
  EXPECT_NEAR(la, lb, 0.05) << "but only by bf16's rounding";
  for (const auto& p : b->model().parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat32) << "fp32 master weights";
  const GptRun r = run(bf16);
  EXPECT_EQ(r.verdict.outcome, Outcome::kHealthy);
  for (const torch::Tensor& p : r.params) EXPECT_EQ(p.scalar_type(), torch::kFloat32);
}

TEST(GptBurst, ABf16FaultIsNamedByTensorAndStageAsInFp32) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    testing::PlantedScenario s(testing::Plant::kForwardNaN, 2, 5);
    TrainingConfig c;
    c.precision = std::string(precision) == "bf16" ? Precision::kBf16 : Precision::kFp32;
    s.bind_config(c);
    const BurstResult r = run_burst(s, c.health, BurstOptions{});
    ASSERT_EQ(r.verdict.outcome, Outcome::kNonFinite);
    EXPECT_EQ(*r.verdict.failure_step, 2);
    ASSERT_TRUE(r.verdict.fault);
    EXPECT_EQ(r.verdict.fault->tensor, "fc1_act");
    EXPECT_EQ(r.verdict.fault->stage, Stage::kForward);
  }
}

TEST(LossScaling, APlantedOverflowIsSkippedBackedOffThenGrown) {
  // 2^128 is past float32's range: the scaled loss and its backward are inf
  // on the CPU as fp16's would be on a GPU.
  testing::PlantedScenario s(testing::Plant::kNone, -1, 12);
  Trainer trainer(s);
  LossScaleOptions o;
  o.init_scale = std::ldexp(1.0, 128);
  o.growth_interval = 3;
  trainer.enable_loss_scaling(o);
  Monitor monitor(s, HealthRules{});
  std::vector<StepRecord> records;
  std::vector<bool> moved;
  for (int64_t step = 0; step < 8; ++step) {
    const std::vector<Batch> batches = trainer.next_batches();
    const std::vector<torch::Tensor> before = parameters_of(s);
    monitor.begin_step(step, batches);
    trainer.step(step, batches, &monitor);
    records.push_back(monitor.finish_step());
    const std::vector<torch::Tensor> after = parameters_of(s);
    bool changed = false;
    for (size_t i = 0; i < before.size(); ++i) changed = changed || !torch::equal(before[i], after[i]);
    moved.push_back(changed);
  }
  ASSERT_TRUE(records[0].skipped) << "the first scaled backward overflows";
  EXPECT_FALSE(moved[0]) << "a skipped step leaves the parameters alone";
  EXPECT_EQ(records[0].loss_scale, std::ldexp(1.0, 128));
  EXPECT_EQ(records[0].health, Health::kFinite) << "an overflow the scaler handles is not a fault";
  EXPECT_EQ(records[0].grad_norm, 0.0) << "the monitor sees the zeroed gradients";
  EXPECT_TRUE(std::isfinite(records[0].loss)) << "the loss is recorded unscaled";
  size_t first_good = 0;
  while (first_good < records.size() && records[first_good].skipped) ++first_good;
  ASSERT_LT(first_good, 4u) << "a few halvings bring the scale into range";
  for (size_t i = 1; i <= first_good; ++i) {
    EXPECT_EQ(records[i].loss_scale, records[i - 1].loss_scale / 2) << "each overflow halves the scale";
  }
  EXPECT_TRUE(moved[first_good]);
  EXPECT_GT(records[first_good].grad_norm, 0.0);
  EXPECT_EQ(records[first_good + 3].loss_scale, 2 * records[first_good].loss_scale)
      << "growth_interval good steps in a row double it";
  // Grown back to the scale that overflowed, the next step overflows again and backs off again.
  ASSERT_EQ(records[first_good + 3].loss_scale, std::ldexp(1.0, 128));
  EXPECT_TRUE(records[first_good + 3].skipped);
  EXPECT_FALSE(moved[first_good + 3]);
  EXPECT_EQ(records[first_good + 4].loss_scale, std::ldexp(1.0, 127));
  ASSERT_TRUE(trainer.loss_scaler());
  EXPECT_EQ(trainer.loss_scaler()->good_steps(), (int64_t(records.size()) - (int64_t(first_good) + 4)) % 3)
      << "good steps since the last back-off or growth";
}

TEST(LossScaling, Fp16NeedsACudaDevice) {
  TrainingConfig c = tiny_gpt();
  c.precision = Precision::kFp16;
  const std::vector<Problem> problems = validate(c);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].field, "precision");
  EXPECT_TRUE(has(problems[0].hint, "bf16"));
}

TEST(IndependentWeightDecay, DecaysByTheScheduleFactorNotByTheLearningRate) {
  for (bool independent : {false, true}) {
    OptimizerConfig o;
    o.kind = OptimizerKind::kAdamW;
    o.lr = 0.01;
    o.weight_decay = 0.1;
    o.independent_weight_decay = independent;
    torch::Tensor p = torch::ones({4}).requires_grad_(true);
    p.mutable_grad() = torch::zeros({4});  // Adam's step is 0: only the decay moves p
    auto opt = make_optimizer(o, {p});
    opt->step();
    EXPECT_FLOAT_EQ(p[0].item<float>(), independent ? 1.0f - 0.1f : 1.0f - 0.01f * 0.1f);
  }
  TrainingConfig c = tiny_gpt();
  c.optimizer.kind = OptimizerKind::kSgd;
  c.optimizer.independent_weight_decay = true;
  const std::vector<Problem> problems = validate(c);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].field, "optimizer.independent_weight_decay");
}

TEST(GptConfig, EveryInconsistencyIsNamed) {
  // Each change on its own, applied to the config's JSON without validating it.
  auto fields = [](const std::vector<std::string>& sets) {
    nlohmann::json j = config_to_json(tiny_gpt());
    apply_overrides(j, sets);
    std::vector<std::string> out;
    for (const Problem& p : validate(config_from_json(j, "test"))) out.push_back(p.field);
    return out;
  };
  EXPECT_EQ(fields({}), std::vector<std::string>{});
  EXPECT_EQ(fields({"dataset.kind=synthetic"}), std::vector<std::string>{"model.kind"});
  EXPECT_EQ(fields({"model.kind=mlp"}), std::vector<std::string>{"model.kind"});
  EXPECT_EQ(fields({"model.gpt.width=18", "model.gpt.heads=4"}), std::vector<std::string>{"model.gpt.width"});
  EXPECT_EQ(fields({"dataset.text_path="}), std::vector<std::string>{"dataset.text_path"});
  EXPECT_EQ(fields({"model.gpt.z_loss=2"}), std::vector<std::string>{"model.gpt.z_loss"});
  const TrainingConfig c = tiny_gpt({"model.gpt.qk_layernorm=true", "model.gpt.z_loss=1e-4", "precision=bf16"});
  EXPECT_EQ(config_from_json(config_to_json(c), "round trip").model.gpt.z_loss, 1e-4);
  EXPECT_TRUE(config_from_json(config_to_json(c), "round trip").model.gpt.qk_layernorm);
  EXPECT_EQ(config_from_json(config_to_json(c), "round trip").precision, Precision::kBf16);
}

}  // namespace
}  // namespace spikehunt
