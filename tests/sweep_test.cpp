// Tests the sweep, shrink and replay verbs end to end: real bursts on the
// synthetic data in child processes, a sweep killed and resumed, children
// that crash or hang, and replays that must catch a changed hash.
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fcntl.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/files.h"
#include "generators/finish.h"
#include "generators/gen.h"
#include "generators/rates.h"
#include "generators/shrink_config.h"
#include "generators/space.h"
#include "generators/store.h"
#include "generators/sweep.h"
#include "harness/repro.h"
#include "test_util.h"

extern char** environ;

namespace spikehunt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::run_spikehunt;
using testing::TempDir;

using testing::has;

const std::string kSpace = testing::tiny_space();

std::string write_space(const TempDir& dir, const std::string& text = kSpace) {
  testing::write_bytes(dir.file("space.json"), text);
  return dir.file("space.json");
}

int64_t count_runs(const std::string& db, const std::string& where = "kind = 'search'") {
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(h);
    return -1;
  }
  sqlite3_busy_timeout(h, 2000);
  sqlite3_stmt* s = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(h, ("SELECT COUNT(*), COUNT(DISTINCT sample) FROM runs WHERE " + where).c_str(), -1, &s,
                         nullptr) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW) {
    n = sqlite3_column_int64(s, 0);
    if (sqlite3_column_int64(s, 1) != n && where == "kind = 'search'") n = -2;  // a sample twice
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return n;
}

std::string only_repro(const std::string& dir) {
  std::string found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 11 && name.substr(name.size() - 11) == ".repro.json") found = e.path().string();
  }
  return found;
}

TEST(SweepEndToEnd, FindsShrinksAndReplaysAFailure) {
  TempDir dir;
  const std::string space = write_space(dir);
  const std::string out = dir.file("sweep");
  const std::string command = "sweep --space " + space + " --runs 6 -j 2 --out " + out +
                              " --no-progress --shrink-bursts 25 --max-shrinks 1";
  const auto r = run_spikehunt(command);
  ASSERT_EQ(r.exit_code, 1) << r.output;
  for (const char* part : {"6 runs, ", "95% Wilson interval", "optimizer.lr", "distinct failure", "minimal config",
                           "replay: reproduced", "replay it: " SPIKEHUNT_BINARY " replay", "TEST(TrainingStability"}) {
    EXPECT_TRUE(has(r.output, part)) << part << "\n" << r.output;
  }
  EXPECT_EQ(count_runs(out + "/sweep.db"), 6);
  EXPECT_GT(count_runs(out + "/sweep.db", "kind = 'shrink'"), 0);
  const std::string repro = only_repro(out + "/repros");
  ASSERT_FALSE(repro.empty());
  const Repro rp = read_repro(repro);
  ASSERT_TRUE(rp.checkpoint) << "a failing burst has a last healthy state";
  EXPECT_FALSE(rp.step_hashes.empty());
  // The repro fails as its failure's title says (a shrink stays within its fault signature).
  SweepStore store(out + "/sweep.db", SearchSpace::load(space).to_json().dump(), 0);
  for (const FailureRow& f : store.failures()) {
    if (f.repro_path.empty()) continue;
    EXPECT_EQ(fault_signature(read_repro(f.repro_path).verdict), f.signature) << f.repro_path;
    EXPECT_EQ(file_safe(f.signature) + ".repro.json", fs::path(f.repro_path).filename().string());
  }
  // Replays from step 0 and from the checkpoint both reproduce it.
  const auto zero = run_spikehunt("replay " + repro);
  EXPECT_EQ(zero.exit_code, 0) << zero.output;
  EXPECT_TRUE(has(zero.output, "from step 0")) << zero.output;
  EXPECT_TRUE(has(zero.output, "reproduced: ")) << zero.output;
  const auto ckpt = run_spikehunt("replay " + repro + " --from-checkpoint");
  EXPECT_EQ(ckpt.exit_code, 0) << ckpt.output;
  EXPECT_TRUE(has(ckpt.output, "from step " + std::to_string(rp.checkpoint->step))) << ckpt.output;
  EXPECT_TRUE(has(ckpt.output, "reproduced: ")) << ckpt.output;
  // The same command again resumes: nothing is trained twice. With --junit
  // it writes a test case per distinct failure, in the JUnit CI dashboards read.
  const auto again = run_spikehunt(command + " --junit " + dir.file("sweep.xml"));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_TRUE(has(again.output, "resuming: 6 of 6 runs already in the database")) << again.output;
  EXPECT_TRUE(has(again.output, "bursts this invocation: 0 search, 0 shrink")) << again.output;
  EXPECT_EQ(testing::junit_problems(dir.file("sweep.xml")), "");
  const std::string xml = read_file(dir.file("sweep.xml"));
  const size_t distinct = store.failures().size();
  EXPECT_TRUE(has(xml, "tests=\"" + std::to_string(distinct) + "\" failures=\"" + std::to_string(distinct) + "\""))
      << xml;
  for (const FailureRow& f : store.failures()) {
    EXPECT_TRUE(has(xml, "<testcase name=\"" + f.signature + "\" classname=\"spikehunt.sweep\"")) << xml;
  }
  EXPECT_TRUE(has(xml, "replay it: ")) << "the shrunk failure's replay command: " << xml;
  EXPECT_TRUE(has(xml, "TEST(TrainingStability")) << xml;
}

