// Tests harness/guard.h: record a suite, check it unchanged (exit 0), catch
// each kind of regression on a planted change (a higher learning rate, a
// reordered data pipeline, an earlier onset), and bad suites or baselines.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/files.h"
#include "harness/guard.h"
#include "test_util.h"

namespace spikehunt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::run_spikehunt;
using testing::TempDir;

using testing::has;

// Two tiny MLP configs: one healthy at lr 0.05, one that a high learning rate
// drives non-finite after going extreme first.
constexpr const char* kSuite = R"({
  "configs": [
    {"name": "tiny", "config": "tiny.json"},
    {"name": "tiny-hot", "config": "tiny.json", "set": ["optimizer.lr=2.5", "seed=1"]}
  ],
  "tolerances": {"loss_relative": 0.01, "loss_absolute": 1e-4, "onset_steps": 0}
})";

constexpr const char* kTiny = R"({"model": {"kind": "mlp", "mlp_width": 32},
  "dataset": {"kind": "synthetic", "synthetic_train_per_class": 40}, "batch_size": 16, "threads": 1,
  "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9}, "max_batches_per_epoch": 5})";

struct Recorded {
  TempDir dir;
  std::string suite, baseline;
  Recorded() : suite(dir.file("suite.json")), baseline(dir.file("baseline.json")) {
    testing::write_bytes(suite, kSuite);
    testing::write_bytes(dir.file("tiny.json"), kTiny);
  }
  testing::CommandResult record() const { return run_spikehunt("guard record --suite " + suite + " --out " + baseline); }
  testing::CommandResult check(const std::string& extra = "") const {
    return run_spikehunt("guard check --suite " + suite + " --baseline " + baseline + " " + extra);
  }
};

TEST(Guard, AnUnchangedBuildPassesBitIdentically) {
  Recorded r;
  const auto rec = r.record();
  ASSERT_EQ(rec.exit_code, 0) << rec.output;
  const GuardBaseline b = read_guard_baseline(r.baseline);
  ASSERT_EQ(b.runs.size(), 2u);
  EXPECT_EQ(b.runs[0].summary.verdict.outcome, Outcome::kHealthy);
  EXPECT_EQ(b.runs[1].summary.verdict.outcome, Outcome::kNonFinite) << "the planted hot config fails in the baseline";
  EXPECT_EQ(int64_t(b.runs[0].losses.size()), b.runs[0].summary.verdict.steps_run);
  EXPECT_EQ(b.runs[0].summary.step_hashes.size(), b.runs[0].losses.size());

  const auto ok = r.check("--junit " + r.dir.file("guard.xml"));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(has(ok.output, "tiny: ok: healthy, 15 steps")) << ok.output;
  // JUnit for a CI dashboard: a passing case per config.
  EXPECT_EQ(testing::junit_problems(r.dir.file("guard.xml")), "");
  const std::string xml = read_file(r.dir.file("guard.xml"));
  EXPECT_TRUE(has(xml, R"(tests="2" failures="0")")) << xml;
  EXPECT_TRUE(has(xml, R"(<testcase name="tiny" classname="spikehunt.guard")")) << xml;
  EXPECT_TRUE(has(xml, R"(<testcase name="tiny-hot" classname="spikehunt.guard")")) << xml;
  EXPECT_TRUE(has(ok.output, "losses bit-identical; hash chain unchanged")) << ok.output;
  EXPECT_TRUE(has(ok.output, "no regression: 2 of 2 config(s)")) << ok.output;
}

