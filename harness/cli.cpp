#include "harness/cli.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>

#include <cstdio>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "harness/burst.h"
#include "harness/child.h"
#include "harness/doctor.h"
#include "harness/checkpoint.h"
#include "harness/env.h"
#include "harness/guard.h"
#include "harness/report.h"
#include "harness/repro.h"
#include "harness/results.h"
#include "harness/safetensors.h"
#include "scenarios/catalog.h"
#include "scenarios/files.h"
#include "scenarios/models.h"
#include "scenarios/planted.h"

namespace spikehunt {

namespace {

std::string thousands(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return s;
}

// ---- run ----

struct RunArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string out = "results";
  bool no_checkpoints = false;
  bool fail_fast = false;
  bool print_config = false;
};

// Where a config came from, as headers print it: "<built-in default>" or the
// file, and the overrides ("my.json with --set optimizer.lr=0.1").
std::string config_source(const std::string& file, const std::vector<std::string>& sets) {
  std::string s = file.empty() ? "<built-in default>" : file;
  if (!sets.empty()) s += " with --set";
  for (const std::string& x : sets) s += " " + x;
  return s;
}

// What a config starts from, said plainly: a file from the field defaults,
// no file from the built-in default (the field defaults and a few changes).
std::string config_origin(const std::string& file) {
  if (!file.empty()) return file + ": the fields it sets over the field defaults (README: Configs)";
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
    std::cout << "  model    scenario \"" << c.scenario << "\" (" << thousands(parameter_count(scenario->model()))
              << " parameters, " << steps << "), registered by this program\n";
    std::cout << "  train    " << train << "\n";
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

int run_verb(const RunArgs& a) {
  const std::string source = config_source(a.config, a.sets);
  const TrainingConfig config = a.config.empty() ? default_config(a.sets) : load_config(a.config, a.sets);
  if (a.print_config) {
    std::cerr << "# " << config_origin(a.config) << "\n";  // stdout stays JSON
    std::cout << config_to_json(config).dump(2) << "\n";
    return kExitOk;
  }
  configure_runtime(config);
  const Environment env = environment(to_string(config.device), config.threads);
  std::unique_ptr<Scenario> scenario;
  std::optional<TrainingError> setup_error;
  try {
    scenario = in_training_code("setup", {}, [&] { return make_scenario(config); });
  } catch (const TrainingError& e) {  // the scenario's own constructor threw: a finding
    setup_error = e;
  }
  print_header(config, source, scenario.get(), env);

  RunDirectory dir(a.out, config);
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
    std::cout << "\nwrote " << dir.commit() << "/ (config.json, verdict.json)\n";
    return kExitFinding;
  }
  TraceWriter trace_writer(dir.file("trace.jsonl"));
  const bool tty = ::isatty(STDERR_FILENO);
  BurstOptions options;
  options.keep_states = !a.no_checkpoints;
  options.fail_fast = a.fail_fast;
  options.on_step = [&](const StepRecord& r) {
    trace_writer.write(r);
    if (tty) {
      std::fprintf(stderr, "\r  step %lld/%lld  loss %-10s %-10s", static_cast<long long>(r.step + 1),
                   static_cast<long long>(planned_optimizer_steps(*scenario)), fmt(r.loss).c_str(), to_string(r.health));
    }
  };
  BurstResult result = run_burst(*scenario, config.health, options);
  if (tty) std::fprintf(stderr, "\r%60s\r", "");
  trace_writer.close();
  const Verdict& v = result.verdict;

  std::cout << story_table(result.trace, v) << "\n" << verdict_text(v, result.trace);

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
  write_file_atomic(dir.file("repro.json"), repro_to_json(repro));
  files.push_back("repro.json");
  const std::string path = dir.commit();
  std::cout << "\nwrote " << path << "/ (";
  for (size_t i = 0; i < files.size(); ++i) std::cout << (i ? ", " : "") << files[i];
  std::cout << ")\nreplay it: " << program_name() << " replay " << path << "/repro.json"
            << (repro.checkpoint ? " --from-checkpoint" : "") << "\n";
  return v.outcome == Outcome::kHealthy ? kExitOk : kExitFinding;
}

// ---- audit ----

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

int audit_verb(const std::string& file) {
  const SafeTensors f = read_safetensors(file);
  const std::vector<TensorAudit> audits = audit(f);
  std::printf("%-40s %-5s %-18s %10s %10s %10s %12s\n", "tensor", "dtype", "shape", "NaN", "+Inf", "-Inf",
              "max|finite|");
  int bad = 0;
  for (const TensorAudit& a : audits) {
    std::printf("%-40s %-5s %-18s %10lld %10lld %10lld %12s\n", a.name.c_str(), to_string(a.dtype),
                shape_text(a.shape).c_str(), static_cast<long long>(a.nan), static_cast<long long>(a.pos_inf),
                static_cast<long long>(a.neg_inf),
                a.nan + a.pos_inf + a.neg_inf == a.numel && a.numel > 0 ? "none" : fmt(a.max_abs).c_str());
    bad += !a.finite();
  }
  for (const auto& [k, v] : f.metadata) std::printf("metadata %s = %s\n", k.c_str(), v.c_str());
  std::printf("%s: %zu tensors, %d with non-finite values\n", file.c_str(), audits.size(), bad);
  return bad == 0 ? kExitOk : kExitFinding;
}

int pair_verb(const std::string& a_path, const std::string& b_path) {
  const SafeTensors a = read_safetensors(a_path);
  const SafeTensors b = read_safetensors(b_path);
  const PairDiff d = compare(a, b);
  if (d.same) {
    std::printf("same state: %zu tensors, bit-identical\n", a.tensors.size());
    return kExitOk;
  }
  std::printf("different state: first differing tensor %s: %s\n", d.first_tensor.c_str(), d.reason.c_str());
  if (d.reason == "values") {
    const TensorEntry* t = a.find(d.first_tensor);
    std::printf("  %lld of %lld elements differ; largest |a - b| = %s at flat index %lld\n",
                static_cast<long long>(d.differing), static_cast<long long>(t ? t->numel() : 0),
                fmt(d.max_abs_diff).c_str(), static_cast<long long>(d.max_diff_index));
  }
  return kExitFinding;
}

// ---- burst (hidden: what a sweep's children run) ----

struct BurstArgs {
  std::string config, result, repro, guard;
  bool hashes = false;
  int64_t heldout = 0;
};

int burst_verb(const BurstArgs& a) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // die with the sweep that spawned us
  const TrainingConfig config = load_config(a.config);
  if (!a.guard.empty()) {  // a guard case: the whole GuardRun (every loss too)
    write_file_atomic(a.result, guard_run_to_json(guard_run({a.guard, config})).dump() + "\n");
    return kExitOk;
  }
  BurstSummary summary;
  if (!a.repro.empty()) {
    Repro repro = record_repro(config, a.repro);
    summary = summary_of(repro.verdict, std::move(repro.step_hashes));
  } else if (a.heldout > 0) {
    summary = run_config_measured(config, a.heldout);
  } else {
    BurstResult r = run_config(config, BurstOptions{});
    summary = summary_of(r.verdict, std::move(r.step_hashes));
  }
  if (!a.hashes) summary.step_hashes.clear();
  summary.environment = environment(to_string(config.device), config.threads);
  nlohmann::json j = to_json(summary);
  j["config_hash"] = config_hash(config).hex();
  write_file_atomic(a.result, j.dump() + "\n");
  return kExitOk;
}

