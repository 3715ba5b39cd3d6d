// The reliability suite (issue 29): one case of every class of bad input a
// user running nightly sweeps was seen to hit, each an exit 2 naming the
// file or flag, the field and the value, and none a hang; one writer per
// output; work trained ahead kept over a kill; a full disk said with its path.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/did_you_mean.h"
#include "base/error.h"
#include "base/files.h"
#include "base/junit.h"
#include "base/out_lock.h"
#include "cli/flags.h"
#include "generators/evaluator.h"
#include "generators/memo.h"
#include "generators/store.h"
#include "harness/guard.h"
#include "harness/results.h"
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

// An output flag naming one of the command's own inputs, or a file of the user's that the command did
// not write, is exit 2 naming both, and the file is left byte for byte.
TEST(Reliability, NoOutputDestroysAnInputOrAFileSpikehuntDidNotWrite) {
  TempDir dir;
  auto keep = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir.file(name)) << bytes;
    return dir.file(name);
  };
  auto unchanged = [&](const std::string& path, const std::string& bytes) { EXPECT_EQ(read_file(path), bytes) << path; };
  const std::string config_bytes = read_file(testing::source_path("configs/healthy.json"));
  const std::string config = keep("c.json", config_bytes);
  expect_bad_input(run_spikehunt("calibrate --config " + config + " --out " + config),
                   {"--out = " + config, "is also its --config", "would destroy that input"});
  unchanged(config, config_bytes);
  const std::string suite = keep("suite.json", R"({"configs": []})");
  expect_bad_input(run_spikehunt("guard record --suite " + suite + " --out " + dir.path() + "/./suite.json"),
                   {"--out", "is also its --suite"});
  unchanged(suite, R"({"configs": []})");
  const std::string space_bytes = read_file(testing::source_path("configs/space.json"));
  const std::string space = keep("space.json", space_bytes);
  expect_bad_input(run_spikehunt("sweep --space " + space + " --junit " + space + " --out " + dir.file("s")),
                   {"--junit", "is also its --space"});
  unchanged(space, space_bytes);
  const std::string baseline = keep("baseline.json", "{}");
  expect_bad_input(run_spikehunt("guard check --suite " + suite + " --baseline " + baseline + " --junit " + baseline),
                   {"--junit", "is also its --baseline"});
  unchanged(baseline, "{}");
  // Files of the user's where a report, a JUnit file, a rules file or a baseline would go.
  std::filesystem::create_directories(dir.file("sweep"));
  const std::string db = keep("sweep/sweep.db", "not html");
  expect_bad_input(run_spikehunt("report " + dir.file("sweep") + " --out " + db),
                   {"--out", "is a file spikehunt did not write (not one of its reports)"});
  unchanged(db, "not html");
  std::filesystem::create_directories(dir.file("mine"));
  const std::string page = keep("mine/report.html", "<p>my own notes</p>");
  expect_bad_input(run_spikehunt("sweep --budget 1s --out " + dir.file("mine")), {page, "did not write"});
  unchanged(page, "<p>my own notes</p>");
  EXPECT_FALSE(std::filesystem::exists(dir.file("mine/sweep.db"))) << "refused before anything was written";
  const std::string xml = keep("notes.xml", "<notes/>");
  expect_bad_input(run_spikehunt("sweep --budget 1s --junit " + xml + " --out " + dir.file("s2")), {"not a JUnit XML file"});
  unchanged(xml, "<notes/>");
  const std::string other = keep("other.json", config_bytes);
  expect_bad_input(run_spikehunt("calibrate --config " + config + " --out " + other), {"not a rules file calibrate wrote"});
  unchanged(other, config_bytes);
  expect_bad_input(run_spikehunt("guard record --suite " + suite + " --out " + other), {"not a guard baseline"});
  unchanged(other, config_bytes);
}

