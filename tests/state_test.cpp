// Tests harness/state.h: a burst stopped at step k, saved to a safetensors
// checkpoint and resumed in a fresh scenario ends bit-identical to one that
// never stopped: SGD with momentum, Adam, a cosine schedule with warm-up
// (resumed mid-schedule), gradient accumulation, and a scenario with two
// optimizers (SGD and Adam) in three param groups.
#include <cmath>

#include <gtest/gtest.h>

#include "harness/burst.h"
#include "harness/checkpoint.h"
#include "harness/health.h"
#include "harness/monitor.h"
#include "harness/state.h"
#include "harness/state_buffers.h"
#include "scenarios/catalog.h"
#include "test_util.h"

namespace spikehunt {
namespace {

struct Recorded {
  std::vector<double> losses;
  std::vector<double> lrs;  // every group's learning rate, step by step
  std::vector<torch::Tensor> params;
  Hash128 chain;
};

void add_lrs(const StepRecord& r, Recorded* run) {
  for (const GroupStats& g : r.groups) run->lrs.push_back(g.lr);
}

Recorded finish(Scenario& s, const TrainingConfig& c, BurstOptions o, Recorded before = {}) {
  o.on_step = [&](const StepRecord& r) {
    before.losses.push_back(r.loss);
    add_lrs(r, &before);
  };
  const BurstResult r = run_burst(s, c.health, o);
  for (const auto& p : s.model().parameters()) before.params.push_back(p.detach().clone());
  before.chain = r.verdict.hash_chain;
  return before;
}

void expect_resume_is_exact(const TrainingConfig& c, int64_t k) {
  configure_runtime(c);
  auto whole = make_scenario(c);
  const Recorded a = finish(*whole, c, BurstOptions{});

  // The first k steps under a monitor, then the checkpoint: tensors to disk, monitor state aside.
  auto first = make_scenario(c);
  Recorded b;
  Monitor m(*first, c.health);
  Trainer trainer(*first);
  for (int64_t i = 0; i < k; ++i) {
    const std::vector<Batch> batches = trainer.next_batches();
    ASSERT_EQ(int64_t(batches.size()), c.accumulation_steps);
    m.begin_step(i, batches);
    trainer.step(i, batches, &m);
    const StepRecord r = m.finish_step();
    b.losses.push_back(r.loss);
    add_lrs(r, &b);
  }
  const MonitorState at_k = m.state();
  testing::TempDir dir;
  write_checkpoint(dir.file("k.safetensors"), capture_state(*first), {});
  auto second = make_scenario(c);
  restore_state(*second, read_checkpoint(dir.file("k.safetensors")), "k.safetensors");
  ASSERT_EQ(Trainer(*second).skip_steps(k), k);
  BurstOptions rest;
  rest.resume = at_k;
  rest.start_step = k;
  const Recorded resumed = finish(*second, c, rest, b);
  EXPECT_EQ(resumed.losses, a.losses) << "losses compared bitwise";
  EXPECT_EQ(resumed.lrs, a.lrs) << "the learning rates resume mid-schedule";
  EXPECT_EQ(resumed.chain, a.chain);
  ASSERT_EQ(resumed.params.size(), a.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(torch::equal(resumed.params[i], a.params[i])) << i;
}

TEST(State, ResumingFromACheckpointIsBitIdenticalWithSgdMomentum) {
  expect_resume_is_exact(default_config({"model.kind=mlp", "optimizer.lr=0.05", "max_batches_per_epoch=6",
                                          "dataset.synthetic_train_per_class=40", "batch_size=16"}),
                         7);
}

TEST(State, ResumingFromACheckpointIsBitIdenticalWithAdam) {
  expect_resume_is_exact(default_config({"model.kind=mlp", "optimizer.kind=adam", "optimizer.lr=0.001",
                                          "max_batches_per_epoch=6", "dataset.synthetic_train_per_class=40",
                                          "batch_size=16"}),
                         9);
}

TEST(State, ResumingMidScheduleWithAccumulationIsBitIdentical) {
  const TrainingConfig c = default_config({"model.kind=mlp", "optimizer.lr=0.05", "max_batches_per_epoch=8",
                                           "dataset.synthetic_train_per_class=40", "batch_size=16",
                                           "accumulation_steps=2", "schedule.kind=cosine",
                                           "schedule.warmup_steps=3", "schedule.min_lr=0.005"});
  expect_resume_is_exact(c, 5);  // past the warm-up, inside the decay
  configure_runtime(c);
  auto s = make_scenario(c);
  Recorded run = finish(*s, c, BurstOptions{});
  ASSERT_EQ(run.lrs.size(), 12u) << "24 batches in pairs: 12 optimizer steps";
  EXPECT_DOUBLE_EQ(run.lrs[0], 0.05 / 3) << "warm-up: (s + 1) / 3 of the rate";
  EXPECT_DOUBLE_EQ(run.lrs[2], 0.05);
  EXPECT_DOUBLE_EQ(run.lrs[11], 0.005) << "cosine down to min_lr at the last step";
  EXPECT_GT(run.lrs[5], run.lrs[8]);
}

TEST(State, AGptOnTextResumesBitIdenticallyInFp32AndBf16) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    const TrainingConfig c = parse_config(
        nlohmann::json::object(), "tiny gpt",
        {"model.kind=gpt", "dataset.kind=text", "model.gpt.width=16", "model.gpt.layers=1", "model.gpt.heads=2",
         "model.gpt.context=16", "model.gpt.qk_layernorm=true", "batch_size=4", "max_batches_per_epoch=8",
         "optimizer.kind=adamw", "optimizer.lr=0.01", "schedule.kind=cosine", "schedule.warmup_steps=2",
         std::string("precision=") + precision});
    expect_resume_is_exact(c, 3);  // AdamW moments, the schedule and the text order all resume
  }
}

// A user's scenario with two optimizers: SGD with momentum over the hidden
// layers (two groups: weights at the config's lr, biases at half of it) and
// Adam over the output layer.
class TwoOptimizers : public StandardScenario {
 public:
  explicit TwoOptimizers(const TrainingConfig& c)
      : StandardScenario(c, std::make_shared<const Dataset>(load_dataset(c.dataset))) {
    std::vector<torch::Tensor> weights, biases, head;
    for (auto& p : model_->named_parameters()) {
      if (p.key().rfind("out.", 0) == 0) head.push_back(p.value());
      else (p.value().dim() >= 2 ? weights : biases).push_back(p.value());
    }
    body_ = std::make_unique<torch::optim::SGD>(weights, torch::optim::SGDOptions(c.optimizer.lr).momentum(0.9));
    body_->add_param_group(torch::optim::OptimizerParamGroup(
        biases, std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(c.optimizer.lr / 2).momentum(0.9))));
    head_ = std::make_unique<torch::optim::Adam>(head, torch::optim::AdamOptions(1e-3));
  }
  std::vector<NamedOptimizer> optimizers() override { return {{"body", body_.get()}, {"head", head_.get()}}; }

