// Tests the persistent workers (base/child.h's ChildPool, the hidden
// `worker` verb): training code that segfaults, aborts, exits or hangs kills
// only its worker and becomes a crashed or timeout verdict, a fresh worker
// runs the next burst; workers are retired after N bursts or past an RSS
// limit; a burst is bit-identical as the 50th of a worker and in a process
// of its own; guard runs its configs through workers, so a segfault in the
// user's code is a regression with a diff. The faulty training code is a
// user's program (tests/faulty_program.cpp, SPIKEHUNT_FAULTY).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/child.h"
#include "base/error.h"
#include "base/files.h"
#include "faulty_scenario.h"
#include "generators/shrinker.h"
#include "harness/burst.h"
#include "scenarios/config.h"
#include "test_util.h"

namespace spikehunt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::has;
using testing::TempDir;

// A small burst of the faulty scenario: the default CNN, 2 batches of 16 a
// phase (6 steps); `fault` at forward call 2.
TrainingConfig faulty(const std::string& fault, int64_t leak_mb = 0) {
  static const bool registered = [] {  // so this process can check the configs' params too
    register_faulty_scenario();
    return true;
  }();
  (void)registered;
  return default_config({"scenario=\"faulty\"", "params.fault=\"" + fault + "\"", "params.at_step=2",
                         "params.leak_mb=" + std::to_string(leak_mb), "batch_size=16", "max_batches_per_epoch=2",
                         "dataset.synthetic_train_per_class=20", "threads=1"});
}

std::vector<BurstSummary> evaluate(ChildEvaluator& e, const std::vector<TrainingConfig>& configs) {
  std::vector<BurstSummary> out(configs.size());
  e.evaluate(configs, [&](size_t i, const BurstSummary& s) { out[i] = s; });
  return out;
}

// A child stopped for a while (Ctrl-Z, a Slurm suspend, SIGSTOP) is not past its timeout for the time
// it could not run; one that runs past it still is.
TEST(Workers, TimeStoppedIsNotCountedAgainstTheTimeout) {
  ChildExit got;
  const ChildSpec stopped{{"/bin/sh", "-c", "(sleep 2.5; kill -CONT $$) & kill -STOP $$; sleep 0.5"}, 2.0, ""};
  run_children({stopped}, 1, [&](size_t, const ChildExit& e) { got = e; });
  EXPECT_FALSE(got.timed_out) << got.describe();
  EXPECT_EQ(got.exit_code, 0) << got.describe();
  EXPECT_GE(got.wall_seconds, 2.9);
  EXPECT_GE(got.stopped_seconds, 2.0);
  EXPECT_LE(got.wall_seconds - got.stopped_seconds, 1.5);
  const ChildSpec slow{{"/bin/sh", "-c", "sleep 3"}, 1.0, ""};
  run_children({slow}, 1, [&](size_t, const ChildExit& e) { got = e; });
  EXPECT_TRUE(got.timed_out) << got.describe();
  EXPECT_EQ(got.describe(), "timeout after 1 s");
}

// A worker whose loaded code is another build than the sweep's refuses its bursts, and the evaluation
// stops with an error naming the build rather than a verdict of the other code.
TEST(Workers, ABurstForAnotherBuildIsRefusedAndStopsTheEvaluation) {
  TempDir dir;
  ChildEvaluator workers(SPIKEHUNT_FAULTY, 1, 60, dir.file("work"));
  workers.expect_build("spikehunt 0.0.0 | an older build");
  try {
    evaluate(workers, {faulty("none")});
    ADD_FAILURE() << "a burst for another build ran";
  } catch (const InputError& e) {
    EXPECT_TRUE(has(e.what(), "build = spikehunt 0.0.0 | an older build changed during the sweep")) << e.what();
    EXPECT_TRUE(has(e.what(), "the program or the files it is built from changed")) << e.what();
  }
}

TEST(Workers, AThrownValueOfAnyTypeIsACrashOfItsStageNotOfTheWorker) {
  // `throw 42;` or `throw "text";` in a user's scenario: not a std::exception,
  // still the training code's error (it used to end the process in std::terminate).
  const BurstResult i = run_config(faulty("throw_int"), BurstOptions{});
  EXPECT_EQ(i.verdict.outcome, Outcome::kCrashed);
  EXPECT_EQ(i.verdict.crash_stage, "forward");
  EXPECT_TRUE(has(i.verdict.message, "a value of a type not derived from std::exception was thrown"))
      << i.verdict.message;
  const BurstResult t = run_config(faulty("throw_text"), BurstOptions{});
  EXPECT_EQ(t.verdict.outcome, Outcome::kCrashed);
  EXPECT_TRUE(has(t.verdict.message, "a C string was thrown: the cache is cold")) << t.verdict.message;
  EXPECT_EQ(t.verdict.steps_run, 2) << "forward call 2 throws: steps 0 and 1 ran";
}