// Ctrl-C during `run` ends it at the next step: exit 130, the folder committed (no .partial left) with
// the trace of the steps run and a verdict that says it was interrupted.
TEST(Reliability, CtrlCDuringRunKeepsWhatRanAndSaysSo) {
  TempDir dir;
  // A healthy run of 4,040 steps: far from its end when the Ctrl-C comes.
  const std::string log = dir.file("run.log");
  const pid_t pid = testing::spawn_background({SPIKEHUNT_BINARY, "run", "--config", testing::source_path("configs/healthy.json"),
                                               "--set", "protocol.epochs_per_phase=50", "--out", dir.file("runs")},
                                              log);
  bool training = false;  // the header is printed (and flushed) just before the first step
  for (int i = 0; i < 1200 && !training; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    training = has(read_file(log), "  seed ");
  }
  ASSERT_TRUE(training) << read_file(log);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // some steps in
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 130);
  std::vector<std::filesystem::path> folders;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("runs"))) folders.push_back(e.path());
  ASSERT_EQ(folders.size(), 1u);
  EXPECT_EQ(folders[0].extension(), "") << "committed, not left .partial: " << folders[0];
  const nlohmann::json verdict = nlohmann::json::parse(read_file((folders[0] / "verdict.json").string()));
  EXPECT_TRUE(verdict.value("interrupted", false));
  const int64_t steps = verdict["steps_run"].get<int64_t>();
  EXPECT_GE(steps, 3);
  const std::string out = read_file(log);
  EXPECT_TRUE(has(out, "interrupted (Ctrl-C) after " + std::to_string(steps) + " of ")) << out;
  EXPECT_TRUE(has(out, "trace.jsonl up to step " + std::to_string(steps))) << out;
}

