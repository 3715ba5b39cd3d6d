// run.cpp — `spikehunt run`: one burst under the monitor, its story, and a
// replayable result folder (config, trace, verdict, checkpoints, repro).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/files.h"
#include "base/number_format.h"
#include "base/program.h"
#include "cli/flags.h"
#include "cli/verbs.h"
#include "harness/burst.h"
#include "harness/checkpoint.h"
#include "harness/health.h"
#include "harness/env.h"
#include "harness/report.h"
#include "harness/repro.h"
#include "harness/results.h"
#include "scenarios/catalog.h"
#include "scenarios/models.h"

namespace spikehunt {

namespace {

struct RunArgs {
  std::string config, rules;
  std::vector<std::string> sets;
  std::string out = "results";
  bool no_checkpoints = false;
  bool fail_fast = false;
  bool print_config = false;
};


// What a config starts from, said plainly: a file from the field defaults,
// no file from the built-in default (the field defaults and a few changes).
std::string config_origin(const std::string& file) {
  if (!file.empty()) return file + ": the fields it sets over the field defaults (docs/config.md)";
  std::string changes;
  for (const std::string& d : config_diff(TrainingConfig{}, default_config())) changes += " " + d;
  return "<built-in default> (configs/default.json): the field defaults with" + changes;
}

// The config line and, when the scenario was built, what it is.
void print_header(const TrainingConfig& c, const std::string& source, Scenario* scenario, const Environment& env) {
  std::cout << describe(env) << "\n";
  std::cout << "config     " << source << "  name \"" << c.name << "\"  hash "
            << config_hash(c).hex().substr(0, 16) << "\n";
  if (scenario == nullptr) {
    std::cout << "  model    scenario \"" << c.scenario << "\" (not built)\n\n" << std::flush;
    return;
  }
  const std::string steps = std::to_string(planned_optimizer_steps(*scenario)) + " steps";
  std::string train = describe_optimizer(c.optimizer) + ", batch " + std::to_string(c.batch_size);
  if (c.accumulation_steps > 1) train += " x " + std::to_string(c.accumulation_steps) + " accumulated";
  train += ", grad clip " + (c.grad_clip > 0 ? fmt(c.grad_clip) : std::string("off"));
  if (const std::string sched = describe_schedule(c.schedule); !sched.empty()) train += ", lr " + sched;
  const std::vector<NamedOptimizer> optimizers = scenario->optimizers();
  if (optimizers.size() > 1) {
    train += ", optimizers";
    for (const NamedOptimizer& o : optimizers) train += " " + o.name;
  }
  if (c.scenario != "standard") {
    // A registered scenario builds its own optimizers and may clip as it likes:
    // what they are is read from the scenario, not from the config's fields.
    std::string own;
    for (const NamedOptimizer& o : optimizers) {
      std::vector<std::string> lrs;  // its groups' distinct rates, as the scenario built them
      for (auto& g : o.optimizer->param_groups()) {
        if (std::find(lrs.begin(), lrs.end(), fmt(group_lr(g))) == lrs.end()) lrs.push_back(fmt(group_lr(g)));
      }
      own += (own.empty() ? "" : "; ") + o.name + " " + optimizer_kind(*o.optimizer) + " lr";
      for (size_t i = 0; i < lrs.size(); ++i) own += (i == 0 ? " " : "/") + lrs[i];
      own += " as built";
    }
    own += ", batch " + std::to_string(c.batch_size);
    if (c.accumulation_steps > 1) own += " x " + std::to_string(c.accumulation_steps) + " accumulated";
    own += ", grad clip " + (scenario->grad_clip() > 0 ? fmt(scenario->grad_clip()) : std::string("off"));
    if (const std::string sched = describe_schedule(c.schedule); !sched.empty()) own += ", lr " + sched;
    std::cout << "  model    scenario \"" << c.scenario << "\" (" << thousands(parameter_count(scenario->model()))
              << " parameters, " << steps << "), registered by this program\n";
    std::cout << "  train    " << own << "\n";
    if (!c.params.values().empty()) std::cout << "  params   " << describe_params(c.params) << "\n";
    std::cout << "  seed     " << c.seed << "\n\n" << std::flush;
    return;
  }
  std::cout << "  model    " << c.model.kind;
  if (c.model.kind == "mlp") std::cout << " " << c.model.mlp_depth << "x" << c.model.mlp_width;
  std::cout << " (" << thousands(parameter_count(scenario->model())) << " parameters), ";
  std::cout << describe_model_details(c) << "\n";
  std::cout << "  train    " << train << (c.precision != Precision::kFp32 ? std::string(", ") + to_string(c.precision) : "")
            << "\n";
  if (c.dataset.kind == DatasetKind::kText) {
    std::cout << "  protocol " << c.protocol.epochs_per_phase << " epoch(s) of " << c.model.gpt.context
              << "-token windows";
  } else {
    std::cout << "  protocol " << describe_protocol(c.protocol);
  }
  if (c.max_batches_per_epoch > 0) std::cout << ", <=" << c.max_batches_per_epoch << " batches/epoch";
  std::cout << " (" << steps << ")\n";
  std::cout << "  data     "
            << (c.dataset.kind == DatasetKind::kSynthetic ? "synthetic"
                : c.dataset.kind == DatasetKind::kText   ? "text " + c.dataset.text_path + " (bytes)"
                                                         : c.dataset.path)
            << "\n";
  std::cout << "  seed     " << c.seed << "\n\n" << std::flush;
}

// Ctrl-C while alive sets flag() (the burst ends at the next step); a second
// Ctrl-C goes to the handler there was before, at once.
class CatchInterrupt {
 public:
  CatchInterrupt() {
    flag_.store(false);
    struct sigaction sa {};
    sa.sa_handler = [](int) {
      if (flag_.exchange(true)) {
        ::sigaction(SIGINT, &previous_, nullptr);
        ::raise(SIGINT);
      }
    };
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &previous_);
  }
  ~CatchInterrupt() { ::sigaction(SIGINT, &previous_, nullptr); }
  CatchInterrupt(const CatchInterrupt&) = delete;
  CatchInterrupt& operator=(const CatchInterrupt&) = delete;
  const std::atomic<bool>& flag() const { return flag_; }

