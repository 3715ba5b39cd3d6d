// Tests harness/ranks.h and data-parallel bursts (BurstOptions::ranks): two
// ranks as two threads of this process, each with its own scenario, talking
// through the ranks' store as two processes would.
#include <cmath>
#include <filesystem>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "harness/burst.h"
#include "harness/ranks.h"

#include <nlohmann/json.hpp>

#include "base/files.h"
#include "scenarios/catalog.h"
#include "test_util.h"

namespace spikehunt {
namespace {

TEST(Ranks, GatherGivesEveryRanksValuesInRankOrderAndAverageTheSameBitsOnEveryRank) {
  Ranks zero(0, 2, 0);
  auto one = std::async(std::launch::async, [port = zero.port()] {
    Ranks r(1, 2, port);
    std::vector<double> out = r.gather({10, 11, 12});
    torch::Tensor a = torch::tensor({0.1f, 0.2f}), b = torch::tensor({{3.0}, {5.0}}, torch::kFloat64);
    r.average({a, torch::Tensor(), b});
    std::vector<double> second = r.gather({7});
    out.insert(out.end(), {a[0].item<double>(), a[1].item<double>(), b[0][0].item<double>(), b[1][0].item<double>()});
    out.insert(out.end(), second.begin(), second.end());
    return out;
  });
  const std::vector<double> all = zero.gather({0, 1, 2});
  torch::Tensor a = torch::tensor({0.3f, 0.4f}), b = torch::tensor({{1.0}, {-1.0}}, torch::kFloat64);
  zero.average({a, torch::Tensor(), b});
  const std::vector<double> second = zero.gather({6});
  const std::vector<double> theirs = one.get();
  EXPECT_EQ(all, (std::vector<double>{0, 1, 2, 10, 11, 12}));
  EXPECT_EQ(std::vector<double>(theirs.begin(), theirs.begin() + 6), all);
  EXPECT_EQ(second, (std::vector<double>{6, 7}));
  // the mean, in the tensor's own dtype, the same bits on both ranks
  EXPECT_FLOAT_EQ(a[0].item<float>(), (0.1f + 0.3f) / 2);
  EXPECT_EQ(a[0].item<double>(), theirs[6]);
  EXPECT_EQ(a[1].item<double>(), theirs[7]);
  EXPECT_EQ(b[0][0].item<double>(), 2.0);
  EXPECT_EQ(b[1][0].item<double>(), 2.0);
  EXPECT_EQ(theirs[8], 2.0);
}

TEST(Ranks, AGatherOfAnotherLengthIsAnErrorNamingBothRanks) {
  Ranks zero(0, 2, 0);
  auto one = std::async(std::launch::async, [port = zero.port()] {
    Ranks r(1, 2, port);
    try {
      r.gather({1, 2});
    } catch (const std::runtime_error&) {
    }
  });
  try {
    zero.gather({1, 2, 3});
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 sent 2 values, rank 0 3"), std::string::npos) << e.what();
  }
  one.get();
}

TEST(Ranks, AWaitForARankThatNeverComesEndsAtTheWatchdog) {
  Ranks zero(0, 2, 0, /*timeout_seconds=*/30);
  int calls = 0;
  zero.set_watchdog([&] {
    if (++calls == 2) throw std::runtime_error("rank 1 exited: exit 3");
  });
  EXPECT_THROW(zero.gather({1}), std::runtime_error);
  EXPECT_EQ(calls, 2);
}

// ---- a data-parallel burst ----

TrainingConfig small_mlp(int64_t batch) {
  return default_config({"model.kind=mlp", "model.mlp_width=32", "dataset.synthetic_train_per_class=40",
                         "batch_size=" + std::to_string(batch), "max_batches_per_epoch=6", "threads=1"});
}

BurstResult burst_on_rank(const TrainingConfig& config, Ranks* ranks) {
  std::unique_ptr<Scenario> s = make_scenario(config);
  BurstOptions o;
  o.ranks = ranks;
  return run_burst(*s, config.health, o);
}

TEST(DataParallelBurst, TwoRanksRecordTheStepsOneProcessRecordsForTheGlobalBatch) {
  const TrainingConfig config = small_mlp(16);
  const BurstResult alone = burst_on_rank(config, nullptr);
  Ranks zero(0, 2, 0);
  auto one = std::async(std::launch::async, [&, port = zero.port()] {
    Ranks r(1, 2, port);
    return burst_on_rank(config, &r);
  });
  const BurstResult r0 = burst_on_rank(config, &zero);
  const BurstResult r1 = one.get();
  ASSERT_GE(alone.trace.recent().size(), 6u);
  ASSERT_EQ(r0.trace.recent().size(), alone.trace.recent().size());
  for (size_t i = 0; i < alone.trace.recent().size(); ++i) {
    const StepRecord &x = alone.trace.recent()[i], &y = r0.trace.recent()[i], &z = r1.trace.recent()[i];
    EXPECT_NEAR(y.loss, x.loss, 1e-6 * std::abs(x.loss)) << "step " << i;
    EXPECT_NEAR(y.grad_norm, x.grad_norm, 1e-5 * x.grad_norm) << "step " << i;
    EXPECT_NEAR(y.param_norm_after, x.param_norm_after, 1e-6 * x.param_norm_after) << "step " << i;
    EXPECT_EQ(y.label_histogram, x.label_histogram) << "step " << i;
    EXPECT_EQ(y.input_max, x.input_max) << "step " << i;
    // every rank records the same global step, bit for bit
    EXPECT_EQ(y.loss, z.loss);
    EXPECT_EQ(y.grad_norm, z.grad_norm);
    EXPECT_EQ(y.input_hash, z.input_hash);
  }
  EXPECT_EQ(r0.verdict.hash_chain, r1.verdict.hash_chain);
  EXPECT_NE(r0.verdict.hash_chain, alone.verdict.hash_chain) << "a hash of the ranks' hashes";
}

// The standard scenario of a config whose batch `at` has a NaN in input row `row`.
class Poisoned : public Scenario {
 public:
  Poisoned(const TrainingConfig& c, int64_t at, int64_t row) : inner_(make_scenario(c)), at_(at), row_(row) {}
  torch::nn::Module& model() override { return inner_->model(); }
  std::vector<NamedOptimizer> optimizers() override { return inner_->optimizers(); }
  torch::Tensor forward(const torch::Tensor& x, const Tap& tap) override { return inner_->forward(x, tap); }
  torch::Tensor loss(const torch::Tensor& out, const torch::Tensor& y) override { return inner_->loss(out, y); }
  std::optional<Batch> next_batch() override {
    std::optional<Batch> b = inner_->next_batch();
    if (b && n_++ == at_) {
      b->inputs = b->inputs.clone();
      b->inputs[row_].view({-1})[0] = NAN;
      b->host_inputs = b->inputs;
    }
    return b;
  }
  int64_t planned_steps() const override { return inner_->planned_steps(); }
  std::vector<std::string> phase_names() const override { return inner_->phase_names(); }
  void optimizer_step() override { inner_->optimizer_step(); }
  std::vector<NamedTensor> optimizer_state() override { return inner_->optimizer_state(); }