// A config in range whose model cannot fit the machine is refused before anything is allocated, naming
// its fields and the estimate, instead of LibTorch's allocator error deep in the run.
TEST(Reliability, AModelTooLargeForTheMachineIsNamedBeforeAnythingIsAllocated) {
  TempDir dir;
  const auto r = run_spikehunt("run --config " + testing::source_path("configs/gpt.json") +
                               " --set model.gpt.layers=64 --set model.gpt.width=8192 --set batch_size=65536 --out " +
                               dir.file("out"));
  expect_bad_input(r, {"error: " + testing::source_path("configs/gpt.json") + ": model.gpt with",
                       "model.gpt.width = 8192, model.gpt.layers = 64", "batch_size = 65536", "the model needs about",
                       "GiB available", "make the model or the batch smaller"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("out"))) << "nothing written";
  // A repro that asks for it: named by the repro's file and its config's field.
  const auto small = run_spikehunt("run --config " + testing::source_path("configs/gpt.json") +
                                   " --set max_batches_per_epoch=2 --set threads=1 --out " + dir.file("small"));
  const std::vector<std::string> folders = [&] {
    std::vector<std::string> f;
    for (const auto& e : std::filesystem::directory_iterator(dir.file("small"))) f.push_back(e.path().string());
    return f;
  }();
  ASSERT_EQ(folders.size(), 1u) << small.output;
  nlohmann::json repro = nlohmann::json::parse(read_file(folders[0] + "/repro.json"));
  repro["config"]["model"]["gpt"]["layers"] = 64;
  repro["config"]["model"]["gpt"]["width"] = 8192;
  repro["config"]["batch_size"] = 65536;
  std::ofstream(dir.file("huge.repro.json")) << repro.dump();
  expect_bad_input(run_spikehunt("replay " + dir.file("huge.repro.json")),
                   {"error: " + dir.file("huge.repro.json") + ": config.model.gpt with", "the model needs about"});
  // Verbs that hand configs to workers: each config is checked first (every burst "crashed", and
  // lr-sensitivity said "diverged" with exit 0). Named by the file the configs came from.
  std::ofstream(dir.file("huge.json")) << repro["config"].dump();
  expect_bad_input(run_spikehunt("lr-sensitivity --config " + dir.file("huge.json") + " --lrs 0.1 --out " + dir.file("l")),
                   {"error: " + dir.file("huge.json") + ": model.gpt with", "the model needs about"});
  std::ofstream(dir.file("space.json")) << nlohmann::json{{"base", repro["config"]},
                                                         {"dimensions", {{"seed", {{"range", {0, 3}}}}}}}.dump();
  const auto sweep = run_spikehunt("sweep --space " + dir.file("space.json") + " --runs 2 --no-progress --out " +
                                   dir.file("sw"));
  expect_bad_input(sweep, {"error: " + dir.file("space.json") + ": model.gpt with", "the model needs about"});
  EXPECT_FALSE(has(sweep.output, "crashed")) << sweep.output;
  const auto mlp = run_spikehunt("doctor --set model.kind=mlp --set model.mlp_width=65536 --set model.mlp_depth=64");
  expect_bad_input(mlp, {"model.mlp_width = 65536, model.mlp_depth = 64", "the model needs about"});
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
  expect_bad_input(run_spikehunt("sweep --max-shrinks -2 --out " + TempDir().path()), {"--max-shrinks", "-2", "at least 0"});
  expect_bad_input(run_spikehunt("lr-sensitivity --config " + gpt + " --vary model.kind"),
                   {"--vary", "model.kind is not FIELD=V1,V2,..."});
  // A key given twice (JSON keeps the last one silently): named, in a nested object too.
  TempDir dir;
  testing::write_bytes(dir.file("twice.json"), R"({"seed": 1, "optimizer": {"lr": 0.1, "momentum": 0.9, "lr": 0.2}})");
  expect_bad_input(run_spikehunt("run --config " + dir.file("twice.json")),
                   {dir.file("twice.json"), "optimizer.lr is given twice in one object"});
  testing::write_bytes(dir.file("list.json"), R"({"dimensions": {"seed": {"set": [{"a": 1}, {"a": 2}]}}})");
  try {
    parse_json_text(read_file(dir.file("list.json")), dir.file("list.json"), "");  // the same key in two objects is fine
  } catch (const InputError& e) {
    ADD_FAILURE() << e.what();
  }
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

  // Held-out samples beyond the data, asked for: an error before anything trains or is written.
  TempDir dir;
  testing::write_bytes(dir.file("tiny.json"), R"({"model": {"kind": "mlp", "mlp_width": 8}, "threads": 1,
    "dataset": {"synthetic_train_per_class": 10}, "batch_size": 8, "max_batches_per_epoch": 2})");
  expect_bad_input(run_spikehunt("lr-sensitivity --config " + dir.file("tiny.json") + " --lrs 0.01 --heldout 100000000"
                                 " --out " + dir.file("lr")),
                   {"--heldout", "100000000", "is beyond the data: its held-out split holds"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("lr")));
  // compare is for sweeps: an lr-sensitivity folder is named, not called "equal".
  const auto lr = run_spikehunt("lr-sensitivity --config " + dir.file("tiny.json") + " --lrs 0.01 -j 1 --out " + dir.file("lr"));
  ASSERT_EQ(lr.exit_code, 0) << lr.output;
  expect_bad_input(run_spikehunt("compare " + dir.file("lr") + " " + dir.file("lr")),
                   {dir.file("lr"), "is an lr-sensitivity folder, not a sweep's"});
}