TEST(Workers, ACrashAbortExitOrHangKillsOnlyItsWorkerAndAFreshOneRunsTheNext) {
  TempDir dir;
  ChildEvaluator workers(SPIKEHUNT_FAULTY, /*jobs=*/1, /*timeout=*/6, dir.file("work"));
  const std::vector<TrainingConfig> configs = {faulty("none"),  faulty("segfault"), faulty("none"), faulty("abort"),
                                               faulty("hang"),  faulty("exit"),     faulty("none")};
  const std::vector<BurstSummary> s = evaluate(workers, configs);
  EXPECT_EQ(s[0].verdict.outcome, Outcome::kHealthy) << s[0].verdict.message;
  EXPECT_EQ(s[1].verdict.outcome, Outcome::kCrashed);
  EXPECT_TRUE(has(s[1].verdict.message, "signal 11")) << s[1].verdict.message;
  EXPECT_EQ(s[2].verdict.outcome, Outcome::kHealthy) << s[2].verdict.message;
  EXPECT_EQ(s[3].verdict.outcome, Outcome::kCrashed);
  EXPECT_TRUE(has(s[3].verdict.message, "signal 6")) << s[3].verdict.message;
  EXPECT_EQ(s[4].verdict.outcome, Outcome::kTimeout) << s[4].verdict.message;
  EXPECT_EQ(s[5].verdict.outcome, Outcome::kCrashed);
  EXPECT_TRUE(has(s[5].verdict.message, "exit 3")) << s[5].verdict.message;
  EXPECT_EQ(s[6].verdict.outcome, Outcome::kHealthy) << s[6].verdict.message;
  // The healthy bursts before and after the crashes trained the same steps.
  EXPECT_EQ(s[0].verdict.hash_chain, s[2].verdict.hash_chain);
  EXPECT_EQ(s[0].verdict.hash_chain, s[6].verdict.hash_chain);
  const PoolStats& p = workers.pool_stats();
  // A burst killed by a signal runs once more in a fresh worker (an outside
  // kill is not a finding): the segfault and the abort twice, and killed
  // again, crashed. The hang runs twice too (past its timeout: a busy machine
  // is not a finding), and past it again, a timeout. The exit runs once.
  EXPECT_EQ(p.jobs, 10);
  EXPECT_EQ(p.processes, 0);
  EXPECT_EQ(p.lost, 7) << "segfault, abort and hang twice each, exit";
  EXPECT_EQ(p.workers_started, 8) << "the first, and one after each lost worker";
  EXPECT_EQ(workers.retries().retried, 2);
  EXPECT_EQ(workers.retries().repeated, 2);
  EXPECT_EQ(workers.retries().timeouts_retried, 1);
  EXPECT_EQ(workers.retries().timeouts_repeated, 1);
  EXPECT_TRUE(has(s[4].verdict.message, "past its timeout again when run once more")) << s[4].verdict.message;
  EXPECT_EQ(workers.retries().by_cause.size(), 2u) << "signal 11 and signal 6";

  // The same verdicts from a process a burst (the old path).
  PoolOptions processes;
  processes.persistent = false;
  ChildEvaluator old(SPIKEHUNT_FAULTY, 1, 6, dir.file("work-old"), processes);
  const std::vector<BurstSummary> o = evaluate(old, {configs[0], configs[1], configs[3]});
  EXPECT_EQ(o[0].verdict.hash_chain, s[0].verdict.hash_chain);
  EXPECT_EQ(o[1].verdict.outcome, Outcome::kCrashed);
  EXPECT_TRUE(has(o[1].verdict.message, "signal 11")) << o[1].verdict.message;
  EXPECT_TRUE(has(o[2].verdict.message, "signal 6")) << o[2].verdict.message;
  EXPECT_EQ(old.pool_stats().processes, 5) << "the segfault and the abort run twice";
  EXPECT_EQ(old.pool_stats().workers_started, 0);
}

