// Tests harness/burst.h on the built-in scenarios: the default config's
// story, the healthy control, determinism, monitoring not changing training,
// checkpoints, and the simple_cnn contract.
#include <gtest/gtest.h>

#include <cstring>

#include "harness/burst.h"
#include "harness/checkpoint.h"
#include "harness/monitor.h"
#include "harness/state.h"
#include "harness/trainer.h"
#include "scenarios/catalog.h"
#include "scenarios/models.h"
#include "test_util.h"

namespace spikehunt {
namespace {

TrainingConfig small_mlp() {
  return default_config({"model.kind=mlp", "model.mlp_width=32", "dataset.synthetic_train_per_class=40",
                         "batch_size=16", "max_batches_per_epoch=5", "optimizer.lr=0.05", "grad_clip=1.0"});
}

std::vector<torch::Tensor> final_parameters(Scenario& s) {
  std::vector<torch::Tensor> out;
  for (const auto& p : s.model().parameters()) out.push_back(p.detach().clone());
  return out;
}

void expect_bit_identical(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i << " differs; largest difference "
                                          << (a[i] - b[i]).abs().max().item<double>();
  }
}

TEST(Models, SimpleCnnHasTheMotivatingCasesParameterCountAndTaps) {
  TrainingConfig c;
  auto model = make_model(c);
  EXPECT_EQ(parameter_count(*model), 421642);
  EXPECT_EQ(model->tap_names(), (std::vector<std::string>{"conv1_act", "conv2_act", "fc1_act", "fc2_logits"}));
  std::vector<std::string> seen;
  struct Recorder : TapSink {
    std::vector<std::string>* seen;
    void on_tap(const char* name, const torch::Tensor&) override { seen->push_back(name); }
  } recorder;
  recorder.seen = &seen;
  const torch::Tensor out = model->forward(torch::zeros({2, 1, 28, 28}), Tap(&recorder));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(seen, model->tap_names());
}

TEST(Models, EveryActivationRuns) {
  for (const char* kind : {"relu", "leaky_relu", "gelu", "tanh", "sigmoid"}) {
    TrainingConfig c = small_mlp();
    c.activation.kind = config_from_json({{"activation", {{"kind", kind}}}}, "x").activation.kind;
    auto model = make_model(c);
    const torch::Tensor out = model->forward(torch::randn({3, 1, 28, 28}), Tap());
    EXPECT_TRUE(torch::isfinite(out).all().item<bool>()) << kind;
  }
  const torch::Tensor x = torch::tensor({-2.0f, 3.0f});
  EXPECT_TRUE(torch::allclose(activate({ActivationKind::kLeakyRelu, 0.25}, x), torch::tensor({-0.5f, 3.0f})));
}

// Same bits, -0, NaN payloads and all.
bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && torch::equal(a.contiguous().view(torch::kInt32), b.contiguous().view(torch::kInt32));
}

TEST(Models, FusedLeakyReluIsLibTorchsBitForBitAndTapsItsMax) {
  struct MaxSink : TapSink {
    double max = -1;
    bool fused = false;
    void on_tap(const char*, const torch::Tensor& t) override { max = t.abs().max().item<double>(); }
    void on_tap_max(const char*, const torch::Tensor&, double m) override { max = m, fused = true; }
  };
  torch::manual_seed(5);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (double slope : {0.01, 0.2, 1e-7}) {
    for (const char* plant : {"finite", "inf", "nan"}) {
      torch::Tensor x = torch::randn({3, 70001}) * 10;  // two threads' chunks and a ragged end
      x[0][0] = -0.0f, x[0][1] = 1e-40f, x[0][2] = -1e-40f;
      if (plant == std::string("inf")) x[1][3] = kInf, x[2][70000] = -kInf;
      if (plant == std::string("nan")) x[1][5] = std::nanf(""), x[2][7] = -kInf;
      const torch::Tensor a = x.clone().requires_grad_(), b = x.clone().requires_grad_();
      MaxSink sink;
      const torch::Tensor fused = activate(ActivationConfig{ActivationKind::kLeakyRelu, slope}, a, Tap(&sink), "t");
      const torch::Tensor ref = torch::leaky_relu(b, slope);
      ASSERT_TRUE(sink.fused);
      EXPECT_TRUE(same_bits(fused, ref)) << "slope " << slope << ", " << plant;
      const double want = plant == std::string("nan") ? NAN : ref.detach().abs().max().item<double>();
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(sink.max)) << plant;
      } else {
        EXPECT_EQ(sink.max, want) << "slope " << slope << ", " << plant;
      }
      const torch::Tensor g = torch::randn(x.sizes());
      fused.backward(g);
      ref.backward(g);
      EXPECT_TRUE(same_bits(a.grad(), b.grad())) << "slope " << slope << ", " << plant;
    }
  }
  // Off the fused path (no tap) it is plain LibTorch.
  const torch::Tensor x = torch::randn({100});
  EXPECT_TRUE(same_bits(activate({ActivationKind::kLeakyRelu, 0.01}, x, Tap(), "t"), torch::leaky_relu(x, 0.01)));
}

