// The user's tests: the spirals training stays stable over its space, the
// same property finds, shrinks and records a failure when the learning rate
// range is too hot, the harness applies the config's schedule to both
// optimizers over accumulated micro-batches, a failure replays bit-identically
// from its checkpoint, and the scenario's declared params are checked.
#include <filesystem>

#include <spikehunt/gtest.h>
#include <spikehunt/spikehunt.h>

#include "spirals.h"

#ifndef SPIRALS_DIR
#define SPIRALS_DIR "."
#endif

namespace {

class Register : public ::testing::Environment {
 public:
  void SetUp() override { register_spirals(); }
};
const auto* const kRegistered = ::testing::AddGlobalTestEnvironment(new Register);

TEST(Spirals, TrainingStaysStableOverItsSpace) {
  spikehunt::StabilityOptions o;
  o.runs = 6;
  o.out_dir = "spirals-failures";
  SPIKEHUNT_EXPECT_STABLE(spikehunt::SearchSpace::load(SPIRALS_DIR "/spirals_space.json"), o);
}

TEST(Spirals, AHotSpaceFailsWithAMinimalReproAndAReplayCommand) {
  spikehunt::StabilityOptions o;
  o.runs = 4;
  o.shrink_evaluations = 12;
  o.out_dir = "spirals-hot-failures";
  const spikehunt::SearchSpace space = spikehunt::SearchSpace::load(SPIRALS_DIR "/spirals_hot_space.json");
  const spikehunt::StabilityResult r = spikehunt::check_stability(space, o);
  ASSERT_FALSE(r.stable) << r.message;
  EXPECT_GE(r.failed_sample, 0) << r.message;
  EXPECT_LT(r.failed_sample, o.runs) << r.message;
  EXPECT_EQ(r.minimal.scenario, "spirals");
  EXPECT_NE(r.verdict.outcome, spikehunt::Outcome::kHealthy) << "the repro fails as recorded";
  EXPECT_TRUE(std::filesystem::exists(r.repro_path)) << r.repro_path;
  EXPECT_NE(r.message.find("replay " + r.repro_path), std::string::npos) << r.message;
  // The repro replays in this process, from its checkpoint, onto the same hashes.
  const spikehunt::Repro repro = spikehunt::read_repro(r.repro_path);
  spikehunt::ReplayOptions replay;
  replay.from_checkpoint = repro.checkpoint.has_value();
  const spikehunt::ReplayReport rep = spikehunt::replay(repro, r.repro_path, replay);
  EXPECT_TRUE(rep.reproduced) << rep.mismatch;
}

TEST(Spirals, TheHarnessAppliesTheScheduleToBothOptimizersOverAccumulatedBatches) {
  const spikehunt::TrainingConfig config = spikehunt::load_config(SPIRALS_DIR "/spirals.json");
  std::vector<spikehunt::StepRecord> steps;
  spikehunt::BurstOptions o;
  o.on_step = [&](const spikehunt::StepRecord& r) { steps.push_back(r); };
  const spikehunt::BurstResult r = spikehunt::run_config(config, o);
  ASSERT_EQ(r.verdict.outcome, spikehunt::Outcome::kHealthy);
  ASSERT_EQ(steps.size(), 70u) << "140 batches, two per optimizer step";
  EXPECT_EQ(steps[0].micro_batches, 2);
  ASSERT_EQ(steps[0].groups.size(), 2u);
  EXPECT_EQ(steps[0].groups[0].optimizer, "body");
  EXPECT_EQ(steps[0].groups[1].optimizer, "head");
  EXPECT_DOUBLE_EQ(steps[0].lr, 0.1 / 10) << "warm-up: a tenth of the rate at the first of 10 steps";
  EXPECT_DOUBLE_EQ(steps[9].lr, 0.1) << "the peak at the end of the warm-up";
  EXPECT_DOUBLE_EQ(steps[69].lr, 0.01) << "cosine down to min_lr at the last step";
  EXPECT_DOUBLE_EQ(steps[40].groups[1].lr, 0.01 * steps[40].lr / 0.1) << "the head's own rate follows the schedule";
  EXPECT_GT(steps[5].groups[1].state_max, 0.0) << "Adam's moments of the head are monitored";
}

TEST(Spirals, AFailureReplaysBitIdenticallyFromItsCheckpoint) {
  const spikehunt::TrainingConfig config =
      spikehunt::load_config(SPIRALS_DIR "/spirals.json", {"optimizer.lr=4", "params.head_lr=0.5"});
  const std::string path = "spirals-checkpoint/hot.repro.json";
  const spikehunt::Repro recorded = spikehunt::record_repro(config, path);
  ASSERT_NE(recorded.verdict.outcome, spikehunt::Outcome::kHealthy) << "lr 4 fails";
  ASSERT_TRUE(recorded.checkpoint.has_value());
  EXPECT_GT(recorded.checkpoint->step, 0) << "the checkpoint is mid-schedule";
  spikehunt::ReplayOptions o;
  o.from_checkpoint = true;
  const spikehunt::ReplayReport rep = spikehunt::replay(recorded, path, o);
  EXPECT_TRUE(rep.reproduced) << rep.mismatch;
  EXPECT_EQ(rep.verdict.hash_chain, recorded.verdict.hash_chain);
  EXPECT_EQ(recorded.scenario_class, "SpiralsScenario");
}

TEST(Spirals, DeclaredParamsAreCheckedWithTheirDefaultsFilledIn) {
  const spikehunt::TrainingConfig c = spikehunt::load_config(SPIRALS_DIR "/spirals.json");
  EXPECT_EQ(c.params.number("head_lr"), 0.01) << "the declared default";
  try {
    spikehunt::load_config(SPIRALS_DIR "/spirals.json", {"params.widht=8"});
    FAIL() << "a misspelt param is bad input";
  } catch (const spikehunt::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean \"width\"?"), std::string::npos) << e.what();
  }
  EXPECT_THROW(spikehunt::load_config(SPIRALS_DIR "/spirals.json", {"params.label_smoothing=0.9"}),
               spikehunt::InputError);
}

TEST(Spirals, TheDoctorFindsNoClassicBug) {
  const spikehunt::TrainingConfig config = spikehunt::load_config(SPIRALS_DIR "/spirals.json");
  spikehunt::DoctorOptions o;
  o.rules = config.health;
  const spikehunt::DoctorReport report = spikehunt::run_doctor([&] { return spikehunt::make_scenario(config); }, o);
  for (const auto& sign : report.signs) EXPECT_TRUE(sign.passed) << sign.name << ": " << sign.evidence;
}

}  // namespace
