// onset_eval — scores health rule sets on a labelled corpus of recorded runs
// (bench/onset_corpus.sh writes it): every run's trace.jsonl is judged again
// by each rule set, and one table says what each buys: missed failures, lead
// times, false alarms on healthy runs, flags on runs that recover.
// Usage: onset_eval CORPUS_DIR RULES.json [RULES.json ...] [--late NAME]
//   RULES.json: a config file; its "health" section is the rule set, its
//   file name (without .json) the row's name. --late NAME lists the failing
//   runs that rule set warns fewer than 5 steps ahead, with their last steps.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "bench/onset_eval.h"
#include "scenarios/config.h"

namespace fs = std::filesystem;
using namespace spikehunt;

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string late;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--late") {
      late = args[i + 1];
      args.erase(args.begin() + long(i), args.begin() + long(i) + 2);
      break;
    }
  }
  if (args.size() < 2) {
    std::cerr << "usage: onset_eval CORPUS_DIR RULES.json [RULES.json ...] [--late NAME]\n";
    return 2;
  }
  try {
    std::vector<std::string> traces;
    if (!fs::is_directory(args[0])) throw InputError(args[0], "", "", "is not a folder", "run bench/onset_corpus.sh first");
    for (const auto& e : fs::recursive_directory_iterator(args[0])) {
      if (e.path().filename() == "trace.jsonl") traces.push_back(e.path().string());
    }
    std::sort(traces.begin(), traces.end());
    if (traces.empty()) throw InputError(args[0], "", "", "holds no trace.jsonl", "run bench/onset_corpus.sh first");
    std::vector<LabelledRun> runs;
    for (const std::string& t : traces) {
      runs.push_back(load_run(t, fs::relative(fs::path(t).parent_path(), args[0]).string()));
    }
    int64_t failing = 0, recovering = 0, steps = 0;
    for (const LabelledRun& r : runs) {
      failing += r.failure_step ? 1 : 0;
      recovering += r.recovers ? 1 : 0;
      steps += int64_t(r.records.size());
    }
    std::printf("%zu runs (%lld failing, %lld recovering, %lld healthy), %lld steps, from %s\n\n", runs.size(),
                static_cast<long long>(failing), static_cast<long long>(recovering),
                static_cast<long long>(int64_t(runs.size()) - failing - recovering), static_cast<long long>(steps),
                args[0].c_str());
    std::vector<RuleSetScore> scores;
    HealthRules late_rules;
    bool late_found = false;
    for (size_t i = 1; i < args.size(); ++i) {
      const TrainingConfig c = load_config(args[i]);
      const std::string name = fs::path(args[i]).stem().string();
      scores.push_back(score_corpus(runs, c.health, name));
      if (name == late) {
        late_rules = c.health;
        late_found = true;
      }
    }
    std::cout << score_table(scores) << "\nrules that fired on healthy runs (steps):\n" << healthy_rules_text(scores);
    if (!late.empty()) {
      if (!late_found) throw InputError("--late", "", late, "is not one of the rule sets given");
      const std::string text = late_runs_text(runs, late_rules);
      std::cout << "\nfailing runs " << late << " warns fewer than " << kShortLead << " steps ahead:\n"
                << (text.empty() ? "  none\n" : text);
    }
    return 0;
  } catch (const InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