TEST(Burst, DefaultConfigGoesExtremeBeforeNonFiniteAndNamesTheTensor) {
  const BurstResult r = run_config(default_config(), BurstOptions{});
  const Verdict& v = r.verdict;
  ASSERT_EQ(v.outcome, Outcome::kNonFinite);
  ASSERT_TRUE(v.onset_step && v.failure_step);
  EXPECT_GE(*v.lead_time(), 1) << "onset " << *v.onset_step << ", failure " << *v.failure_step;
  ASSERT_TRUE(v.fault);
  EXPECT_FALSE(v.fault->tensor.empty());
  EXPECT_GT(v.fault->nan + v.fault->pos_inf + v.fault->neg_inf, 0);
  EXPECT_LT(v.steps_run, v.planned_steps) << "fail fast";
  // The warning leads: at least 5 steps, every step before it finite, the
  // onset's rules recorded with their values, the runaway into the NaN extreme.
  EXPECT_GE(*v.lead_time(), 5);
  EXPECT_EQ(v.onset_hits.size(), v.onset_rules.size());
  for (const StepRecord& rec : r.trace.recent()) {
    if (rec.step < *v.onset_step) {
      EXPECT_EQ(rec.health, Health::kFinite) << rec.step;
    }
    if (rec.step == *v.onset_step) {
      EXPECT_FALSE(rec.rules.empty());
    }
    if (rec.step == *v.failure_step - 1) {
      EXPECT_EQ(rec.health, Health::kExtreme) << rec.step;
    }
  }
  EXPECT_FALSE(r.trace.before_onset().empty());
  // What does not depend on the CPU's float kernels is pinned: the data. The
  // onset and failure steps are not (OpenBLAS picks its kernels at run time:
  // step 49 in fc1_act with Prescott kernels, step 50 in fc2_logits with SkylakeX).
  ASSERT_GE(r.step_hashes.size(), 40u);
  EXPECT_EQ(r.step_hashes[0].input.hex(), "04b888a0d9baf21455940eba75d2cb72");
  EXPECT_EQ(r.step_hashes[0].labels.hex(), "b0db0dc5e7a25e46adf249e2e0911a76");
  EXPECT_EQ(r.step_hashes[39].input.hex(), "5fa970dcacbdb8a8a513d29d028ea7fa") << "the last batch of domain A";
  EXPECT_EQ(r.step_hashes[39].labels.hex(), "c9f9c9ff8674a19d0ea0cd33520b1021");
  EXPECT_GE(*v.failure_step, 40) << "the runaway ends after the domain switch at step 40";
}

TEST(Burst, HealthyControlNeverGoesExtreme) {
  const TrainingConfig c = load_config(testing::source_path("configs/healthy.json"));
  std::vector<StepRecord> records;
  BurstOptions o;
  o.on_step = [&](const StepRecord& r) { records.push_back(r); };
  const BurstResult r = run_config(c, o);
  EXPECT_EQ(r.verdict.outcome, Outcome::kHealthy);
  EXPECT_FALSE(r.verdict.onset_step);
  EXPECT_EQ(r.verdict.steps_run, r.verdict.planned_steps);
  ASSERT_EQ(records.size(), size_t(r.verdict.steps_run));
  for (const StepRecord& rec : records) EXPECT_EQ(rec.health, Health::kFinite) << rec.step;
  // It learns: by the end of the first domain the loss is far below chance
  // (log 5 = 1.6 over that domain's 5 classes).
  double tail = 0;
  int n = 0;
  for (const StepRecord& rec : records) {
    if (rec.phase == 0 && rec.batch >= c.max_batches_per_epoch - 5) tail += rec.loss, ++n;
  }
  ASSERT_EQ(n, 5);
  EXPECT_LT(tail / n, 0.8);
}

