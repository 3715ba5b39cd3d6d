#include "harness/repro.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/files.h"
#include "harness/checkpoint.h"
#include "harness/report.h"
#include "harness/results.h"
#include "scenarios/catalog.h"

namespace spikehunt {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string checkpoint_name(const std::string& repro_path) {
  return fs::path(repro_sibling(repro_path, ".last_healthy.safetensors")).filename().string();
}

std::string beside(const std::string& repro_path, const std::string& file) {
  return (fs::path(repro_path).parent_path() / file).string();
}

}  // namespace

void write_repro(const std::string& path, Repro repro, const std::optional<StateSnapshot>& state) {
  if (repro.code.empty()) repro.code = code_identity();
  if (state) {
    repro.checkpoint = ReproCheckpoint{checkpoint_name(path), state->step, state->monitor};
    write_checkpoint(beside(path, repro.checkpoint->file), state->tensors,
                     {{"spikehunt", kVersion}, {"step", std::to_string(state->step)}, {"state", "entering the onset step"}});
  }
  write_file_atomic(path, repro_to_json(repro));
}

// ---- replay ----

namespace {

std::string where(int64_t step) { return "step " + std::to_string(step); }

std::string optional_step(const std::optional<int64_t>& s) { return s ? std::to_string(*s) : "none"; }

// Why a replay saw other data at `step` than the repro recorded: a second replay of the same config
// to that step tells a program that draws other data each run from one whose data (or the code or
// environment that draws them) changed since it was recorded and is repeatable now.
std::string why_data_differ(const TrainingConfig& config, int64_t step, bool labels, const std::string& first) {
  configure_runtime(config);
  std::unique_ptr<Scenario> again = make_scenario(config);
  BurstOptions options;
  options.max_steps = step + 1;
  std::string second;
  options.on_step = [&](const StepRecord& r) {
    if (r.step == step) second = (labels ? r.label_hash : r.input_hash).hex();
  };
  run_burst(*again, config.health, options);
  const std::string what = labels ? "labels" : "inputs";
  if (second.empty()) return "; a second replay ended before step " + std::to_string(step);
  if (second != first) {
    return "; a second replay drew other " + what + " again (" + second + "): the program does not draw the same " +
           "data each run (an unseeded shuffle or initialization, a time-based seed, data files that change): seed " +
           "it from the config's seed (a command: from its seed knob)";
  }
  return "; a second replay drew the same " + what + " as the first: the program is repeatable now, so its data, "
         "the code that draws them or the environment changed since the repro was recorded";
}

}  // namespace

