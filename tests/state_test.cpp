// Tests harness/state.h: a burst stopped at step k, saved to a safetensors
// checkpoint and resumed in a fresh scenario ends bit-identical to one that
// never stopped, for SGD with momentum and for Adam.
#include <gtest/gtest.h>

#include "harness/burst.h"
#include "harness/checkpoint.h"
#include "harness/health.h"
#include "harness/monitor.h"
#include "harness/state.h"
#include "scenarios/catalog.h"
#include "test_util.h"

namespace spikehunt {
namespace {

struct Run {
  std::vector<double> losses;
  std::vector<torch::Tensor> params;
  Hash128 chain;
};

Run finish(Scenario& s, const TrainingConfig& c, BurstOptions o, Run before = {}) {
  o.on_step = [&](const StepRecord& r) { before.losses.push_back(r.loss); };
  const BurstResult r = run_burst(s, c.health, o);
  for (const auto& p : s.model().parameters()) before.params.push_back(p.detach().clone());
  before.chain = r.verdict.hash_chain;
  return before;
}

void expect_resume_is_exact(const TrainingConfig& c, int64_t k) {
  configure_runtime(c);
  auto whole = make_scenario(c);
  const Run a = finish(*whole, c, BurstOptions{});

  // The first k steps under a monitor, then the checkpoint: tensors to disk, monitor state aside.
  auto first = make_scenario(c);
  Run b;
  Monitor m(*first, c.health);
  for (int64_t i = 0; i < k; ++i) {
    const Batch batch = *first->next_batch();
    m.begin_step(batch);
    train_step(*first, batch, &m);
    b.losses.push_back(m.finish_step().loss);
  }
  const MonitorState at_k = m.state();
  testing::TempDir dir;
  write_checkpoint(dir.file("k.safetensors"), capture_state(*first), {});
  auto second = make_scenario(c);
  restore_state(*second, read_checkpoint(dir.file("k.safetensors")), "k.safetensors");
  ASSERT_EQ(second->skip_batches(k), k);
  BurstOptions rest;
  rest.resume = at_k;
  const Run resumed = finish(*second, c, rest, b);
  EXPECT_EQ(resumed.losses, a.losses) << "losses compared bitwise";
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

}  // namespace
}  // namespace spikehunt
