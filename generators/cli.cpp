#include "generators/cli.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <tuple>

#include <CLI/CLI.hpp>

#include "generators/html_report.h"
#include "generators/lr_sensitivity.h"
#include "generators/merge.h"
#include "generators/sweep.h"
#include "harness/child.h"
#include "scenarios/error.h"

namespace spikehunt {

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

namespace {

// How bursts run (child.h's pool), for every verb that runs them.
struct WorkerArgs {
  bool process_per_burst = false;
  int64_t worker_bursts = PoolOptions{}.jobs_per_worker;
  int64_t worker_rss_mb = PoolOptions{}.rss_limit_mb;
};

void add_worker_flags(CLI::App* verb, WorkerArgs& a) {
  verb->add_flag("--process-per-burst", a.process_per_burst,
                 "Start a process for every burst instead of keeping one worker a job (the path before workers)");
  verb->add_option("--worker-bursts", a.worker_bursts, "Bursts a worker runs before a fresh one takes its place")
      ->capture_default_str();
  verb->add_option("--worker-rss-mb", a.worker_rss_mb, "A worker past this resident memory after a burst is replaced")
      ->capture_default_str();
}

void check_positive(const char* verb, const char* flag, int64_t v);

PoolOptions pool_options(const char* verb, const WorkerArgs& a) {
  check_positive(verb, "--worker-bursts", a.worker_bursts);
  check_positive(verb, "--worker-rss-mb", a.worker_rss_mb);
  PoolOptions p;
  p.persistent = !a.process_per_burst;
  p.jobs_per_worker = a.worker_bursts;
  p.rss_limit_mb = a.worker_rss_mb;
  return p;
}

// The flags of what a sweep does besides its search (its bursts, shrinks,
// budget), shared by `sweep` and `merge`.
struct FinishArgs : WorkerArgs {
  std::string budget, timeout = "5m", shrinker = "passes";
  int64_t shrink_bursts = 60, max_shrinks = 3;
  int jobs = 2;
  bool no_progress = false;
};

struct SweepArgs : FinishArgs {
  std::string space, out = "results/sweep", shard;
  int64_t runs = 24;
  uint64_t seed = 0;
  bool shrink_in_shard = false;
};

struct ShrinkArgs : WorkerArgs {
  std::string config, run, space, timeout = "5m", out;
  int64_t bursts = 100;
  int jobs = 2;
};

void check_positive(const char* verb, const char* flag, int64_t v) {
  if (v < 1) throw flag_error(verb, flag, std::to_string(v), "must be at least 1");
}

void apply_finish_args(const char* verb, const FinishArgs& a, SweepOptions* o) {
  check_positive(verb, "-j", a.jobs);
  check_positive(verb, "--shrink-bursts", a.shrink_bursts);
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
}

void add_finish_flags(CLI::App* verb, FinishArgs& a, const char* budget_help, const char* shrink_bursts_names,
                      const char* shrink_bursts_help) {
  verb->add_option("-j,--jobs", a.jobs, "Bursts at once (persistent workers, one a job)")->capture_default_str();
  verb->add_option("--budget", a.budget, budget_help);
  verb->add_option("--timeout", a.timeout, "Per-burst timeout: a burst past it is a timeout verdict")->capture_default_str();
  verb->add_option(shrink_bursts_names, a.shrink_bursts, shrink_bursts_help)->capture_default_str();
  verb->add_option("--max-shrinks", a.max_shrinks, "Distinct failures to shrink, most frequent first")->capture_default_str();
  verb->add_option("--shrinker", a.shrinker,
                   "passes: resets, then binary searches, the shrinks at once on idle slots; tree: RapidCheck's shrink "
                   "tree one failure after another (the shrinker before passes, to compare with)")
      ->capture_default_str();
  verb->add_flag("--no-progress", a.no_progress, "No progress bar");
  add_worker_flags(verb, a);
}

bool whole_number(const std::string& text, int64_t* v) {
  if (text.empty() || text.size() > 15) return false;
  for (const char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  *v = std::stoll(text);
  return true;
}

}  // namespace

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
  const int64_t step = std::max<int64_t>(1, number("SLURM_ARRAY_TASK_STEP", "1"));
  const int64_t count = number("SLURM_ARRAY_TASK_COUNT", nullptr);
  if (task < min || (task - min) % step != 0 || (task - min) / step >= count || count < 1) {
    throw InputError("environment", "SLURM_ARRAY_TASK_ID", std::to_string(task),
                     "is not on the array's grid (min " + std::to_string(min) + ", step " + std::to_string(step) +
                         ", count " + std::to_string(count) + "): a list like --array=1,4,9 has no shard formula",
                     "submit the array as a range (--array=0-K or A-B:S), or give --shard I/N");
  }
  return std::make_pair((task - min) / step, count);
}

namespace {

}  // namespace

void add_generator_verbs(Cli& cli) {
  auto s = std::make_shared<SweepArgs>();
  CLI::App* sweep = cli.verb(
      "sweep", "Sample a search space, run each burst in a child process, shrink and replay every distinct failure", [s] {
        SweepOptions o;
        if (!s->space.empty()) {
          o.space = SearchSpace::load(s->space);
          o.space_source = s->space;
        }
        check_positive("sweep", "--runs", s->runs);
        apply_finish_args("sweep", *s, &o);
        o.runs = s->runs;
        o.seed = s->seed;
        o.out_dir = s->out;
        if (!s->shard.empty()) {
          std::tie(o.shard_index, o.shard_count) = parse_shard(s->shard);
        } else if (const auto slurm = shard_from_slurm(std::getenv)) {
          std::tie(o.shard_index, o.shard_count) = *slurm;
          std::cout << "shard " << shard_text(o.shard_index, o.shard_count) << " from the Slurm array (task "
                    << std::getenv("SLURM_ARRAY_TASK_ID") << ")\n";
        }
        if (s->shrink_in_shard && o.shard_count == 1) {
          throw flag_error("sweep", "--shrink-in-shard", "", "needs --shard I/N (or a Slurm array task)");
        }
        o.shard_shrinks = s->shrink_in_shard;
        std::cout << "seed " << o.seed << " (rerun with --seed " << o.seed << " to resume or repeat)\n";
        return run_sweep(o, std::cout);
      });
  sweep->add_option("--space", s->space, "Search space JSON (default: the built-in space, configs/space.json)");
  sweep->add_option("--runs", s->runs, "Search samples")->capture_default_str();
  sweep->add_option("--seed", s->seed, "Sweep seed: sample i is the same point for the same seed")->capture_default_str();
  add_finish_flags(sweep, *s, "Wall-time budget for the whole sweep, e.g. 30m, 90s, 1h30m (a duration)",
                   "--shrink-bursts,--shrink-budget", "Bursts each shrink may run (--shrink-budget: its old name)");
  sweep->add_option("--out", s->out, "Folder for sweep.db and repros/")->capture_default_str();
  sweep->add_option("--shard", s->shard,
                    "I/N: search only samples i with i mod N = I, into OUT/shard-I-of-N (default in a Slurm array task: "
                    "(SLURM_ARRAY_TASK_ID - MIN) / STEP of SLURM_ARRAY_TASK_COUNT); then `merge`");
  sweep->add_flag("--shrink-in-shard", s->shrink_in_shard, "A shard shrinks, records and replays its own failures too");

  struct MergeArgs : FinishArgs {
    std::string out;
    std::vector<std::string> shards;
    bool allow_missing = false;
  };
  auto mg = std::make_shared<MergeArgs>();
  CLI::App* merge = cli.verb(
      "merge", "Join the shards of a sharded sweep, then shrink, replay and report as one machine's sweep would", [mg] {
        MergeOptions o;
        apply_finish_args("merge", *mg, &o.sweep);
        o.out_dir = mg->out;
        o.shard_dirs = mg->shards;
        o.allow_missing = mg->allow_missing;
        return run_merge(o, std::cout);
      });
  merge->add_option("OUT", mg->out, "The merged sweep's folder (sweep.db, repros/, report.html)")->required();
  merge->add_option("SHARD_DIR", mg->shards, "The shards' folders, e.g. OUT/shard-*")->required();
  merge->add_flag("--allow-missing", mg->allow_missing, "Merge even when some samples are in no shard (they are listed)");
  add_finish_flags(merge, *mg, "Wall-time budget for the shrinks (a duration)", "--shrink-bursts",
                   "Bursts each shrink may run");

  auto cmp = std::make_shared<std::pair<std::string, std::string>>();
  CLI::App* compare = cli.verb(
      "compare", "Compare two sweeps: samples, verdicts, fault signatures, distinct failures and minimal configs",
      [cmp] { return run_compare(cmp->first, cmp->second, std::cout); });
  compare->add_option("A", cmp->first, "A sweep's --out folder (or a merge's OUT)")->required();
  compare->add_option("B", cmp->second, "Another")->required();

  auto k = std::make_shared<ShrinkArgs>();
  CLI::App* shrink_cmd = cli.verb("shrink", "Shrink one failing config to a minimal one that fails the same way", [k] {
    if (k->config.empty() == k->run.empty()) {
      throw flag_error("shrink", "--config / --run", "", "give exactly one of them",
                       program_name() + " shrink --config FILE, or --run ID of a results/ folder");
    }
    check_positive("shrink", "--bursts", k->bursts);
    check_positive("shrink", "-j", k->jobs);
    ShrinkOptions o;
    if (!k->config.empty()) {
      o.source = k->config;
    } else {
      o.source = std::filesystem::is_directory(k->run) ? k->run : "results/" + k->run;
      if (!std::filesystem::is_directory(o.source)) {
        throw flag_error("shrink", "--run", k->run, "is neither a run folder nor a run id under results/");
      }
      o.source += "/config.json";
    }
    o.config = load_config(o.source);
    if (!k->space.empty()) o.space = SearchSpace::load(k->space);
    o.jobs = k->jobs;
    o.timeout_seconds = parse_duration(k->timeout, "shrink", "--timeout");
    o.evaluations = k->bursts;
    o.out_dir = k->out;
    o.pool = pool_options("shrink", *k);
    return run_shrink(o, std::cout);
  });
  shrink_cmd->add_option("--config", k->config, "The failing config JSON");
  shrink_cmd->add_option("--run", k->run, "A `spikehunt run` result: its id under results/, or its folder");
  shrink_cmd->add_option("--space", k->space, "Space giving the simplest values and grids (default: built-in)");
  shrink_cmd->add_option("-j,--jobs", k->jobs, "Bursts at once")->capture_default_str();
  shrink_cmd->add_option("--bursts", k->bursts, "Bursts the shrink may run (a count; a sweep's --budget is time)")
      ->capture_default_str();
  shrink_cmd->add_option("--timeout", k->timeout, "Per-burst timeout")->capture_default_str();
  shrink_cmd->add_option("--out", k->out, "Folder for the minimal config and repro (default: results/shrink-<hash>)");
  add_worker_flags(shrink_cmd, *k);


  struct LrArgs : WorkerArgs {
    std::string config, lrs, timeout = "10m", out = "results/lr-sensitivity";
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
        o.config = load_config(l->config, l->sets);
        for (const std::string& v : l->vary) o.vary.push_back(parse_vary(v));
        if (!l->lrs.empty()) o.lrs = parse_lrs(l->lrs);
        o.heldout = l->heldout;
        o.jobs = l->jobs;
        o.timeout_seconds = parse_duration(l->timeout, "lr-sensitivity", "--timeout");
        o.out_dir = l->out;
        o.pool = pool_options("lr-sensitivity", *l);
        return run_lr_sensitivity(o, std::cout);
      });
  lr->add_option("--config", l->config, "The config JSON to train at every point (e.g. configs/gpt.json)")->required();
  lr->add_option("--set", l->sets, "Override one field of it, e.g. --set max_batches_per_epoch=100 (repeatable)");
  lr->add_option("--vary", l->vary,
                 "A field and its values, e.g. --vary model.gpt.qk_layernorm=false,true (repeatable: variants multiply)");
  lr->add_option("--lrs", l->lrs, "Peak learning rates, comma-separated (default: Wortsman et al.'s 3e-4,1e-3,...,3e-1)");
  lr->add_option("--heldout", l->heldout, "Held-out samples (sequences) for the losses at init and at the end")
      ->capture_default_str();
  lr->add_option("-j,--jobs", l->jobs, "Bursts at once (persistent workers, one a job)")->capture_default_str();
  lr->add_option("--timeout", l->timeout, "Per-burst timeout: a burst past it is a timeout verdict")->capture_default_str();
  lr->add_option("--out", l->out, "Folder for sweep.db and lr_sensitivity.json")->capture_default_str();
  add_worker_flags(lr, *l);

  auto report_dir = std::make_shared<std::string>("results/sweep");
  auto report_out = std::make_shared<std::string>();
  CLI::App* report = cli.verb("report", "Write DIR/report.html: a self-contained, offline page of a sweep and its failures",
                              [report_dir, report_out] {
                                const ReportFacts f = write_sweep_report(*report_dir, *report_out);
                                std::cout << "wrote " << f.path << ": " << f.runs << " runs, " << f.failed << " failed, "
                                          << f.failures << " distinct failure(s), " << f.charts << " chart(s)\n";
                                return kExitOk;
                              });
  report->add_option("dir", *report_dir, "The sweep's --out folder")->capture_default_str();
  report->add_option("--out", *report_out, "Where to write the HTML (default DIR/report.html)");
}

int cli_main(int argc, char** argv) {
  Cli cli;
  add_harness_verbs(cli);
  add_generator_verbs(cli);
  return cli.main(argc, argv);
}

}  // namespace spikehunt