TEST(SweepEndToEnd, AKilledSweepResumesWithoutLosingOrRepeatingARun) {
  TempDir dir;
  // Bursts of the default CNN (about 0.3 s each), every sample a point of its
  // own (a continuous lr): ten of the tiny MLP's took under half a second, and
  // the poll below could see all ten before the kill.
  const std::string space = write_space(dir, R"({
    "base": {"dataset": {"synthetic_train_per_class": 40}, "batch_size": 32, "threads": 1},
    "dimensions": {"optimizer.lr": {"log_range": [0.001, 0.02]}, "max_batches_per_epoch": {"range": [6, 10]}}})");
  const std::string out = dir.file("sweep");
  const pid_t pid = testing::spawn_background({SPIKEHUNT_BINARY, "sweep", "--space", space, "--runs", "10", "-j", "1",
                                               "--out", out, "--no-progress", "--max-shrinks", "0"},
                                              "/dev/null");
  int64_t before = 0;
  for (int i = 0; i < 1200 && before < 3; ++i) {  // up to 60 s for 3 runs
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (fs::exists(out + "/sweep.db")) before = count_runs(out + "/sweep.db");
  }
  ASSERT_GE(before, 3);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  const int64_t committed = count_runs(out + "/sweep.db");
  ASSERT_LT(committed, 10) << "killed mid-sweep";
  const auto r = run_spikehunt("sweep --space " + space + " --runs 10 -j 1 --out " + out + " --no-progress --max-shrinks 0");
  EXPECT_TRUE(has(r.output, "resuming: " + std::to_string(committed) + " of 10 runs")) << r.output;
  EXPECT_TRUE(has(r.output, "bursts this invocation: " + std::to_string(10 - committed) + " search")) << r.output;
  EXPECT_EQ(count_runs(out + "/sweep.db"), 10) << "every sample exactly once (-2: a sample twice)";
  // The resumed samples are the points the seed defines.
  const SearchSpace s = SearchSpace::load(space);
  sqlite3* h = nullptr;
  sqlite3_open((out + "/sweep.db").c_str(), &h);
  sqlite3_stmt* q = nullptr;
  sqlite3_prepare_v2(h, "SELECT sample, config_json FROM runs WHERE kind = 'search'", -1, &q, nullptr);
  while (sqlite3_step(q) == SQLITE_ROW) {
    const int64_t sample = sqlite3_column_int64(q, 0);
    const json stored = json::parse(reinterpret_cast<const char*>(sqlite3_column_text(q, 1)));
    EXPECT_EQ(stored, config_to_json(s.config(sample_point(s, 0, uint64_t(sample))))) << "sample " << sample;
  }
  sqlite3_finalize(q);
  sqlite3_close(h);
}

