// Tests the spikehunt binary end to end: exit codes, what `run` prints and
// writes, `audit`, and that bad input leaves nothing behind.
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/files.h"
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
  EXPECT_TRUE(has(r.output, "LibTorch 2.")) << r.output;  // the torch wheel's LibTorch
  EXPECT_TRUE(has(r.output, "BLAS: ") && !has(r.output, "BLAS: none loaded")) << r.output;  // the wheel links MKL in (x86_64)
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
                                                    "repro.json", "trace.jsonl", "verdict.json"}));
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

TEST(Cli, AGptRunSaysWhatItTrainsOnAndATraceLineStaysReadable) {
  TempDir out;
  const auto r = run_spikehunt("run --config " + testing::source_path("configs/gpt.json") +
                               " --set model.gpt.width=16 --set model.gpt.layers=1 --set model.gpt.heads=2"
                               " --set max_batches_per_epoch=3 --set threads=1 --out " + out.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "model    gpt (")) << r.output;
  EXPECT_TRUE(has(r.output, "parameters), width 16, 1 layers, 2 heads, context 64\n")) << "no activation: " << r.output;
  EXPECT_TRUE(has(r.output, "protocol 1 epoch(s) of 64-token windows, <=3 batches/epoch (3 steps)")) << r.output;
  EXPECT_TRUE(has(r.output, "data     text /usr/share/games/fortunes (bytes)")) << r.output;
  EXPECT_TRUE(has(r.output, "verdict: healthy after 3 of 3 steps")) << r.output;
  std::string trace;
  for (const auto& e : fs::recursive_directory_iterator(out.path())) {
    if (e.path().filename() == "trace.jsonl") trace = read_file(e.path().string());
  }
  ASSERT_FALSE(trace.empty());
  const std::string first = trace.substr(0, trace.find('\n'));
  EXPECT_FALSE(has(first, "label_histogram")) << "no 256 counts per line";
  EXPECT_TRUE(has(first, "\"classes\":256")) << first;
  EXPECT_TRUE(has(first, "\"block0_attn_logits\"")) << first;
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

TEST(Cli, AnOutputFolderThatIsAFileIsBadInputNamingIt) {
  TempDir dir;
  const std::string file = dir.file("afile");
  std::ofstream(file) << "x";
  const std::string tiny = " --set batch_size=8 --set max_batches_per_epoch=1 --set threads=1";
  for (const std::string& out : {file, file + "/runs"}) {
    const auto r = run_spikehunt("run" + tiny + " --out " + out);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(has(r.output, "error: " + out + ": is a file, or inside one, not a folder\nhint: give --out a folder"))
        << r.output;
  }
  std::ofstream(dir.file("tiny.json")) << R"({"batch_size": 8, "max_batches_per_epoch": 1, "threads": 1})";
  const auto lr = run_spikehunt("lr-sensitivity --lrs 0.1 --config " + dir.file("tiny.json") + " --out " + file + "/lr");
  EXPECT_EQ(lr.exit_code, 2) << lr.output;
  EXPECT_TRUE(has(lr.output, "error: " + file + "/lr: is inside a file, not a folder")) << lr.output;
  std::ifstream in(file);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "x") << "the file is left as it was";
}

TEST(Cli, PrintConfigShowsTheResolvedConfigAndWhatItStartsFrom) {
  const auto r = run_spikehunt("run --print-config --set seed=9");
  ASSERT_EQ(r.exit_code, 0);
  const size_t json_at = r.output.find('{');
  ASSERT_NE(json_at, std::string::npos) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output.substr(json_at))["seed"], 9);
  EXPECT_TRUE(has(r.output.substr(0, json_at), "# <built-in default> (configs/default.json): the field defaults with "
                                               "max_batches_per_epoch=40 optimizer.lr=0.15 seed=4"))
      << r.output;
  const auto file = run_spikehunt("run --print-config --config " + testing::source_path("configs/healthy.json"));
  EXPECT_TRUE(has(file.output, "healthy.json: the fields it sets over the field defaults")) << file.output;
}

// ---- one CLI convention for every verb ----