// A warning raised every step is counted, not printed every step; a counter
// inside another (a burst inside the doctor) passes each on to it.
TEST(Reliability, EachLibTorchWarningIsCountedAndPassedToTheCounterAroundIt) {
  c10::WarningHandler* const before = c10::WarningUtils::get_warning_handler();
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
  EXPECT_EQ(c10::WarningUtils::get_warning_handler(), before) << "the handler before is back";
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

// One writer per output: a second process (or a second lock in this one) is
// refused at once, exit 2, naming the holder; the holder's death (SIGKILL)
// releases it.
TEST(Reliability, OneWriterPerOutputAndTheLockGoesWithItsHolder) {
  TempDir dir;
  const std::string out = dir.file("out");
  {
    const OutLock held = OutLock::folder(out, "sweep");
    EXPECT_TRUE(std::filesystem::exists(out + "/.lock"));
    try {
      OutLock::folder(out, "merge");
      ADD_FAILURE() << "a second lock on one folder was taken";
    } catch (const InputError& e) {
      EXPECT_TRUE(has(e.what(), out + ": is being written by another spikehunt (sweep, pid " +
                                    std::to_string(::getpid()) + " on host "))
          << e.what();
      EXPECT_TRUE(has(e.what(), "since ") && has(e.what(), "hint: ")) << e.what();
    }
    // Every verb that writes an output folder or file is refused while it is held.
    testing::write_bytes(dir.file("space.json"), testing::tiny_space());
    expect_bad_input(run_spikehunt("sweep --space " + dir.file("space.json") + " --runs 1 --no-progress --out " + out),
                     {out, "is being written by another spikehunt (sweep, pid " + std::to_string(::getpid())});
    expect_bad_input(run_spikehunt("lr-sensitivity --config " + testing::source_path("configs/gpt.json") +
                                   " --lrs 0.01 --out " + out),
                     {"is being written by another spikehunt"});
    const OutLock baseline = OutLock::file(dir.file("baseline.json"), "guard record");
    testing::write_bytes(dir.file("tiny.json"), R"({"model": {"kind": "mlp", "mlp_width": 16}})");
    testing::write_bytes(dir.file("suite.json"), R"({"configs": [{"name": "a", "config": "tiny.json"}]})");
    expect_bad_input(run_spikehunt("guard record --suite " + dir.file("suite.json") + " --out " + dir.file("baseline.json")),
                     {dir.file("baseline.json"), "is being written by another spikehunt (guard record"});
  }
  EXPECT_FALSE(std::filesystem::exists(out + "/.lock")) << "released and removed";
  EXPECT_FALSE(std::filesystem::exists(dir.file("baseline.json.lock")));
  { const OutLock again = OutLock::folder(out, "sweep"); }

  // Another process holds it (a POSIX lock, as Python's lockf takes), then is SIGKILLed.
  const std::string ready = dir.file("ready");
  const std::string holder = "/usr/bin/python3 -c \"import fcntl, os, time\n"
                             "f = open('" + out + "/.lock', 'a+')\n"
                             "fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                             "f.truncate(0); f.write('sweep, pid %d on host elsewhere, since then' % os.getpid()); f.flush()\n"
                             "open('" + ready + "', 'w').close()\n"
                             "time.sleep(120)\" & echo $!";
  FILE* p = ::popen(holder.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char pid_text[32] = {};
  ASSERT_NE(std::fgets(pid_text, sizeof pid_text, p), nullptr);
  ::pclose(p);
  const pid_t pid = pid_t(std::atol(pid_text));
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 200 && !std::filesystem::exists(ready); ++i) ::usleep(50000);
  ASSERT_TRUE(std::filesystem::exists(ready)) << "the holder did not start";
  try {
    OutLock::folder(out, "sweep");
    ADD_FAILURE() << "taken while another process holds it";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "(sweep, pid " + std::to_string(pid) + " on host elsewhere")) << e.what();
  }
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  for (int i = 0; i < 100 && ::kill(pid, 0) == 0; ++i) ::usleep(50000);  // reaped by init: it was a shell's child
  const OutLock after = OutLock::folder(out, "sweep");  // its lock went with it
  EXPECT_TRUE(has(read_file(out + "/.lock"), "sweep, pid " + std::to_string(::getpid()))) << "the new holder says so";
}