// A sweep suspended whole (Ctrl-Z, a Slurm suspend: SIGSTOP to its process group, workers included)
// for longer than its --timeout makes no timeout: the clock counts only time a burst could run.
TEST(SweepEndToEnd, ASuspendedSweepIsNotATimeout) {
  TempDir dir;
  const std::string space = write_space(dir, R"({
    "base": {"dataset": {"synthetic_train_per_class": 40}, "batch_size": 32, "threads": 1},
    "dimensions": {"optimizer.lr": {"log_range": [0.001, 0.02]}, "max_batches_per_epoch": {"range": [6, 10]}}})");
  const std::string out = dir.file("sweep");
  const std::string log = dir.file("sweep.log");
  const pid_t pid = testing::spawn_background({SPIKEHUNT_BINARY, "sweep", "--space", space, "--runs", "6", "-j", "2",
                                               "--timeout", "3s", "--out", out, "--no-progress", "--max-shrinks", "0"},
                                              log, /*own_group=*/true);
  int64_t before = 0;
  for (int i = 0; i < 1200 && before < 1; ++i) {  // up to 60 s for the first run
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (fs::exists(out + "/sweep.db")) before = count_runs(out + "/sweep.db");
  }
  ASSERT_GE(before, 1);
  ASSERT_EQ(::kill(-pid, SIGSTOP), 0);
  const auto clock = std::chrono::steady_clock::now();
  // Meanwhile, a report or a compare of it says it shows what is committed so far.
  const auto report = run_spikehunt("report " + out + " --out " + dir.file("partial.html"));
  EXPECT_EQ(report.exit_code, 0) << report.output;
  EXPECT_TRUE(has(report.output, "the sweep is still running (sweep, pid " + std::to_string(pid))) << report.output;
  EXPECT_TRUE(has(read_file(dir.file("partial.html")), "This sweep is still running"));
  const auto compared = run_spikehunt("compare " + out + " " + out);
  EXPECT_TRUE(has(compared.output, out + " is still being written (sweep, pid")) << compared.output;
  std::this_thread::sleep_until(clock + std::chrono::seconds(5));
  ASSERT_EQ(::kill(-pid, SIGCONT), 0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(count_runs(out + "/sweep.db"), 6);
  EXPECT_EQ(count_runs(out + "/sweep.db", "kind = 'search' AND outcome = 'timeout'"), 0)
      << "5 s stopped with --timeout 3s: none of it counted";
  EXPECT_FALSE(has(read_file(log), "past their --timeout")) << "not even a timeout run once more:\n" << read_file(log);
}

