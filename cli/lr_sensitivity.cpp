// lr_sensitivity.cpp — `spikehunt lr-sensitivity`: one config trained over a
// grid of peak learning rates per variant (--vary), and its flags' parsers.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/flags.h"
#include "cli/verbs.h"
#include "generators/lr_sensitivity.h"

namespace spikehunt {

using json = nlohmann::json;

namespace {

// "a,b,,c" → {"a", "b", "", "c"}: the items between commas, empty ones kept.
std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> items;
  for (size_t begin = 0; begin <= text.size();) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    items.push_back(text.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return items;
}

}  // namespace

std::vector<double> parse_lrs(const std::string& text, const char* verb) {
  if (text.empty()) {
    throw flag_error(verb, "--lrs", "\"\"", "is empty", "give learning rates, e.g. --lrs 3e-4,1e-3,3e-3");
  }
  std::vector<double> lrs;
  for (const std::string& item : comma_items(text)) {
    char* end = nullptr;
    const double x = std::strtod(item.c_str(), &end);
    if (item.empty() || end == nullptr || *end != '\0' || !(x > 0) || !(x <= 10)) {
      throw flag_error(verb, "--lrs", text, "holds \"" + item + "\", not a learning rate in (0, 10]",
                       "e.g. --lrs 3e-4,1e-3,3e-3");
    }
    if (std::find(lrs.begin(), lrs.end(), x) != lrs.end()) {  // it would count twice in the sensitivity
      throw flag_error(verb, "--lrs", text, "holds " + item + " twice", "give each learning rate once");
    }
    lrs.push_back(x);
  }
  return lrs;
}

LrVary parse_vary(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 >= text.size()) {
    throw InputError("--vary", text, "", "is not FIELD=V1,V2,...", "e.g. --vary model.gpt.qk_layernorm=false,true");
  }
  LrVary v;
  v.field = text.substr(0, eq);
  for (const std::string& value : comma_items(text.substr(eq + 1))) {
    if (value.empty()) throw InputError("--vary", v.field, text, "has an empty value", "separate values by single commas");
    v.values.push_back(value);
  }
  const json defaults = config_to_json(TrainingConfig{});
  for (const std::string& value : v.values) {  // each value must be one the field takes
    json j = defaults;
    try {
      apply_overrides(j, {v.field + "=" + value});
    } catch (const InputError& e) {
      throw InputError("--vary", unfiled(e.problems()));
    }
  }
  return v;
}

void add_lr_sensitivity_verb(Cli& cli) {
  struct LrArgs : WorkerArgs {
    CLI::App* app = nullptr;
    std::string config, lrs, rules, timeout = "10m", out = "results/lr-sensitivity";
    std::vector<std::string> sets, vary;
    int64_t heldout = 256;
    int jobs = 2;
  };
  auto l = std::make_shared<LrArgs>();
  CLI::App* lr = cli.verb(
      "lr-sensitivity", "Train one config over a grid of peak learning rates per variant; final loss per LR and LR sensitivity",
      [l] {
        check_positive("lr-sensitivity", "-j", l->jobs);
        check_positive("lr-sensitivity", "--heldout", l->heldout);
        LrSensitivityOptions o;
        o.source = l->config;
        o.config = load_config(l->config, with_rules(l->rules, l->sets));
        for (const std::string& v : l->vary) {
          const LrVary parsed = parse_vary(v);
          if (parsed.field == "optimizer.lr") {  // the grid sets it: every variant would be the same runs
            throw InputError("--vary", parsed.field, v, "is what the grid sweeps", "give the learning rates with --lrs");
          }
          for (const LrVary& earlier : o.vary) {
            if (earlier.field == parsed.field) {
              throw InputError("--vary", parsed.field, v, "is varied twice",
                               "give all its values in one --vary " + parsed.field + "=V1,V2,...");
            }
          }
          o.vary.push_back(parsed);
        }
        if (l->app->count("--lrs") > 0) o.lrs = parse_lrs(l->lrs);  // given empty: an error, not the default
        o.heldout = l->heldout;
        o.heldout_given = l->app->count("--heldout") > 0;
        o.jobs = l->jobs;
        o.timeout_seconds = parse_duration(l->timeout, "lr-sensitivity", "--timeout");
        o.out_dir = l->out;
        o.pool = pool_options("lr-sensitivity", *l);
        return run_lr_sensitivity(o, std::cout);
      });
  lr->add_option("--config", l->config, "The config JSON to train at every point (e.g. configs/gpt.json)")->required();
  lr->add_option("--set", l->sets, "Override one field of it, e.g. --set max_batches_per_epoch=100 (repeatable)");
  add_rules_flag(lr, l->rules);
  lr->add_option("--vary", l->vary,
                 "A field and its values, e.g. --vary model.gpt.qk_layernorm=false,true (repeatable: variants multiply)");
  l->app = lr;
  lr->add_option("--lrs", l->lrs, "Peak learning rates, comma-separated (default: Wortsman et al.'s 3e-4,1e-3,...,3e-1)");
  lr->add_option("--heldout", l->heldout, "Held-out samples (sequences) for the losses at init and at the end")
      ->capture_default_str();
  lr->add_option("-j,--jobs", l->jobs, "Bursts at once (persistent workers, one a job)")->capture_default_str();
  lr->add_option("--timeout", l->timeout, "Per-burst timeout: a burst past it is a timeout verdict")->capture_default_str();
  lr->add_option("--out", l->out, "Folder for sweep.db and lr_sensitivity.json")->capture_default_str();
  add_worker_flags(lr, *l);
}

}  // namespace spikehunt