// A burst trained ahead of a shrink's decisions is committed as held when it
// finishes: a cache opened on the database again (a resume after a kill)
// holds it without training it, and a decision that takes it moves it into
// the runs.
TEST(Reliability, BurstsTrainedAheadAreCommittedAndFoundAgainAfterAKill) {
  TempDir dir;
  const TrainingConfig config = default_config({"optimizer.lr=0.3"});
  const std::string hash = config_hash(config).hex();
  BurstSummary trained;
  trained.verdict.outcome = Outcome::kExtreme;
  trained.verdict.onset_rules = {"loss_limit"};
  trained.verdict.steps_run = trained.verdict.planned_steps = 7;
  SweepStore store(dir.file("sweep.db"), "{}", 0);
  {
    EvalCache killed(&store);
    killed.hold(hash, trained);
    EXPECT_EQ(killed.held(), 1);
  }  // gone without a decision taking it
  EvalCache resumed(&store);
  const std::optional<BurstSummary> found = resumed.peek(hash);
  ASSERT_TRUE(found.has_value()) << "held over the kill";
  EXPECT_EQ(found->verdict.onset_rules, trained.verdict.onset_rules);
  EXPECT_EQ(resumed.held(), 0) << "found held, not trained by this process";
  EXPECT_EQ(store.count("shrink"), 0) << "held is counted nowhere";
  ASSERT_TRUE(resumed.release(hash).has_value());
  EXPECT_EQ(resumed.taken_from_earlier(), 1) << "the summary says it was not trained again";
  resumed.add("shrink", -1, config, trained);
  EXPECT_EQ(store.count("shrink"), 1);
  EvalCache later(&store);
  EXPECT_FALSE(later.peek(hash).has_value()) << "a run now, no longer held";
  ASSERT_TRUE(later.find(hash).has_value());
}

// What a killed writer left half-written (a trace being recorded, an atomic
// write's temporary) is removed by the next holder of the folder's lock;
// anything else stays.
// n healthy search runs, samples 0..n-1, each config `config_bytes` long.
void add_search_runs(SweepStore& store, int n, size_t config_bytes) {
  for (int i = 0; i < n; ++i) {
    RunRow row;
    row.kind = "search";
    row.sample = i;
    row.config_hash = "c" + std::to_string(i);
    row.config_json = "\"" + std::string(config_bytes - 2, 'x') + "\"";
    row.summary = summary_of(Verdict{}, {});
    store.add_run(std::move(row));
  }
}

// A sweep killed mid-way leaves sweep.db-wal beside sweep.db; deleted (it
// looks like a temporary file), it took every run committed since the last
// checkpoint with it, and a resume started over without a word. Each commit
// now reaches the database file itself.
TEST(Reliability, ADeletedWriteAheadLogAfterAKillLosesNoCommittedRun) {
  testing::TempDir dir;
  const std::string db = dir.file("sweep.db");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    SweepStore store(db, "{}", 7);
    add_search_runs(store, 3, 2);
    _exit(0);  // killed: no close, no checkpoint on the way out
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::error_code ec;
  ASSERT_TRUE(std::filesystem::exists(db + "-wal")) << "a killed writer leaves its log";
  std::filesystem::remove(db + "-wal");
  SweepStore again(db, "{}", 7);
  EXPECT_EQ(again.count("search"), 3);
  EXPECT_TRUE(again.has_sample(2));
}

// A damaged database (a page overwritten) was exit 3 with SQLite's words
// alone, or a report of the rows it could still read, or a resume that
// started over; now it is exit 2 naming the file, what is wrong and what to
// do, when it is opened, and the file is left as it was.
TEST(Reliability, ADamagedSweepDatabaseIsNamedWhenOpenedAndLeftAsItWas) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("s"));
  const std::string db = dir.file("s/sweep.db");
  int64_t root = 0;
  {
    SweepStore store(db, "{}", 7);
    add_search_runs(store, 60, 200);
  }
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* q = nullptr;
    sqlite3_prepare_v2(raw, "SELECT rootpage FROM sqlite_master WHERE name = 'runs'", -1, &q, nullptr);
    ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
    root = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(raw);
  }
  ASSERT_GT(root, 1);
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((root - 1) * 4096 + 8);  // the runs table's first page, past its header: its cell pointers
    const std::string junk = std::string(400, '\xde');
    f.write(junk.data(), std::streamsize(junk.size()));
  }
  const std::string bytes = read_file(db);
  for (const bool writer : {false, true}) {
    try {
      if (writer) SweepStore(db, "{}", 7);
      else SweepStore::open_read_only(db);
      ADD_FAILURE() << "a damaged database opened, writer " << writer;
    } catch (const InputError& e) {
      EXPECT_TRUE(has(e.what(), db + ": is damaged (SQLite's quick_check: ")) << e.what();
      EXPECT_TRUE(has(e.what(), "hint: its pages were overwritten")) << e.what();
    }
  }
  expect_bad_input(run_spikehunt("report " + dir.file("s")), {"sweep.db: is damaged", "hint:", ".recover"});
  EXPECT_EQ(read_file(db), bytes);
}

