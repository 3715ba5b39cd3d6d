// onset_eval — scores health rule sets on a labelled corpus of recorded runs
// (bench/onset_corpus.sh writes it): every run's trace.jsonl is judged again
// by each rule set, and one table says what each buys: missed failures, lead
// times, false alarms on healthy runs, flags on runs that recover.
// Usage: onset_eval CORPUS_DIR RULES.json [RULES.json ...] [--late NAME]
//                   [--diverged K] [--anchors]
//   RULES.json: a config file or a rules file from `spikehunt calibrate`; its
//   "health" section is the rule set, its
//   file name (without .json) the row's name. --late NAME lists the failing
//   runs that rule set warns fewer than 5 steps ahead, with their last steps.
//   --diverged K: a run also fails where its loss stands past K x its best
//   for 10 steps in a row, at the first of them (default: only a non-finite
//   step fails).
//   --anchors: the published detectors (Megatron, OLMo, Lightning, ZClip, the
//   first non-finite step) scored as more rows of the same table.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "bench/onset_eval.h"
#include "scenarios/config.h"

namespace fs = std::filesystem;
using namespace spikehunt;

namespace {

// A config file, or a rules file `spikehunt calibrate` wrote (its calibration
// record is the file's provenance, not a rule).
TrainingConfig load_rule_set(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "", "", "cannot be read", "give a config or a rules file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path, "", "", std::string("is not JSON: ") + e.what());
  }
  if (j.is_object()) j.erase("calibration");
  return parse_config(j, path, {});
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string late, diverged;
  bool with_anchors = false;
  for (size_t i = 0; i < args.size();) {
    if ((args[i] == "--late" || args[i] == "--diverged") && i + 1 < args.size()) {
      (args[i] == "--late" ? late : diverged) = args[i + 1];
      args.erase(args.begin() + long(i), args.begin() + long(i) + 2);
    } else if (args[i] == "--anchors") {
      with_anchors = true;
      args.erase(args.begin() + long(i));
    } else {
      ++i;
    }
  }
  if (args.size() < 2) {
    std::cerr << "usage: onset_eval CORPUS_DIR RULES.json [RULES.json ...] [--late NAME] [--diverged K] [--anchors]\n";
    return 2;
  }
  try {
    double diverge_factor = 0;
    if (!diverged.empty()) {
      char* end = nullptr;
      diverge_factor = std::strtod(diverged.c_str(), &end);
      if (end == diverged.c_str() || *end != '\0' || !(diverge_factor > 1) || !std::isfinite(diverge_factor)) {
        throw InputError("--diverged", "", diverged, "is not a number above 1", "e.g. --diverged 2: a loss past twice its best fails");
      }
    }
    std::vector<std::string> traces;
    if (!fs::is_directory(args[0])) throw InputError(args[0], "", "", "is not a folder", "run bench/onset_corpus.sh first");
    for (const auto& e : fs::recursive_directory_iterator(args[0])) {
      if (e.path().filename() == "trace.jsonl") traces.push_back(e.path().string());
    }
    std::sort(traces.begin(), traces.end());
    if (traces.empty()) throw InputError(args[0], "", "", "holds no trace.jsonl", "run bench/onset_corpus.sh first");
    std::vector<LabelledRun> runs;
    for (const std::string& t : traces) {
      runs.push_back(load_run(t, fs::relative(fs::path(t).parent_path(), args[0]).string(), diverge_factor));
    }
    int64_t failing = 0, recovering = 0, steps = 0, diverging = 0;
    for (const LabelledRun& r : runs) {
      failing += r.failure_step ? 1 : 0;
      diverging += r.failure == "diverged" ? 1 : 0;
      recovering += r.recovers ? 1 : 0;
      steps += int64_t(r.records.size());
    }
    std::printf("%zu runs (%lld failing, %lld of them by divergence, %lld recovering, %lld healthy), %lld steps, from %s\n\n",
                runs.size(), static_cast<long long>(failing), static_cast<long long>(diverging),
                static_cast<long long>(recovering),
                static_cast<long long>(int64_t(runs.size()) - failing - recovering), static_cast<long long>(steps),
                args[0].c_str());
    std::vector<RuleSetScore> scores;
    HealthRules late_rules;
    bool late_found = false;
    for (size_t i = 1; i < args.size(); ++i) {
      const TrainingConfig c = load_rule_set(args[i]);
      const std::string name = fs::path(args[i]).stem().string();
      scores.push_back(score_corpus(runs, c.health, name));
      if (name == late) {
        late_rules = c.health;
        late_found = true;
      }
    }
    if (with_anchors) {
      for (const Anchor& a : anchors()) scores.push_back(score_corpus(runs, a));
    }
    std::cout << score_table(scores) << "\nrules that fired on healthy runs (steps):\n" << healthy_rules_text(scores)
              << "\nleads on the failing runs (in the order of their names; 0: no warning before the failure):\n"
              << leads_text(scores);
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