TEST(SweepEndToEnd, CrashingAndHangingChildrenBecomeVerdictsAndTheSweepGoesOn) {
  TempDir dir;
  const std::string space = write_space(dir, R"({
    "base": {"model": {"kind": "mlp", "mlp_width": 16}, "dataset": {"synthetic_train_per_class": 20},
             "batch_size": 16, "max_batches_per_epoch": 2, "threads": 1, "optimizer": {"lr": 0.01}},
    "dimensions": {"seed": {"range": [0, 3]}}})");
  // A stand-in for spikehunt whose bursts segfault for seed 1 and hang for
  // seed 2, and whose first burst of seed 0 is killed as an outside kill
  // (the OOM killer, a preemption) would.
  const std::string fake = dir.file("fake-spikehunt");
  const std::string once = dir.file("killed-once");
  testing::write_bytes(fake, std::string("#!/bin/sh\n") +
                                 "if [ \"$1\" = burst ] && grep -q '\"seed\": 0,' \"$3\" && [ ! -e " + once +
                                 " ]; then touch " + once + "; kill -KILL $$; fi\n"
                                 "if [ \"$1\" = burst ] && grep -q '\"seed\": 1,' \"$3\"; then kill -SEGV $$; fi\n"
                                 "if [ \"$1\" = burst ] && grep -q '\"seed\": 2,' \"$3\"; then exec sleep 60; fi\n"
                                 "exec " + SPIKEHUNT_BINARY + " \"$@\"\n");
  fs::permissions(fake, fs::perms::owner_all);
  const SearchSpace s = SearchSpace::load(space);
  std::set<uint64_t> seeds;
  for (uint64_t i = 0; i < 8; ++i) seeds.insert(s.config(sample_point(s, 0, i)).seed);
  ASSERT_TRUE(seeds.count(1) && seeds.count(2) && seeds.count(0)) << "the premise: the 8 samples cover seeds 0, 1, 2";
  const std::string out = dir.file("sweep");
  // Run the orchestrator in this process so it can spawn the stand-in.
  SweepOptions o;
  o.space = s;
  o.runs = 8;
  o.jobs = 2;
  o.timeout_seconds = 3;
  o.max_shrinks = 0;
  o.out_dir = out;
  o.binary = fake;
  o.progress = false;
  o.pool.persistent = false;  // the stand-in is no worker: a process a burst (workers: worker_test.cpp)
  std::ostringstream text;
  EXPECT_EQ(run_sweep(o, text), 1);
  EXPECT_EQ(count_runs(out + "/sweep.db"), 8) << text.str();
  SweepStore store(out + "/sweep.db", s.to_json().dump(), 0);
  for (const RunRow& r : store.runs("search")) {
    const uint64_t seed = json::parse(r.config_json)["seed"].get<uint64_t>();
    const Verdict& v = r.summary.verdict;
    if (seed == 1) {
      EXPECT_EQ(v.outcome, Outcome::kCrashed) << v.message;
      EXPECT_TRUE(has(v.message, "signal 11")) << v.message;
      EXPECT_TRUE(has(v.message, "killed again when run once more in a fresh worker")) << v.message;
    } else if (seed == 2) {
      EXPECT_EQ(v.outcome, Outcome::kTimeout) << v.message;
    } else {
      EXPECT_EQ(v.outcome, Outcome::kHealthy) << v.message;
    }
  }
  EXPECT_TRUE(has(text.str(), "crashed")) << text.str();
  EXPECT_TRUE(has(text.str(), "timeout")) << text.str();
  // The outside kill was run once more (its verdict healthy, above) and
  // said; the segfaults were run twice each and are crashed.
  EXPECT_TRUE(fs::exists(once)) << "the premise: a seed-0 burst was killed";
  const std::vector<RunRow> runs = store.runs("search");
  const int64_t segfaulting = std::count_if(runs.begin(), runs.end(), [](const RunRow& r) {
    return json::parse(r.config_json)["seed"].get<uint64_t>() == 1;
  });
  EXPECT_TRUE(has(text.str(), std::to_string(segfaulting + 1) + " burst(s) killed by a signal spikehunt did not send ("))
      << text.str();
  EXPECT_TRUE(has(text.str(), "1x signal 9 (Killed)")) << text.str();
  EXPECT_TRUE(has(text.str(), std::to_string(segfaulting) + "x signal 11 (Segmentation fault)")) << text.str();
  EXPECT_TRUE(has(text.str(), std::to_string(segfaulting) + " killed again: crashed")) << text.str();
}

