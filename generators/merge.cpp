#include "generators/merge.h"
#include "generators/html_report.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "base/child.h"
#include "base/did_you_mean.h"
#include "base/error.h"
#include "base/files.h"
#include "base/out_lock.h"
#include "generators/finish.h"
#include "generators/shrinker.h"
#include "generators/store.h"
#include "generators/sweep.h"
#include "harness/env.h"

namespace spikehunt {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string index_ranges(const std::vector<int64_t>& sorted, size_t max_items) {
  std::string text;
  size_t items = 0, i = 0;
  while (i < sorted.size()) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (items == max_items) {
      text += ", ... (" + std::to_string(sorted.size() - i) + " more)";
      break;
    }
    text += (text.empty() ? "" : ", ") + std::to_string(sorted[i]);
    if (j > i) text += "-" + std::to_string(sorted[j]);
    ++items;
    i = j + 1;
  }
  return text;
}

namespace {

struct Shard {
  std::string dir;
  std::unique_ptr<SweepStore> store;
  std::map<std::string, std::string> facts;  // seed, space, build, runs, shard count
  int64_t index = 0, count = 1;
  std::vector<RunRow> runs;                   // its search runs
};

int64_t parse_count(const std::string& text, const std::string& file, const std::string& field) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw InputError(file, field, text, "is not a count", "the database is damaged: run the shard again in a fresh --out");
}

Shard open_shard(const std::string& dir) {
  Shard s;
  s.dir = dir;
  const std::string path = dir + "/sweep.db";
  if (!fs::exists(path)) {
    throw InputError(dir, "", "", "has no sweep.db: it is not the folder of a sweep shard (did its task start?)",
                     "give merge the OUT/shard-I-of-N folders that `sweep --shard` wrote");
  }
  s.store = SweepStore::open_read_only(path);
  const std::string shard = s.store->meta("shard").value_or("0/1");
  const size_t slash = shard.find('/');
  if (slash == std::string::npos) throw InputError(path, "shard", shard, "is not I/N");
  s.index = parse_count(shard.substr(0, slash), path, "shard");
  s.count = parse_count(shard.substr(slash + 1), path, "shard");
  s.facts["seed"] = std::to_string(s.store->seed());
  s.facts["space"] = s.store->space_json();
  s.facts["build"] = s.store->meta("build").value_or("(not recorded)");
  s.facts["shard count"] = std::to_string(s.count);
  s.runs = s.store->runs("search");
  int64_t last = -1;
  for (const RunRow& r : s.runs) last = std::max(last, r.sample);
  s.facts["runs"] = s.store->meta("runs").value_or(std::to_string(last + 1));
  return s;
}

// Every shard must agree on `field` with the most common value; the first odd one is named.
void check_agree(const std::vector<Shard>& shards, const std::string& field) {
  std::map<std::string, int> votes;
  for (const Shard& s : shards) ++votes[s.facts.at(field)];
  std::string common;
  int most = 0;
  for (const Shard& s : shards) {  // ties go to the earlier shard on the command line
    if (votes[s.facts.at(field)] > most) most = votes[s.facts.at(field)], common = s.facts.at(field);
  }
  for (const Shard& s : shards) {
    if (s.facts.at(field) == common) continue;
    const auto [odd, usual] = where_they_differ(s.facts.at(field), common);
    throw InputError(s.store->path(), field, odd, "differs from the other shards' " + field + " (" + usual + ")",
                     "merge only the shards of one sweep: one --space, --seed, --runs and --shard count, run by one build");
  }
}

std::string canonical(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(path, ec);
  return ec ? path : p.string();
}

}  // namespace

