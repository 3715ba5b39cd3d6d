// flags.cpp — the parsers and flag sets several verbs share (flags.h).
#include "cli/flags.h"

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/files.h"
#include "scenarios/config.h"

namespace spikehunt {

namespace {

bool whole_number(const std::string& text, int64_t* v) {
  if (text.empty() || text.size() > 15) return false;
  for (const char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *v = std::stoll(text);
  return true;
}

}  // namespace

double parse_duration(const std::string& text, const std::string& verb, const std::string& flag) {
  double total = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    size_t end = i;
    while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
    if (end == i) break;
    const double value = std::stod(text.substr(i, end - i));
    double unit = 1;
    if (end < text.size()) {
      const char u = text[end++];
      if (u == 'h') unit = 3600;
      else if (u == 'm') unit = 60;
      else if (u == 's') unit = 1;
      else break;
    } else if (any) {
      break;  // "1h30" is ambiguous
    }
    total += value * unit;
    any = true;
    i = end;
  }
  if (!any || i != text.size() || !(total > 0)) {
    throw flag_error(verb, flag, text, "is not a duration", "write e.g. 30m, 90s, 1h30m or 45 (seconds)");
  }
  return total;
}

void add_worker_flags(CLI::App* verb, WorkerArgs& a) {
  verb->add_flag("--process-per-burst", a.process_per_burst,
                 "Start a process for every burst instead of keeping one worker a job (the path before workers)");
  verb->add_option("--worker-bursts", a.worker_bursts, "Bursts a worker runs before a fresh one takes its place")
      ->capture_default_str();
  verb->add_option("--worker-rss-mb", a.worker_rss_mb, "A worker past this resident memory after a burst is replaced")
      ->capture_default_str();
}

PoolOptions pool_options(const char* verb, const WorkerArgs& a) {
  check_positive(verb, "--worker-bursts", a.worker_bursts);
  check_positive(verb, "--worker-rss-mb", a.worker_rss_mb);
  PoolOptions p;
  p.persistent = !a.process_per_burst;
  p.jobs_per_worker = a.worker_bursts;
  p.rss_limit_mb = a.worker_rss_mb;
  return p;
}

void check_positive(const char* verb, const char* flag, int64_t v) {
  if (v < 1) throw flag_error(verb, flag, std::to_string(v), "must be at least 1");
}

void apply_finish_args(const char* verb, const FinishArgs& a, SweepOptions* o) {
  check_positive(verb, "-j", a.jobs);
  check_positive(verb, "--shrink-bursts", a.shrink_bursts);
  if (a.max_shrinks < 0) {
    throw flag_error(verb, "--max-shrinks", std::to_string(a.max_shrinks), "must be at least 0", "0 shrinks none");
  }
  o->jobs = a.jobs;
  o->timeout_seconds = parse_duration(a.timeout, verb, "--timeout");
  o->budget_seconds = a.budget.empty() ? 0 : parse_duration(a.budget, verb, "--budget");
  o->shrink_evaluations = a.shrink_bursts;
  o->max_shrinks = a.max_shrinks;
  if (a.shrinker != "passes" && a.shrinker != "tree") {
    throw flag_error(verb, "--shrinker", a.shrinker, "is not a shrinker", "passes (the default) or tree");
  }
  o->shrinker = a.shrinker == "tree" ? ShrinkMethod::kTree : ShrinkMethod::kPasses;
  o->progress = !a.no_progress;
  o->pool = pool_options(verb, a);
  if (!a.junit.empty()) {
    o->junit_path = checked_output_file(verb, "--junit", a.junit);
    refuse_foreign_output(verb, "--junit", a.junit, OutputKind::kJunit);
  }
}

std::string checked_output_file(const std::string& verb, const char* flag, const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (std::filesystem::is_directory(path)) {
    throw flag_error(verb, flag, path, "is a folder", "give the file to write, e.g. " + std::string(flag) + " report.xml");
  }
  if (!parent.empty() && !std::filesystem::is_directory(parent)) {
    std::error_code ec;
    for (std::filesystem::path p = parent; !p.empty(); p = p.parent_path()) {  // a file on the way?
      if (std::filesystem::exists(p, ec) && !std::filesystem::is_directory(p, ec)) {
        throw flag_error(verb, flag, path, "is inside " + p.string() + ", a file, not a folder",
                         "write the file elsewhere, e.g. " + std::string(flag) + " " +
                             std::filesystem::path(path).filename().string());
      }
      if (p == p.parent_path()) break;
    }
    throw flag_error(verb, flag, path, "is in a folder that does not exist (" + parent.string() + ")",
                     "make the folder first, or write the file elsewhere");
  }
  return path;
}

void refuse_foreign_output(const std::string& verb, const char* flag, const std::string& path, OutputKind kind) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return;
  std::string head;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size <= (64u << 20)) head = read_file(path);
  bool ours = false;
  const char* what = "";
  if (kind == OutputKind::kJunit) {
    what = "a JUnit XML file";
    ours = head.rfind("<?xml", 0) == 0 && head.find("<testsuites") != std::string::npos;
  } else {
    what = kind == OutputKind::kRules ? "a rules file calibrate wrote" : "a guard baseline";
    const nlohmann::json j = nlohmann::json::parse(head, nullptr, /*allow_exceptions=*/false);
    ours = j.is_object() && (kind == OutputKind::kRules ? j.contains("calibration") && j.contains("health")
                                                        : j.value("format", "") == "spikehunt guard baseline");
  }
  if (ours) return;
  throw flag_error(verb, flag, path, std::string("is a file spikehunt did not write (not ") + what + "): it is left as it is",
                   "give " + std::string(flag) + " a path of its own, or move the file away");
}