// ---- worker (hidden: a pool's persistent worker, child.h) ----

int worker_verb() {
  return serve_worker([](const std::vector<std::string>& args) {
    // What a fresh process starts with: the default generators' seed (a
    // scenario that never seeds draws what it would in a process of its own).
    torch::manual_seed(c10::default_rng_seed_val);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // A fresh command line a job: nothing parsed by one job is left for the next.
    Cli cli;
    add_harness_verbs(cli);
    return cli.main(int(args.size()), argv.data());
  });
}

// ---- replay ----

struct ReplayArgs {
  std::string file;
  bool from_checkpoint = false;
  int64_t threads = 0;
  bool threads_given = false;
};

int replay_verb(const ReplayArgs& a) {
  if (a.threads_given && a.threads < 1) {
    throw flag_error("replay", "--threads", std::to_string(a.threads), "must be at least 1",
                     "leave it out to replay on the repro's thread count");
  }
  const Repro repro = read_repro(a.file);
  ReplayOptions options;
  options.from_checkpoint = a.from_checkpoint;
  options.threads = a.threads_given ? a.threads : 0;
  const ReplayReport r = replay(repro, a.file, options);
  for (const std::string& w : r.warnings) std::cout << "warning: " << w << "\n";
  const char* from = !a.from_checkpoint ? ""
                     : r.start_step == 0 ? " (its checkpoint: the onset is the first step, so it holds the initial state)"
                                         : " (its checkpoint)";
  std::printf("replayed %s from step %lld%s: %lld steps in %.2f s\n", a.file.c_str(),
              static_cast<long long>(r.start_step), from, static_cast<long long>(r.steps_run), r.seconds);
  if (r.reproduced) {
    std::printf("reproduced: %s", to_string(r.verdict.outcome));
    if (r.verdict.fault) std::printf(", %s", r.verdict.fault->describe().c_str());
    if (r.verdict.failure_step) std::printf(" at step %lld", static_cast<long long>(*r.verdict.failure_step));
    std::printf(", hash chain %s\n", r.verdict.hash_chain.hex().c_str());
    return kExitOk;
  }
  std::printf("not reproduced: %s\n", r.mismatch.c_str());
  return kExitFinding;
}

}  // namespace