TEST(Workers, AWorkerIsRetiredAfterItsBurstsAndPastItsMemoryLimit) {
  TempDir dir;
  PoolOptions pool;
  pool.jobs_per_worker = 2;
  ChildEvaluator two_each(SPIKEHUNT_FAULTY, 1, 60, dir.file("work"), pool);
  const std::vector<BurstSummary> s = evaluate(two_each, std::vector<TrainingConfig>(5, faulty("none")));
  for (const BurstSummary& b : s) EXPECT_EQ(b.verdict.outcome, Outcome::kHealthy) << b.verdict.message;
  EXPECT_EQ(two_each.pool_stats().workers_started, 3);
  EXPECT_EQ(two_each.pool_stats().retired_jobs, 2);

  // Each leaking burst keeps 900 MiB: past an 800 MiB limit its worker goes. A
  // healthy worker stays below it (about 500 MiB: the CUDA build of LibTorch
  // alone maps ~470 MiB of its libraries resident).
  PoolOptions small;
  small.rss_limit_mb = 800;
  ChildEvaluator leaky(SPIKEHUNT_FAULTY, 1, 60, dir.file("work-rss"), small);
  const std::vector<BurstSummary> l =
      evaluate(leaky, {faulty("none"), faulty("leak", 900), faulty("none"), faulty("leak", 900), faulty("none")});
  for (const BurstSummary& b : l) EXPECT_EQ(b.verdict.outcome, Outcome::kHealthy) << b.verdict.message;
  EXPECT_EQ(leaky.pool_stats().retired_rss, 2);
  EXPECT_EQ(leaky.pool_stats().workers_started, 3) << "the first, then one after each leak";
  EXPECT_EQ(leaky.pool_stats().lost, 0);
}

// Every file of a repro folder, name -> bytes.
std::map<std::string, std::string> files_of(const std::string& folder) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(folder)) out[e.path().filename().string()] = read_file(e.path().string());
  return out;
}

