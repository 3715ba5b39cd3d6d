// The reliability suite (issue 29): one case of every class of bad input a
// user running nightly sweeps was seen to hit, each an exit 2 naming the
// file or flag, the field and the value, and none a hang.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/did_you_mean.h"
#include "base/error.h"
#include "base/files.h"
#include "cli/flags.h"
#include "generators/evaluator.h"
#include "harness/guard.h"
#include "harness/warnings.h"

#include "test_util.h"

namespace spikehunt {
namespace {

using testing::has;
using testing::run_spikehunt;
using testing::TempDir;

// Exit 2, and every one of `parts` in the message.
void expect_bad_input(const testing::CommandResult& r, std::initializer_list<std::string> parts) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const std::string& p : parts) EXPECT_TRUE(has(r.output, p)) << "missing \"" << p << "\" in:\n" << r.output;
}

TEST(Reliability, ANumberBeyondADoubleNamesTheFileTheFieldAndTheNumber) {
  TempDir dir;
  const std::string config = dir.file("huge.json");
  std::ofstream(config) << R"({"optimizer": {"kind": "sgd", "lr": -1e999}})";
  expect_bad_input(run_spikehunt("run --config " + config), {config, "optimizer.lr", "-1e999", "beyond a double"});
  const std::string space = dir.file("space.json");
  std::ofstream(space) << R"({"base": {}, "dimensions": {"optimizer.lr": {"set": [0.1, 1e999]}}})";
  expect_bad_input(run_spikehunt("sweep --space " + space + " --out " + dir.file("out")),
                   {space, "dimensions.optimizer.lr.set[1]", "1e999"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("out"))) << "nothing written";
  const std::string rules = dir.file("rules.json");
  std::ofstream(rules) << R"({"health": {"loss_limit": 1e999}})";
  expect_bad_input(run_spikehunt("run --rules " + rules), {rules, "health.loss_limit", "1e999"});
}

