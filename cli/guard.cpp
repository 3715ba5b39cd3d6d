// guard.cpp — `spikehunt guard record|check`: a pinned suite of configs
// recorded as a baseline, then checked for runs that got less stable.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/program.h"
#include "cli/flags.h"
#include "cli/verbs.h"
#include "harness/guard.h"

namespace spikehunt {

void add_guard_verb(Cli& cli) {
  struct GuardArgs {
    std::string action, suite, out, baseline, rules, junit;
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
          if (!g.junit.empty()) throw flag_error(verb, "--junit", g.junit, "applies to guard check", "record writes --out");
          refuse_foreign_output(verb, "--out", g.out, OutputKind::kBaseline);
          return guard_record(g.suite, g.out, with_rules(g.rules, g.sets), std::cout, g.options);
        }
        if (g.baseline.empty()) {
          throw flag_error(verb, "--baseline", "", "is required", "the file guard record --out wrote");
        }
        if (!g.out.empty()) {
          throw flag_error(verb, "--out", g.out, "applies to guard record", "check writes nothing: it reads --baseline");
        }
        GuardOptions options = g.options;
        if (!g.junit.empty()) {
          options.junit_path = checked_output_file(verb, "--junit", g.junit);
          refuse_foreign_output(verb, "--junit", g.junit, OutputKind::kJunit);
        }
        return guard_check(g.suite, g.baseline, with_rules(g.rules, g.sets), std::cout, options);
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
  guard->add_option("--junit", guard_args->junit,
                    "check: also write JUnit XML (Jenkins, GitLab, GitHub test reports), a test case per config");
  add_rules_flag(guard, guard_args->rules);
  guard->add_option("--set", guard_args->sets, "Override a field of every config, e.g. --set optimizer.lr=0.1 (repeatable)")
      ->allow_extra_args(false);
}

}  // namespace spikehunt