 private:
  std::unique_ptr<torch::optim::SGD> body_;
  std::unique_ptr<torch::optim::Adam> head_;
};

TEST(State, TwoOptimizersAreSteppedMonitoredAndResumedBitIdentically) {
  register_scenario("test_two_optimizers", [](const TrainingConfig& c) { return std::make_unique<TwoOptimizers>(c); });
  const TrainingConfig c = default_config({"scenario=test_two_optimizers", "model.kind=mlp", "optimizer.lr=0.05",
                                           "max_batches_per_epoch=6", "dataset.synthetic_train_per_class=40",
                                           "batch_size=16", "schedule.kind=linear", "schedule.warmup_steps=2"});
  expect_resume_is_exact(c, 6);
  configure_runtime(c);
  auto s = make_scenario(c);
  std::vector<StepRecord> records;
  BurstOptions o;
  o.on_step = [&](const StepRecord& r) { records.push_back(r); };
  run_burst(*s, c.health, o);
  ASSERT_GE(records.size(), 3u);
  const StepRecord& r = records[2];
  ASSERT_EQ(r.groups.size(), 3u);
  EXPECT_EQ(r.groups[0].optimizer, "body");
  EXPECT_EQ(r.groups[1].group, 1);
  EXPECT_EQ(r.groups[2].optimizer, "head");
  EXPECT_DOUBLE_EQ(r.groups[1].lr, r.groups[0].lr / 2) << "each group keeps its own rate under the schedule";
  EXPECT_GT(r.groups[2].state_max, 0.0) << "Adam's moments are monitored";
  EXPECT_GT(r.groups[0].state_norm, 0.0) << "and SGD's momentum";
  for (const LayerStats& l : r.layers) EXPECT_GT(l.state_norm, 0.0) << l.name << ": every parameter was stepped";
  // The checkpoint holds both optimizers' state: Adam's step counts, SGD's momentum.
  std::vector<std::string> names;
  for (const NamedTensor& t : capture_state(*s)) names.push_back(t.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "optim.out.weight.step"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "optim.fc1.bias.momentum_buffer"), names.end());
}