// SPAM's gradient spike score: g² against the second moment Adam kept before
// the step. Adam's update v1 = β2·v0 + (1 − β2)·g² gives g² back from the
// states before and after the step, so the monitor's score is checked
// against the optimizer's own numbers.
TEST(Burst, TheGradientSpikeScoreIsTheSquaredGradientOverTheSecondMomentBeforeTheStep) {
  const TrainingConfig c =  // no clipping: Adam's state then holds the very gradient the monitor read
      default_config({"model.kind=mlp", "model.mlp_width=32", "dataset.synthetic_train_per_class=40", "batch_size=16",
                      "max_batches_per_epoch=5", "optimizer.kind=adam", "optimizer.lr=0.01",
                      "optimizer.betas=[0.9,0.99]", "grad_clip=0"});
  configure_runtime(c);
  auto s = make_scenario(c);
  HealthRules rules = c.health;
  rules.grad_spike_limit = 5000;  // off by default: the monitor then does not score
  Monitor m(*s, rules);
  Trainer trainer(*s);
  const double beta2 = 0.99;
  for (int64_t i = 0; i < 4; ++i) {
    std::vector<torch::Tensor> v_before;
    for (const auto& p : s->model().parameters()) {
      const std::optional<ParamState> st = param_state(s->optimizer(), p);
      torch::Tensor v;
      if (st) {
        for (const NamedTensor& b : st->buffers) {
          if (b.name == "exp_avg_sq") v = b.tensor.detach().to(torch::kFloat64).clone();
        }
      }
      v_before.push_back(v);
    }
    const std::vector<Batch> b = trainer.next_batches();
    m.begin_step(i, b);
    trainer.step(i, b, &m);
    const StepRecord r = m.finish_step();
    double worst = 0;
    for (size_t k = 0; k < r.layers.size(); ++k) {
      const LayerStats& l = r.layers[k];
      EXPECT_TRUE(l.adaptive);
      if (i == 0) {
        EXPECT_EQ(l.grad_spike_score, 0.0) << l.name << ": no second moment before the first step";
        continue;
      }
      torch::Tensor v1;
      const std::optional<ParamState> after = param_state(s->optimizer(), s->model().parameters()[k]);
      ASSERT_TRUE(after);
      for (const NamedTensor& buf : after->buffers) {
        if (buf.name == "exp_avg_sq") v1 = buf.tensor.detach().to(torch::kFloat64);
      }
      const torch::Tensor& v0 = v_before[k];
      const torch::Tensor g2 = (v1 - beta2 * v0) / (1 - beta2);
      const double want = (g2 / v0).masked_fill(v0 <= 0, 0).max().item<double>();
      EXPECT_NEAR(l.grad_spike_score, want, 1e-3 * want + 1e-9) << l.name << " step " << i;
      EXPECT_GT(l.grad_spike_score, 0.0) << l.name << " step " << i;
      worst = std::max(worst, l.grad_spike_score);
    }
    EXPECT_EQ(r.grad_spike_score, worst) << "the step's score is its largest layer's";
  }
  auto plain = make_scenario(c);
  BurstOptions o;
  double seen = 0;
  o.on_step = [&](const StepRecord& r) { seen = std::max(seen, r.grad_spike_score); };
  run_burst(*plain, c.health, o);
  EXPECT_EQ(seen, 0.0) << "grad_spike_limit off (the default): nothing is scored";
}

TEST(Burst, SameConfigTwiceIsBitIdentical) {
  const TrainingConfig c = default_config({"max_batches_per_epoch=8"});
  configure_runtime(c);
  auto run = [&](std::vector<torch::Tensor>* params) {
    std::vector<double> losses;
    auto s = make_scenario(c);
    BurstOptions o;
    o.on_step = [&](const StepRecord& r) { losses.push_back(r.loss); };
    const BurstResult r = run_burst(*s, c.health, o);
    *params = final_parameters(*s);
    return std::make_pair(r.verdict.hash_chain, losses);
  };
  std::vector<torch::Tensor> p1, p2;
  const auto a = run(&p1);
  const auto b = run(&p2);
  EXPECT_EQ(a.first, b.first) << "hash chain";
  EXPECT_EQ(a.second, b.second) << "losses, compared bitwise";
  expect_bit_identical(p1, p2);
}

TEST(Burst, MonitoringDoesNotChangeTraining) {
  for (const TrainingConfig& c : {small_mlp(), default_config({"max_batches_per_epoch=6"})}) {
    configure_runtime(c);
    auto plain = make_scenario(c);
    BurstOptions off;
    off.monitor = false;
    run_burst(*plain, c.health, off);
    auto watched = make_scenario(c);
    BurstOptions on;
    on.keep_states = true;
    const BurstResult r = run_burst(*watched, c.health, on);
    ASSERT_EQ(r.verdict.steps_run, plain->planned_steps());
    expect_bit_identical(final_parameters(*plain), final_parameters(*watched));
  }
}