TEST(Guard, AHigherLearningRateIsARegression) {
  Recorded r;
  ASSERT_EQ(r.record().exit_code, 0);
  // The planted change: every config trains at lr 3 (tiny goes from healthy to non-finite).
  const auto bad = r.check("--set optimizer.lr=3 --junit " + r.dir.file("guard.xml"));
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_EQ(testing::junit_problems(r.dir.file("guard.xml")), "");
  const std::string xml = read_file(r.dir.file("guard.xml"));
  EXPECT_TRUE(has(xml, R"(<testcase name="tiny" classname="spikehunt.guard")")) << xml;
  EXPECT_TRUE(has(xml, R"(<failure message="REGRESSION: non_finite)")) << xml;
  EXPECT_TRUE(has(xml, "- verdict: healthy → non_finite at step")) << "the findings are the failure's text: " << xml;
  EXPECT_TRUE(has(bad.output, "tiny: REGRESSION: non_finite")) << bad.output;
  EXPECT_TRUE(has(bad.output, "- verdict: healthy → non_finite at step")) << bad.output;
  EXPECT_TRUE(has(bad.output, "- loss left its tolerance at ")) << bad.output;
  EXPECT_TRUE(has(bad.output, "note: config differs from the baseline's: optimizer.lr=3")) << bad.output;
  EXPECT_FALSE(has(bad.output, "hash chain changed")) << "same data: " << bad.output;
  // A change inside the loss tolerance passes (tiny-hot sets its own lr).
  std::string tiny = kTiny;
  tiny.replace(tiny.find("0.05"), 4, "0.0500001");
  testing::write_bytes(r.dir.file("tiny.json"), tiny);
  const auto small = r.check();
  EXPECT_EQ(small.exit_code, 0) << small.output;
  EXPECT_TRUE(has(small.output, "losses within tolerance")) << small.output;
}

TEST(Guard, AReorderedDataPipelineChangesTheHashChain) {
  Recorded r;
  ASSERT_EQ(r.record().exit_code, 0);
  const auto bad = r.check("--set protocol.task_order=[1,0]");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(has(bad.output, "tiny: REGRESSION")) << bad.output;
  EXPECT_TRUE(has(bad.output, "- hash chain changed at step 0: input hash ")) << bad.output;
  EXPECT_TRUE(has(bad.output, "(the data pipeline feeds other batches)")) << bad.output;
}

GuardRun synthetic_run(Outcome outcome, std::optional<int64_t> onset, std::optional<int64_t> failure,
                       std::vector<double> losses) {
  GuardRun r;
  r.name = "x";
  r.summary.verdict.outcome = outcome;
  r.summary.verdict.onset_step = onset;
  r.summary.verdict.failure_step = failure;
  r.summary.verdict.steps_run = int64_t(losses.size());
  r.summary.verdict.planned_steps = 10;
  for (size_t k = 0; k < losses.size(); ++k) r.summary.step_hashes.push_back({Hash128{k, 1}, Hash128{k, 2}});
  r.losses = std::move(losses);
  return r;
}

int regressions(const std::vector<GuardFinding>& f) {
  return int(std::count_if(f.begin(), f.end(), [](const GuardFinding& x) { return x.regression; }));
}

TEST(Guard, CompareFlagsEachKindOfRegressionAndOnlyThose) {
  const GuardTolerances t;  // 1% + 1e-4 of the loss, onset 0 steps
  const double nan = std::nan("");
  const GuardRun base = synthetic_run(Outcome::kExtreme, 3, std::nullopt, {2.0, 1.9, 1.8, 5.0, 6.0});
  EXPECT_EQ(regressions(guard_compare(base, base, t)), 0);

  GuardRun earlier = synthetic_run(Outcome::kExtreme, 2, std::nullopt, {2.0, 1.9, 1.8, 5.0, 6.0});
  auto f = guard_compare(base, earlier, t);
  ASSERT_EQ(regressions(f), 1);
  EXPECT_EQ(f[0].text, "onset came earlier: step 3 → 2 (tolerance 0 steps)");
  EXPECT_EQ(regressions(guard_compare(base, earlier, GuardTolerances{0.01, 1e-4, 1})), 0) << "within onset_steps";

  GuardRun worse = synthetic_run(Outcome::kNonFinite, 3, 4, {2.0, 1.9, 1.8, 5.0, nan});
  f = guard_compare(base, worse, t);
  ASSERT_GE(regressions(f), 2);
  EXPECT_TRUE(has(f[0].text, "verdict: extreme → non_finite at step 4")) << f[0].text;
  EXPECT_TRUE(has(f[1].text, "loss left its tolerance at 1 of 5 steps; first at step 4: 6 → nan")) << f[1].text;

  GuardRun drift = synthetic_run(Outcome::kExtreme, 3, std::nullopt, {2.0, 1.9 * 1.0099, 1.8, 5.0, 6.0});
  EXPECT_EQ(regressions(guard_compare(base, drift, t)), 0) << "0.99% is inside 1%";
  drift.losses[1] = 1.9 * 1.0101 + 1e-4;
  f = guard_compare(base, drift, t);
  ASSERT_EQ(regressions(f), 1);
  EXPECT_TRUE(has(f[0].text, "at 1 of 5 steps; first at step 1: 1.9 → ")) << f[0].text;

  GuardRun better = synthetic_run(Outcome::kHealthy, std::nullopt, std::nullopt, {2.0, 1.9, 1.8, 5.0, 6.0});
  f = guard_compare(base, better, t);
  EXPECT_EQ(regressions(f), 0);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_TRUE(has(f[0].text, "verdict improved")) << f[0].text;

  GuardRun moved = base;
  moved.summary.step_hashes[2].labels = Hash128{9, 9};
  f = guard_compare(base, moved, t);
  ASSERT_EQ(regressions(f), 1);
  EXPECT_TRUE(has(f[0].text, "hash chain changed at step 2: label hash ")) << f[0].text;

  GuardRun replanned = base;
  replanned.summary.verdict.planned_steps = 12;
  EXPECT_EQ(regressions(guard_compare(base, replanned, t)), 1);
}

TEST(Guard, ABaselineFromBeforeTheGrowthAndChanceRulesStillPassesWithANote) {
  // Recorded with the rules of the earlier version (no growth_ratio, no
  // chance_loss_factor in its configs): the same training, now warned about
  // earlier by chance_loss, is a note, not a regression.
  Recorded r;
  ASSERT_EQ(r.record().exit_code, 0);
  json b = json::parse(read_file(r.baseline));
  for (json& c : b["configs"]) {
    c["config"]["health"].erase("growth_ratio");
    c["config"]["health"].erase("chance_loss_factor");
    json& v = c["summary"]["verdict"];
    if (!v["onset_step"].is_null()) v["onset_step"] = v["failure_step"].is_null() ? json(1000) : v["failure_step"];  // warned late
  }
  testing::write_bytes(r.baseline, b.dump());
  const auto check = r.check();
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_TRUE(has(check.output, "health.chance_loss_factor=6")) << check.output;
  EXPECT_TRUE(has(check.output, "under other health rules than the baseline's")) << check.output;

  // Other training with other rules is still judged: a higher learning rate regresses.
  const auto hotter = r.check("--set optimizer.lr=0.5");
  EXPECT_EQ(hotter.exit_code, 1) << hotter.output;
}

TEST(Guard, BadSuitesAndBaselinesAreExitTwoAndWriteNothing) {
  Recorded r;
  testing::write_bytes(r.dir.file("bad.json"), R"({"configs": [{"name": "a", "confg": "tiny.json"}]})");
  auto out = run_spikehunt("guard record --suite " + r.dir.file("bad.json") + " --out " + r.baseline);
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_TRUE(has(out.output, r.dir.file("bad.json") + ": configs[0].confg")) << out.output;
  EXPECT_FALSE(fs::exists(r.baseline));

  testing::write_bytes(r.dir.file("bad2.json"), R"({"configs": [{"name": "a", "set": ["optimizer.lr=-1"]}]})");
  out = run_spikehunt("guard record --suite " + r.dir.file("bad2.json") + " --out " + r.baseline);
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_TRUE(has(out.output, "optimizer.lr = -1")) << out.output;

  testing::write_bytes(r.dir.file("bad3.json"), R"({"configs": [{"name": "a"}], "tolerances": {"loss_relative": -0.1}})");
  out = run_spikehunt("guard record --suite " + r.dir.file("bad3.json") + " --out " + r.baseline);
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_TRUE(has(out.output, "tolerances.loss_relative = -0.1")) << out.output;
  EXPECT_FALSE(fs::exists(r.baseline));

  // A baseline without one of the suite's configs, and one that is not a baseline.
  testing::write_bytes(r.dir.file("one.json"), R"({"configs": [{"name": "tiny", "config": "tiny.json"}]})");
  ASSERT_EQ(run_spikehunt("guard record --suite " + r.dir.file("one.json") + " --out " + r.baseline).exit_code, 0);
  out = r.check();
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_TRUE(has(out.output, "\"tiny-hot\" has no entry for this config")) << out.output;
  testing::write_bytes(r.dir.file("junk.json"), R"({"configs": []})");
  out = run_spikehunt("guard check --suite " + r.suite + " --baseline " + r.dir.file("junk.json"));
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_TRUE(has(out.output, "format")) << out.output;
  out = run_spikehunt("guard check --suite " + r.suite);
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_TRUE(has(out.output, "--baseline")) << out.output;

  // Losses of "nan" in a healthy run's baseline would be skipped by the comparison and pass any run.
  nlohmann::json b = nlohmann::json::parse(read_file(r.baseline));
  for (auto& loss : b["configs"][0]["losses"]) loss = "nan";
  testing::write_bytes(r.dir.file("nan.json"), b.dump());
  out = run_spikehunt("guard check --suite " + r.dir.file("one.json") + " --baseline " + r.dir.file("nan.json"));
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_TRUE(has(out.output, "configs[0].losses[0] = \"nan\" is not finite, but the run is healthy")) << out.output;
}

}  // namespace
}  // namespace spikehunt
