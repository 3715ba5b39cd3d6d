// Tests sharded sweeps without a scheduler: `sweep --shard I/N` run by hand
// (as a Slurm array task would), `merge` against a one-machine sweep of the
// same seed and space, merge's refusals and its report of missing samples,
// `compare`, the shard a Slurm array task's variables give, and the node
// environment each run records. tests/slurm_cluster.sh does it on a real Slurm.
#include <cstdlib>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/flags.h"
#include "generators/finish.h"
#include "generators/merge.h"
#include "generators/store.h"
#include "generators/sweep.h"
#include "harness/env.h"
#include "harness/record.h"
#include "test_util.h"

namespace spikehunt {
namespace {

namespace fs = std::filesystem;
using testing::has;
using testing::run_spikehunt;
using testing::TempDir;

std::string write_space(const TempDir& dir) {
  testing::write_bytes(dir.file("space.json"), testing::tiny_space());
  return dir.file("space.json");
}

// The part of a sweep's printout that must not depend on where it ran:
// from the rates line on, less the timing line and the folder names.
std::string findings(std::string text, const std::string& dir) {
  text = text.substr(text.find(" runs, "));
  for (size_t at; (at = text.find(dir)) != std::string::npos;) text.erase(at, dir.size());
  std::string kept;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    if (line.rfind("bursts this invocation", 0) != 0 && line.find("(replayed from step") == std::string::npos) kept += line + "\n";
    start = end == std::string::npos ? text.size() : end + 1;
  }
  return kept;
}

TEST(MergeEndToEnd, ThreeShardsMergeIntoWhatOneMachineFinds) {
  TempDir dir;
  const std::string space = write_space(dir), one = dir.file("one"), sharded = dir.file("sharded");
  const std::string flags = " --space " + space + " --runs 6 --seed 3 -j 2 --no-progress --shrink-bursts 12";
  const auto whole = run_spikehunt("sweep" + flags + " --out " + one);
  ASSERT_EQ(whole.exit_code, 1) << whole.output;  // the tiny space diverges at high learning rates
  int64_t shard_runs = 0;
  for (int i = 0; i < 3; ++i) {
    const auto shard = run_spikehunt("sweep" + flags + " --out " + sharded + " --shard " + std::to_string(i) + "/3");
    ASSERT_NE(shard.exit_code, 2) << shard.output;
    EXPECT_TRUE(has(shard.output, "shard " + std::to_string(i) + "/3: samples i with i mod 3 = " + std::to_string(i) +
                                      ", 2 of the 6 runs"))
        << shard.output;
    EXPECT_FALSE(has(shard.output, "minimal config")) << "a shard searches; merge shrinks";
    EXPECT_TRUE(fs::exists(sharded + "/shard-" + std::to_string(i) + "-of-3/sweep.db"));
    shard_runs += SweepStore::open_read_only(sharded + "/shard-" + std::to_string(i) + "-of-3/sweep.db")->count("search");
  }
  EXPECT_EQ(shard_runs, 6);
  const std::string shards = " " + sharded + "/shard-0-of-3 " + sharded + "/shard-1-of-3 " + sharded + "/shard-2-of-3";
  const auto merged = run_spikehunt("merge " + sharded + shards + " -j 2 --no-progress --shrink-bursts 12");
  ASSERT_EQ(merged.exit_code, 1) << merged.output;
  EXPECT_TRUE(has(merged.output, "joined 6 run(s) (0 merged before)")) << merged.output;
  EXPECT_TRUE(has(merged.output, "the runs ran in 1 environment(s)")) << merged.output;
  EXPECT_TRUE(has(findings(whole.output, one), "minimal config")) << whole.output;
  EXPECT_EQ(findings(merged.output, sharded), findings(whole.output, one));
  EXPECT_TRUE(fs::exists(sharded + "/report.html"));
  const auto cmp = run_spikehunt("compare " + one + " " + sharded);
  EXPECT_EQ(cmp.exit_code, 0) << cmp.output;
  EXPECT_TRUE(has(cmp.output, "equal: the same 6 samples")) << cmp.output;

  // Idempotent: merging again joins nothing, trains nothing, finds the same.
  const auto again = run_spikehunt("merge " + sharded + shards + " -j 2 --no-progress --shrink-bursts 12");
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_TRUE(has(again.output, "joined 0 run(s) (6 merged before)")) << again.output;
  EXPECT_TRUE(has(again.output, "bursts this invocation: 0 search, 0 shrink")) << again.output;
  EXPECT_EQ(findings(again.output, sharded), findings(whole.output, one));
}

TEST(MergeEndToEnd, OddShardsAreRefusedAndMissingSamplesNamed) {
  TempDir dir;
  const std::string space = write_space(dir), out = dir.file("s");
  const std::string flags = " --space " + space + " --runs 4 --no-progress --max-shrinks 0";
  for (const char* shard : {"0/2", "1/2"}) ASSERT_NE(run_spikehunt("sweep" + flags + " --out " + out + " --shard " + shard).exit_code, 2);
  ASSERT_NE(run_spikehunt("sweep" + flags + " --seed 9 --out " + dir.file("other") + " --shard 1/2").exit_code, 2);
  ASSERT_NE(run_spikehunt("sweep" + flags + " --out " + dir.file("three") + " --shard 1/3").exit_code, 2);
  const std::string s0 = out + "/shard-0-of-2", s1 = out + "/shard-1-of-2";

  auto refused = [&](const std::string& args, const std::vector<std::string>& said) {
    const auto r = run_spikehunt("merge " + dir.file("m") + " " + args + " --no-progress --max-shrinks 0");
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    for (const std::string& s : said) EXPECT_TRUE(has(r.output, s)) << s << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir.file("m"))) << "nothing written before the shards are checked: " << args;
  };
  refused(s0 + " " + dir.file("other") + "/shard-1-of-2",
          {dir.file("other") + "/shard-1-of-2/sweep.db: seed = 9 differs from the other shards' seed (0)"});
  refused(s0 + " " + dir.file("three") + "/shard-1-of-3", {"shard count = 3 differs", "shard-1-of-3/sweep.db"});
  refused(s0 + " " + s0, {"shard = 0/2 is given twice"});
  refused(s0 + " " + dir.file("nowhere"), {dir.file("nowhere") + ": has no sweep.db"});
  refused(s0, {"samples = 1, 3 are in no shard: 2 of 4 runs missing", "shard 1/2: 2 of 2 runs missing (its folder was not given)",
               "--allow-missing"});

  const auto partial = run_spikehunt("merge " + dir.file("m") + " " + s0 + " --allow-missing --no-progress --max-shrinks 0");
  EXPECT_NE(partial.exit_code, 2) << partial.output;
  EXPECT_TRUE(has(partial.output, "2 of 4 samples are in no shard (--allow-missing): 1, 3")) << partial.output;
  EXPECT_TRUE(has(partial.output, "\n2 runs, ")) << partial.output;
  // The other shard comes in later: the same merge command takes it in.
  const auto full = run_spikehunt("merge " + dir.file("m") + " " + s0 + " " + s1 + " --no-progress --max-shrinks 0");
  EXPECT_TRUE(has(full.output, "joined 2 run(s) (2 merged before)")) << full.output;
  EXPECT_TRUE(has(full.output, "\n4 runs, ")) << full.output;

  // compare names what differs.
  const auto cmp = run_spikehunt("compare " + dir.file("m") + " " + dir.file("other") + "/shard-1-of-2");
  EXPECT_EQ(cmp.exit_code, 1) << cmp.output;
  EXPECT_TRUE(has(cmp.output, "seed 0 against 9")) << cmp.output;
  EXPECT_TRUE(has(cmp.output, "samples only in " + dir.file("m") + ": 0, 2")) << cmp.output;

  // OUT a plain file, and a shard row that does not parse: refused before anything is joined.
  testing::write_bytes(dir.file("plain"), "x");
  const auto to_file = run_spikehunt("merge " + dir.file("plain") + " " + s0 + " " + s1 + " --no-progress --max-shrinks 0");
  EXPECT_EQ(to_file.exit_code, 2) << to_file.output;
  EXPECT_TRUE(has(to_file.output, dir.file("plain") + ": OUT is a file, not a folder")) << to_file.output;
  testing::write_bytes(dir.file("corrupt.py"),
                       "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n"
                       "c.execute(\"UPDATE runs SET config_json = '{not json' WHERE kind = 'search'\")\nc.commit()\n");
  ASSERT_EQ(std::system(("/usr/bin/python3 " + dir.file("corrupt.py") + " " + s1 + "/sweep.db").c_str()), 0);
  const auto bad_row = run_spikehunt("merge " + dir.file("m3") + " " + s0 + " " + s1 + " --no-progress --max-shrinks 0");
  EXPECT_EQ(bad_row.exit_code, 2) << bad_row.output;
  EXPECT_TRUE(has(bad_row.output, s1 + "/sweep.db: runs (sample ") &&
              has(bad_row.output, ").config_json = {not json is not JSON"))
      << bad_row.output;
  EXPECT_FALSE(fs::exists(dir.file("m3"))) << "OUT untouched";
  // compare reads each row it compares: the damaged one is named, not called equal.
  const auto cmp_bad = run_spikehunt("compare " + s1 + " " + s1);
  EXPECT_EQ(cmp_bad.exit_code, 2) << cmp_bad.output;
  EXPECT_TRUE(has(cmp_bad.output, ").config_json = {not json is not JSON")) << cmp_bad.output;
}

