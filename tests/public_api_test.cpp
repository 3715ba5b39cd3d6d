// Tests include/spikehunt/: the version the headers, the build and the
// changelog state, and the deprecated names kept for one release.
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include <spikehunt/spikehunt.h>

#include "test_util.h"

namespace spikehunt {
namespace {

// CHANGELOG.md's newest release, "## [0.2.0] — ...".
std::string changelog_version() {
  std::ifstream in(testing::source_path("CHANGELOG.md"));
  const std::regex release(R"(^## \[(\d+\.\d+\.\d+)\])");
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, m, release)) return m[1];
  }
  return "";
}

TEST(Version, TheChangelogTheBuildTheHeaderAndTheBinaryAgree) {
  const std::string macros = std::to_string(SPIKEHUNT_VERSION_MAJOR) + "." + std::to_string(SPIKEHUNT_VERSION_MINOR) +
                             "." + std::to_string(SPIKEHUNT_VERSION_PATCH);
  EXPECT_EQ(macros, kVersion) << "version.h's macros and kVersion";
  EXPECT_EQ(std::string(SPIKEHUNT_PROJECT_VERSION), kVersion) << "CMakeLists.txt's project(VERSION) and version.h";
  EXPECT_EQ(changelog_version(), kVersion) << "CHANGELOG.md's newest release and version.h";
  const testing::CommandResult v = testing::run_spikehunt("--version");
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find(std::string("spikehunt ") + kVersion + " "), std::string::npos) << v.output;
}

// 0.1's train_step, deprecated for this release: one step exactly as
// Trainer::step takes it without a schedule, bit for bit.
TEST(Deprecated, TrainStepIsTrainerStepForOneRelease) {
  testing::PlantedScenario a(testing::Plant::kNone, 0, 4), b(testing::Plant::kNone, 0, 4);
  Trainer trainer(b, /*schedule=*/false);
  for (int64_t step = 0; step < 3; ++step) {
    const std::optional<Batch> batch_a = a.next_batch();
    const std::optional<Batch> batch_b = b.next_batch();
    ASSERT_TRUE(batch_a && batch_b);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    const torch::Tensor loss_a = train_step(a, *batch_a, nullptr);
#pragma GCC diagnostic pop
    const torch::Tensor loss_b = trainer.step(step, {*batch_b}, nullptr);
    EXPECT_EQ(loss_a.item<float>(), loss_b.item<float>()) << "step " << step;
  }
  const std::vector<torch::Tensor> pa = a.model().parameters(), pb = b.model().parameters();
  ASSERT_EQ(pa.size(), pb.size());
  double largest = 0;
  for (size_t i = 0; i < pa.size(); ++i) largest = std::max(largest, (pa[i] - pb[i]).abs().max().item<double>());
  EXPECT_EQ(largest, 0.0) << "largest parameter difference after 3 steps (tolerance 0: bit-identical)";
  // It does train: the parameters moved from a fresh scenario's.
  testing::PlantedScenario fresh(testing::Plant::kNone, 0, 4);
  const std::vector<torch::Tensor> p0 = fresh.model().parameters();
  double moved = 0;
  for (size_t i = 0; i < pa.size(); ++i) moved = std::max(moved, (pa[i] - p0[i]).abs().max().item<double>());
  EXPECT_GT(moved, 0.0) << "largest parameter change from the initial values after 3 steps";
}

}  // namespace
}  // namespace spikehunt