int run_merge(const MergeOptions& m, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  if (m.shard_dirs.empty()) {
    throw InputError("merge", "SHARD_DIR", "", "is missing: give the shards' folders", "e.g. merge OUT OUT/shard-*");
  }
  // ---- check every shard before writing anything ----
  std::vector<Shard> shards;
  for (const std::string& dir : m.shard_dirs) {
    if (canonical(dir) == canonical(m.out_dir)) {
      throw InputError(dir, "", "", "is both a shard and the merge's OUT folder", "merge into the shards' parent folder");
    }
    shards.push_back(open_shard(dir));
  }
  for (const char* field : {"seed", "space", "runs", "shard count", "build"}) check_agree(shards, field);
  const std::string binary = m.sweep.binary.empty() ? self_executable() : m.sweep.binary;
  const std::string build = build_id(binary);
  if (shards.front().facts["build"] != build) {
    throw InputError(shards.front().store->path(), "build", shards.front().facts["build"],
                     "is not the build of this merge (" + build + "): its shrinks would not be the shards' bursts",
                     "run merge with the spikehunt that ran the shards");
  }
  const int64_t count = shards.front().count, runs = std::stoll(shards.front().facts["runs"]);
  std::map<int64_t, const Shard*> by_index;
  for (const Shard& s : shards) {
    if (s.index >= count) throw InputError(s.store->path(), "shard", shard_text(s.index, s.count), "is out of range");
    if (const auto [it, fresh] = by_index.emplace(s.index, &s); !fresh) {
      throw InputError(s.store->path(), "shard", shard_text(s.index, count), "is given twice: " + it->second->dir + " is too");
    }
  }
  std::set<int64_t> present;
  for (const Shard& s : shards) {
    for (const RunRow& r : s.runs) {
      if (r.sample < runs) present.insert(r.sample);
    }
  }
  std::vector<int64_t> missing;
  for (int64_t i = 0; i < runs; ++i) {
    if (!present.count(i)) missing.push_back(i);
  }
  std::string missing_by_shard;
  for (int64_t k = 0; k < count; ++k) {
    int64_t of_shard = 0, absent = 0;
    for (int64_t i = k; i < runs; i += count) ++of_shard, absent += !present.count(i);
    if (absent == 0) continue;
    missing_by_shard += "\n  shard " + shard_text(k, count) + ": " + std::to_string(absent) + " of " +
                        std::to_string(of_shard) + " runs missing" +
                        (by_index.count(k) ? " (" + by_index[k]->dir + ": unfinished)" : " (its folder was not given)");
  }
  if (!missing.empty() && !m.allow_missing) {
    throw InputError(m.out_dir, "samples", index_ranges(missing),
                     "are in no shard: " + std::to_string(missing.size()) + " of " + std::to_string(runs) +
                         " runs missing" + missing_by_shard,
                     "resume the unfinished shards (the same sweep --shard command resumes), or merge what is there "
                     "with --allow-missing");
  }

  // ---- every row the join takes is read first: a bad one leaves OUT untouched ----
  const std::string space_json = shards.front().facts["space"];
  SweepOptions o = m.sweep;
  o.space = SearchSpace::from_json(json_from_text(space_json, shards.front().store->path(), "space"),
                                   shards.front().store->path());
  for (const Shard& s : shards) {
    for (const RunRow& r : s.runs) {
      config_from_text(r.config_json, s.store->path(), "runs (sample " + std::to_string(r.sample) + ").config_json");
    }
  }
  if (fs::exists(m.out_dir) && !fs::is_directory(m.out_dir)) {
    throw InputError(m.out_dir, "OUT", "", "is a file, not a folder", "give the folder to merge into");
  }

  // ---- join the runs: one transaction, samples already merged are kept ----
  o.space_source = "the shards' space";
  o.seed = shards.front().store->seed();
  o.runs = runs;
  o.out_dir = m.out_dir;
  o.binary = binary;
  refuse_foreign_report(m.out_dir + "/report.html", "OUT");  // the user's own page there is never replaced
  const OutLock lock = OutLock::folder(m.out_dir, "merge");
  fs::create_directories(m.out_dir + "/repros");
  for (const std::string& d : {m.out_dir, m.out_dir + "/repros"}) remove_stale_temporaries(d);  // under our lock
  SweepStore store(m.out_dir + "/sweep.db", space_json, o.seed);
  store.set_meta("build", build);
  store.set_meta("runs", std::to_string(runs));
  store.set_meta("merged", std::to_string(shards.size()) + " of " + std::to_string(count) + " shards");
  std::vector<RunRow> all = store.runs("search");  // merged before, then those joined now
  std::map<int64_t, std::string> merged;           // sample -> config hash, of OUT's search runs
  for (const RunRow& r : all) merged[r.sample] = r.config_hash;
  std::vector<RunRow> fresh;
  for (const Shard& s : shards) {
    for (const RunRow& r : s.runs) {
      if (r.sample >= runs) continue;
      const auto it = merged.find(r.sample);
      if (it == merged.end()) {
        fresh.push_back(r);
        merged[r.sample] = r.config_hash;
      } else if (it->second != r.config_hash) {
        throw InputError(store.path(), "sample", std::to_string(r.sample),
                         "holds another config than " + s.store->path() + " for this sample",
                         "merge into a fresh OUT folder");
      }
    }
  }
  std::sort(fresh.begin(), fresh.end(), [](const RunRow& a, const RunRow& b) { return a.sample < b.sample; });
  const size_t imported = fresh.size();
  all.insert(all.end(), fresh.begin(), fresh.end());
  store.add_runs(std::move(fresh));

  out << "merge: " << shards.size() << " of " << count << " shard(s) of seed " << o.seed << ", " << runs << " runs over "
      << o.space.dimensions().size() << " dimensions; database " << store.path() << "\n";
  out << "joined " << imported << " run(s) (" << merged.size() - imported << " merged before)";
  if (!missing.empty()) {
    out << "; " << missing.size() << " of " << runs << " samples are in no shard (--allow-missing): "
        << index_ranges(missing) << missing_by_shard;
  }
  out << "\n";
  std::map<std::string, std::pair<int64_t, std::set<std::string>>> environments;
  for (const RunRow& r : all) {
    if (r.sample >= runs) continue;
    const std::string key = r.summary.environment ? environment_key(*r.summary.environment) : "(not recorded)";
    auto& [n, nodes] = environments[key];
    ++n;
    if (r.summary.environment) nodes.insert(r.summary.environment->node);
  }
  out << "the runs ran in " << environments.size() << " environment(s):\n";
  for (const auto& [key, e] : environments) {
    std::string nodes;
    for (const std::string& n : e.second) nodes += (nodes.empty() ? "" : ", ") + n;
    out << "  " << e.first << " run(s) on " << (nodes.empty() ? "?" : nodes) << ": " << key << "\n";
  }
  if (environments.size() > 1) {
    out << "  (LibTorch, OpenBLAS and oneDNN pick kernels per CPU: a failure found in one environment is shrunk and "
           "replayed here, and says so where this is another)\n";
  }

  ChildEvaluator children(binary, o.jobs, o.timeout_seconds, m.out_dir + "/work", o.pool);
  EvalCache cache(&store);
  Budget budget;
  budget.evaluations = o.shrink_evaluations;
  if (o.budget_seconds > 0) {
    budget.deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(o.budget_seconds));
  }
  return finish_sweep(FinishContext{o, m.out_dir, store, binary, children, cache, budget, start, 0}, out);
}