TEST(SweepEndToEnd, TheFirstSampleOfAFailureDoesNotDependOnTheJobCount) {
  TempDir dir;
  const std::string space = write_space(dir);
  std::vector<std::string> firsts;
  for (const char* jobs : {"1", "3"}) {
    const auto r = run_spikehunt("sweep --space " + space + " --runs 8 --max-shrinks 0 --no-progress -j " + jobs +
                                 " --out " + dir.file(std::string("j") + jobs));
    ASSERT_EQ(r.exit_code, 1) << r.output;
    std::string lines;
    for (size_t at = r.output.find("(first: sample "); at != std::string::npos;
         at = r.output.find("(first: sample ", at + 1)) {
      lines += r.output.substr(at, r.output.find(')', at) - at) + ";";
    }
    firsts.push_back(lines);
  }
  EXPECT_FALSE(firsts[0].empty());
  EXPECT_EQ(firsts[0], firsts[1]) << "the lowest sample index of each failure, with -j 1 and -j 3";
}

TEST(SweepEndToEnd, BadInputIsExitTwo) {
  TempDir dir;
  testing::write_bytes(dir.file("bad.json"), R"({"dimensions": {"optimizer.lr": {"log_range": [1, 0.1]}}})");
  auto r = run_spikehunt("sweep --space " + dir.file("bad.json") + " --out " + dir.file("o"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "dimensions.optimizer.lr = [1,0.1] is empty: min > max")) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("o/sweep.db")));
  r = run_spikehunt("sweep --budget 5x --out " + dir.file("o"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "--budget = 5x is not a duration")) << r.output;
  r = run_spikehunt("sweep --runs 0 --out " + dir.file("o"));
  EXPECT_EQ(r.exit_code, 2);
  // A database from another seed is refused, not mixed.
  const std::string space = write_space(dir);
  r = run_spikehunt("sweep --space " + space + " --runs 1 --max-shrinks 0 --no-progress --out " + dir.file("s"));
  ASSERT_NE(r.exit_code, 2) << r.output;
  r = run_spikehunt("sweep --space " + space + " --runs 1 --seed 5 --no-progress --out " + dir.file("s"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "sweep.db: holds a sweep with --seed 0, not --seed 5")) << r.output;
  EXPECT_TRUE(has(r.output, "hint: resume with --seed 0")) << r.output;
  fs::create_directories(dir.file("junk"));
  testing::write_bytes(dir.file("junk/sweep.db"), std::string(4096, 'x'));
  r = run_spikehunt("sweep --space " + space + " --runs 1 --no-progress --out " + dir.file("junk"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "is not a sweep database")) << r.output;
}

TEST(ReplayEndToEnd, ATamperedHashIsReportedAtItsStep) {
  TempDir dir;
  const TrainingConfig c = default_config({"model.kind=mlp", "optimizer.lr=8", "dataset.synthetic_train_per_class=20",
                                           "batch_size=16", "max_batches_per_epoch=3", "threads=1"});
  const std::string path = dir.file("x.repro.json");
  const Repro rp = record_repro(c, path);
  ASSERT_NE(rp.verdict.outcome, Outcome::kHealthy);
  ASSERT_GE(rp.step_hashes.size(), 2u);
  EXPECT_EQ(run_spikehunt("replay " + path).exit_code, 0);
  json j = json::parse(std::ifstream(path));
  std::string h = j["step_hashes"][1][0];
  h[0] = h[0] == '0' ? '1' : '0';
  j["step_hashes"][1][0] = h;
  testing::write_bytes(path, j.dump());
  const auto r = run_spikehunt("replay " + path);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.output, "not reproduced: step 1: input hash expected " + h)) << r.output;
  // A second replay to step 1 draws what the first drew: the recording, not the program, differs.
  EXPECT_TRUE(has(r.output, "a second replay drew the same inputs as the first")) << r.output;
  // The repro records the code that ran, file by file; another file there now is said.
  ASSERT_TRUE(j.contains("code") && !j["code"].empty()) << j.dump().substr(0, 400);
  EXPECT_FALSE(has(r.output, "the code changed")) << r.output;
  const std::string binary = j["code"][0]["path"];
  j["code"][0]["hash"] = std::string(32, '0');
  testing::write_bytes(path, j.dump());
  EXPECT_TRUE(has(run_spikehunt("replay " + path).output, "warning: the code changed since the repro was recorded: " +
                                                            binary));
  j["config"]["optimizer"]["lr"] = -1;
  testing::write_bytes(path, j.dump());
  const auto bad = run_spikehunt("replay " + path);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(has(bad.output, "x.repro.json: config.optimizer.lr = -1 is not in (0, 10]")) << bad.output;
  testing::write_bytes(path, "{}");
  EXPECT_EQ(run_spikehunt("replay " + path).exit_code, 2);
}