 private:
  std::unique_ptr<Scenario> inner_;
  int64_t at_, row_, n_ = 0;
};

Verdict poisoned_burst(const TrainingConfig& config, int64_t row, Ranks* ranks) {
  Poisoned s(config, 3, row);
  BurstOptions o;
  o.ranks = ranks;
  return run_burst(s, config.health, o).verdict;
}

TEST(DataParallelBurst, ANaNInRank1sShardIsNamedAsRank1sAndInRank0sAsRank0s) {
  const TrainingConfig config = small_mlp(16);
  for (int64_t row : {12, 3}) {  // rows 8..15 are rank 1's shard of a batch of 16
    Ranks zero(0, 2, 0);
    auto one = std::async(std::launch::async, [&, port = zero.port()] {
      Ranks r(1, 2, port);
      return poisoned_burst(config, row, &r);
    });
    const Verdict v = poisoned_burst(config, row, &zero);
    const Verdict v1 = one.get();
    ASSERT_EQ(v.outcome, Outcome::kNonFinite) << "row " << row;
    ASSERT_TRUE(v.fault.has_value());
    EXPECT_EQ(v.failure_step, 3);
    EXPECT_EQ(v.fault->tensor, "input");
    EXPECT_EQ(v.fault->rank, row < 8 ? 0 : 1);
    EXPECT_EQ(v.fault->nan, 1);
    EXPECT_EQ(v.fault->describe(), v1.fault->describe());
    EXPECT_NE(v.fault->describe().find(row < 8 ? " on rank 0" : " on rank 1"), std::string::npos) << v.fault->describe();
  }
}

// ---- over processes: `run`, its repro and `replay` ----

TEST(DataParallelRun, ARunOverTwoProcessesRecordsItsWorldSizeAndItsReproReplaysFromItsCheckpoint) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("c.json"), R"({"model": {"kind": "mlp", "mlp_width": 32},
    "dataset": {"synthetic_train_per_class": 40}, "batch_size": 16, "max_batches_per_epoch": 20,
    "optimizer": {"lr": 2}, "threads": 1, "world_size": 2})");
  const auto r = testing::run_spikehunt("run --config " + dir.file("c.json") + " --out " + dir.file("out"));
  ASSERT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(testing::has(r.output, "failure    step 10")) << r.output;
  EXPECT_TRUE(testing::has(r.output, "of 80 on rank 0")) << r.output;  // the logits of rank 0's 8 rows
  std::string repro;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("out"))) repro = e.path().string() + "/repro.json";
  const nlohmann::json j = nlohmann::json::parse(read_file(repro));
  EXPECT_EQ(j.at("config").at("world_size"), 2);
  const auto replay = testing::run_spikehunt("replay " + repro + " --from-checkpoint");
  EXPECT_EQ(replay.exit_code, 0) << replay.output;  // reproduced
  EXPECT_TRUE(testing::has(replay.output, "from step 2 (its checkpoint)")) << replay.output;
  EXPECT_TRUE(testing::has(replay.output, "reproduced: non_finite")) << replay.output;
}

TEST(DataParallelRun, MoreRanksThanRowsIsABadConfigNamingWorldSize) {
  const auto r = testing::run_spikehunt("run --set batch_size=4 --set world_size=5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::has(r.output, "world_size = 5 is more than batch_size 4")) << r.output;
}

}  // namespace
}  // namespace spikehunt