// ---- doctor ----

namespace {

struct DoctorArgs {
  std::string config, planted;
  std::vector<std::string> sets;
  bool json = false, verbose = false;
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

int doctor_verb(const DoctorArgs& a) {
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
    config = a.config.empty() ? default_config(a.sets) : load_config(a.config, a.sets);
    if (config.scenario == "standard") {  // load the data once for every sign
      auto data = std::make_shared<const Dataset>(load_dataset(config.dataset));
      make = [config, data] { return make_scenario(config, data); };
    } else {
      make = [config] { return make_scenario(config); };
    }
    title = config_source(a.config, a.sets);
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

// ---- the CLI ----

InputError flag_error(const std::string& verb, const std::string& flag, const std::string& value,
                      const std::string& message, const std::string& hint) {
  return InputError(program_name() + " " + verb, flag, value, message, hint);
}

struct Cli::Impl {
  CLI::App app{"spikehunt: fuzzing and numerical stress-testing for deep-learning training"};
  std::vector<std::pair<CLI::App*, std::function<int()>>> verbs;
};

Cli::Cli() : impl_(std::make_unique<Impl>()) {
  impl_->app.set_version_flag("--version", std::string("spikehunt ") + kVersion + " (LibTorch " +
                                               environment("cpu", 1).libtorch + ", BLAS: " + blas_in_use() + ")");
  impl_->app.require_subcommand(1);
}

Cli::~Cli() = default;

CLI::App* Cli::verb(const std::string& name, const std::string& description, std::function<int()> run, bool hidden) {
  CLI::App* command = impl_->app.add_subcommand(name, description);
  if (hidden) command->group("");
  impl_->verbs.emplace_back(command, std::move(run));
  return command;
}

namespace {

// Flags that moved, with what to write instead: (verb, flag) -> hint.
const std::map<std::pair<std::string, std::string>, std::string>& moved_flags() {
  static const std::map<std::pair<std::string, std::string>, std::string> moved = {
      {{"shrink", "--budget"}, "shrink counts bursts: --bursts N (a sweep's --budget is its wall time)"},
  };
  return moved;
}

std::string verb_list(const std::vector<std::string>& verbs) {
  std::string s;
  for (const std::string& v : verbs) s += (s.empty() ? "" : ", ") + v;
  return s;
}

// The flags a verb takes, by their long (and short) names.
std::vector<std::string> flags_of(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& sn : o->get_snames()) names.push_back("-" + sn);
  }
  return names;
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

// A command-line parse error in the form of config errors: error: / hint:.
InputError flag_error(const CLI::ParseError& e, const std::string& program, const std::string& verb,
                      const CLI::App* app) {
  const std::string where = verb.empty() ? program : program + " " + verb;
  const std::string help = where + " --help lists its flags";
  const std::string what = e.what();
  std::smatch m;
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr && app != nullptr) {
    std::vector<Problem> problems;
    std::vector<std::string> args;
    std::istringstream extras(what.substr(what.find(':') + 1));
    for (std::string arg; extras >> arg;) args.push_back(arg);
    const bool any_flag = std::any_of(args.begin(), args.end(), [](const std::string& a) { return a[0] == '-'; });
    for (const std::string& arg : args) {
      if (arg[0] != '-') {  // beside an unknown flag, most likely its value
        if (!any_flag) problems.push_back({arg, "", "is not an argument of " + where, help});
        continue;
      }
      const std::string flag = arg.substr(0, arg.find('='));
      const auto moved = moved_flags().find({verb, flag});
      const std::string near = nearest(flag, flags_of(*app));
      problems.push_back({flag, "", "is not a flag of " + where,
                          moved != moved_flags().end() ? moved->second
                          : near.empty()               ? help
                                                       : "did you mean \"" + near + "\"? (" + help + ")"});
    }
    return InputError(where, std::move(problems));
  }
  if (std::regex_search(what, m, std::regex(R"(Could not convert: (\S+) = (.*))"))) {
    std::string kind = "is not a value of its type";
    if (app != nullptr) {
      for (const CLI::Option* o : app->get_options()) {
        if (!o->check_name(m[1])) continue;
        const std::string type = o->get_type_name();
        kind = type == "INT" ? "is not an integer" : type == "UINT" ? "is not a non-negative integer"
             : type == "FLOAT" ? "is not a number" : "is not a " + type;
      }
    }
    return InputError(where, m[1], m[2], kind, help);
  }
  if (std::regex_search(what, m, std::regex(R"((\S+): \d+ required (\S+) missing)"))) {
    return InputError(where, m[1], "", "needs a value (" + std::string(m[2]) + ")", help);
  }
  return InputError(where, "", "", what, help);
}

}  // namespace

int Cli::main(int argc, char** argv) {
  set_invoked_as(argc > 0 ? argv[0] : "spikehunt");
  const std::string program = program_name();
  // The verb: the first argument that is not a flag.
  std::string verb;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help" || a == "--version") break;
    if (!a.empty() && a[0] != '-') {
      verb = a;
      break;
    }
  }
  std::vector<std::string> verbs;  // as help lists them (the hidden ones left out)
  const CLI::App* verb_app = nullptr;
  for (const auto& [command, run] : impl_->verbs) {
    if (!command->get_group().empty()) verbs.push_back(command->get_name());
    if (command->get_name() == verb) verb_app = command;
  }
  if (!verb.empty() && verb_app == nullptr) {
    const std::string near = nearest(verb, verbs);
    std::cerr << InputError(program, verb, "", "is not a verb of " + program,
                            (near.empty() ? "" : "did you mean \"" + near + "\"? ") + "the verbs: " + verb_list(verbs))
                     .what()
              << "\n";
    return kExitBadInput;
  }
  if (verb.empty() && argc > 1 && std::string(argv[1]) != "-h" && std::string(argv[1]) != "--help" &&
      std::string(argv[1]) != "--version") {
    std::cerr << InputError(program, argv[1], "", "is not a flag of " + program,
                            "its flags are --help and --version; a verb comes first: " + program + " VERB ...")
                     .what()
              << "\n";
    return kExitBadInput;
  }
  if (argc <= 1) {
    std::cerr << InputError(program, "", "", "needs a verb", "the verbs: " + verb_list(verbs) + " (" + program +
                                                                 " --help, " + program + " VERB --help)")
                     .what()
              << "\n";
    return kExitBadInput;
  }
  try {
    impl_->app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return impl_->app.exit(e) == 0 ? kExitOk : kExitBadInput;
  } catch (const CLI::CallForAllHelp& e) {
    return impl_->app.exit(e) == 0 ? kExitOk : kExitBadInput;
  } catch (const CLI::CallForVersion& e) {
    return impl_->app.exit(e) == 0 ? kExitOk : kExitBadInput;
  } catch (const CLI::ParseError& e) {
    std::cerr << flag_error(e, program, verb, verb_app).what() << "\n";
    return kExitBadInput;
  }
  try {
    for (auto& [command, run] : impl_->verbs) {
      if (command->parsed()) return run();
    }
  } catch (const InputError& e) {
    std::cerr << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitInternal;
  }
  return kExitOk;
}