TEST(Shard, TheSlurmArrayVariablesGiveTheShard) {
  std::map<std::string, std::string> vars;
  auto env = [&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  EXPECT_FALSE(shard_from_slurm(env)) << "not an array task";
  vars = {{"SLURM_ARRAY_TASK_MIN", "1"}, {"SLURM_ARRAY_TASK_STEP", "2"}, {"SLURM_ARRAY_TASK_COUNT", "4"}};
  for (int task : {1, 3, 5, 7}) {  // --array=1-7:2
    vars["SLURM_ARRAY_TASK_ID"] = std::to_string(task);
    const auto shard = shard_from_slurm(env);
    ASSERT_TRUE(shard);
    EXPECT_EQ(shard->first, (task - 1) / 2);
    EXPECT_EQ(shard->second, 4);
  }
  vars["SLURM_ARRAY_TASK_ID"] = "4";  // off the grid
  EXPECT_THROW(shard_from_slurm(env), InputError);
  vars = {{"SLURM_ARRAY_TASK_ID", "2"}};  // no count: no shard can be told
  try {
    shard_from_slurm(env);
    ADD_FAILURE() << "no SLURM_ARRAY_TASK_COUNT";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "SLURM_ARRAY_TASK_COUNT")) << e.what();
  }
  vars = {{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_COUNT", "3"}};  // --array=0-2: min 0, step 1
  EXPECT_EQ(shard_from_slurm(env), std::make_pair(int64_t{2}, int64_t{3}));

  EXPECT_EQ(parse_shard("1/3"), std::make_pair(int64_t{1}, int64_t{3}));
  for (const char* bad : {"3/3", "1", "a/3", "1/0", "-1/3", "1/3/4"}) EXPECT_THROW(parse_shard(bad), InputError) << bad;
  EXPECT_EQ(index_ranges({1, 2, 3, 5, 8, 9}), "1-3, 5, 8-9");
  EXPECT_EQ(index_ranges({1, 3, 5}, 2), "1, 3, ... (1 more)");
}

TEST(NodeEnvironment, EachRunRecordsItAndAnotherKindOfNodeIsSaidPlainly) {
  const Environment here = environment("cpu", 1);
  EXPECT_FALSE(here.cpu_capability.empty());
  EXPECT_NE(here.cpu_capability, "unknown") << "ATen's CPU capability is read from LibTorch";
  EXPECT_FALSE(here.node.empty());
  BurstSummary s;
  s.environment = here;
  const BurstSummary back = summary_from_json(to_json(s), "test");
  ASSERT_TRUE(back.environment);
  EXPECT_EQ(back.environment->cpu_capability, here.cpu_capability);
  EXPECT_EQ(back.environment->node, here.node);
  EXPECT_EQ(environment_note(back), "") << "found here";

  Environment twin = here;  // another node of the same kind: one environment
  twin.node = "node-b";
  EXPECT_EQ(environment_key(twin), environment_key(here));
  s.environment = twin;
  EXPECT_EQ(environment_note(s), "");

  Environment other = here;  // another kind of CPU: ATen picks other kernels
  other.node = "node-c";
  other.cpu_capability = here.cpu_capability == "AVX512" ? "AVX2" : "AVX512";
  EXPECT_NE(environment_key(other), environment_key(here));
  s.environment = other;
  const std::string note = environment_note(s);
  EXPECT_TRUE(has(note, "found on node node-c")) << note;
  EXPECT_TRUE(has(note, "not promised to be bit-exact")) << note;
  EXPECT_TRUE(has(note, "ATen picks " + here.cpu_capability + " kernels here, " + other.cpu_capability)) << note;
  EXPECT_TRUE(has(note, "srun -w node-c")) << note;
}

}  // namespace
}  // namespace spikehunt