TEST(Burst, KeepsTheLastHealthyAndFirstBadState) {
  BurstOptions o;
  o.keep_states = true;
  const BurstResult r = run_config(default_config(), o);
  ASSERT_TRUE(r.last_healthy && r.first_bad);
  EXPECT_EQ(r.last_healthy->step, *r.verdict.onset_step);
  EXPECT_EQ(r.first_bad->step, *r.verdict.failure_step);
  ASSERT_EQ(r.last_healthy->tensors.size(), 17u) << "8 parameters, 8 momentum buffers, the RNG";
  EXPECT_EQ(r.last_healthy->tensors[0].name, "model.conv1.weight");
  EXPECT_EQ(r.last_healthy->tensors[8].name, "optim.conv1.weight.momentum_buffer");
  EXPECT_EQ(r.last_healthy->tensors[16].name, "rng.cpu");
  for (const NamedTensor& t : r.last_healthy->tensors) {
    if (t.tensor.is_floating_point()) {
      EXPECT_TRUE(torch::isfinite(t.tensor).all().item<bool>()) << t.name;
    }
  }
  testing::TempDir dir;
  write_checkpoint(dir.file("a.safetensors"), r.last_healthy->tensors, {{"step", "1"}});
  const std::vector<NamedTensor> back = read_checkpoint(dir.file("a.safetensors"));
  ASSERT_EQ(back.size(), r.last_healthy->tensors.size());
  for (const NamedTensor& t : r.last_healthy->tensors) {
    auto it = std::find_if(back.begin(), back.end(), [&](const NamedTensor& b) { return b.name == t.name; });
    ASSERT_NE(it, back.end()) << t.name;
    EXPECT_TRUE(torch::equal(it->tensor, t.tensor)) << t.name;
  }
}

// With the state entering each step kept, the monitor measures the step
// against that copy instead of one of its own: the same bits either way.
TEST(Burst, KeepingStatesLeavesEveryStatisticBitIdentical) {
  BurstOptions with, without;
  with.keep_states = true;
  const BurstResult a = run_config(default_config(), with);
  const BurstResult b = run_config(default_config(), without);
  ASSERT_TRUE(a.verdict.onset_step);
  ASSERT_EQ(a.trace.recent().size(), b.trace.recent().size());
  for (size_t k = 0; k < a.trace.recent().size(); ++k) {
    const StepRecord &x = a.trace.recent()[k], &y = b.trace.recent()[k];
    ASSERT_EQ(x.layers.size(), y.layers.size());
    nlohmann::json jx = to_json(x), jy = to_json(y);
    jx.erase("step_ms"), jy.erase("step_ms");  // the one measure of time
    EXPECT_EQ(jx.dump(), jy.dump()) << "step " << x.step;
    for (size_t i = 0; i < x.layers.size(); ++i) {
      const LayerStats &l = x.layers[i], &m = y.layers[i];
      EXPECT_TRUE(std::memcmp(&l.update_norm, &m.update_norm, sizeof(double)) == 0) << l.name << " step " << x.step;
      EXPECT_TRUE(std::memcmp(&l.param_norm_after, &m.param_norm_after, sizeof(double)) == 0) << l.name;
    }
  }
  EXPECT_GT(a.trace.recent().front().update_norm, 0.0);
}

// The state entering each step is the monitor's copy of the last step's
// (made as it read them) or a copy of its own: either way, the last healthy
// checkpoint is the state a burst stopped before the onset step holds.
TEST(Burst, TheLastHealthyStateIsTheStateEnteringTheOnsetStepBitForBit) {
  const TrainingConfig c = default_config();
  configure_runtime(c);
  auto kept = make_scenario(c);
  BurstOptions o;
  o.keep_states = true;
  const BurstResult r = run_burst(*kept, c.health, o);
  ASSERT_TRUE(r.last_healthy && r.verdict.onset_step);
  ASSERT_GT(*r.verdict.onset_step, 2) << "steps copied ahead before it";
  configure_runtime(c);
  auto stopped = make_scenario(c);
  BurstOptions until;
  until.max_steps = *r.verdict.onset_step;
  const BurstResult before = run_burst(*stopped, c.health, until);
  EXPECT_EQ(r.last_healthy->monitor.chain.hex(), before.verdict.hash_chain.hex());
  EXPECT_TRUE(r.last_healthy->monitor.judge.is_object() && r.last_healthy->monitor.judge.contains("loss"));
  const std::vector<NamedTensor> want = capture_state(*stopped);
  ASSERT_EQ(want.size(), r.last_healthy->tensors.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].name, r.last_healthy->tensors[i].name);
    EXPECT_TRUE(torch::equal(want[i].tensor, r.last_healthy->tensors[i].tensor)) << want[i].name;
  }
}

