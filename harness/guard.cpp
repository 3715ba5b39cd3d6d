#include "harness/guard.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <set>

#include <stdlib.h>

#include <nlohmann/json.hpp>

#include "base/child.h"
#include "base/error.h"
#include "base/files.h"
#include "base/junit.h"
#include "base/number_format.h"
#include "base/out_lock.h"
#include "base/program.h"
#include "harness/burst.h"
#include "harness/child_verdict.h"
#include "scenarios/catalog.h"

namespace spikehunt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kBaselineFormat = "spikehunt guard baseline";
constexpr int kBaselineVersion = 1;

void check_keys(const json& j, const std::set<std::string>& known, const std::string& file, const std::string& where) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (known.count(it.key())) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    throw InputError(file, where.empty() ? it.key() : where + "." + it.key(), "", "is not a known key",
                     "known keys: " + list);
  }
}

double tolerance(const json& t, const char* key, double fallback, const std::string& file) {
  if (!t.contains(key)) return fallback;
  const json& v = t[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
    throw InputError(file, std::string("tolerances.") + key, v.dump(), "is not a number >= 0");
  }
  return v.get<double>();
}

int rank(Outcome o) {
  switch (o) {
    case Outcome::kHealthy: return 0;
    case Outcome::kExtreme: return 1;
    case Outcome::kNonFinite: return 2;
    default: return 3;  // crashed, timeout
  }
}


// One line: what the run did.
std::string describe(const GuardRun& r) {
  const Verdict& v = r.summary.verdict;
  std::string text = to_string(v.outcome);
  if (v.outcome == Outcome::kHealthy) {
    text += ", " + std::to_string(v.steps_run) + " steps";
    if (!r.losses.empty()) text += ", final loss " + significant(r.losses.back(), 6);
  } else {
    if (v.failure_step) text += " at step " + std::to_string(*v.failure_step);
    if (v.onset_step) text += std::string(v.failure_step ? " (onset step " : " from step ") + std::to_string(*v.onset_step) +
                              (v.failure_step ? ")" : "");
    if (v.fault) text += ", " + v.fault->describe();
    else if (!v.onset_rules.empty()) text += ", " + v.onset_rules.front();
    if (!v.message.empty()) text += ": " + v.message;
  }
  return text;
}