void refuse_outputs_that_are_inputs(const CLI::App& command, const std::string& verb) {
  std::vector<std::pair<std::string, std::string>> outputs, inputs;  // (flag, value)
  for (const CLI::Option* o : command.get_options()) {
    const std::vector<std::string>& lnames = o->get_lnames();
    const bool output = std::find(lnames.begin(), lnames.end(), "out") != lnames.end() ||
                        std::find(lnames.begin(), lnames.end(), "junit") != lnames.end() || o->get_name() == "OUT";
    const std::string flag = lnames.empty() ? o->get_name() : "--" + lnames.front();
    for (const std::string& value : o->results()) {
      if (!value.empty()) (output ? outputs : inputs).push_back({flag, value});
    }
  }
  for (const auto& [out_flag, out] : outputs) {
    for (const auto& [in_flag, in] : inputs) {
      std::error_code ec;
      if (!std::filesystem::equivalent(out, in, ec) || ec) continue;
      throw flag_error(verb, out_flag.c_str(), out,
                       "is also its " + in_flag + " (" + in + "): writing it would destroy that input",
                       "give " + out_flag + " a path of its own");
    }
    for (const auto& [other_flag, other] : outputs) {
      std::error_code ec;
      if (&other != &out && out_flag < other_flag && std::filesystem::equivalent(out, other, ec) && !ec) {
        throw flag_error(verb, out_flag.c_str(), out, "is also its " + other_flag + ": one would overwrite the other",
                         "give each output a path of its own");
      }
    }
  }
}

void ensure_open_files(const CLI::App& command, const std::string& verb) {
  int64_t jobs = 1;
  if (const CLI::Option* o = command.get_option_no_throw("--jobs"); o != nullptr) {
    try {
      jobs = std::max<int64_t>(1, o->as<int64_t>());
    } catch (const CLI::Error&) {
    }
  }
  // Measured: a sweep holds 9 + 1 a job at once (its database and log, the
  // lock, a socket a worker), and opens repros, checkpoints and reports
  // besides; each worker is a LibTorch process of its own with the same limit.
  const rlim_t need = rlim_t(64 + 8 * jobs);
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= need) return;
  if (r.rlim_max == RLIM_INFINITY || r.rlim_max >= need) {
    rlimit raised = r;
    raised.rlim_cur = r.rlim_max == RLIM_INFINITY ? std::max<rlim_t>(need, 4096) : std::min<rlim_t>(r.rlim_max, std::max<rlim_t>(need, 4096));
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) return;  // as far as this session allows, for this process and its workers
  }
  const std::string hard = r.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(r.rlim_max);
  throw InputError("open files (ulimit -n)", "", "",
                   "the limit is " + std::to_string(r.rlim_cur) + " (at most " + hard + " in this session), and `" +
                       verb + "` with " + std::to_string(jobs) + " job(s) needs about " + std::to_string(need) +
                       ": nothing was started",
                   "raise it (ulimit -n 1024) and run the same command again");
}

void add_finish_flags(CLI::App* verb, FinishArgs& a, const char* budget_help, const char* shrink_bursts_names,
                      const char* shrink_bursts_help) {
  verb->add_option("-j,--jobs", a.jobs, "Bursts at once (persistent workers, one a job)")->capture_default_str();
  verb->add_option("--budget", a.budget, budget_help);
  verb->add_option("--timeout", a.timeout, "Per-burst timeout: a burst past it is a timeout verdict")->capture_default_str();
  verb->add_option(shrink_bursts_names, a.shrink_bursts, shrink_bursts_help)->capture_default_str();
  verb->add_option("--max-shrinks", a.max_shrinks, "Distinct failures to shrink, most harmful first (crashed, non-finite, extreme, timeout), then most frequent")->capture_default_str();
  verb->add_option("--shrinker", a.shrinker,
                   "passes: resets, then binary searches, the shrinks at once on idle slots; tree: RapidCheck's shrink "
                   "tree one failure after another (the shrinker before passes, to compare with)")
      ->capture_default_str();
  verb->add_flag("--no-progress", a.no_progress, "No progress bar");
  verb->add_option("--junit", a.junit,
                   "Also write JUnit XML (Jenkins, GitLab, GitHub test reports): a test case per distinct failure");
  add_worker_flags(verb, a);
}

