// Tests the spikehunt binary end to end: exit codes, what `run` prints and
// writes, `audit`, and that bad input leaves nothing behind.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/checkpoint.h"
#include "test_util.h"

namespace spikehunt {
namespace {

namespace fs = std::filesystem;
using testing::run_spikehunt;
using testing::TempDir;

using testing::has;

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Cli, VersionNamesLibTorchAndBlas) {
  const auto r = run_spikehunt("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(has(r.output, "LibTorch 1.")) << r.output;
  EXPECT_TRUE(has(r.output, "BLAS: ")) << r.output;
}

TEST(Cli, UnknownVerbsAndFlagsAreBadInput) {
  EXPECT_EQ(run_spikehunt("frobnicate").exit_code, 2);
  EXPECT_EQ(run_spikehunt("run --no-such-flag").exit_code, 2);
  EXPECT_EQ(run_spikehunt("").exit_code, 2);
  EXPECT_EQ(run_spikehunt("run --help").exit_code, 0);
}

TEST(Cli, DefaultRunTellsTheWholeStoryAndWritesItsResults) {
  TempDir out;
  const auto r = run_spikehunt("run --out " + out.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;  // a finding
  for (const char* part : {"seed     4", "step  phase/ep/b", "verdict: non_finite", "onset      step",
                           "failure    step", "lead time", "fault      ", "hash chain"}) {
    EXPECT_TRUE(has(r.output, part)) << part << "\n" << r.output;
  }
  const std::vector<std::string> runs = entries(out.path());
  ASSERT_EQ(runs.size(), 1u);
  const std::string dir = out.file(runs[0]);
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"config.json", "first_bad.safetensors", "last_healthy.safetensors",
                                                    "trace.jsonl", "verdict.json"}));
  std::ifstream verdict_file(dir + "/verdict.json");
  const nlohmann::json verdict = nlohmann::json::parse(verdict_file);
  EXPECT_EQ(verdict["outcome"], "non_finite");
  EXPECT_GE(verdict["lead_time"].get<int64_t>(), 1);
  EXPECT_FALSE(verdict["environment"]["blas"].get<std::string>().empty());
  std::ifstream trace(dir + "/trace.jsonl");
  std::string line;
  int64_t lines = 0;
  while (std::getline(trace, line)) {
    const nlohmann::json rec = nlohmann::json::parse(line);  // every line is strict JSON
    EXPECT_EQ(rec["step"].get<int64_t>(), lines);
    EXPECT_EQ(rec["input_hash"].get<std::string>().size(), 32u);
    ++lines;
  }
  EXPECT_EQ(lines, verdict["steps_run"].get<int64_t>());
  EXPECT_EQ(verdict["failure_step"].get<int64_t>(), lines - 1);
  // The run's config replays to the same hash chain, and fail-fast names the same fault.
  TempDir again;
  const auto r2 =
      run_spikehunt("run --config " + dir + "/config.json --no-checkpoints --fail-fast --out " + again.path());
  EXPECT_EQ(r2.exit_code, 1);
  EXPECT_TRUE(has(r2.output, "hash chain " + verdict["hash_chain"].get<std::string>())) << r2.output;
  auto fault_line = [](const std::string& out) {
    const size_t at = out.find("fault      ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_FALSE(fault_line(r.output).empty());
  EXPECT_EQ(fault_line(r2.output), fault_line(r.output));
}

TEST(Cli, HealthyControlExitsZero) {
  TempDir out;
  const auto r = run_spikehunt("run --config " + testing::source_path("configs/healthy.json") +
                               " --no-checkpoints --out " + out.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "verdict: healthy")) << r.output;
}

TEST(Cli, BadConfigIsExitTwoWithFieldAndHintAndWritesNothing) {
  TempDir out;
  const auto r = run_spikehunt("run --set optimizer.lr=-0.05 --out " + out.path() + "/results");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "optimizer.lr = -0.05 is not in (0, 10]")) << r.output;
  EXPECT_TRUE(has(r.output, "hint: ")) << r.output;
  EXPECT_FALSE(fs::exists(out.path() + "/results"));
  const auto missing = run_spikehunt("run --config /no/such.json --out " + out.path());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(has(missing.output, "/no/such.json: cannot be read")) << missing.output;
  const auto data = run_spikehunt("run --set dataset.kind=idx --set dataset.path=/no/data --out " + out.path());
  EXPECT_EQ(data.exit_code, 2);
  EXPECT_TRUE(has(data.output, "dataset.path = /no/data is not a directory")) << data.output;
  EXPECT_TRUE(entries(out.path()).empty()) << "no partial result folders";
}

TEST(Cli, PrintConfigShowsTheResolvedConfig) {
  const auto r = run_spikehunt("run --print-config --set seed=9");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(r.output)["seed"], 9);
}

TEST(Cli, AuditCountsNonFiniteValuesAndComparesPairs) {
  TempDir dir;
  torch::Tensor bad = torch::ones({4});
  bad[1] = std::numeric_limits<float>::quiet_NaN();
  bad[2] = -std::numeric_limits<float>::infinity();
  write_checkpoint(dir.file("bad.safetensors"), {{"model.w", bad}, {"model.b", torch::zeros({2})}}, {});
  write_checkpoint(dir.file("good.safetensors"), {{"model.w", torch::ones({4})}, {"model.b", torch::zeros({2})}}, {});
  const auto a = run_spikehunt("audit " + dir.file("bad.safetensors"));
  EXPECT_EQ(a.exit_code, 1) << a.output;
  EXPECT_TRUE(has(a.output, "2 tensors, 1 with non-finite values")) << a.output;
  EXPECT_EQ(run_spikehunt("audit " + dir.file("good.safetensors")).exit_code, 0);
  const auto same = run_spikehunt("audit --pair " + dir.file("good.safetensors") + " " + dir.file("good.safetensors"));
  EXPECT_EQ(same.exit_code, 0);
  EXPECT_TRUE(has(same.output, "same state")) << same.output;
  const auto diff = run_spikehunt("audit --pair " + dir.file("good.safetensors") + " " + dir.file("bad.safetensors"));
  EXPECT_EQ(diff.exit_code, 1);
  EXPECT_TRUE(has(diff.output, "first differing tensor model.w: values")) << diff.output;
  EXPECT_TRUE(has(diff.output, "2 of 4 elements differ; largest |a - b| = inf")) << diff.output;
}

TEST(Cli, AuditOfACorruptFileIsAClearErrorNotACrash) {
  TempDir dir;
  testing::write_bytes(dir.file("junk.safetensors"), "this is not a checkpoint at all");
  const auto r = run_spikehunt("audit " + dir.file("junk.safetensors"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "error: " + dir.file("junk.safetensors") + ": header length")) << r.output;
  const auto none = run_spikehunt("audit " + dir.file("missing.safetensors"));
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_EQ(run_spikehunt("audit").exit_code, 2);
}

}  // namespace
}  // namespace spikehunt
