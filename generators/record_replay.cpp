#include "generators/record_replay.h"

#include <filesystem>
#include <sstream>
#include <vector>

#include "base/child.h"
#include "harness/record.h"
#include "harness/repro.h"
#include "harness/results.h"

namespace spikehunt {

namespace fs = std::filesystem;

std::string record_and_replay(const std::string& binary, const TrainingConfig& config, const std::string& path,
                              const std::string& expected_signature, double timeout_seconds, const std::string& work_dir,
                              bool* ok) {
  *ok = false;
  fs::create_directories(work_dir);
  const std::string stem = work_dir + "/repro-" + config_hash(config).hex().substr(0, 12);
  save_config(config, stem + ".config.json");
  ChildExit recorded;
  run_children({{{binary, "burst", "--config", stem + ".config.json", "--result", stem + ".result.json", "--repro", path,
                  "--hashes"},
                 timeout_seconds,
                 stem + ".log"}},
               1, [&](size_t, const ChildExit& e) { recorded = e; });
  std::string verdict;
  if (recorded.exit_code != 0 || !fs::exists(path)) {
    verdict = "the repro could not be recorded: " + recorded.describe() + " " + tail_of(stem + ".log", 300);
  } else if (const Repro repro = read_repro(path); fault_signature(repro.verdict) != expected_signature) {
    verdict = "the config failed differently when recorded: " + fault_signature(repro.verdict) + ", not " +
              expected_signature;
  } else {
    std::vector<std::string> argv = {binary, "replay", path};
    if (repro.checkpoint) argv.push_back("--from-checkpoint");
    ChildExit replayed;
    run_children({{argv, timeout_seconds, stem + ".replay.log"}}, 1, [&](size_t, const ChildExit& e) { replayed = e; });
    std::istringstream log(tail_of(stem + ".replay.log", 4000));
    std::string summary;
    for (std::string line; std::getline(log, line);) {
      if (line.rfind("replayed ", 0) == 0) summary = line.substr(line.find(" from step ") + 1);
      if (line.rfind("reproduced", 0) == 0 || line.rfind("not reproduced", 0) == 0) verdict = line;
    }
    *ok = replayed.exit_code == 0;
    if (verdict.empty()) verdict = "the replay did not finish: " + replayed.describe();
    else if (!summary.empty()) verdict += " (replayed " + summary + ")";
  }
  for (const char* ext : {".config.json", ".result.json", ".log", ".replay.log"}) {
    std::error_code ec;
    fs::remove(stem + ext, ec);
  }
  return verdict;
}

}  // namespace spikehunt