std::pair<int64_t, int64_t> parse_shard(const std::string& text) {
  const size_t slash = text.find('/');
  int64_t index = 0, count = 0;
  if (slash == std::string::npos || !whole_number(text.substr(0, slash), &index) ||
      !whole_number(text.substr(slash + 1), &count) || count < 1) {
    throw flag_error("sweep", "--shard", text, "is not I/N", "e.g. --shard 0/3, --shard 1/3, --shard 2/3 for three shards");
  }
  if (index >= count) {
    throw flag_error("sweep", "--shard", text, "is out of range: shards count from 0",
                     std::to_string(count) + " shards are 0/" + std::to_string(count) + " to " +
                         std::to_string(count - 1) + "/" + std::to_string(count));
  }
  return {index, count};
}

std::optional<std::pair<int64_t, int64_t>> shard_from_slurm(const std::function<const char*(const char*)>& env) {
  const char* id = env("SLURM_ARRAY_TASK_ID");
  if (id == nullptr) return std::nullopt;
  auto number = [&](const char* name, const char* fallback) {
    const char* v = env(name);
    const std::string text = v != nullptr ? v : fallback != nullptr ? fallback : "";
    int64_t n = 0;
    if (!whole_number(text, &n)) {
      throw InputError("environment", name, text,
                       v == nullptr ? "is not set, and SLURM_ARRAY_TASK_ID is: the shard cannot be told"
                                    : "is not a whole number",
                       "give the shard explicitly: --shard I/N");
    }
    return n;
  };
  const int64_t task = number("SLURM_ARRAY_TASK_ID", nullptr), min = number("SLURM_ARRAY_TASK_MIN", "0");
  const int64_t step = number("SLURM_ARRAY_TASK_STEP", "1");
  if (step < 1) {  // Slurm never sets it so: every task would be shard 0
    throw InputError("environment", "SLURM_ARRAY_TASK_STEP", std::to_string(step), "is not a step of an array (at least 1)",
                     "give the shard explicitly: --shard I/N");
  }
  const int64_t count = number("SLURM_ARRAY_TASK_COUNT", nullptr);
  if (task < min || (task - min) % step != 0 || (task - min) / step >= count || count < 1) {
    throw InputError("environment", "SLURM_ARRAY_TASK_ID", std::to_string(task),
                     "is not on the array's grid (min " + std::to_string(min) + ", step " + std::to_string(step) +
                         ", count " + std::to_string(count) + "): a list like --array=1,4,9 has no shard formula",
                     "submit the array as a range (--array=0-K or A-B:S), or give --shard I/N");
  }
  return std::make_pair((task - min) / step, count);
}

void add_rules_flag(CLI::App* verb, std::string& file) {
  verb->add_option("--rules", file,
                   "Health rules file (`spikehunt calibrate` writes one): its health fields over the config's");
}

std::vector<std::string> with_rules(const std::string& file, const std::vector<std::string>& sets) {
  if (file.empty()) return sets;
  const nlohmann::json j = read_json_file(file, "spikehunt calibrate --out FILE writes one");
  for (auto it = j.begin(); j.is_object() && it != j.end(); ++it) {
    const std::string& key = it.key();
    if (key != "health" && key != "calibration") {
      throw InputError(file, key, "", "is not a key of a rules file (health, calibration)",
                       "a rules file holds only health rules, e.g. {\"health\": {\"param_jump_limit\": 1.5}}; "
                       "give other fields with --config or --set");
    }
  }
  if (!j.is_object() || !j.contains("health") || !j["health"].is_object()) {
    throw InputError(file, "health", j.is_object() && j.contains("health") ? j["health"].dump() : "",
                     "must be an object of health rule fields", "e.g. {\"health\": {\"param_jump_limit\": 1.5}}");
  }
  std::vector<std::string> out;
  for (const auto& [field, value] : j["health"].items()) {
    const std::string set = "health." + field + "=" + value.dump();
    try {
      parse_config(config_to_json(TrainingConfig{}), file, {set});
    } catch (const InputError& e) {
      throw InputError(file, "health." + field, value.dump(), "is not a health rule the config takes: " +
                       (e.problems().empty() ? std::string(e.what()) : e.problems().front().message),
                       "docs/health.md lists the rules and their ranges");
    }
    out.push_back(set);
  }
  out.insert(out.end(), sets.begin(), sets.end());
  return out;
}

std::string config_source(const std::string& file, const std::vector<std::string>& sets) {
  std::string s = file.empty() ? "<built-in default>" : file;
  if (!sets.empty()) s += " with --set";
  for (const std::string& x : sets) s += " " + x;
  return s;
}

}  // namespace spikehunt