TEST(ReproFile, NumbersThatAreNotIntegersAreClearErrors) {
  // Regression (fuzz_repro): get<int64_t>() of 8.9e63 was undefined behaviour.
  TempDir dir;
  const TrainingConfig c = default_config({"model.kind=mlp", "optimizer.lr=8", "dataset.synthetic_train_per_class=10",
                                           "batch_size=8", "max_batches_per_epoch=2", "threads=1"});
  record_repro(c, dir.file("r.repro.json"));
  const std::string text = read_file(dir.file("r.repro.json"));
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"steps_run", 8.9e63}, {"onset_step", 1.5}, {"planned_steps", "7"}}) {
    json j = json::parse(text);
    j["verdict"][field] = value;
    try {
      parse_repro(j.dump(), "r.repro.json");
      ADD_FAILURE() << field;
    } catch (const InputError& e) {
      EXPECT_TRUE(has(e.what(), "r.repro.json")) << e.what();
    }
  }
  json j = json::parse(text);
  ASSERT_FALSE(j["checkpoint"].is_null());
  j["checkpoint"]["monitor"]["judge"]["loss"] = "nope";
  EXPECT_THROW(parse_repro(j.dump(), "r.repro.json"), InputError);
  j = json::parse(text);
  j["environment"]["threads"] = 1e300;
  EXPECT_THROW(parse_repro(j.dump(), "r.repro.json"), InputError);
}

// A repro's step hashes are read into 32 bytes each as they are parsed: a
// million of them fit in a process allowed 160 MB more than it holds (as
// JSON values they took ~250 bytes each: 3 GB for 3 M), and a bad one is
// named by its index.
TEST(ReproFile, MillionsOfStepHashesAreReadInTheirOwnSizeAndABadOneIsNamed) {
  TempDir dir;
  const TrainingConfig c = default_config({"model.kind=mlp", "optimizer.lr=8", "dataset.synthetic_train_per_class=10",
                                           "batch_size=8", "max_batches_per_epoch=2", "threads=1"});
  record_repro(c, dir.file("r.repro.json"));
  json j = json::parse(read_file(dir.file("r.repro.json")));
  const Repro small = parse_repro(j.dump(), "r.repro.json");
  ASSERT_EQ(int64_t(small.step_hashes.size()), small.verdict.steps_run);
  EXPECT_EQ(small.step_hashes.back().input.hex(), j["step_hashes"].back()[0].get<std::string>());

  j["step_hashes"][1][1] = "zz";
  try {
    parse_repro(j.dump(), "r.repro.json");
    ADD_FAILURE() << "a bad hash was read";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "step_hashes[1]")) << e.what();
  }

  const size_t n = 1000000;
  const json entry = j["step_hashes"][0];
  j["step_hashes"] = json::array();
  j["verdict"]["steps_run"] = n + 1;  // and one step short: refused once read
  std::string text = j.dump();
  const std::string marker = "\"step_hashes\":[]";
  const size_t at = text.find(marker);
  ASSERT_NE(at, std::string::npos);
  std::string list = "\"step_hashes\":[";
  list.reserve(n * (entry.dump().size() + 1) + 32);
  for (size_t i = 0; i < n; ++i) list += (i ? "," : "") + entry.dump();
  text.replace(at, marker.size(), list + "]");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::ifstream status("/proc/self/status");
    std::string line;
    rlim_t data = 0;
    while (std::getline(status, line)) {
      if (line.rfind("VmData:", 0) == 0) data = rlim_t(std::stoll(line.substr(7))) * 1024;
    }
    const rlimit limit{data + (rlim_t{160} << 20), data + (rlim_t{160} << 20)};
    if (data == 0 || setrlimit(RLIMIT_DATA, &limit) != 0) _exit(3);
    try {
      parse_repro(text, "r.repro.json");
    } catch (const InputError& e) {
      _exit(has(e.what(), "1000000 steps") && has(e.what(), "verdict.steps_run (1000001)") ? 0 : 1);
    } catch (const std::bad_alloc&) {
      _exit(2);
    }
    _exit(1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: not refused as cut short; 2: out of memory; 3: no limit set";
}