// A value quoted in an error is printed with its control characters and its
// bytes that are not UTF-8 as \xHH: a damaged or hostile file cannot write
// escape sequences to the terminal or split the message.
TEST(Reliability, AnErrorQuotesBytesThatAreNotTextAsHex) {
  const InputError e("f.json", "na\nme", std::string("ok \xc3\xa9 \x1b[2J \xff end"), "is bad");
  const std::string text = e.what();
  EXPECT_EQ(text, "error: f.json: na\\x0ame = ok \xc3\xa9 \\x1b[2J \\xff end is bad");
}

// Under `ulimit -n 12` a sweep ran its bursts, then could not open its
// repros and report. A soft limit too low is raised as far as the hard one
// allows; a hard limit too low is exit 2 before anything starts.
TEST(Reliability, TooFewOpenFilesIsSaidBeforeAnythingStarts) {
  TempDir dir;
  const std::string bin = SPIKEHUNT_BINARY;
  const testing::CommandResult low =
      testing::run_program("bash", "-c 'ulimit -n 12; exec " + bin + " sweep --runs 2 --out " + dir.file("s") + "'");
  expect_bad_input(low, {"open files (ulimit -n): the limit is 12", "`sweep` with 2 job(s) needs about 80",
                         "nothing was started", "hint: raise it"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("s")));
  const testing::CommandResult soft =
      testing::run_program("bash", "-c 'ulimit -Hn 4096; ulimit -Sn 12; exec " + bin + " doctor --signs'");
  EXPECT_EQ(soft.exit_code, 0) << soft.output;
  EXPECT_TRUE(has(soft.output, "label_pairing")) << soft.output;
}

TEST(Reliability, AKilledWritersHalfFilesAreRemovedByTheNextHolder) {
  TempDir dir;
  for (const char* name : {"f.trace.jsonl.partial", "sweep.json.tmp-4242", "notes.tmp-x", "f.repro.json"}) {
    testing::write_bytes(dir.file(name), "half");
  }
  EXPECT_EQ(remove_stale_temporaries(dir.path()), 2);
  EXPECT_FALSE(std::filesystem::exists(dir.file("f.trace.jsonl.partial")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("sweep.json.tmp-4242")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("notes.tmp-x")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("f.repro.json")));
}

// A full disk is the machine's error (exit 3) naming the path, with what to
// do; what was committed before stays. A real tmpfs of 320 KiB, filled, in a
// mount namespace of the command's own (root, unshare -m).
TEST(Reliability, AFullDiskNamesThePathAndSaysWhatToDo) {
  EXPECT_TRUE(has(system_error_hint(ENOSPC), "full")) << system_error_hint(ENOSPC);
  EXPECT_TRUE(has(system_error_hint(EROFS), "read-only"));
  TempDir dir;
  try {
    write_file_atomic(dir.file("no/such/folder/x.json"), "{}");
    ADD_FAILURE() << "written into a folder that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(has(e.what(), dir.file("no/such/folder/x.json") + ": cannot write")) << e.what();
  }
  if (std::system("unshare -m true 2>/dev/null") != 0) {
    GTEST_SKIP() << "SKIPPED: this machine cannot make a mount namespace (unshare -m): no tmpfs to fill";
  }
  const std::string disk = dir.file("disk");
  std::filesystem::create_directories(disk);
  const std::string script = dir.file("full.sh");
  testing::write_bytes(dir.file("space.json"), testing::tiny_space());
  testing::write_bytes(script, "set -e\nmount -t tmpfs -o size=320k tmpfs " + disk + "\n" +
                                   "dd if=/dev/zero of=" + disk + "/filler bs=1k count=304 2>/dev/null || true\n" +
                                   "set +e\n" + SPIKEHUNT_BINARY + " sweep --space " + dir.file("space.json") +
                                   " --runs 4 -j 1 --max-shrinks 0 --no-progress --out " + disk + "/out\n"
                                   "echo \"exit=$?\"\n"
                                   // and a read-only one
                                   "umount " + disk + "\nmount -t tmpfs -o ro,size=64k tmpfs " + disk + "\n" +
                                   SPIKEHUNT_BINARY + " sweep --space " + dir.file("space.json") +
                                   " --runs 1 --no-progress --out " + disk + "/ro\n"
                                   "echo \"ro exit=$?\"\n");
  const auto r = testing::run_program("/usr/bin/unshare", "-m sh " + script);
  EXPECT_TRUE(has(r.output, "exit=3")) << r.output;
  EXPECT_TRUE(has(r.output, "error: " + disk + "/out")) << "the path: " << r.output;
  EXPECT_TRUE(has(r.output, "hint: the disk") && has(r.output, "is full")) << r.output;
  EXPECT_FALSE(has(r.output, "filesystem error:")) << "said in spikehunt's words: " << r.output;
  EXPECT_TRUE(has(r.output, "ro exit=3")) << r.output;
  EXPECT_TRUE(has(r.output, "error: " + disk + "/ro: cannot create the folder: Read-only file system")) << r.output;
  EXPECT_TRUE(has(r.output, "hint: the filesystem is read-only")) << r.output;
}