namespace {

struct SweepFacts {
  std::unique_ptr<SweepStore> store;
  std::map<int64_t, RunRow> runs;              // search runs by sample
  std::map<std::string, FailureRow> failures;  // by signature
  std::set<std::string> environments;
};

SweepFacts read_sweep(const std::string& dir) {
  SweepFacts f;
  f.store = SweepStore::open_read_only(dir + "/sweep.db");
  if (f.store->space_json().find("\"lr_sensitivity\"") != std::string::npos &&
      json::parse(f.store->space_json(), nullptr, false).contains("lr_sensitivity")) {
    throw InputError(dir, "", "", "is an lr-sensitivity folder, not a sweep's (it holds no search samples to compare)",
                     "compare two sweeps' folders; an lr-sensitivity result is its lr_sensitivity.json (spikehunt "
                     "report " + dir + " shows it)");
  }
  for (RunRow& r : f.store->runs("search")) {
    // A damaged row is named, not compared by its hash alone and called equal.
    config_from_text(r.config_json, f.store->path(), "runs (sample " + std::to_string(r.sample) + ").config_json");
    f.environments.insert(r.summary.environment ? environment_key(*r.summary.environment) : "(not recorded)");
    f.runs[r.sample] = std::move(r);
  }
  for (FailureRow& r : f.store->failures()) f.failures[r.signature] = std::move(r);
  return f;
}

bool reproduced(const FailureRow& f) { return f.replay.rfind("reproduced", 0) == 0; }

}  // namespace