ReplayReport replay(const Repro& repro, const std::string& repro_path, const ReplayOptions& options) {
  ReplayReport report;
  TrainingConfig config = repro.config;
  if (options.threads > 0 && options.threads != config.threads) {
    report.warnings.push_back("replaying on " + std::to_string(options.threads) + " threads, recorded on " +
                              std::to_string(config.threads) + ": bit-exactness is not promised");
    config.threads = options.threads;
  }
  const Environment now = environment(to_string(config.device), config.threads);
  for (std::string& w : environment_warnings(repro.environment, now, "repro")) report.warnings.push_back(std::move(w));
  // The code that ran, file by file, against what is on disk now.
  for (const CodeFile& f : repro.code) {
    const std::string now = code_hash(f.path);
    if (now.empty()) report.warnings.push_back("the code changed since the repro was recorded: " + f.path + " is gone");
    else if (now != f.hash) report.warnings.push_back("the code changed since the repro was recorded: " + f.path);
  }
  // The scenario's name is looked up again: another class registered under it trains other code.
  const std::string cls = scenario_class(config.scenario);
  if (!repro.scenario_class.empty() && !cls.empty() && cls != repro.scenario_class) {
    report.warnings.push_back("scenario \"" + config.scenario + "\" was class " + repro.scenario_class +
                              " when recorded and is class " + cls + " now: this replays another class's code");
  }
  configure_runtime(config);
  std::unique_ptr<Scenario> scenario = make_scenario(config);
  BurstOptions options_burst;
  if (options.from_checkpoint) {
    if (!repro.checkpoint) {
      throw InputError(repro_path, "checkpoint", "null", "is absent: this repro replays from step 0 only",
                       "drop --from-checkpoint");
    }
    const std::string file = beside(repro_path, repro.checkpoint->file);
    restore_state(*scenario, read_checkpoint(file), file);
    report.start_step = repro.checkpoint->step;
    if (Trainer(*scenario).skip_steps(report.start_step) != report.start_step) {
      report.mismatch = "the data ends before the checkpoint's step " + std::to_string(report.start_step);
      return report;
    }
    options_burst.resume = repro.checkpoint->monitor;
    options_burst.start_step = report.start_step;
  }
  std::string first_mismatch, got_hash;
  int64_t data_step = -1;  // the step whose input or label hash differed
  bool labels_differ = false;
  options_burst.on_step = [&](const StepRecord& r) {
    if (!first_mismatch.empty()) return;
    if (r.step >= int64_t(repro.step_hashes.size())) {
      first_mismatch = where(r.step) + ": the recorded burst had stopped after step " +
                       std::to_string(int64_t(repro.step_hashes.size()) - 1) + "; the replay went on";
      return;
    }
    const StepHashes& want = repro.step_hashes[size_t(r.step)];
    if (want.input != r.input_hash) {
      first_mismatch = where(r.step) + ": input hash expected " + want.input.hex() + ", got " + r.input_hash.hex();
      data_step = r.step, got_hash = r.input_hash.hex();
    } else if (want.labels != r.label_hash) {
      first_mismatch = where(r.step) + ": label hash expected " + want.labels.hex() + ", got " + r.label_hash.hex();
      data_step = r.step, got_hash = r.label_hash.hex(), labels_differ = true;
    }
  };
  const BurstResult result = run_burst(*scenario, config.health, options_burst);
  const Verdict& got = result.verdict;
  const Verdict& want = repro.verdict;
  report.verdict = got;
  report.steps_run = got.steps_run;
  report.seconds = got.wall_seconds;
  auto mismatch = [&](const std::string& what, const std::string& expected, const std::string& actual) {
    if (first_mismatch.empty() && expected != actual) {
      first_mismatch = what + ": expected " + expected + ", got " + actual;
    }
  };
  mismatch("outcome", to_string(want.outcome), to_string(got.outcome));
  mismatch("onset step", optional_step(want.onset_step), optional_step(got.onset_step));
  mismatch("failure step", optional_step(want.failure_step), optional_step(got.failure_step));
  mismatch("fault", want.fault ? want.fault->describe() : "none", got.fault ? got.fault->describe() : "none");
  mismatch("steps run", std::to_string(want.steps_run), std::to_string(report.start_step + got.steps_run));
  mismatch("hash chain", want.hash_chain.hex(), got.hash_chain.hex());
  report.reproduced = first_mismatch.empty();
  if (data_step >= 0 && !options.from_checkpoint) first_mismatch += why_data_differ(config, data_step, labels_differ, got_hash);
  report.mismatch = first_mismatch;
  return report;
}

Repro record_repro(const TrainingConfig& config, const std::string& path) {
  configure_runtime(config);
  std::unique_ptr<Scenario> scenario = make_scenario(config);
  BurstOptions options;
  options.keep_states = true;
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty()) fs::create_directories(dir);
  TraceWriter trace(repro_sibling(path, ".trace.jsonl"));
  options.on_step = [&](const StepRecord& r) { trace.write(r); };
  BurstResult result = run_burst(*scenario, config.health, options);
  trace.close();
  Repro repro;
  repro.config = config;
  repro.scenario_class = scenario_class(config.scenario);
  repro.environment = environment(to_string(config.device), config.threads);
  repro.verdict = result.verdict;
  repro.step_hashes = result.step_hashes;
  write_repro(path, repro, result.last_healthy);
  return read_repro(path);
}