TEST(Reliability, SpecialFilesAndSymlinkLoopsAreNamedNotOpened) {
  TempDir dir;
  const std::string fifo = dir.file("text.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opening a FIFO for reading blocks until a writer comes: these would hang.
  expect_bad_input(run_spikehunt("run --config " + testing::source_path("configs/gpt.json") +
                                 " --set dataset.text_path=" + fifo),
                   {"dataset.text_path", fifo, "is neither a regular file nor a directory"});
  expect_bad_input(run_spikehunt("run --config " + fifo), {fifo, "is not a regular file (a FIFO)"});
  const std::string loop = dir.file("loop");
  std::filesystem::create_symlink(loop, loop);
  expect_bad_input(run_spikehunt("run --config " + testing::source_path("configs/gpt.json") +
                                 " --set dataset.text_path=" + loop),
                   {"dataset.text_path", loop, "cannot be read", "symbolic links"});
}

TEST(Reliability, FlagsAreBoundedLikeTheFieldsTheyStandFor) {
  expect_bad_input(run_spikehunt("replay no-such.repro.json --threads 100000"), {"--threads", "100000", "[1, 1024]"});
  const std::string gpt = testing::source_path("configs/gpt.json");
  expect_bad_input(run_spikehunt("lr-sensitivity --config " + gpt + " --lrs ''"), {"--lrs", "is empty"});
  expect_bad_input(run_spikehunt("lr-sensitivity --config " + gpt + " --lrs 0.1,0.01,0.1"), {"--lrs", "0.1 twice"});
  expect_bad_input(run_spikehunt("calibrate --lrs ''"), {"--lrs", "is empty"});
  expect_bad_input(run_spikehunt("run --set health.growth_ratio=1"), {"health.growth_ratio", "(0, 1]"});
  // A whole number past the field's range says so (it is an integer, just too large).
  expect_bad_input(run_spikehunt("run --set schedule.warmup_steps=1e12"),
                   {"schedule.warmup_steps", "is not in [0, 1000000000]"});
}

TEST(Reliability, LrSensitivityGridsAndSlurmVariablesThatCannotMeanWhatTheySay) {
  const std::string gpt = testing::source_path("configs/gpt.json");
  expect_bad_input(run_spikehunt("lr-sensitivity --config " + gpt + " --vary optimizer.lr=0.1,0.3"),
                   {"--vary", "optimizer.lr", "is what the grid sweeps"});
  expect_bad_input(run_spikehunt("lr-sensitivity --config " + gpt +
                                 " --vary model.gpt.qk_layernorm=false --vary model.gpt.qk_layernorm=true"),
                   {"--vary", "model.gpt.qk_layernorm=true", "is varied twice"});
  const std::map<std::string, std::string> vars = {{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_STEP", "0"},
                                                   {"SLURM_ARRAY_TASK_COUNT", "4"}};
  try {
    shard_from_slurm([&](const char* name) -> const char* {
      const auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
    ADD_FAILURE() << "SLURM_ARRAY_TASK_STEP=0 was taken";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "SLURM_ARRAY_TASK_STEP") && has(e.what(), "= 0")) << e.what();
  }
  // A warm-up longer than the run is allowed (a user may mean it) and said.
  const auto warm = run_spikehunt("run --set model.kind=mlp --set max_batches_per_epoch=2 "
                                  "--set dataset.synthetic_train_per_class=10 --set optimizer.lr=0.01 "
                                  "--set schedule.warmup_steps=100000 --out " + TempDir().path());
  EXPECT_TRUE(has(warm.output, "warning: schedule.warmup_steps = 100000 is longer than the run")) << warm.output;
}

// A warning raised every step is counted, not printed every step; a counter
// inside another (a burst inside the doctor) passes each on to it.
TEST(Reliability, EachLibTorchWarningIsCountedAndPassedToTheCounterAroundIt) {
  c10::WarningHandler* const before = c10::Warning::get_warning_handler();
  {
    WarningCounter outer;
    {
      WarningCounter inner;
      for (int i = 0; i < 5; ++i) TORCH_WARN("the same warning");
      TORCH_WARN("another");
      const std::vector<WarningCount> c = inner.counts();
      ASSERT_EQ(c.size(), 2u);
      EXPECT_EQ(c[0].message, "the same warning");
      EXPECT_EQ(c[0].count, 5);
      EXPECT_EQ(c[1].message, "another");
      EXPECT_EQ(c[1].count, 1);
    }
    ASSERT_EQ(outer.counts().size(), 2u);
    EXPECT_EQ(outer.counts()[0].count, 5);
    EXPECT_EQ(describe_warnings(outer.counts()), "  5x the same warning\n  1x another\n");
  }
  EXPECT_EQ(c10::Warning::get_warning_handler(), before) << "the handler before is back";
}

// A resumed sweep removes the work files of a process killed mid-burst,
// and never a living process's.
TEST(Reliability, AResumeRemovesTheWorkFilesOfProcessesThatAreGone) {
  TempDir dir;
  const std::string work = dir.file("work");
  std::filesystem::create_directories(work);
  pid_t gone = 4194300;  // above any pid this machine hands out unless it is in use
  while (::kill(gone, 0) == 0 || errno != ESRCH) --gone;
  const std::string dead = work + "/burst-" + std::to_string(gone) + "-3.config.json";
  const std::string alive = work + "/burst-" + std::to_string(::getppid()) + "-0.log";
  const std::string other = work + "/notes.txt";
  for (const std::string& f : {dead, alive, other}) testing::write_bytes(f, "x");
  ChildEvaluator evaluator("/bin/false", 1, 10, work, PoolOptions{});
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(alive));
  EXPECT_TRUE(std::filesystem::exists(other));
}

// Two long values that differ late are shown where they differ (a merge's
// odd shard, a resume over another space), not cut at the same place.
TEST(Reliability, TwoLongValuesAreShownWhereTheyDiffer) {
  const std::string base(150, 'x');
  const auto [a, b] = where_they_differ(base + "\"lr\": [0.1, 0.3]}", base + "\"lr\": [0.1, 0.5]}");
  EXPECT_NE(a, b);
  EXPECT_TRUE(has(a, "0.3]}") && has(b, "0.5]}")) << a << "\n" << b;
  EXPECT_EQ(a.rfind("...", 0), 0u) << "cut before, and says so: " << a;
  const auto [short_a, short_b] = where_they_differ("0", "9");
  EXPECT_EQ(short_a, "0");
  EXPECT_EQ(short_b, "9");
}

// A repro or a guard baseline cut short is a bad file (exit 2), not a
// replay that "went another way" or "losses within tolerance".
TEST(Reliability, TruncatedReproAndBaselineFilesAreBadFiles) {
  TempDir dir;
  const auto run = run_spikehunt("run --set model.kind=mlp --set health.loss_limit=1 --set max_batches_per_epoch=3 "
                                 "--set dataset.synthetic_train_per_class=20 --out " + dir.file("run"));
  ASSERT_EQ(run.exit_code, 1) << run.output;
  const std::string folder = std::filesystem::directory_iterator(dir.file("run"))->path().string();
  nlohmann::json repro = nlohmann::json::parse(read_file(folder + "/repro.json"));
  ASSERT_GE(repro["step_hashes"].size(), 2u);
  repro["step_hashes"].erase(repro["step_hashes"].size() - 1);
  write_file_atomic(dir.file("cut.repro.json"), repro.dump());
  expect_bad_input(run_spikehunt("replay " + dir.file("cut.repro.json")),
                   {dir.file("cut.repro.json"), "step_hashes", "does not match verdict.steps_run"});
  repro.erase("step_hashes");
  write_file_atomic(dir.file("none.repro.json"), repro.dump());
  expect_bad_input(run_spikehunt("replay " + dir.file("none.repro.json")), {"step_hashes", "is missing"});

  GuardRun g;
  g.name = "tiny";
  g.summary.verdict.steps_run = 3;
  g.summary.verdict.planned_steps = 3;
  g.summary.step_hashes.assign(3, StepHashes{});
  g.losses = {2.3, 2.2, 2.1};
  const std::string baseline = dir.file("baseline.json");
  write_guard_baseline(baseline, {g});
  ASSERT_EQ(read_guard_baseline(baseline).runs.size(), 1u) << "the whole file reads";
  nlohmann::json b = nlohmann::json::parse(read_file(baseline));
  b["configs"][0]["losses"].erase(2);
  write_file_atomic(baseline, b.dump());
  try {
    read_guard_baseline(baseline);
    ADD_FAILURE() << "a baseline with a loss cut off was read";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "configs[0].losses") && has(e.what(), "does not match")) << e.what();
  }
  b = nlohmann::json::parse(read_file(folder + "/repro.json"));
  b["verdict"]["onset_step"] = -4;
  write_file_atomic(dir.file("negative.repro.json"), b.dump());
  expect_bad_input(run_spikehunt("replay " + dir.file("negative.repro.json")), {"verdict.onset_step", "-4", "is negative"});
}

}  // namespace
}  // namespace spikehunt