// JUnit for CI dashboards: whatever a failure's text holds (a log's control
// characters, bytes that are not UTF-8, markup), the document is valid
// against the schema they read; --junit is checked before anything trains.
TEST(Reliability, JunitIsValidWhateverTheTextAndItsFlagIsCheckedFirst) {
  EXPECT_EQ(xml_escape("a<b & \"c\" 'd' >"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos; &gt;");
  EXPECT_EQ(xml_escape(std::string("bell\x07") + "\xff" + "ok\xc3\xa9"), "bell\xEF\xBF\xBD\xEF\xBF\xBDok\xc3\xa9");
  EXPECT_EQ(xml_escape("two\nlines\ttab"), "two&#10;lines\ttab");
  TempDir dir;
  JunitSuite suite{"spikehunt sweep <odd> & \"name\"", 12.5, {{"seed", "0"}}, {}};
  suite.cases.push_back({"non_finite:forward:fc1_act", "spikehunt.sweep", 0, "3 of 24 runs", "non_finite",
                         std::string("log: \x1b[31mred\x1b[0m ]]> </failure> \xc0\x80 done\n"), ""});
  suite.cases.push_back({"healthy", "spikehunt.guard", 1.25, "", "", "", "ok: healthy"});
  write_file_atomic(dir.file("j.xml"), junit_xml(suite));
  EXPECT_EQ(testing::junit_problems(dir.file("j.xml")), "");
  const std::string xml = read_file(dir.file("j.xml"));
  EXPECT_TRUE(has(xml, R"(tests="2" failures="1" errors="0" time="12.500")")) << xml;
  // Broken on purpose, the schema says so: the check can fail.
  write_file_atomic(dir.file("bad.xml"), "<testsuites><testsuite name=\"x\" tests=\"1\"></testsuite></testsuites>");
  EXPECT_NE(testing::junit_problems(dir.file("bad.xml")), "") << "a suite without failures and errors counts";

  expect_bad_input(run_spikehunt("sweep --runs 1 --junit " + dir.file("no/such/x.xml") + " --out " + dir.file("o")),
                   {"--junit", dir.file("no/such/x.xml"), "folder that does not exist"});
  expect_bad_input(run_spikehunt("sweep --runs 1 --junit " + dir.path() + " --out " + dir.file("o")),
                   {"--junit", "is a folder"});
  expect_bad_input(run_spikehunt("sweep --runs 2 --shard 0/2 --junit " + dir.file("x.xml") + " --out " + dir.file("o")),
                   {"--junit", "a shard only searches", "give --junit to merge"});
  expect_bad_input(run_spikehunt("guard record --suite s.json --out b.json --junit " + dir.file("x.xml")),
                   {"--junit", "applies to guard check"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("o"))) << "nothing written";
}

}  // namespace
}  // namespace spikehunt