namespace {

std::string literal(const std::string& text) { return json(text).dump(); }  // a C++ string literal too

// A declared parameter as the code that declares it.
std::string spec_code(const ParamSpec& p) {
  const std::string name = literal(p.name), doc = literal(p.doc);
  auto bound = [](const std::optional<double>& b) { return b ? json(*b).dump() : std::string("0"); };
  switch (p.type) {
    case ParamType::kNumber:
      return "spikehunt::ParamSpec::number(" + name + ", " + p.default_value.dump() + ", " + bound(p.min) + ", " +
             bound(p.max) + ", " + doc + ")";
    case ParamType::kInteger: {
      auto ibound = [](const std::optional<double>& b) { return b ? std::to_string(int64_t(*b)) : std::string("0"); };
      return "spikehunt::ParamSpec::integer(" + name + ", " + p.default_value.dump() + ", " + ibound(p.min) + ", " +
             ibound(p.max) + ", " + doc + ")";
    }
    case ParamType::kBoolean:
      return "spikehunt::ParamSpec::boolean(" + name + ", " + p.default_value.dump() + ", " + doc + ")";
    case ParamType::kString: {
      std::string choices;
      for (const std::string& c : p.choices) choices += (choices.empty() ? "" : ", ") + literal(c);
      return "spikehunt::ParamSpec::string(" + name + ", " + p.default_value.dump() + ", {" + choices + "}, " + doc + ")";
    }
    case ParamType::kList:
      return "spikehunt::ParamSpec::list(" + name + ", nlohmann::json::parse(" + literal(p.default_value.dump()) +
             "), " + doc + ")";
  }
  return "";
}

// A registered scenario is registered by the test first, as the user's program does.
std::string registration_code(const Repro& repro) {
  const std::string& name = repro.config.scenario;
  if (name == "standard") return "";
  const std::string cls = repro.scenario_class.empty() ? "YourScenario" : repro.scenario_class;
  std::string params;
  if (const std::vector<ParamSpec>* specs = declared_params(name)) {
    for (const ParamSpec& p : *specs) params += "\n       " + spec_code(p) + ",";
  }
  if (!params.empty()) params = ",\n      {" + params.substr(0, params.size() - 1) + "}";
  return "  // \"" + name + "\" is your own scenario: registered here as your program registers it\n"
         "  // (" + (repro.scenario_class.empty() ? "put your Scenario class in place of YourScenario"
                                                  : "its class, " + cls + ", built from the config") + ").\n"
         "  spikehunt::register_scenario(\n      " + literal(name) +
         ", [](const spikehunt::TrainingConfig& c) { return std::make_unique<" + cls + ">(c); }" + params + ");\n";
}

}  // namespace

// A Python scenario's draft: a pytest test that loads the file registering
// the scenario and runs the config through spikehunt.run_config.
std::string python_draft(const Repro& repro, const std::string& source, const std::string& name,
                         const std::string& id, const std::string& what, int64_t at, const std::string& list) {
  const std::string& scenario = repro.config.scenario;
  const std::string cls = repro.scenario_class.empty() ? "your Scenario class" : "class " + repro.scenario_class;
  return "# Drafted by spikehunt from " + name + ": " + what + " at step " + std::to_string(at) +
         ".\n# Fails until the instability is fixed: python3 -m pytest THIS_FILE\n"
         "import importlib.util\n\nimport spikehunt\n\n\n"
         "def test_training_stability_repro_" + id + "():\n"
         "    # " + json(scenario).dump() + " is your own scenario (" + cls + "): its file registers it.\n"
         "    spec = importlib.util.spec_from_file_location(\"scenarios_" + id + "\", " + json(source).dump() + ")\n"
         "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
         "    verdict = spikehunt.run_config([\n" + list +
         "    ])\n"
         "    assert verdict[\"outcome\"] == \"healthy\", verdict.get(\"fault\", verdict[\"outcome\"])\n";
}

std::string draft_regression_test(const Repro& repro, const std::string& repro_path) {
  const std::vector<std::string> overrides = config_diff(default_config(), repro.config);
  std::string list;
  const std::string source = scenario_source(repro.config.scenario);
  for (const std::string& o : overrides) list += std::string(source.empty() ? "      " : "        ") + json(o).dump() + ",\n";
  const std::string name = fs::path(repro_path).filename().string();
  const std::string id = config_hash(repro.config).hex().substr(0, 8);
  const Verdict& v = repro.verdict;
  std::string what = to_string(v.outcome);
  if (v.fault) what = v.fault->describe();
  const int64_t at = v.failure_step ? *v.failure_step : v.onset_step.value_or(-1);
  if (!source.empty()) return python_draft(repro, source, name, id, what, at, list);
  return "// Drafted by spikehunt from " + name + ": " + what + " at step " + std::to_string(at) +
         ".\n// Fails until the instability is fixed. Link with spikehunt::spikehunt.\n"
         "#include <gtest/gtest.h>\n#include <spikehunt/spikehunt.h>\n\n"
         "TEST(TrainingStability, Repro" + id + ") {\n" + registration_code(repro) +
         "  const spikehunt::TrainingConfig config = spikehunt::default_config({\n" + list +
         "  });\n"
         "  const spikehunt::BurstResult r = spikehunt::run_config(config, spikehunt::BurstOptions{});\n"
         "  EXPECT_EQ(r.verdict.outcome, spikehunt::Outcome::kHealthy)\n"
         "      << (r.verdict.fault ? r.verdict.fault->describe() : spikehunt::to_string(r.verdict.outcome));\n"
         "}\n";
}

}  // namespace spikehunt