TEST(State, CapturingIntoLastStepsBuffersGivesCaptureStatesTensorsInTheirMemory) {
  register_scenario("test_two_optimizers_into", [](const TrainingConfig& c) { return std::make_unique<TwoOptimizers>(c); });
  const TrainingConfig c = default_config({"scenario=test_two_optimizers_into", "model.kind=mlp",
                                           "max_batches_per_epoch=3", "dataset.synthetic_train_per_class=40",
                                           "batch_size=16"});
  configure_runtime(c);
  auto s = make_scenario(c);
  std::vector<NamedTensor> into;
  capture_state_into(*s, into);  // before any step: no optimizer state yet
  BurstOptions o;
  o.max_steps = 2;
  run_burst(*s, c.health, o);
  capture_state_into(*s, into);  // the optimizers' state appears: new names, new buffers
  const void* fc1 = into.front().tensor.data_ptr();
  run_burst(*s, c.health, o);    // the parameters and moments change
  capture_state_into(*s, into);
  const std::vector<NamedTensor> fresh = capture_state(*s);
  ASSERT_EQ(into.size(), fresh.size());
  for (size_t i = 0; i < fresh.size(); ++i) {
    EXPECT_EQ(into[i].name, fresh[i].name);
    EXPECT_TRUE(torch::equal(into[i].tensor, fresh[i].tensor)) << fresh[i].name;
  }
  EXPECT_EQ(into.front().tensor.data_ptr(), fc1) << into.front().name << " was copied into the last buffer";
  EXPECT_NE(into.front().tensor.data_ptr(), s->model().parameters().front().data_ptr()) << "a copy, not the live one";
}

TEST(State, RestoreRejectsAForeignCheckpoint) {
  const TrainingConfig mlp = default_config({"model.kind=mlp", "dataset.synthetic_train_per_class=10"});
  const TrainingConfig wide = default_config({"model.kind=mlp", "model.mlp_width=64", "dataset.synthetic_train_per_class=10"});
  auto a = make_scenario(mlp);
  auto b = make_scenario(wide);
  try {
    restore_state(*b, capture_state(*a), "a.safetensors");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a.safetensors: model.fc1.weight = [128,784] does not match the model's [64,784]"),
              std::string::npos)
        << e.what();
  }
  auto cnn = make_scenario(default_config({"dataset.synthetic_train_per_class=10"}));
  EXPECT_THROW(restore_state(*cnn, capture_state(*a), "a.safetensors"), InputError);
}

TEST(State, HealthJudgeStateRoundTrips) {
  HealthJudge a(HealthRules{});
  for (int i = 0; i < 20; ++i) {
    StepRecord r;
    r.loss = 1 + 0.1 * i;
    r.grad_norm = 0.5 + 0.01 * i;
    r.activation_max = 3;
    a.judge(r);
  }
  HealthJudge b(HealthRules{});
  b.restore(nlohmann::json::parse(a.state().dump()));
  EXPECT_EQ(b.state(), a.state());
  StepRecord spike;
  spike.grad_norm = 80;
  StepRecord copy = spike;
  a.judge(spike);
  b.judge(copy);
  EXPECT_EQ(spike.rules, copy.rules);
  EXPECT_EQ(spike.health, Health::kExtreme);
}

TEST(State, ARestoredJudgeContinuesGrowthRunsAndAttributesTheOnsetAsTheOriginal) {
  auto record = [](int64_t i) {
    StepRecord r;
    r.step = i;
    r.loss = 2 + 0.1 * double(i % 3);
    r.grad_norm = i < 24 ? 1 + 0.1 * double(i % 4) : 1.6 * std::pow(1.7, double(i - 23));  // climbs from 24
    r.grad_max = 0.1;
    r.activation_max = 3;
    LayerStats l;
    l.name = "fc.weight";
    l.is_weight = true;
    l.grad_norm = r.grad_norm;
    l.param_norm_before = 5;
    l.param_norm_after = 5.01;
    r.layers = {l};
    return r;
  };
  HealthJudge a(HealthRules{}, 10);
  for (int64_t i = 0; i < 25; ++i) {
    StepRecord r = record(i);
    a.judge(r);
  }
  HealthJudge b(HealthRules{}, 10);
  b.restore(nlohmann::json::parse(a.state().dump()));  // mid-climb: one growing step already seen
  EXPECT_EQ(b.state(), a.state());
  for (int64_t i = 25; i < 40; ++i) {
    StepRecord ra = record(i), rb = record(i);
    a.judge(ra);
    b.judge(rb);
    ASSERT_EQ(ra.rules, rb.rules) << i;
    ASSERT_EQ(ra.movers.size(), rb.movers.size()) << i;
    for (size_t k = 0; k < ra.movers.size(); ++k) {
      EXPECT_EQ(ra.movers[k].tensor, rb.movers[k].tensor);
      EXPECT_EQ(ra.movers[k].since, rb.movers[k].since);
      EXPECT_EQ(ra.movers[k].ratio, rb.movers[k].ratio);
    }
    if (!ra.movers.empty()) {
      EXPECT_EQ(ra.movers[0].since, 24) << "the climb began before the checkpoint";
    }
  }
}

}  // namespace
}  // namespace spikehunt
