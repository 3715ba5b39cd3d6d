// The user's tests: the spirals training stays stable over its space, and
// the same property finds, shrinks and records a failure when the learning
// rate range is too hot.
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

TEST(Spirals, TheDoctorFindsNoClassicBug) {
  const spikehunt::TrainingConfig config = spikehunt::load_config(SPIRALS_DIR "/spirals.json");
  spikehunt::DoctorOptions o;
  o.rules = config.health;
  const spikehunt::DoctorReport report = spikehunt::run_doctor([&] { return spikehunt::make_scenario(config); }, o);
  for (const auto& sign : report.signs) EXPECT_TRUE(sign.passed) << sign.name << ": " << sign.evidence;
}

}  // namespace