TEST(ShrinkEndToEnd, ShrinksAFailingConfigAndLeavesAHealthyOneAlone) {
  TempDir dir;
  const std::string space = write_space(dir);
  const TrainingConfig bad = default_config({"model.kind=mlp", "model.mlp_width=32", "dataset.synthetic_train_per_class=40", "batch_size=16",
                        "threads=1", "optimizer.lr=6", "seed=3", "max_batches_per_epoch=6"});
  save_config(bad, dir.file("bad.json"));
  const auto r = run_spikehunt("shrink --config " + dir.file("bad.json") + " --space " + space + " -j 2 --bursts 25 --out " +
                               dir.file("shrunk"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "minimal config, as a diff from the original")) << r.output;
  EXPECT_TRUE(has(r.output, "replay: reproduced")) << r.output;
  const TrainingConfig minimal = load_config(dir.file("shrunk/minimal.config.json"));
  EXPECT_LE(minimal.optimizer.lr, bad.optimizer.lr);
  EXPECT_LE(minimal.seed, bad.seed);
  EXPECT_LE(minimal.max_batches_per_epoch, bad.max_batches_per_epoch);
  TrainingConfig fine = bad;
  fine.optimizer.lr = 0.01;
  save_config(fine, dir.file("fine.json"));
  const auto ok = run_spikehunt("shrink --config " + dir.file("fine.json") + " --space " + space + " --out " + dir.file("f"));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(has(ok.output, "nothing to shrink")) << ok.output;
  const auto missing = run_spikehunt("shrink --run no-such-run");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(has(missing.output, "--run = no-such-run is neither a run folder nor a run id under results/")) << missing.output;
  EXPECT_EQ(run_spikehunt("shrink --config " + dir.file("bad.json") + " --run x").exit_code, 2);
}

TEST(SweepEndToEnd, ATimeBudgetStopsTheSweepAndTheSameCommandResumes) {
  TempDir dir;
  // Bursts of the default CNN (about 0.3 s each in a worker; 12 of the tiny
  // MLP's take under a second), so 2 s stop the sweep mid-way.
  const std::string space = write_space(dir, R"({
    "base": {"dataset": {"synthetic_train_per_class": 40}, "batch_size": 32, "threads": 1},
    "dimensions": {"seed": {"range": [0, 5]}, "max_batches_per_epoch": {"range": [6, 10]}}})");
  const std::string command = "sweep --space " + space + " --runs 12 -j 1 --budget 2s --max-shrinks 0 --no-progress --out " +
                              dir.file("s");
  const auto first = run_spikehunt(command);
  EXPECT_TRUE(has(first.output, "time budget spent after ")) << first.output;
  const int64_t done = count_runs(dir.file("s/sweep.db"));
  EXPECT_GT(done, 0);
  EXPECT_LT(done, 12);
  const auto rest = run_spikehunt("sweep --space " + space + " --runs 12 -j 2 --max-shrinks 0 --no-progress --out " + dir.file("s"));
  EXPECT_TRUE(has(rest.output, "resuming: " + std::to_string(done) + " of 12 runs")) << rest.output;
  EXPECT_EQ(count_runs(dir.file("s/sweep.db")), 12);
}

}  // namespace
}  // namespace spikehunt
