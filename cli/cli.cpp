// cli.cpp — the command line itself: verbs, parsing, and CLI11's parse
// errors in the form of config errors (with did-you-mean), mapped to exit codes.
#include "cli/cli.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>

#include <CLI/CLI.hpp>

#include "base/did_you_mean.h"
#include "base/error.h"
#include "base/program.h"
#include "cli/flags.h"
#include "cli/verbs.h"
#include "harness/env.h"

namespace spikehunt {

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

// A command-line parse error in the form of config errors: error: / hint:.
InputError parse_error(const CLI::ParseError& e, const std::string& program, const std::string& verb,
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
      const std::string near = closest(flag, flags_of(*app), /*min_edits=*/2, /*containing=*/false);
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
    const std::string near = closest(verb, verbs, /*min_edits=*/2, /*containing=*/false);
    std::cerr << InputError(program, verb, "", "is not a verb of " + program,
                            (near.empty() ? "" : "did you mean \"" + near + "\"? ") + "the verbs: " + verb_list(verbs))
                     .what()
              << "\n";
    return kExitBadInput;
  }
  // `run|sweep|doctor -- COMMAND` (a training command of the user's, unmodified) is the Python
  // package's: the monitor goes into the command's Python process (python/spikehunt/_command.py).
  const bool on_commands = verb == "run" || verb == "sweep" || verb == "doctor";
  for (int i = 1; on_commands && i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    std::cerr << InputError(program + " " + verb, "--", "",
                            "takes a training command (" + verb + " -- COMMAND) from the Python package only",
                            "python3 -m spikehunt " + verb + " [flags] -- COMMAND ... (pip install . puts it on PATH "
                            "as spikehunt; docs/commands.md)")
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
    std::cerr << parse_error(e, program, verb, verb_app).what() << "\n";
    return kExitBadInput;
  }
  try {
    for (auto& [command, run] : impl_->verbs) {
      if (!command->parsed()) continue;
      refuse_outputs_that_are_inputs(*command, command->get_name());
      ensure_open_files(*command, command->get_name());
      try {
        return run();
      } catch (const InputError& e) {
        // A check that saw only the config (a model too large for this machine) said of the
        // file the config came from: the verb's --config, the sweep's --space, or the repro
        // replay reads (its fields under "config.").
        if (e.file() != "config") throw;
        for (const auto& [flag, prefix] : {std::pair<const char*, const char*>{"--config", ""}, {"--space", ""},
                                           {"file", "config."}}) {
          const CLI::Option* from = command->get_option_no_throw(flag);
          if (from != nullptr && from->count() > 0) throw refiled(e, from->as<std::string>(), prefix);
        }
        throw;
      }
    }
  } catch (const InputError& e) {
    std::cerr << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::filesystem::filesystem_error& e) {
    // "filesystem error: cannot create directories: No space left on device [DIR]" said as
    // "error: DIR: cannot create directories: No space left on device" and what to do.
    std::string what = e.what();
    if (what.rfind("filesystem error: ", 0) == 0) what = what.substr(18);
    if (const size_t bracket = what.find(" ["); bracket != std::string::npos) what.resize(bracket);
    std::cerr << "error: " << (e.path1().empty() ? "" : e.path1().string() + ": ") << what << "\n";
    if (const std::string hint = system_error_hint(e.code().value()); !hint.empty()) std::cerr << "hint: " << hint << "\n";
    return kExitInternal;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitInternal;
  }
  return kExitOk;
}

void add_verbs(Cli& cli) {
  // In the order help lists them.
  add_run_verb(cli);
  add_audit_verb(cli);
  add_guard_verb(cli);
  add_replay_verb(cli);
  add_doctor_verb(cli);
  add_burst_verb(cli);
  add_worker_verb(cli);
  add_rank_verb(cli);
  add_sweep_verb(cli);
  add_merge_verb(cli);
  add_compare_verb(cli);
  add_shrink_verb(cli);
  add_lr_sensitivity_verb(cli);
  add_calibrate_verb(cli);
  add_report_verb(cli);
}

int cli_main(int argc, char** argv) {
  Cli cli;
  add_verbs(cli);
  return cli.main(argc, argv);
}

}  // namespace spikehunt