bool same_number(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

GuardSuite load_guard_suite(const std::string& path, const std::vector<std::string>& overrides) {
  const json j = read_json_file(path, "see docs/guard.md");
  if (!j.is_object()) throw InputError(path, "", "", "is not a JSON object", "see docs/guard.md");
  check_keys(j, {"configs", "tolerances"}, path, "");
  GuardSuite suite;
  if (j.contains("tolerances")) {
    const json& t = j["tolerances"];
    if (!t.is_object()) throw InputError(path, "tolerances", t.dump(), "is not an object");
    check_keys(t, {"loss_relative", "loss_absolute", "onset_steps"}, path, "tolerances");
    suite.tolerances.loss_relative = tolerance(t, "loss_relative", suite.tolerances.loss_relative, path);
    suite.tolerances.loss_absolute = tolerance(t, "loss_absolute", suite.tolerances.loss_absolute, path);
    if (t.contains("onset_steps")) suite.tolerances.onset_steps = json_integer(t["onset_steps"], "tolerances.onset_steps", path);
    if (suite.tolerances.onset_steps < 0) {
      throw InputError(path, "tolerances.onset_steps", std::to_string(suite.tolerances.onset_steps), "is negative");
    }
  }
  const json configs = j.value("configs", json());
  if (!configs.is_array() || configs.empty()) {
    throw InputError(path, "configs", configs.dump(), "is not a non-empty list",
                     R"(e.g. "configs": [{"name": "default"}, {"name": "healthy", "config": "healthy.json"}])");
  }
  const fs::path dir = fs::path(path).parent_path();
  std::set<std::string> names;
  for (size_t i = 0; i < configs.size(); ++i) {
    const std::string field = "configs[" + std::to_string(i) + "]";
    const json& e = configs[i];
    if (!e.is_object()) throw InputError(path, field, e.dump(), "is not an object");
    check_keys(e, {"name", "config", "set"}, path, field);
    GuardCase c;
    if (!e.contains("name") || !e["name"].is_string() || e["name"].get<std::string>().empty()) {
      throw InputError(path, field + ".name", e.value("name", json()).dump(), "is not a non-empty string");
    }
    c.name = e["name"].get<std::string>();
    if (!names.insert(c.name).second) throw InputError(path, field + ".name", "\"" + c.name + "\"", "is used twice");
    std::vector<std::string> sets;
    if (e.contains("set")) {
      if (!e["set"].is_array()) throw InputError(path, field + ".set", e["set"].dump(), "is not a list of \"key=value\"");
      for (const json& s : e["set"]) {
        if (!s.is_string()) throw InputError(path, field + ".set", s.dump(), "is not a \"key=value\" string");
        sets.push_back(s.get<std::string>());
      }
    }
    sets.insert(sets.end(), overrides.begin(), overrides.end());
    const json config = e.value("config", json());
    if (config.is_null()) {
      c.config = default_config(sets);
    } else if (config.is_string()) {
      fs::path file = config.get<std::string>();
      if (file.is_relative()) file = dir / file;
      c.config = load_config(file.string(), sets);
    } else if (config.is_object()) {
      c.config = parse_config(config, path + ": " + field + ".config", sets);
    } else {
      throw InputError(path, field + ".config", config.dump(), "is neither a config file path nor a config object");
    }
    suite.cases.push_back(std::move(c));
  }
  return suite;
}

GuardRun guard_run(const GuardCase& c) {
  configure_runtime(c.config);
  std::unique_ptr<Scenario> scenario = make_scenario(c.config);
  GuardRun run;
  run.name = c.name;
  run.config = c.config;
  BurstOptions options;
  options.on_step = [&](const StepRecord& r) { run.losses.push_back(r.loss); };
  BurstResult result = run_burst(*scenario, c.config.health, options);
  run.summary = summary_of(result.verdict, std::move(result.step_hashes));
  return run;
}

json guard_run_to_json(const GuardRun& r) {
  json losses = json::array();
  for (double l : r.losses) losses.push_back(number(l));
  return {{"name", r.name}, {"config", config_to_json(r.config)}, {"summary", to_json(r.summary)}, {"losses", losses}};
}

GuardRun guard_run_from_json(const json& e, const std::string& path, const std::string& field) {
  if (!e.is_object() || !e.contains("name") || !e["name"].is_string()) {
    throw InputError(path, field + ".name", e.is_object() ? e.value("name", json()).dump() : e.dump(), "is missing");
  }
  GuardRun r;
  r.name = e["name"].get<std::string>();
  json config = e.value("config", json::object());
  // A baseline recorded before the growth and chance rules existed was
  // judged without them: read it with them off, so a check says the rules
  // differ instead of calling their earlier warning a regression.
  if (config.is_object() && config.contains("health") && config["health"].is_object()) {
    json& h = config["health"];
    if (!h.contains("growth_ratio")) h["growth_ratio"] = 0.0;
    if (!h.contains("chance_loss_factor")) h["chance_loss_factor"] = 0.0;
  }
  r.config = parse_config(config, path + ": " + field + ".config");
  r.summary = summary_from_json(e.value("summary", json()), path + ": " + field);
  const json losses = e.value("losses", json());
  if (!losses.is_array()) throw InputError(path, field + ".losses", losses.dump(), "is not a list");
  for (size_t k = 0; k < losses.size(); ++k) {
    try {
      r.losses.push_back(number_from(losses[k]));
    } catch (const json::exception&) {
      throw InputError(path, field + ".losses[" + std::to_string(k) + "]", losses[k].dump(), "is not a number");
    }
  }
  // A list cut short would compare only the steps it still has ("losses within tolerance").
  const int64_t steps = r.summary.verdict.steps_run;
  // A loss that is not finite is skipped by the comparison (the verdicts compare past it): only the last step
  // of a run that went non-finite may hold one, or a baseline of "nan" would pass any run.
  for (size_t k = 0; k < r.losses.size(); ++k) {
    if (std::isfinite(r.losses[k])) continue;
    const bool fault_step = r.summary.verdict.outcome == Outcome::kNonFinite && int64_t(k) + 1 == steps;
    if (!fault_step) {
      throw InputError(path, field + ".losses[" + std::to_string(k) + "]", losses[k].dump(),
                       "is not finite, but the run is " + std::string(to_string(r.summary.verdict.outcome)) +
                           (r.summary.verdict.outcome == Outcome::kNonFinite ? " only at its last step" : "") +
                           ": a recorded loss is a number",
                       "the baseline was edited or damaged: record it again with spikehunt guard record");
    }
  }
  for (const auto& [name, size] : {std::pair<std::string, size_t>{"losses", r.losses.size()},
                                   std::pair<std::string, size_t>{"summary.step_hashes", r.summary.step_hashes.size()}}) {
    if (int64_t(size) != steps) {
      throw InputError(path, field + "." + name, std::to_string(size) + " steps",
                       "does not match summary.verdict.steps_run (" + std::to_string(steps) + ")",
                       "the baseline was cut short or edited: record it again with spikehunt guard record");
    }
  }
  return r;
}

void write_guard_baseline(const std::string& path, const std::vector<GuardRun>& runs) {
  json configs = json::array();
  for (const GuardRun& r : runs) configs.push_back(guard_run_to_json(r));
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const TrainingConfig& first = runs.front().config;
  const json j = {{"format", kBaselineFormat},
                  {"version", kBaselineVersion},
                  {"recorded", when},
                  {"environment", to_json(environment(to_string(first.device), first.threads))},
                  {"configs", configs}};
  write_file_atomic(path, j.dump(1) + "\n");
}

GuardBaseline read_guard_baseline(const std::string& path) {
  const json j = read_json_file(path, "write one with: spikehunt guard record --suite FILE --out " + path, uint64_t{1} << 30);
  if (!j.is_object() || j.value("format", json()) != kBaselineFormat) {
    throw InputError(path, "format", j.is_object() ? j.value("format", json()).dump() : "", "is not \"" +
                     std::string(kBaselineFormat) + "\"", "write one with: spikehunt guard record --suite FILE --out " + path);
  }
  if (j.value("version", json()) != kBaselineVersion) {
    throw InputError(path, "version", j.value("version", json()).dump(), "is not " + std::to_string(kBaselineVersion),
                     "record the baseline again with this spikehunt");
  }
  GuardBaseline b;
  b.environment = environment_from_json(j.value("environment", json::object()), "environment", path);
  b.recorded = j.value("recorded", "");
  const json configs = j.value("configs", json());
  if (!configs.is_array()) throw InputError(path, "configs", configs.dump(), "is not a list");
  for (size_t i = 0; i < configs.size(); ++i) {
    b.runs.push_back(guard_run_from_json(configs[i], path, "configs[" + std::to_string(i) + "]"));
  }
  return b;
}

std::vector<GuardRun> guard_runs(const GuardSuite& suite, const GuardOptions& options) {
  const std::string binary = options.binary.empty() ? self_executable() : options.binary;
  std::string pattern = (fs::temp_directory_path() / "spikehunt-guard-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot make a folder under " + fs::temp_directory_path().string());
  const std::string work = pattern;
  struct Remove {
    std::string dir;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove{work};
  std::vector<ChildSpec> specs;
  for (size_t i = 0; i < suite.cases.size(); ++i) {
    const std::string stem = work + "/case-" + std::to_string(i);
    save_config(suite.cases[i].config, stem + ".config.json");
    specs.push_back({{binary, "burst", "--config", stem + ".config.json", "--result", stem + ".result.json", "--guard",
                      suite.cases[i].name},
                     options.timeout_seconds,
                     stem + ".log"});
  }
  std::vector<GuardRun> runs(suite.cases.size());
  ChildPool pool(options.pool);
  // A case killed by a signal the pool did not send runs once more (as a
  // sweep's burst does: an outside kill is not a regression).
  std::vector<size_t> again;
  const auto ended = [&](size_t i, const ChildExit& e, bool second) {
    const std::string stem = work + "/case-" + std::to_string(i);
    GuardRun& r = runs[i];
    r.name = suite.cases[i].name;
    r.config = suite.cases[i].config;
    if (e.exit_code == 0 && e.signal == 0 && fs::exists(stem + ".result.json")) {
      r = guard_run_from_json(json::parse(read_file(stem + ".result.json")), stem + ".result.json", "result");
    } else if (!second && (killed_from_outside(e) || e.timed_out)) {
      again.push_back(i);
    } else {
      r.summary.verdict = lost_child_verdict(e, stem + ".log");
      if (second && killed_from_outside(e)) r.summary.verdict.message += kKilledAgain;
      if (second && e.timed_out) r.summary.verdict.message += kTimedOutAgain;
    }
  };
  pool.run(specs, std::max(options.jobs, 1), [&](size_t i, const ChildExit& e) { ended(i, e, false); });
  if (!again.empty()) {
    std::vector<ChildSpec> second;
    for (size_t i : again) second.push_back(specs[i]);
    const std::vector<size_t> of = again;
    pool.run(second, std::max(options.jobs, 1), [&](size_t k, const ChildExit& e) { ended(of[k], e, true); });
  }
  return runs;
}

std::vector<GuardFinding> guard_compare(const GuardRun& base, const GuardRun& now, const GuardTolerances& t) {
  std::vector<GuardFinding> out;
  auto regression = [&](const std::string& text) { out.push_back({true, text}); };
  auto note = [&](const std::string& text) { out.push_back({false, text}); };
  const Verdict &b = base.summary.verdict, &n = now.summary.verdict;

  const std::vector<std::string> changed = config_diff(base.config, now.config);
  std::string rules_changed;  // the health.* differences: they move onsets, not training
  bool training_changed = false;
  if (!changed.empty()) {
    std::string list;
    for (const std::string& c : changed) {
      list += (list.empty() ? "" : ", ") + c;
      if (c.rfind("health.", 0) == 0 && c.rfind("health.stop_at", 0) != 0) {
        rules_changed += (rules_changed.empty() ? "" : ", ") + c;
      } else {
        training_changed = true;
      }
    }
    note("config differs from the baseline's: " + list);
  }
  // Only the rules differ: the same training judged by other rules may warn
  // earlier (or call a step extreme) without being less stable.
  const bool only_rules = !rules_changed.empty() && !training_changed;
  const std::string rerecord = " under other health rules than the baseline's (" + rules_changed +
                               "): the same training, judged differently; record the baseline again to keep it";

  if (only_rules && n.outcome == Outcome::kExtreme && rank(n.outcome) > rank(b.outcome)) {
    note("verdict: " + std::string(to_string(b.outcome)) + " → " + describe(now) + rerecord);
  } else if (rank(n.outcome) > rank(b.outcome)) {
    regression("verdict: " + std::string(to_string(b.outcome)) + " → " + describe(now));
  } else if (rank(n.outcome) < rank(b.outcome)) {
    note("verdict improved: " + describe(base) + " → " + to_string(n.outcome) + " (record the baseline again to keep it)");
  } else if (fault_signature(n) != fault_signature(b)) {
    note("the failure changed: " + fault_signature(b) + " → " + fault_signature(n));
  }
  if (b.onset_step && n.onset_step && *n.onset_step < *b.onset_step - t.onset_steps && only_rules) {
    note("onset came earlier: step " + std::to_string(*b.onset_step) + " → " + std::to_string(*n.onset_step) + rerecord);
  } else if (b.onset_step && n.onset_step && *n.onset_step < *b.onset_step - t.onset_steps) {
    regression("onset came earlier: step " + std::to_string(*b.onset_step) + " → " + std::to_string(*n.onset_step) +
               " (tolerance " + std::to_string(t.onset_steps) + " steps)");
  }
  if (b.failure_step && n.failure_step && *n.failure_step < *b.failure_step - t.onset_steps) {
    regression("first non-finite step came earlier: step " + std::to_string(*b.failure_step) + " → " +
               std::to_string(*n.failure_step));
  }

  if (n.planned_steps != b.planned_steps) {
    regression("planned steps: " + std::to_string(b.planned_steps) + " → " + std::to_string(n.planned_steps) +
               " (the protocol or the dataset changed)");
  }
  const auto& bh = base.summary.step_hashes;
  const auto& nh = now.summary.step_hashes;
  for (size_t k = 0; k < std::min(bh.size(), nh.size()); ++k) {
    if (bh[k] == nh[k]) continue;
    std::string what;
    if (bh[k].input != nh[k].input) what = "input hash " + bh[k].input.hex().substr(0, 12) + "… → " + nh[k].input.hex().substr(0, 12) + "…";
    if (bh[k].labels != nh[k].labels) {
      what += (what.empty() ? "" : ", ") + std::string("label hash ") + bh[k].labels.hex().substr(0, 12) + "… → " +
              nh[k].labels.hex().substr(0, 12) + "…";
    }
    regression("hash chain changed at step " + std::to_string(k) + ": " + what +
               " (the data pipeline feeds other batches)");
    break;
  }

  const size_t m = std::min(base.losses.size(), now.losses.size());
  int64_t outside = 0;
  size_t first = 0, worst = 0;
  double worst_excess = -1;
  for (size_t k = 0; k < m; ++k) {
    const double x = base.losses[k], y = now.losses[k];
    if (same_number(x, y) || !std::isfinite(x)) continue;  // past a non-finite baseline the verdicts compare
    const double allowed = t.loss_absolute + t.loss_relative * std::fabs(x);
    const double delta = std::fabs(y - x);
    if (std::isfinite(delta) && delta <= allowed) continue;
    if (outside++ == 0) first = k;
    const double excess = std::isfinite(delta) ? delta / allowed : INFINITY;
    if (excess > worst_excess) worst_excess = excess, worst = k;
  }
  if (outside > 0) {
    auto at = [&](size_t k) {
      return "step " + std::to_string(k) + ": " + significant(base.losses[k], 6) + " → " + significant(now.losses[k], 6) +
             " (tolerance ±" + significant(t.loss_absolute + t.loss_relative * std::fabs(base.losses[k]), 6) + ")";
    };
    std::string text = "loss left its tolerance at " + std::to_string(outside) + " of " + std::to_string(m) +
                       " steps; first at " + at(first);
    if (worst != first) text += "; furthest at " + at(worst);
    regression(text);
  }
  return out;
}

namespace {

std::string loss_agreement(const GuardRun& base, const GuardRun& now) {
  const size_t m = std::min(base.losses.size(), now.losses.size());
  double largest = 0;
  bool identical = base.losses.size() == now.losses.size();
  for (size_t k = 0; k < m; ++k) {
    if (same_number(base.losses[k], now.losses[k])) continue;
    identical = false;
    largest = std::max(largest, std::fabs(now.losses[k] - base.losses[k]));
  }
  return identical ? "losses bit-identical" : "losses within tolerance (largest |Δ| " + significant(largest, 6) + ")";
}

}  // namespace

int guard_record(const std::string& suite_path, const std::string& out, const std::vector<std::string>& overrides,
                 std::ostream& log, const GuardOptions& options) {
  const GuardSuite suite = load_guard_suite(suite_path, overrides);
  const OutLock lock = OutLock::file(out, "guard record");  // one writer of the baseline
  log << "guard record: " << suite.cases.size() << " config(s) from " << suite_path << "\n";
  const std::vector<GuardRun> runs = guard_runs(suite, options);
  for (const GuardRun& r : runs) {
    log << "  " << r.name << ": " << describe(r) << "; hash chain " << r.summary.verdict.hash_chain.hex().substr(0, 16)
        << "…\n";
  }
  write_guard_baseline(out, runs);
  log << "wrote " << out << " (commit it; check with: " << program_name() << " guard check --suite " << suite_path
      << " --baseline " << out << ")\n";
  return kExitOk;
}

int guard_check(const std::string& suite_path, const std::string& baseline_path,
                const std::vector<std::string>& overrides, std::ostream& log, const GuardOptions& options) {
  const GuardSuite suite = load_guard_suite(suite_path, overrides);
  const GuardBaseline baseline = read_guard_baseline(baseline_path);
  std::vector<const GuardRun*> bases;  // each case's baseline, found before anything trains
  for (const GuardCase& c : suite.cases) {
    const auto it = std::find_if(baseline.runs.begin(), baseline.runs.end(), [&](const GuardRun& r) { return r.name == c.name; });
    if (it == baseline.runs.end()) {
      throw InputError(baseline_path, "configs", "\"" + c.name + "\"", "has no entry for this config of " + suite_path,
                       "record the baseline again: spikehunt guard record --suite " + suite_path + " --out " + baseline_path);
    }
    bases.push_back(&*it);
  }
  log << "guard check: " << suite.cases.size() << " config(s) from " << suite_path << " against " << baseline_path
      << " (recorded " << baseline.recorded << ")\n";
  const Environment here = environment(to_string(suite.cases.front().config.device), suite.cases.front().config.threads);
  for (const std::string& w : environment_warnings(baseline.environment, here, "baseline")) log << "warning: " << w << "\n";
  log << "tolerances: loss ±(" << significant(suite.tolerances.loss_absolute, 6) << " + "
      << significant(suite.tolerances.loss_relative, 6) << " × |loss|), onset " << suite.tolerances.onset_steps
      << " step(s) earlier\n";
  int64_t regressed = 0;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<GuardRun> runs = guard_runs(suite, options);
  JunitSuite junit{"spikehunt guard " + suite_path, 0, {{"suite", suite_path}, {"baseline", baseline_path}}, {}};
  for (size_t i = 0; i < suite.cases.size(); ++i) {
    const GuardCase& c = suite.cases[i];
    const GuardRun& base = *bases[i];
    const GuardRun& now = runs[i];
    const std::vector<GuardFinding> findings = guard_compare(base, now, suite.tolerances);
    const bool bad = std::any_of(findings.begin(), findings.end(), [](const GuardFinding& f) { return f.regression; });
    regressed += bad;
    std::string line = (bad ? "REGRESSION: " : "ok: ") + describe(now);
    if (!bad) line += "; " + loss_agreement(base, now) + "; hash chain unchanged";
    std::string detail;
    for (const GuardFinding& f : findings) detail += std::string("      ") + (f.regression ? "- " : "  note: ") + f.text + "\n";
    log << "  " << c.name << ": " << line << "\n" << detail;
    junit.cases.push_back({c.name, "spikehunt.guard", now.summary.verdict.wall_seconds, bad ? line : "",
                           bad ? to_string(now.summary.verdict.outcome) : "", bad ? detail : "", bad ? "" : line + "\n" + detail});
  }
  if (!options.junit_path.empty()) {
    junit.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    write_file_atomic(options.junit_path, junit_xml(junit));
    log << "junit: " << options.junit_path << "\n";
  }
  for (const GuardRun& r : baseline.runs) {
    const bool in_suite = std::any_of(suite.cases.begin(), suite.cases.end(), [&](const GuardCase& c) { return c.name == r.name; });
    if (!in_suite) log << "  note: " << r.name << " is in the baseline but not in the suite any more\n";
  }
  if (regressed == 0) {
    log << "no regression: " << suite.cases.size() << " of " << suite.cases.size() << " config(s) as stable as the baseline\n";
    return kExitOk;
  }
  log << regressed << " of " << suite.cases.size() << " config(s) got less stable than the baseline\n";
  return kExitFinding;
}

}  // namespace spikehunt
