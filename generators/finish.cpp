#include "generators/finish.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/files.h"
#include "base/junit.h"
#include "base/number_format.h"
#include "base/program.h"
#include "generators/html_report.h"
#include "generators/progress.h"
#include "generators/rates.h"
#include "generators/record_replay.h"
#include "generators/shrink_ahead.h"
#include "harness/env.h"
#include "harness/repro.h"
#include "harness/results.h"

namespace spikehunt {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct FailureGroup {
  std::string signature;
  int64_t occurrences = 0;
  RunRow first;  // the search run with this signature of the lowest sample index
  int64_t rank = 0;  // its place in the shrink order (0: shrunk first)
};

// How much a failure costs the user's training, most first: a crash or a
// non-finite value ends the run; an extreme step is a warning sign; a timeout
// says least about the code.
int harm(Outcome o) {
  switch (o) {
    case Outcome::kCrashed: return 0;
    case Outcome::kNonFinite: return 1;
    case Outcome::kExtreme: return 2;
    case Outcome::kTimeout: return 3;
    case Outcome::kHealthy: break;
  }
  return 4;
}

// A distinct minimal config without a repro yet.
struct ToRecord {
  FailureRow row;  // its signature is what the recorded repro must fail with
};

// What the shrinks leave for the repros: the minimal configs to record, and
// the shrink bursts this invocation ran.
struct Shrunk {
  std::vector<ToRecord> to_record;
  int64_t bursts = 0;
};

// ---- 1. distinct failures ----

// The search runs of this sweep (into *searched_out) grouped by fault
// signature, in the order they are shrunk: the most harmful first (crashed,
// non-finite, extreme, timeout), then the most frequent, then the lowest
// first sample.
std::vector<FailureGroup> distinct_failures(const FinishContext& c, std::vector<RunRow>* searched_out) {
  const SweepOptions& o = c.options;
  SweepStore& store = c.store;
  std::vector<RunRow>& searched = *searched_out;
  for (RunRow& r : store.runs("search")) {
    if (r.sample < o.runs) searched.push_back(std::move(r));
  }
  std::map<std::string, FailureGroup> groups;
  for (const RunRow& r : searched) {
    const std::string sig = fault_signature(r.summary.verdict);
    if (sig.empty()) continue;
    FailureGroup& g = groups[sig];  // "first" is the lowest sample, whatever -j finished first
    if (g.occurrences++ == 0 || r.sample < g.first.sample) g.signature = sig, g.first = r;
  }
  std::vector<FailureGroup> ordered;
  for (auto& [sig, g] : groups) ordered.push_back(g);
  std::sort(ordered.begin(), ordered.end(), [](const FailureGroup& a, const FailureGroup& b) {
    const int ha = harm(a.first.summary.verdict.outcome), hb = harm(b.first.summary.verdict.outcome);
    if (ha != hb) return ha < hb;
    return a.occurrences != b.occurrences ? a.occurrences > b.occurrences : a.first.sample < b.first.sample;
  });
  for (size_t i = 0; i < ordered.size(); ++i) ordered[i].rank = int64_t(i);
  return ordered;
}

// ---- 2. shrinks ----

// Shrinks the first --max-shrinks failures not shrunk before (a resume keeps
// what was).
Shrunk shrink_failures(const FinishContext& c, const std::vector<FailureGroup>& ordered, Progress& progress,
                       std::ostream& out) {
  const SweepOptions& o = c.options;
  SweepStore& store = c.store;
  Evaluator& children = c.children;
  EvalCache& cache = c.cache;
  const Budget& budget = c.budget;
  Shrunk shrunk_out;
  int64_t& shrink_bursts = shrunk_out.bursts;
  std::vector<ToRecord>& to_record = shrunk_out.to_record;
  int64_t shrunk = 0;
  // With more than one slot, the shrinks run at once first (their bursts
  // held), so that those in order below find them trained.
  std::vector<std::pair<SpacePoint, BurstSummary>> to_shrink;
  for (size_t i = 0; i < ordered.size() && int64_t(i) < o.max_shrinks; ++i) {
    const std::optional<FailureRow> row = store.failure(ordered[i].signature);
    if (row && !row->minimal_config_json.empty()) continue;  // shrunk before this resume
    to_shrink.emplace_back(o.space.point_of(config_from_json(json::parse(ordered[i].first.config_json), store.path())),
                           ordered[i].first.summary);
  }
  const bool passes = o.shrinker == ShrinkMethod::kPasses;
  if (passes && children.parallelism() > 1 && to_shrink.size() > 1 && !budget.expired()) {
    progress.note("shrinking " + std::to_string(to_shrink.size()) + " failures at once ...");
    shrink_ahead(o.space, to_shrink, children, cache, budget);
    progress.done();
  }
  for (const FailureGroup& g : ordered) {
    FailureRow f = store.failure(g.signature).value_or(FailureRow{});
    f.signature = g.signature;
    f.first_run = g.first.id;
    f.occurrences = g.occurrences;
    if (shrunk >= o.max_shrinks) {
      store.put_failure(f);
      continue;
    }
    ++shrunk;
    if (const std::string note = environment_note(g.first.summary); !note.empty()) out << g.signature << ": " << note << "\n";
    if (f.minimal_config_json.empty()) {
      if (budget.expired()) {
        out << "time budget spent before shrinking " << g.signature << "\n";
        store.put_failure(f);
        continue;
      }
      const TrainingConfig start_config = config_from_json(json::parse(g.first.config_json), store.path());
      progress.note("shrinking " + g.signature + " ...");
      const auto note = [&](const ShrinkResult& s) {
        progress.note("shrinking " + g.signature + ": " + std::to_string(s.evaluations) + " bursts, " +
                      std::to_string(s.accepted) + " steps");
      };
      const ShrinkResult r =
          passes ? shrink(o.space, o.space.point_of(start_config), g.first.summary, children, cache, budget, note)
                 : shrink_tree(o.space, o.space.point_of(start_config), g.first.summary, children, cache, budget, note);
      progress.done();
      f.minimal_config_json = config_to_json(o.space.config(r.minimal)).dump();
      f.shrink_evaluations = r.evaluations;
      f.shrink_steps = r.accepted;
      f.budget_exhausted = r.budget_exhausted;
      shrink_bursts += r.evaluations;
      store.put_failure(f);
    }
    // A failure folded into another's repro by an older build keeps its
    // line; each other one gets its own repro.
    const bool folded = f.replay.rfind(one_failure_with(""), 0) == 0;
    if (!folded && (f.repro_path.empty() || !fs::exists(f.repro_path))) to_record.push_back({f});
  }
  return shrunk_out;
}

// ---- 3. repros ----

// Records and replays each minimal config's repro, as many at once as there
// are slots, and stores each failure's repro and replay line.
void record_repros(const FinishContext& c, std::vector<ToRecord>& to_record, Progress& progress) {
  const SweepOptions& o = c.options;
  SweepStore& store = c.store;
  const std::string& dir = c.dir;
  const std::string& binary = c.binary;
  Evaluator& children = c.children;
  if (!to_record.empty()) {
    progress.note("recording and replaying " + std::to_string(to_record.size()) + " repro(s) ...");
    std::atomic<size_t> next{0};
    std::vector<std::string> errors(to_record.size());
    auto record = [&] {
      for (size_t i; (i = next++) < to_record.size();) {
        FailureRow& f = to_record[i].row;
        const std::string path = dir + "/repros/" + file_safe(f.signature) + ".repro.json";
        try {
          bool ok = false;
          f.replay = record_and_replay(binary, config_from_json(json::parse(f.minimal_config_json), store.path()), path,
                                       f.signature, o.timeout_seconds, dir + "/work", &ok);
          f.repro_path = fs::exists(path) ? path : "";
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      }
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < std::min(children.parallelism(), int(to_record.size())); ++t) threads.emplace_back(record);
    record();
    for (std::thread& t : threads) t.join();
    progress.done();
    for (size_t i = 0; i < to_record.size(); ++i) {
      if (!errors[i].empty()) throw std::runtime_error(errors[i]);
      store.put_failure(to_record[i].row);
    }
  }
}

// ---- 4. summary ----

// "non_finite:forward:fc1_act: 3 of 24 runs (first: sample 5)".
std::string failure_title(const FailureGroup& g, int64_t n) {
  return g.signature + ": " + std::to_string(g.occurrences) + " of " + std::to_string(n) + " runs (first: sample " +
         std::to_string(g.first.sample) + ")";
}

// What the summary says under a failure's title (each line indented): its
// minimal config, the shrink, how its repro fails and how to replay it.
std::string failure_text(const FinishContext& c, const FailureGroup& g, const FailureRow& row) {
  std::ostringstream out;
  if (const std::string note = environment_note(g.first.summary); !note.empty()) out << "   " << note << "\n";
  if (row.minimal_config_json.empty()) {
    if (g.rank >= c.options.max_shrinks) {
      out << "   not shrunk: --max-shrinks " << c.options.max_shrinks << " shrinks the " << c.options.max_shrinks
          << " most harmful (crashed, non-finite, extreme, timeout; the most frequent first), and this one is "
          << g.rank + 1 << (g.rank == 0 ? "st" : g.rank == 1 ? "nd" : g.rank == 2 ? "rd" : "th") << "\n";
    } else {
      out << "   not shrunk: the time budget (--budget) ran out before its shrink\n";
    }
    return out.str();
  }
  if (row.replay.rfind(one_failure_with(""), 0) == 0) {
    out << "   " << row.replay << " (" << row.shrink_evaluations << " shrink bursts)\n";
    return out.str();
  }
  const TrainingConfig minimal = config_from_json(json::parse(row.minimal_config_json), c.store.path());
  out << "   minimal config (fields away from the space's simplest values):\n";
  const std::vector<std::string> diff = config_diff(c.options.space.simplest(), minimal);
  if (diff.empty()) out << "     (none: the simplest config of the space fails)\n";
  for (const std::string& d : diff) out << "     " << d << "\n";
  out << "   shrink: " << row.shrink_evaluations << " bursts, " << row.shrink_steps << " steps accepted"
      << (row.budget_exhausted ? " (budget spent: may not be minimal)" : " (a local minimum)") << "\n";
  if (row.repro_path.empty()) {
    out << "   " << row.replay << "\n";
    return out.str();
  }
  const Repro repro = read_repro(row.repro_path);
  const Verdict& v = repro.verdict;
  out << "   fails: " << to_string(v.outcome);
  if (v.onset_step) out << ", onset step " << *v.onset_step;
  if (v.failure_step) out << ", non-finite at step " << *v.failure_step;
  if (v.fault) out << ", " << v.fault->describe();
  out << "\n   repro:  " << row.repro_path << "\n   replay: " << row.replay << "\n";
  out << "   replay it: " << program_name() << " replay " << row.repro_path << (repro.checkpoint ? " --from-checkpoint" : "") << "\n";
  out << "   draft regression test:\n";
  std::istringstream test(draft_regression_test(repro, row.repro_path));
  for (std::string l; std::getline(test, l);) out << "     " << l << "\n";
  return out.str();
}


// The stored row of a distinct failure (its shrink, repro and replay), or
// null when it has none yet.
const FailureRow* stored_row(const std::vector<FailureRow>& rows, const std::string& signature) {
  const auto row = std::find_if(rows.begin(), rows.end(), [&](const FailureRow& f) { return f.signature == signature; });
  return row == rows.end() ? nullptr : &*row;
}

// Prints the rates, the per-factor table and every distinct failure (`rows`:
// the store's failures); returns how many search runs failed.
int64_t print_summary(const FinishContext& c, const std::vector<RunRow>& searched,
                      const std::vector<FailureGroup>& ordered, const std::vector<FailureRow>& rows,
                      int64_t shrink_bursts, std::ostream& out) {
  const SweepOptions& o = c.options;
  SweepStore& store = c.store;
  const int64_t search_bursts = c.search_bursts;
  const Clock::time_point start = c.start;
  const int64_t ahead_unused = c.cache.held();  // trained on idle slots, never asked for
  const SweepRates rates = sweep_rates(searched, o.space);
  const int64_t n = rates.all.runs, failed = rates.all.failed;
  const auto [lo, hi] = wilson_interval(failed, n);
  out << "\n" << n << " runs, " << failed << " failed: " << percent(n ? double(failed) / double(n) : 0)
      << " (95% Wilson interval " << percent(lo) << " to " << percent(hi) << ")";
  for (const auto& [outcome, count] : rates.by_outcome) out << ", " << count << " " << outcome;
  const int64_t earlier = c.cache.taken_from_earlier();  // trained ahead before a kill, committed as held
  out << "\nbursts this invocation: " << search_bursts << " search, " << shrink_bursts << " shrink"
      << (earlier > 0 ? " (" + std::to_string(earlier) + " of them trained ahead before the last run was killed: "
                                "kept held, not trained again)"
                      : "")
      << (ahead_unused > 0 ? " (+" + std::to_string(ahead_unused) + " trained on idle slots and not needed)" : "")
      << "; total in the database: "
      << store.count("search") << " search, " << store.count("shrink") << " shrink; "
      << duration_text(std::chrono::duration<double>(Clock::now() - start).count()) << "\n";
  if (const std::string retried = describe_retries(c.children.retries()); !retried.empty()) out << retried << "\n";
  if (const auto changed = store.meta("code_changed")) {
    out << "the code changed during this sweep (--allow-code-change): builds " << *changed
        << "; its runs trained more than one version of the code\n";
  }
  out << "\n";
  char line[160];
  size_t field_width = 6;
  for (const FactorRate& f : rates.factors) field_width = std::max(field_width, f.field.size());
  std::snprintf(line, sizeof line, "  %-*s %-16s %9s %6s  %s\n", int(field_width), "factor", "value", "failed", "rate",
                "95% interval");
  out << line;
  for (const FactorRate& f : rates.factors) {
    const auto [flo, fhi] = wilson_interval(f.cell.failed, f.cell.runs);
    const std::string frac = std::to_string(f.cell.failed) + "/" + std::to_string(f.cell.runs);
    std::snprintf(line, sizeof line, "  %-*s %-16s %9s %6s  [%s, %s]\n", int(field_width), f.field.c_str(),
                  f.bucket.c_str(), frac.c_str(), percent(double(f.cell.failed) / double(f.cell.runs)).c_str(),
                  percent(flo).c_str(), percent(fhi).c_str());
    out << line;
  }
  int64_t folded = 0;
  for (const FailureRow& f : rows) folded += f.replay.rfind(one_failure_with(""), 0) == 0;
  out << "\n" << rows.size() << " distinct failure(s) by fault signature";
  if (folded > 0) out << ", " << int64_t(rows.size()) - folded << " after shrinking (" << folded << " shrank to another's minimal config)";
  out << "\n";
  int index = 0;
  for (const FailureGroup& g : ordered) {
    const FailureRow* row = stored_row(rows, g.signature);
    if (row == nullptr) continue;
    out << "\n" << ++index << ". " << failure_title(g, n) << "\n" << failure_text(c, g, *row);
  }
  return failed;
}

// --junit FILE: one test case per distinct failure (its title the message,
// what the summary says under it the text), or one passing case when no
// search run failed; written whole or not at all.
void write_sweep_junit(const FinishContext& c, const std::vector<RunRow>& searched,
                       const std::vector<FailureGroup>& ordered, const std::vector<FailureRow>& rows) {
  const SweepOptions& o = c.options;
  JunitSuite suite;
  suite.name = "spikehunt sweep " + c.dir;
  suite.seconds = std::chrono::duration<double>(Clock::now() - c.start).count();
  suite.properties = {{"space", o.space_source}, {"seed", std::to_string(o.seed)}, {"runs", std::to_string(o.runs)},
                      {"database", c.store.path()}};
  const int64_t n = int64_t(searched.size());
  for (const FailureGroup& g : ordered) {
    const FailureRow* row = stored_row(rows, g.signature);
    if (row == nullptr) continue;
    const std::string cls = failure_class(g.first.summary.verdict);
    suite.cases.push_back({g.signature, "spikehunt.sweep", 0, failure_title(g, n), cls.substr(0, cls.find(':')),
                           failure_text(c, g, *row), ""});
  }
  if (suite.cases.empty()) {
    suite.cases.push_back({"no failure in " + std::to_string(n) + " runs", "spikehunt.sweep", suite.seconds, "", "", "", ""});
  }
  write_file_atomic(o.junit_path, junit_xml(suite));
}

}  // namespace

std::string environment_note(const BurstSummary& found) {
  if (!found.environment) return "";
  const Environment& there = *found.environment;
  const Environment here = environment(there.device, there.threads);
  if (environment_key(there) == environment_key(here)) return "";
  std::string differs;
  for (const std::string& w : environment_warnings(there, here, "node that found it")) differs += "; " + w;
  return "found on node " + there.node + " in another environment than this one (" + here.node +
         "): its shrink and replay here are not promised to be bit-exact" + differs +
         " (to run them where it was found, run this on a node like " + there.node + ", e.g. srun -w " + there.node +
         ")";
}

int finish_sweep(const FinishContext& c, std::ostream& out) {
  Progress progress(c.options.progress, 0);
  std::vector<RunRow> searched;
  const std::vector<FailureGroup> ordered = distinct_failures(c, &searched);
  Shrunk shrunk = shrink_failures(c, ordered, progress, out);
  record_repros(c, shrunk.to_record, progress);
  const std::vector<FailureRow> rows = c.store.failures();
  const int64_t failed = print_summary(c, searched, ordered, rows, shrunk.bursts, out);
  if (!c.options.junit_path.empty()) {
    write_sweep_junit(c, searched, ordered, rows);
    out << "\njunit: " << c.options.junit_path << "\n";
  }
  remove_if_empty(c.dir + "/work");
  try {
    const ReportFacts report = write_sweep_report(c.dir);
    out << "\nreport: " << report.path << " (one offline page: open it in a browser)\n";
  } catch (const std::exception& e) {
    out << "\nno report written: " << e.what() << "\n";
  }
  return failed > 0 ? kExitFinding : kExitOk;
}

}  // namespace spikehunt