TEST(Burst, StopAtExtremeStopsAtTheOnset) {
  const BurstResult r = run_config(default_config({"health.stop_at=extreme"}), BurstOptions{});
  EXPECT_EQ(r.verdict.outcome, Outcome::kExtreme);
  ASSERT_TRUE(r.verdict.onset_step);
  EXPECT_EQ(r.verdict.steps_run, *r.verdict.onset_step + 1);
  EXPECT_FALSE(r.verdict.failure_step);
}

// A healthy MLP with an instability planted in one layer: from step 20 on,
// that layer's weight is scaled by 1.45 after every optimizer step.
class PlantedLayerScenario : public StandardScenario {
 public:
  PlantedLayerScenario(const TrainingConfig& c, std::string layer)
      : StandardScenario(c, std::make_shared<Dataset>(load_dataset(c.dataset))), layer_(std::move(layer)) {}
  void optimizer_step() override {
    StandardScenario::optimizer_step();
    if (steps_++ < 20) return;
    torch::NoGradGuard no_grad;
    for (const auto& p : model().named_parameters()) {
      if (p.key() == layer_) p.value().mul_(1.45);
    }
  }

 private:
  std::string layer_;
  int64_t steps_ = 0;
};

TEST(Burst, TheLayerWithAPlantedInstabilityIsNamedAsTheFirstMover) {
  const TrainingConfig c = default_config({"model.kind=mlp", "model.mlp_depth=2", "model.mlp_width=32",
                                           "dataset.synthetic_train_per_class=60", "batch_size=16",
                                           "max_batches_per_epoch=0", "optimizer.lr=0.01", "seed=1"});
  {
    auto healthy = make_scenario(c);
    ASSERT_FALSE(run_burst(*healthy, c.health, BurstOptions{}).verdict.onset_step) << "the control is healthy";
  }
  for (const std::string layer : {"fc1.weight", "fc2.weight", "out.weight"}) {
    PlantedLayerScenario s(c, layer);
    const Verdict v = run_burst(s, c.health, BurstOptions{}).verdict;
    ASSERT_TRUE(v.onset_step) << layer;
    EXPECT_GT(*v.onset_step, 20) << layer;
    ASSERT_FALSE(v.movers.empty()) << layer;
    EXPECT_EQ(v.movers[0].tensor, layer) << describe_movers(v.movers, *v.onset_step);
    EXPECT_EQ(v.movers[0].quantity, "update") << describe_movers(v.movers, *v.onset_step);
    EXPECT_EQ(v.movers[0].since, 20) << "its first scaled step";
    EXPECT_FALSE(v.onset_hits.empty());
  }
}

TEST(Burst, AdamStateIsWatched) {
  const TrainingConfig c = default_config({"model.kind=mlp", "optimizer.kind=adam", "optimizer.lr=0.001",
                                           "max_batches_per_epoch=3", "dataset.synthetic_train_per_class=20"});
  std::vector<StepRecord> records;
  BurstOptions o;
  o.on_step = [&](const StepRecord& r) { records.push_back(r); };
  run_config(c, o);
  ASSERT_FALSE(records.empty());
  EXPECT_GT(records.back().state_norm, 0.0);
  auto s = make_scenario(c);
  run_burst(*s, c.health, BurstOptions{});
  const std::vector<NamedTensor> state = s->optimizer_state();
  ASSERT_EQ(state.size(), 2 * s->model().parameters().size());
  EXPECT_EQ(state[0].name, "fc1.weight.exp_avg");
  EXPECT_EQ(state[1].name, "fc1.weight.exp_avg_sq");
}

TEST(Burst, GradClipMatchesLibTorch) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> a = {torch::randn({5, 5}, torch::requires_grad()), torch::randn({3}, torch::requires_grad())};
  std::vector<torch::Tensor> b = {a[0].detach().clone().requires_grad_(), a[1].detach().clone().requires_grad_()};
  for (auto* v : {&a, &b}) ((*v)[0].pow(3).sum() + (*v)[1].exp().sum()).backward();
  clip_grad_norm(a, 0.5);
  torch::nn::utils::clip_grad_norm_(b, 0.5);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(torch::equal(a[i].grad(), b[i].grad()));
}

}  // namespace
}  // namespace spikehunt