void add_harness_verbs(Cli& cli) {
  auto run_args = std::make_shared<RunArgs>();
  CLI::App* run = cli.verb("run", "Run one training burst under the monitor and tell the story of its failure",
                           [run_args] { return run_verb(*run_args); });
  run->add_option("--config", run_args->config, "Config JSON (default: the built-in default, configs/default.json)");
  run->add_option("--set", run_args->sets, "Override one field, e.g. --set optimizer.lr=0.01 (repeatable)")
      ->allow_extra_args(false);
  run->add_option("--out", run_args->out, "Folder the run's folder <YYYYMMDD-HHMMSS>-<config hash>/ is written under (relative to the current directory)")->capture_default_str();
  run->add_flag("--no-checkpoints", run_args->no_checkpoints, "Do not keep the last healthy / first bad state");
  run->add_flag("--fail-fast", run_args->fail_fast,
                "Stop a step at its first non-finite statistic (before backward / the optimizer step); "
                "on a GPU a host sync per statistic");
  run->add_flag("--print-config", run_args->print_config, "Print the resolved config (after --set) as JSON and exit");

  struct AuditArgs {
    std::string file;
    std::vector<std::string> pair;
  };
  auto audit_args = std::make_shared<AuditArgs>();
  CLI::App* audit_cmd = cli.verb(
      "audit", "Count NaN/+Inf/-Inf per tensor of a safetensors checkpoint, or compare two", [audit_args] {
        const AuditArgs& a = *audit_args;
        if (!a.pair.empty() && !a.file.empty()) {
          throw flag_error("audit", "--pair", "", "takes two files; give either FILE or --pair A B");
        }
        if (!a.pair.empty()) return pair_verb(a.pair[0], a.pair[1]);
        if (a.file.empty()) throw flag_error("audit", "FILE", "", "is missing", program_name() + " audit FILE.safetensors");
        return audit_verb(a.file);
      });
  audit_cmd->add_option("file", audit_args->file, "Checkpoint to audit");
  audit_cmd->add_option("--pair", audit_args->pair, "Two checkpoints: are they the same state?")->expected(2);

  struct GuardArgs {
    std::string action, suite, out, baseline;
    std::vector<std::string> sets;
    GuardOptions options;
  };
  auto guard_args = std::make_shared<GuardArgs>();
  CLI::App* guard = cli.verb(
      "guard", "Record a pinned suite of configs, or check that none got less stable than its baseline", [guard_args] {
        const GuardArgs& g = *guard_args;
        const std::string verb = "guard " + g.action;
        if (g.suite.empty()) throw flag_error(verb, "--suite", "", "is required", program_name() + " " + verb + " --suite FILE ...");
        if (g.action == "record") {
          if (g.out.empty()) throw flag_error(verb, "--out", "", "is required", "where to write the baseline JSON");
          if (!g.baseline.empty()) throw flag_error(verb, "--baseline", g.baseline, "applies to guard check", "record writes --out");
          return guard_record(g.suite, g.out, g.sets, std::cout, g.options);
        }
        if (g.baseline.empty()) {
          throw flag_error(verb, "--baseline", "", "is required", "the file guard record --out wrote");
        }
        if (!g.out.empty()) {
          throw flag_error(verb, "--out", g.out, "applies to guard record", "check writes nothing: it reads --baseline");
        }
        return guard_check(g.suite, g.baseline, g.sets, std::cout, g.options);
      });
  guard->add_option("-j,--jobs", guard_args->options.jobs, "Configs at once, each in its own worker process")
      ->capture_default_str()->check(CLI::PositiveNumber);
  guard->add_option("--timeout", guard_args->options.timeout_seconds,
                    "Seconds a config may train; past it, a timeout (a regression). 0: none")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  guard->add_option("action", guard_args->action, "record | check")->required()->check(CLI::IsMember({"record", "check"}));
  guard->add_option("--suite", guard_args->suite, "Suite JSON: the pinned configs and the tolerances");
  guard->add_option("--out", guard_args->out, "record: the baseline JSON to write");
  guard->add_option("--baseline", guard_args->baseline, "check: the baseline JSON guard record wrote");
  guard->add_option("--set", guard_args->sets, "Override a field of every config, e.g. --set optimizer.lr=0.1 (repeatable)")
      ->allow_extra_args(false);

  auto replay_args = std::make_shared<ReplayArgs>();
  CLI::App* replay_cmd = cli.verb("replay", "Rerun a repro file and check every recorded hash, the failure step, stage and tensor",
                                  [replay_args] { return replay_verb(*replay_args); });
  replay_cmd->add_option("file", replay_args->file, "The .repro.json file")->required();
  replay_cmd->add_flag("--from-checkpoint", replay_args->from_checkpoint,
                       "Start from the repro's last healthy checkpoint instead of step 0");
  CLI::Option* threads =
      replay_cmd->add_option("--threads", replay_args->threads, "Thread count (default: the repro's; others are not bit-exact)");
  replay_cmd->callback([replay_args, threads] { replay_args->threads_given = threads->count() > 0; });

  auto doctor_args = std::make_shared<DoctorArgs>();
  CLI::App* doctor_cmd = cli.verb("doctor", "Run the vital signs that catch the classic training bugs",
                                  [doctor_args] {
                                    return doctor_args->json ? doctor_json_main(*doctor_args) : doctor_verb(*doctor_args);
                                  });
  doctor_cmd->add_option("--config", doctor_args->config, "Config JSON (default: the built-in default)");
  doctor_cmd->add_option("--set", doctor_args->sets, "Override one field (repeatable)")->allow_extra_args(false);
  doctor_cmd->add_option("--planted", doctor_args->planted,
                         "A planted-bug scenario: healthy, detached_logits, log_zero_loss, shifted_labels, "
                         "imbalanced_majority, vanishing_deep_sigmoid, exploding_no_clip, dead_relu");
  doctor_cmd->add_option("--steps", doctor_args->steps, "Steps of the watched training run")->capture_default_str();
  doctor_cmd->add_option("--overfit-steps", doctor_args->overfit_steps, "Budget to overfit one batch")
      ->capture_default_str();
  doctor_cmd->add_flag("--json", doctor_args->json, "Machine-readable output (a JSON document, also on errors)");
  doctor_cmd->add_flag("--verbose", doctor_args->verbose, "With a thrown error's whole text (LibTorch's backtrace)");

  auto burst_args = std::make_shared<BurstArgs>();
  CLI::App* burst = cli.verb("burst", "Run one burst and write its summary (what sweeps spawn)",
                             [burst_args] { return burst_verb(*burst_args); }, /*hidden=*/true);
  burst->add_option("--config", burst_args->config, "The config JSON to train")->required();
  burst->add_option("--result", burst_args->result, "Where to write the burst's summary JSON")->required();
  burst->add_option("--repro", burst_args->repro, "Also record a repro file here (with its checkpoint and trace)");
  burst->add_flag("--hashes", burst_args->hashes, "Put every step's hashes in the summary");
  burst->add_option("--heldout", burst_args->heldout,
                    "Also measure the held-out loss before and after on this many samples, and the largest logits");
  burst->add_option("--guard", burst_args->guard, "Run it as the guard case of this name: write its GuardRun (every loss)");
  cli.verb("worker", "Run bursts sent on fd 3 until it closes (a sweep's persistent worker)", [] { return worker_verb(); },
           /*hidden=*/true);
}

}  // namespace spikehunt