int run_compare(const std::string& a_dir, const std::string& b_dir, std::ostream& out) {
  const SweepFacts a = read_sweep(a_dir), b = read_sweep(b_dir);
  // Said last: the lines above keep their places for scripts that read them.
  std::string running;
  for (const std::string& dir : {a_dir, b_dir}) {
    if (const std::string holder = OutLock::other_holder(dir); !holder.empty()) {
      running += dir + " is still being written (" + holder + "): compared as committed so far\n";
    }
  }
  std::vector<std::string> diffs;
  if (a.store->seed() != b.store->seed()) {
    diffs.push_back("seed " + std::to_string(a.store->seed()) + " against " + std::to_string(b.store->seed()));
  }
  if (a.store->space_json() != b.store->space_json()) diffs.push_back("the search spaces differ");
  std::vector<int64_t> only_a, only_b;
  for (const auto& [i, r] : a.runs) {
    const auto it = b.runs.find(i);
    if (it == b.runs.end()) {
      only_a.push_back(i);
      continue;
    }
    const RunRow& s = it->second;
    const std::string where = "sample " + std::to_string(i) + ": ";
    if (r.config_hash != s.config_hash) diffs.push_back(where + "another config");
    const std::string va = to_string(r.summary.verdict.outcome), vb = to_string(s.summary.verdict.outcome);
    if (va != vb) diffs.push_back(where + va + " against " + vb);
    const std::string fa = fault_signature(r.summary.verdict), fb = fault_signature(s.summary.verdict);
    if (fa != fb) diffs.push_back(where + "fault " + fa + " against " + fb);
    if (r.summary.verdict.steps_run != s.summary.verdict.steps_run) {
      diffs.push_back(where + std::to_string(r.summary.verdict.steps_run) + " steps against " +
                      std::to_string(s.summary.verdict.steps_run));
    }
    if (r.summary.first.input != s.summary.first.input || r.summary.first.labels != s.summary.first.labels) {
      diffs.push_back(where + "another first batch (input or label hash)");
    }
  }
  for (const auto& [i, r] : b.runs) {
    if (!a.runs.count(i)) only_b.push_back(i);
  }
  if (!only_a.empty()) diffs.push_back("samples only in " + a_dir + ": " + index_ranges(only_a));
  if (!only_b.empty()) diffs.push_back("samples only in " + b_dir + ": " + index_ranges(only_b));
  for (const auto& [sig, f] : a.failures) {
    const auto it = b.failures.find(sig);
    if (it == b.failures.end()) {
      diffs.push_back("failure " + sig + " only in " + a_dir);
      continue;
    }
    const FailureRow& g = it->second;
    if (f.occurrences != g.occurrences) {
      diffs.push_back("failure " + sig + ": " + std::to_string(f.occurrences) + " runs against " +
                      std::to_string(g.occurrences));
    }
    const json ma = f.minimal_config_json.empty() ? json() : json::parse(f.minimal_config_json);
    const json mb = g.minimal_config_json.empty() ? json() : json::parse(g.minimal_config_json);
    if (ma != mb) diffs.push_back("failure " + sig + ": another minimal config");
    if (reproduced(f) != reproduced(g)) diffs.push_back("failure " + sig + ": replay \"" + f.replay + "\" against \"" + g.replay + "\"");
  }
  for (const auto& [sig, g] : b.failures) {
    if (!a.failures.count(sig)) diffs.push_back("failure " + sig + " only in " + b_dir);
  }
  auto line = [&](const std::string& dir, const SweepFacts& f) {
    int64_t failed = 0;
    for (const auto& [i, r] : f.runs) failed += !failure_class(r.summary.verdict).empty();
    out << "  " << dir << ": " << f.runs.size() << " runs, " << failed << " failed, " << f.failures.size()
        << " distinct failure(s), " << f.environments.size() << " environment(s)\n";
  };
  out << "compare " << a_dir << " and " << b_dir << "\n";
  line(a_dir, a);
  line(b_dir, b);
  if (diffs.empty()) {
    out << "equal: the same " << a.runs.size() << " samples with the same configs, verdicts, fault signatures and first "
        << "batches; the same " << a.failures.size() << " distinct failure(s) with the same occurrences, minimal "
        << "configs and replay outcomes\n" << running;
    return kExitOk;
  }
  out << diffs.size() << " difference(s):\n";
  for (size_t i = 0; i < diffs.size() && i < 40; ++i) out << "  " << diffs[i] << "\n";
  if (diffs.size() > 40) out << "  ... (" << diffs.size() - 40 << " more)\n";
  out << running;
  return kExitFinding;
}

}  // namespace spikehunt