TEST(CliConventions, AnUnknownVerbIsNamedWithDidYouMean) {
  for (const char* args : {"minimize", "minimize --help"}) {
    const auto r = run_spikehunt(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_TRUE(has(r.output, ": minimize is not a verb of ")) << r.output;
    EXPECT_TRUE(has(r.output, "hint: the verbs: run, audit, guard, replay, doctor, sweep, merge, compare, shrink, "
                              "lr-sensitivity, calibrate, report"))
        << r.output;
    EXPECT_FALSE(has(r.output, "burst")) << "the hidden verb is not offered";
  }
  const auto typo = run_spikehunt("swep --runs 2");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_TRUE(has(typo.output, "did you mean \"sweep\"?")) << typo.output;
  const auto none = run_spikehunt("");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_TRUE(has(none.output, "needs a verb")) << none.output;
}

TEST(CliConventions, FlagErrorsReadLikeConfigErrors) {
  auto r = run_spikehunt("sweep --runs abc");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, " sweep: --runs = abc is not an integer\nhint: ")) << r.output;
  r = run_spikehunt("sweep --rusn 3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, " sweep: --rusn is not a flag of ")) << r.output;
  EXPECT_TRUE(has(r.output, "did you mean \"--runs\"?")) << r.output;
  r = run_spikehunt("shrink --budget 30m --config x.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "hint: shrink counts bursts: --bursts N")) << "a count and a duration never share a name\n"
                                                                        << r.output;
  r = run_spikehunt("run --config");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, " run: --config needs a value")) << r.output;
  r = run_spikehunt("sweep --runs 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, " sweep: --runs = 0 must be at least 1")) << r.output;
  r = run_spikehunt("sweep --shrinker bisect");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, " sweep: --shrinker = bisect is not a shrinker\nhint: passes (the default) or tree")) << r.output;
}

TEST(CliConventions, EverySetProblemIsReportedAtOnce) {
  TempDir out;
  const auto r = run_spikehunt("run --set optimizr.momentum=0.5 --set optimizer.lr=-0.05 --out " + out.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "error: --set: optimizr is not a config field (in optimizr.momentum=0.5)\nhint: did you mean \"optimizer\"?"))
      << r.output;
  EXPECT_TRUE(has(r.output, "(with --set): optimizer.lr = -0.05 is not in (0, 10]")) << r.output;
  EXPECT_TRUE(entries(out.path()).empty());
}

TEST(CliConventions, NoFlagIsAcceptedThatTheActionIgnores) {
  TempDir dir;
  auto r = run_spikehunt("guard check --suite " + testing::source_path("configs/guard.json") + " --baseline b.json --out " +
                         dir.file("x.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "guard check: --out = " + dir.file("x.json") + " applies to guard record")) << r.output;
  r = run_spikehunt("replay x.repro.json --threads 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.output, "replay: --threads = 0 is not in [1, 1024]")) << r.output;
}

TEST(CliConventions, APrintedReplayCommandPastesBackAndReproduces) {
  TempDir out;
  const auto r = run_spikehunt("run --set seed=3 --out " + out.path());
  ASSERT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has(r.output, "config     <built-in default> with --set seed=3  name")) << r.output;
  const size_t at = r.output.find("replay it: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string command = r.output.substr(at + 11, r.output.find('\n', at) - at - 11);
  EXPECT_EQ(command.rfind(SPIKEHUNT_BINARY, 0), 0u) << "the program as it was invoked: " << command;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string replayed;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) replayed.append(buf, n);
  const int status = ::pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 0) << command << "\n" << replayed;
  EXPECT_TRUE(has(replayed, "reproduced: non_finite")) << replayed;
}

// The reference's verb table (docs/cli.md) lists every flag of every verb, and nothing else.
TEST(CliConventions, TheReferencesVerbTableMatchesEveryVerbsHelp) {
  std::ifstream in(testing::source_path("docs/cli.md"));
  std::map<std::string, std::set<std::string>> table;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) inside = line == "## Every verb and flag";
    if (!inside || line.rfind("| `", 0) != 0) continue;
    const std::regex row(R"(^\| `([a-z]+)` \| (.*?) \| )");
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    const std::string flags = m[2];
    static const std::regex flag(R"(`(-[-a-z]+)`)");
    for (std::sregex_iterator it(flags.begin(), flags.end(), flag), end; it != end; ++it) {
      table[m[1]].insert((*it)[1]);
    }
    table[m[1]];  // a verb without flags still counts
  }
  ASSERT_GE(table.size(), 8u) << "the table's verbs";
  for (const auto& [verb, flags] : table) {
    const auto help = run_spikehunt(verb + " --help");
    ASSERT_EQ(help.exit_code, 0) << verb << " is a verb\n" << help.output;
    std::set<std::string> accepted;
    std::istringstream lines(help.output.substr(help.output.find("Options:")));
    for (std::string l; std::getline(lines, l);) {  // "  -j,--jobs INT=2   Bursts at once": the names column
      if (l.rfind("  -", 0) != 0) continue;
      std::istringstream names(l.substr(2, l.find(' ', 2) - 2));
      for (std::string name; std::getline(names, name, ',');) accepted.insert(name);
    }
    accepted.erase("-h");
    accepted.erase("--help");
    accepted.erase("--shrink-budget");  // the old name, said beside the new one
    EXPECT_EQ(flags, accepted) << "docs/cli.md's table and `spikehunt " << verb << " --help` differ";
  }
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

