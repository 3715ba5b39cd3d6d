// doctor.cpp — `spikehunt doctor`: the vital signs that catch the classic
// training bugs, as text or (--json) one JSON document whatever happens.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/number_format.h"
#include "cli/flags.h"
#include "cli/verbs.h"
#include "harness/burst.h"
#include "harness/doctor/doctor.h"
#include "scenarios/catalog.h"
#include "scenarios/planted.h"

namespace spikehunt {

namespace {

struct DoctorArgs {
  std::string config, planted, rules;
  std::vector<std::string> sets;
  bool json = false, verbose = false, signs = false;
  int64_t steps = 100, overfit_steps = 1000;
};

// The scenario actually run, in one line: its name, size, optimizers and its
// own knobs (a user's scenario) or the built-in model and activation.
std::string doctor_header(const std::string& title, const TrainingConfig& c, const DoctorReport& r) {
  std::string s = "spikehunt doctor: " + title + ": ";
  if (c.scenario == "standard") {
    s += c.model.kind + (c.model.kind == "mlp" ? " " + std::to_string(c.model.mlp_depth) + "x" +
                                                     std::to_string(c.model.mlp_width) : "") +
         ", " + describe_model_details(c);
  } else {
    s += "scenario \"" + c.scenario + "\"";
    const std::string cls = scenario_class(c.scenario);
    if (!cls.empty()) s += " (" + cls + ")";
  }
  if (r.parameters > 0) s += ", " + thousands(r.parameters) + " parameters";
  s += ", " + describe_optimizer(c.optimizer);
  if (r.optimizers.size() > 1 || (r.optimizers.size() == 1 && r.optimizers[0] != "optimizer")) {
    std::string names;
    for (const std::string& o : r.optimizers) names += (names.empty() ? "" : ", ") + o;
    s += " (optimizers: " + names + ")";
  }
  s += ", batch " + std::to_string(c.batch_size);
  if (c.accumulation_steps > 1) s += " x " + std::to_string(c.accumulation_steps) + " accumulated";
  if (const std::string sched = describe_schedule(c.schedule); !sched.empty()) s += ", lr " + sched;
  if (!c.params.values().empty()) s += "\n  params " + describe_params(c.params);
  return s + "\n";
}

// `doctor --signs`: the registry, one sign a line (or a JSON array): its
// ranks, the part of the program it concerns and, for a consequence, the
// signs of the causes it names.
int list_signs(bool as_json) {
  nlohmann::json all = nlohmann::json::array();
  for (const SignInfo& s : doctor_signs()) {
    if (as_json) {
      all.push_back({{"name", s.name}, {"part", s.part}, {"ranks", s.ranks}, {"consequence_rank", s.consequence_rank},
                     {"causes", s.causes}});
      continue;
    }
    std::string ranks;
    for (int r : s.ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    std::string line = s.name + std::string(s.name.size() < 24 ? 24 - s.name.size() : 1, ' ') + "rank " + ranks +
                       (s.part.empty() ? "" : "; part " + s.part);
    if (s.consequence_rank != 0) {
      std::string causes;
      for (const std::string& c : s.causes) causes += (causes.empty() ? "" : ", ") + c;
      line += "; at " + std::to_string(s.consequence_rank) + " a consequence of: " + causes;
    }
    std::cout << line << "\n";
  }
  if (as_json) std::cout << all.dump(2) << "\n";
  return kExitOk;
}

int doctor_verb(const DoctorArgs& a) {
  if (a.signs) {
    if (!a.config.empty() || !a.planted.empty()) {
      throw flag_error("doctor", "--signs", "", "lists the signs: give it without --config or --planted");
    }
    return list_signs(a.json);
  }
  if (!a.config.empty() && !a.planted.empty()) {
    throw flag_error("doctor", "--config / --planted", "", "give one of them, not both");
  }
  if (a.steps < 1 || a.overfit_steps < 1) {
    throw flag_error("doctor", a.steps < 1 ? "--steps" : "--overfit-steps",
                     std::to_string(std::min(a.steps, a.overfit_steps)), "must be at least 1");
  }
  ScenarioFactory make;
  std::string title;
  TrainingConfig config;
  if (!a.planted.empty()) {
    config = planted_config(a.planted);  // checks the name
    if (!a.sets.empty()) throw flag_error("doctor", "--set", "", "does not apply to --planted scenarios");
    make = [name = a.planted] { return make_planted_scenario(name); };
    title = "planted bug " + a.planted;
  } else {
    const std::vector<std::string> sets = with_rules(a.rules, a.sets);
    config = a.config.empty() ? default_config(sets) : load_config(a.config, sets);
    if (config.scenario == "command") {  // python/spikehunt/_command_scenario.py: its steps run in another process
      throw InputError(a.config.empty() ? "--set" : a.config, "scenario", "\"command\"",
                       "is a training command run in a process of its own: the doctor's probes act on a model "
                       "they hold, which a command does not give them",
                       "spikehunt doctor -- COMMAND (the command's own words, from the Python package) runs "
                       "the doctor inside its process (docs/commands.md)");
    }
    if (config.scenario == "standard") {  // load the data once for every sign
      auto data = std::make_shared<const Dataset>(load_dataset(config.dataset));
      make = [config, data] { return make_scenario(config, data); };
    } else {
      make = [config] { return make_scenario(config); };
    }
    title = config_source(a.config, sets);
  }
  configure_runtime(config);
  DoctorOptions o;
  o.steps = a.steps;
  o.overfit_steps = a.overfit_steps;
  o.rules = config.health;
  const DoctorReport report = run_doctor(make, o);
  if (a.json) {
    nlohmann::json j = doctor_json(report);
    j["title"] = title;
    j["config"] = config_to_json(config);
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << doctor_header(title, config, report) << doctor_text(report, a.verbose);
  }
  return report.passed() ? kExitOk : kExitFinding;
}

// `doctor --json` prints a document whatever happens: the error, with its exit code.
int doctor_json_main(const DoctorArgs& a) {
  nlohmann::json error;
  int code = kExitOk;
  try {
    return doctor_verb(a);
  } catch (const InputError& e) {
    nlohmann::json problems = nlohmann::json::array();
    for (const Problem& p : e.problems()) {
      problems.push_back({{"field", p.field}, {"value", p.value}, {"message", p.message}, {"hint", p.hint}});
    }
    error = {{"kind", "bad_input"}, {"file", e.file()}, {"problems", problems}, {"text", e.what()}};
    code = kExitBadInput;
  } catch (const std::exception& e) {
    error = {{"kind", "internal"}, {"text", e.what()}};
    code = kExitInternal;
  }
  std::cout << nlohmann::json{{"passed", false}, {"error", error}}.dump(2) << "\n";
  return code;
}

}  // namespace

void add_doctor_verb(Cli& cli) {
  auto doctor_args = std::make_shared<DoctorArgs>();
  CLI::App* doctor_cmd = cli.verb("doctor", "Run the vital signs that catch the classic training bugs",
                                  [doctor_args] {
                                    return doctor_args->json ? doctor_json_main(*doctor_args) : doctor_verb(*doctor_args);
                                  });
  doctor_cmd->add_option("--config", doctor_args->config, "Config JSON (default: the built-in default)");
  doctor_cmd->add_option("--set", doctor_args->sets, "Override one field (repeatable)")->allow_extra_args(false);
  add_rules_flag(doctor_cmd, doctor_args->rules);
  doctor_cmd->add_option("--planted", doctor_args->planted,
                         "A planted-bug scenario: healthy, detached_logits, log_zero_loss, shifted_labels, "
                         "imbalanced_majority, vanishing_deep_sigmoid, exploding_no_clip, dead_relu");
  doctor_cmd->add_option("--steps", doctor_args->steps, "Steps of the watched training run")->capture_default_str();
  doctor_cmd->add_option("--overfit-steps", doctor_args->overfit_steps, "Budget to overfit one batch")
      ->capture_default_str();
  doctor_cmd->add_flag("--signs", doctor_args->signs,
                       "List every vital sign the doctor runs, with its ranks and, for a consequence, its causes");
  doctor_cmd->add_flag("--json", doctor_args->json, "Machine-readable output (a JSON document, also on errors)");
  doctor_cmd->add_flag("--verbose", doctor_args->verbose, "With a thrown error's whole text (LibTorch's backtrace or the Python traceback) and the time each probe took");
}

}  // namespace spikehunt