 private:
  static inline std::atomic<bool> flag_{false};
  static inline struct sigaction previous_ {};
};

// The exit code of a run ended by Ctrl-C, as a shell reports one killed by SIGINT.
constexpr int kExitInterrupted = 130;

int run_verb(const RunArgs& a) {
  const std::vector<std::string> sets = with_rules(a.rules, a.sets);
  const std::string source = config_source(a.config, sets);
  const TrainingConfig config = a.config.empty() ? default_config(sets) : load_config(a.config, sets);
  if (a.print_config) {
    std::cerr << "# " << config_origin(a.config) << "\n";  // stdout stays JSON
    std::cout << config_to_json(config).dump(2) << "\n";
    return kExitOk;
  }
  configure_runtime(config);
  const Environment env = environment(to_string(config.device), config.threads);
  // The results root absolute before the training code runs (it may change the working directory);
  // paths are printed as given, from where the command was run.
  const std::string root = std::filesystem::absolute(a.out).string();
  std::unique_ptr<Scenario> scenario;
  std::optional<TrainingError> setup_error;
  try {
    scenario = in_training_code("setup", {}, [&] { return make_scenario(config); });
  } catch (const TrainingError& e) {  // the scenario's own constructor threw: a finding
    setup_error = e;
  }
  print_header(config, source, scenario.get(), env);
  if (scenario && config.schedule.warmup_steps > planned_optimizer_steps(*scenario)) {  // allowed, but said
    std::fprintf(stderr,
                 "warning: schedule.warmup_steps = %lld is longer than the run (%lld optimizer steps): the learning "
                 "rate never reaches optimizer.lr\n",
                 static_cast<long long>(config.schedule.warmup_steps),
                 static_cast<long long>(planned_optimizer_steps(*scenario)));
  }

  RunDirectory dir(root, config);
  const auto shown = [&](const std::string& committed) {
    return (std::filesystem::path(a.out) / std::filesystem::path(committed).filename()).string();
  };
  save_config(config, dir.file("config.json"));
  if (setup_error) {
    Verdict v;
    set_crashed(v, *setup_error);
    std::cout << verdict_text(v, Trace{});
    nlohmann::json verdict = to_json(v);
    verdict["config_hash"] = config_hash(config).hex();
    verdict["config_name"] = config.name;
    verdict["environment"] = to_json(env);
    write_file_atomic(dir.file("verdict.json"), verdict.dump(2) + "\n");
    std::cout << "\nwrote " << shown(dir.commit()) << "/ (config.json, verdict.json)\n";
    return kExitFinding;
  }
  TraceWriter trace_writer(dir.file("trace.jsonl"));
  const bool tty = ::isatty(STDERR_FILENO);
  BurstOptions options;
  options.keep_states = !a.no_checkpoints;
  options.fail_fast = a.fail_fast;
  bool first_step = true;
  options.on_step = [&](const StepRecord& r) {
    trace_writer.write(r);
    if (first_step) {  // per-tensor rules that name no tensor of this model: said once, not an error
      first_step = false;
      for (const std::string& line : unused_layer_rules(config.health, r)) {
        std::fprintf(stderr, "warning: %s\n", line.c_str());
      }
    }
    if (tty) {
      std::fprintf(stderr, "\r  step %lld/%lld  loss %-10s %-10s", static_cast<long long>(r.step + 1),
                   static_cast<long long>(planned_optimizer_steps(*scenario)), fmt(r.loss).c_str(), to_string(r.health));
    }
  };
  BurstResult result;
  {
    CatchInterrupt interrupt;  // Ctrl-C ends the run at the next step, its results kept
    options.stop = &interrupt.flag();
    result = run_burst(*scenario, config.health, options);
  }
  if (tty) std::fprintf(stderr, "\r%60s\r", "");
  trace_writer.close();
  const Verdict& v = result.verdict;
  if (result.interrupted) {
    // What ran is kept and named; no repro (a replay runs the whole protocol, which this run did not).
    std::cout << story_table(result.trace, v) << "\ninterrupted (Ctrl-C) after " << v.steps_run << " of "
              << planned_optimizer_steps(*scenario) << " steps: the verdict so far is " << to_string(v.outcome) << "\n";
    nlohmann::json verdict = to_json(v);
    verdict["interrupted"] = true;
    verdict["config_hash"] = config_hash(config).hex();
    verdict["config_name"] = config.name;
    verdict["environment"] = to_json(env);
    write_file_atomic(dir.file("verdict.json"), verdict.dump(2) + "\n");
    std::cout << "\nwrote " << shown(dir.commit()) << "/ (config.json, trace.jsonl up to step " << v.steps_run
              << ", verdict.json with \"interrupted\": true)\n";
    return kExitInterrupted;
  }

  std::cout << story_table(result.trace, v) << "\n" << verdict_text(v, result.trace);
  if (!v.warnings.empty()) {  // each once, however many steps raised it (LibTorch prints every one)
    std::cout << "LibTorch warnings the training code raised (each shown once, with its count; in verdict.json):\n"
              << describe_warnings(v.warnings);
  }

  nlohmann::json verdict = to_json(v);
  verdict["config_hash"] = config_hash(config).hex();
  verdict["config_name"] = config.name;
  verdict["environment"] = to_json(env);
  write_file_atomic(dir.file("verdict.json"), verdict.dump(2) + "\n");
  std::vector<std::string> files = {"config.json", "trace.jsonl", "verdict.json"};
  auto save_state = [&](const std::optional<StateSnapshot>& s, const char* name, const char* meaning) {
    if (!s) return;
    write_checkpoint(dir.file(name), s->tensors,
                     {{"spikehunt", kVersion},
                      {"step", std::to_string(s->step)},
                      {"state", meaning},
                      {"config_hash", config_hash(config).hex()}});
    files.push_back(name);
  };
  save_state(result.last_healthy, "last_healthy.safetensors", "entering the onset step");
  save_state(result.first_bad, "first_bad.safetensors", "after the failure step");
  // Every run is replayable: its repro (the config, every step's hashes, the
  // verdict) points at last_healthy.safetensors when there is one.
  Repro repro;
  repro.config = config;
  repro.environment = env;
  repro.verdict = v;
  repro.step_hashes = result.step_hashes;
  repro.scenario_class = scenario_class(config.scenario);
  if (result.last_healthy) {
    repro.checkpoint = ReproCheckpoint{"last_healthy.safetensors", result.last_healthy->step, result.last_healthy->monitor};
  }
  repro.code = code_identity();
  write_file_atomic(dir.file("repro.json"), repro_to_json(repro));
  files.push_back("repro.json");
  const std::string path = shown(dir.commit());
  std::cout << "\nwrote " << path << "/ (";
  for (size_t i = 0; i < files.size(); ++i) std::cout << (i ? ", " : "") << files[i];
  std::cout << ")\nreplay it: " << program_name() << " replay " << path << "/repro.json"
            << (repro.checkpoint ? " --from-checkpoint" : "") << "\n";
  return v.outcome == Outcome::kHealthy ? kExitOk : kExitFinding;
}

}  // namespace

void add_run_verb(Cli& cli) {
  auto run_args = std::make_shared<RunArgs>();
  CLI::App* run = cli.verb("run", "Run one training burst under the monitor and tell the story of its failure",
                           [run_args] { return run_verb(*run_args); });
  run->add_option("--config", run_args->config, "Config JSON (default: the built-in default, configs/default.json)");
  add_rules_flag(run, run_args->rules);
  run->add_option("--set", run_args->sets, "Override one field, e.g. --set optimizer.lr=0.01 (repeatable)")
      ->allow_extra_args(false);
  run->add_option("--out", run_args->out, "Folder the run's folder <YYYYMMDD-HHMMSS>-<config hash>/ is written under (relative to the current directory)")->capture_default_str();
  run->add_flag("--no-checkpoints", run_args->no_checkpoints, "Do not keep the last healthy / first bad state");
  run->add_flag("--fail-fast", run_args->fail_fast,
                "Stop a step at its first non-finite statistic (before backward / the optimizer step); "
                "on a GPU a host sync per statistic");
  run->add_flag("--print-config", run_args->print_config, "Print the resolved config (after --set) as JSON and exit");
}

}  // namespace spikehunt