TEST(Workers, TheFiftiethBurstOfAWorkerIsBitIdenticalToAFreshProcess) {
  TempDir dir;
  // 49 other bursts first: other seeds, thread counts, optimizers,
  // activations, models, datasets (and a GPT on text), so whatever a burst
  // leaves behind in its process (RNG state, thread count, cached datasets)
  // had every chance to leak into the 50th.
  std::vector<ChildSpec> specs;
  auto spec = [&](const TrainingConfig& c, const std::string& name, std::vector<std::string> extra) {
    save_config(c, dir.file(name + ".config.json"));
    std::vector<std::string> argv = {SPIKEHUNT_BINARY, "burst", "--config", dir.file(name + ".config.json"), "--result",
                                     dir.file(name + ".result.json")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return ChildSpec{argv, 120, dir.file(name + ".log")};
  };
  const char* optimizers[] = {"sgd", "adam"};
  const char* activations[] = {"relu", "leaky_relu", "gelu", "tanh"};
  for (int i = 0; i < 49; ++i) {
    std::vector<std::string> sets = {"batch_size=16", "max_batches_per_epoch=2", "dataset.synthetic_train_per_class=20",
                                     "seed=" + std::to_string(i), "threads=" + std::to_string(1 + i % 2),
                                     std::string("optimizer.kind=\"") + optimizers[i % 2] + "\"",
                                     std::string("activation.kind=\"") + activations[i % 4] + "\""};
    if (i % 7 == 3) sets.push_back("model.kind=\"mlp\"");
    if (i == 20) {
      sets = {"model.kind=\"gpt\"", "dataset.kind=\"text\"", "model.gpt.width=32", "model.gpt.layers=1",
              "model.gpt.context=16", "batch_size=4", "max_batches_per_epoch=3", "seed=5", "threads=2"};
    }
    specs.push_back(spec(default_config(sets), "other-" + std::to_string(i), {"--hashes"}));
  }
  // The 50th: a burst that diverges (so its repro holds a checkpoint of the
  // parameters and optimizer state mid-training), recorded as a repro.
  const TrainingConfig target = default_config({"batch_size=32", "max_batches_per_epoch=6", "optimizer.lr=0.3",
                                                "optimizer.momentum=0.95", "seed=7", "threads=2"});
  fs::create_directories(dir.file("worker"));
  fs::create_directories(dir.file("fresh"));
  specs.push_back(spec(target, "target", {"--hashes", "--repro", dir.file("worker/target.repro.json")}));
  ChildPool pool;
  std::vector<ChildExit> exits(specs.size());
  pool.run(specs, 1, [&](size_t i, const ChildExit& e) { exits[i] = e; });
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_EQ(exits[i].exit_code, 0) << "burst " << i << ": " << exits[i].describe() << "\n"
                                     << tail_of(specs[i].log_path);
  }
  ASSERT_EQ(pool.stats().workers_started, 1) << "all 50 in one worker";
  const json in_worker = json::parse(read_file(dir.file("target.result.json")));

  std::vector<ChildSpec> fresh = {spec(target, "target", {"--hashes", "--repro", dir.file("fresh/target.repro.json")})};
  run_children(fresh, 1, [&](size_t, const ChildExit& e) { ASSERT_EQ(e.exit_code, 0) << e.describe(); });
  const json in_process = json::parse(read_file(dir.file("target.result.json")));

  ASSERT_NE(in_worker["verdict"]["outcome"], "healthy") << "the premise: the target fails";
  auto training = [](json j) {  // all but how long it took
    j["verdict"].erase("wall_seconds");
    return j;
  };
  EXPECT_EQ(training(in_worker), training(in_process)) << "verdict, hash chain and every step's hashes";
  const auto a = files_of(dir.file("worker")), b = files_of(dir.file("fresh"));
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GE(a.size(), 2u) << "the repro and its checkpoint";
  for (const auto& [name, bytes] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const auto ends = [&](const std::string& tail) {
      return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (ends(".safetensors")) {
      EXPECT_TRUE(bytes == b.at(name)) << name << ": the checkpoint's parameters and optimizer state differ";
    } else if (ends(".jsonl")) {  // the trace: every step's loss and statistics, all but its time
      std::istringstream x(bytes), y(b.at(name));
      std::string lx, ly;
      int64_t steps = 0;
      while (std::getline(x, lx)) {
        ASSERT_TRUE(std::getline(y, ly)) << name << ": fewer steps in the fresh process";
        json jx = json::parse(lx), jy = json::parse(ly);
        jx.erase("step_ms");
        jy.erase("step_ms");
        EXPECT_EQ(jx, jy) << name << " step " << steps;
        ++steps;
      }
      EXPECT_GT(steps, 3);
    } else {  // the repro: the same step hashes, verdict and checkpointed monitor state
      json x = json::parse(bytes), y = json::parse(b.at(name));
      for (json* j : {&x, &y}) {
        (*j)["verdict"].erase("wall_seconds");
        j->erase("environment");  // the same machine; it names no burst-specific state
      }
      EXPECT_EQ(x, y) << name;
    }
  }
}

TEST(Workers, GuardRunsThroughWorkersSoASegfaultInTheUsersCodeIsARegressionWithADiff) {
  TempDir dir;
  testing::write_bytes(dir.file("suite.json"), R"({"configs": [
    {"name": "steady", "set": ["scenario=\"faulty\"", "batch_size=16", "max_batches_per_epoch=2",
                               "dataset.synthetic_train_per_class=20", "threads=1"]},
    {"name": "other", "set": ["scenario=\"faulty\"", "batch_size=16", "max_batches_per_epoch=2",
                              "dataset.synthetic_train_per_class=20", "threads=1", "seed=3"]}]})");
  auto r = testing::run_program(SPIKEHUNT_FAULTY, "guard record --suite " + dir.file("suite.json") + " --out " +
                                                      dir.file("baseline.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto check = [&](const std::string& flags) {
    return testing::run_program(SPIKEHUNT_FAULTY, "guard check --suite " + dir.file("suite.json") + " --baseline " +
                                                      dir.file("baseline.json") + " " + flags);
  };
  r = check("");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "no regression: 2 of 2")) << r.output;
  // The user's code now segfaults: the check ends with its diff, exit 1, every case checked.
  r = check("--set 'params.fault=\"segfault\"'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "steady: REGRESSION: crashed")) << r.output;
  EXPECT_TRUE(has(r.output, "other: REGRESSION: crashed")) << r.output;
  EXPECT_TRUE(has(r.output, "verdict: healthy → crashed")) << r.output;
  EXPECT_TRUE(has(r.output, "signal 11")) << r.output;
  EXPECT_TRUE(has(r.output, "killed again when run once more")) << "a signal is run once more: " << r.output;
  EXPECT_TRUE(has(r.output, "2 of 2 config(s) got less stable")) << r.output;
  // A hang past --timeout is a timeout regression, and the next case still runs.
  r = check("--timeout 5 --set 'params.fault=\"hang\"'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "verdict: healthy → timeout")) << r.output;
  EXPECT_TRUE(has(r.output, "other: REGRESSION: timeout")) << r.output;
}

}  // namespace
}  // namespace spikehunt