TEST(Cli, AnAllNanTensorHasNoLargestFiniteValue) {
  TempDir dir;
  write_checkpoint(dir.file("nan.safetensors"),
                   {{"model.w", torch::full({3}, std::numeric_limits<float>::quiet_NaN())}}, {});
  const auto a = run_spikehunt("audit " + dir.file("nan.safetensors"));
  EXPECT_EQ(a.exit_code, 1);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(a.output, m, std::regex(R"(model\.w +F32 +\[3\] +3 +0 +0 +(\S+))"))) << a.output;
  EXPECT_EQ(m[1], "none") << "not 0: no element is finite";
}

// A small MLP run whose loss limit is under the loss at init: extreme at step 0, with a repro and checkpoint.
testing::CommandResult run_failing_at_step_zero(const TempDir& out) {
  return run_spikehunt("run --set model.kind=mlp --set health.loss_limit=1 --set max_batches_per_epoch=3 "
                       "--set dataset.synthetic_train_per_class=20 --out " + out.path());
}

TEST(Cli, ReplayingFromACheckpointAtStepZeroSaysSo) {
  TempDir out;
  // A loss limit under the loss at init: the first step is the onset.
  const auto r = run_failing_at_step_zero(out);
  ASSERT_EQ(r.exit_code, 1) << r.output;
  ASSERT_TRUE(has(r.output, "onset      step 0 ")) << r.output;
  const std::string repro = out.file(entries(out.path()).front()) + "/repro.json";
  const auto rep = run_spikehunt("replay " + repro + " --from-checkpoint");
  EXPECT_EQ(rep.exit_code, 0) << rep.output;
  EXPECT_TRUE(has(rep.output, "from step 0 (its checkpoint: the onset is the first step, so it holds the initial state)"))
      << rep.output;
}

// A checkpoint whose bytes changed after it was written (a flipped bit, a tensor scaled or zeroed by
// hand) is exit 2 naming the file and the tensor before anything replays; untouched, it reproduces.
TEST(Cli, ADamagedCheckpointIsNamedBeforeAnyReplay) {
  TempDir out;
  const auto r = run_failing_at_step_zero(out);
  ASSERT_EQ(r.exit_code, 1) << r.output;
  const std::string folder = out.file(entries(out.path()).front());
  const std::string repro = folder + "/repro.json";
  const std::string file = folder + "/" + nlohmann::json::parse(read_file(repro))["checkpoint"]["file"].get<std::string>();
  const std::string bytes = read_file(file);
  SafeTensors f = parse_safetensors(bytes, file);
  const TensorEntry& w = f.tensors.front();
  // One bit of the first tensor's first element flipped.
  std::string flipped = bytes;
  flipped[f.data_start + w.begin] ^= 0x01;
  testing::write_bytes(file, flipped);
  auto rep = run_spikehunt("replay " + repro + " --from-checkpoint");
  EXPECT_EQ(rep.exit_code, 2) << rep.output;
  EXPECT_TRUE(has(rep.output, file + ": " + w.name + " = content hash")) << rep.output;
  EXPECT_TRUE(has(rep.output, "the checkpoint is damaged or was edited")) << rep.output;
  EXPECT_FALSE(has(rep.output, "reproduced")) << rep.output;
  // The whole tensor zeroed, written as a valid file with the old metadata.
  std::vector<TensorBlob> blobs;
  for (const TensorEntry& e : f.tensors) {
    std::string data(f.data(e));
    if (&e == &w) data.assign(data.size(), '\0');
    blobs.push_back({e.name, e.dtype, e.shape, data});
  }
  write_safetensors(file, blobs, f.metadata);
  rep = run_spikehunt("replay " + repro + " --from-checkpoint");
  EXPECT_EQ(rep.exit_code, 2) << rep.output;
  EXPECT_TRUE(has(rep.output, w.name)) << rep.output;
  testing::write_bytes(file, bytes);
  rep = run_spikehunt("replay " + repro + " --from-checkpoint");
  EXPECT_EQ(rep.exit_code, 0) << rep.output;
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
