// calibrate.cpp — `spikehunt calibrate`: trains healthy baseline runs of one
// config (seeds, optionally lower learning rates), raises the health rules
// that fire on them to a margin above what they reach (harness/calibrate.h),
// and writes the rules file every verb takes with --rules.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/dotted_path.h"
#include "base/error.h"
#include "base/files.h"
#include "base/json.h"
#include "base/number_format.h"
#include "cli/flags.h"
#include "cli/verbs.h"
#include "harness/burst.h"
#include "harness/calibrate.h"
#include "harness/health.h"

namespace spikehunt {

using json = nlohmann::json;

namespace {

std::string lr_list(const std::vector<double>& lrs) {
  std::string s;
  for (double lr : lrs) s += (s.empty() ? "" : ", ") + fmt(lr);
  return s;
}

struct CalibrateArgs {
  CLI::App* app = nullptr;
  std::string config, rules, lrs, out = "rules.json";
  std::vector<std::string> sets;
  int64_t seeds = 3;
  double margin = 2.0;
  bool model_wide = false;
};

int calibrate_verb(const CalibrateArgs& a) {
  check_positive("calibrate", "--seeds", a.seeds);
  if (!(a.margin >= 1) || !(a.margin <= 100)) {
    throw flag_error("calibrate", "--margin", fmt(a.margin), "is not in [1, 100]",
                     "2 puts each raised threshold at twice what the healthy runs reached");
  }
  checked_output_file("calibrate", "--out", a.out);  // before anything trains
  refuse_foreign_output("calibrate", "--out", a.out, OutputKind::kRules);
  const std::vector<std::string> sets = with_rules(a.rules, a.sets);
  const TrainingConfig base = a.config.empty() ? default_config(sets) : load_config(a.config, sets);
  std::vector<double> lrs = {base.optimizer.lr};
  if (a.app->count("--lrs") > 0) {  // given empty: an error, not no lower rates
    for (double lr : parse_lrs(a.lrs, "calibrate")) {
      if (lr > base.optimizer.lr) {
        throw flag_error("calibrate", "--lrs", a.lrs, "holds " + fmt(lr) + ", above the config's optimizer.lr " +
                         fmt(base.optimizer.lr), "baselines train at or below the learning rate under test");
      }
      if (std::find(lrs.begin(), lrs.end(), lr) == lrs.end()) lrs.push_back(lr);
    }
  }
  const std::string source = config_source(a.config, sets);
  std::cout << "calibrating the health rules of " << source << " on " << a.seeds * int64_t(lrs.size())
            << " baseline runs (seeds " << base.seed << ".." << base.seed + uint64_t(a.seeds) - 1 << " at lr "
            << lr_list(lrs) << "), margin " << fmt(a.margin) << "x\n";

  std::vector<Baseline> baselines;
  json runs = json::array();
  int64_t classes = 0;
  for (double lr : lrs) {
    for (int64_t k = 0; k < a.seeds; ++k) {
      std::vector<std::string> run_sets = sets;
      run_sets.push_back("optimizer.lr=" + shortest(lr));
      run_sets.push_back("seed=" + std::to_string(base.seed + uint64_t(k)));
      run_sets.push_back("health.stop_at=non_finite");
      const TrainingConfig c = a.config.empty() ? default_config(run_sets) : load_config(a.config, run_sets);
      Baseline b;
      b.label = "seed " + std::to_string(c.seed) + ", lr " + fmt(lr);
      BurstOptions o;
      o.on_step = [&](const StepRecord& r) { b.steps.push_back(r); };
      const Verdict v = run_config(c, o).verdict;
      if (v.outcome == Outcome::kCrashed || v.outcome == Outcome::kTimeout) {
        throw InputError(a.config.empty() ? "<built-in default>" : a.config, "baseline", b.label,
                         "did not train: " + v.message, "calibrate on a config that runs to its end");
      }
      const int64_t run_classes = b.steps.empty() ? 0 : int64_t(b.steps.front().label_histogram.size());
      if (const auto problem = baseline_problem(b, run_classes)) {
        throw InputError(a.config.empty() ? "<built-in default>" : a.config, "baseline", b.label,
                         "is not healthy, so it cannot say what healthy looks like: " + *problem,
                         "calibrate at a learning rate this model trains at (--set optimizer.lr=...), then judge "
                         "riskier configs with the rules it writes");
      }
      classes = run_classes;
      std::cout << "  " << b.label << ": " << b.steps.size() << " steps, loss " << fmt(b.steps.front().loss)
                << " -> " << fmt(b.steps.back().loss) << "\n";
      runs.push_back({{"seed", c.seed}, {"lr", number(lr)}, {"steps", b.steps.size()},
                      {"first_loss", number(b.steps.front().loss)}, {"last_loss", number(b.steps.back().loss)}});
      baselines.push_back(std::move(b));
    }
  }
  for (const std::string& line : unused_layer_rules(base.health, baselines.front().steps.front())) {
    std::cout << "warning: " << line << "\n";
  }
  const Calibration cal = derive_rules(base.health, classes, baselines, a.margin, !a.model_wide);
  std::cout << "the current rules call " << cal.flagged_before << " of " << cal.baseline_steps
            << " healthy steps extreme\n";
  json health = json::object(), moved = json::array();
  for (const MovedRule& m : cal.moved) {
    std::cout << "  moved " << m.why << "\n";
    if (m.tensor.empty()) health[m.field] = number(m.after);
    moved.push_back({{"field", m.field}, {"rule", m.rule}, {"before", number(m.before)}, {"after", number(m.after)},
                     {"observed", number(m.observed)}, {"where", m.where}, {"steps", m.steps}, {"why", m.why}});
    if (!m.tensor.empty()) moved.back()["tensor"] = m.tensor;
  }
  // The per-tensor thresholds whole (the config's own and the raised): a
  // rules file's health.layers replaces the config's.
  TrainingConfig calibrated;
  calibrated.health = cal.rules;
  const json calibrated_json = config_to_json(calibrated);
  if (const json* layers = find_path(calibrated_json, "health.layers")) health["layers"] = *layers;
  if (cal.moved.empty()) std::cout << "  no rule fires on these healthy runs: every threshold stays\n";
  const json file = {{"health", health},
                     {"calibration",
                      {{"config", source}, {"margin", number(a.margin)}, {"baselines", runs}, {"moved", moved},
                       {"flagged_before", cal.flagged_before}, {"baseline_steps", cal.baseline_steps}}}};
  write_file_atomic(a.out, file.dump(2) + "\n");
  std::cout << "wrote " << a.out << " (" << cal.moved.size() << " rule" << (cal.moved.size() == 1 ? "" : "s")
            << " moved): give it to run, sweep, shrink, guard, doctor or lr-sensitivity with --rules " << a.out
            << "\n";
  return kExitOk;
}

}  // namespace

void add_calibrate_verb(Cli& cli) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* v = cli.verb("calibrate",
                         "Fit the health rules to a model: raise the rules its healthy runs trip, write a rules file",
                         [a] { return calibrate_verb(*a); });
  a->app = v;
  v->add_option("--config", a->config, "Config JSON of the healthy baseline (default: the built-in default)");
  v->add_option("--set", a->sets, "Override one field, e.g. --set optimizer.lr=0.01 (repeatable)");
  add_rules_flag(v, a->rules);
  v->add_option("--seeds", a->seeds, "Baseline runs per learning rate, seeds counted from the config's")
      ->capture_default_str();
  v->add_option("--lrs", a->lrs, "Lower learning rates to add to the baselines, comma-separated (e.g. 0.01,0.03)");
  v->add_option("--margin", a->margin, "Each raised threshold is this many times what the healthy runs reached")
      ->capture_default_str();
  v->add_option("--out", a->out, "The rules file to write")->capture_default_str();
  v->add_flag("--model-wide", a->model_wide,
              "Raise the per-tensor rules' model-wide thresholds instead of one threshold per tensor "
              "(for sweeps whose variants name their tensors differently)");
}

}  // namespace spikehunt
