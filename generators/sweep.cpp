#include "generators/sweep.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "generators/driver.h"
#include "generators/gen.h"
#include "generators/html_report.h"
#include "harness/child.h"
#include "harness/report.h"
#include "harness/repro.h"
#include "harness/results.h"
#include "harness/store.h"
#include "scenarios/error.h"
#include "scenarios/files.h"

namespace spikehunt {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::pair<double, double> wilson_interval(int64_t k, int64_t n) {
  if (n <= 0) return {0.0, 1.0};
  const double z = 1.959963984540054, p = double(k) / double(n), nn = double(n);
  const double denom = 1 + z * z / nn;
  const double centre = (p + z * z / (2 * nn)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / nn + z * z / (4 * nn * nn)) / denom;
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

namespace {

const json* find_field(const json& j, const std::string& path) {
  const json* node = &j;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object()) return nullptr;
    const auto it = node->find(part);
    if (it == node->end()) return nullptr;
    node = &*it;
    if (dot == std::string::npos) return node;
    start = dot + 1;
  }
}

std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string value_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

Factor factor_of(const Dimension& d, const json* v) {
  Factor f;
  f.field = d.field;
  if (v == nullptr) {
    f.bucket = "(unset)";
    f.order = -1e300;
    return f;
  }
  if (d.kind == "permutations") {
    for (const json& x : *v) f.bucket += (f.bucket.empty() ? "" : ">") + std::string(1, char('A' + x.get<int64_t>()));
    return f;
  }
  if (d.kind == "set" || !v->is_number()) {
    f.bucket = value_text(*v);
    const auto at = std::find(d.values.begin(), d.values.end(), *v);
    f.order = double(at - d.values.begin());
    if (v->is_number()) f.value = v->get<double>();
    return f;
  }
  const double x = v->get<double>();
  f.value = x;
  if (d.kind == "log_range" && x > 0) {
    const int decade = static_cast<int>(std::floor(std::log10(x) + 1e-9));
    f.bucket = "[" + g(std::pow(10.0, decade)) + ", " + g(std::pow(10.0, decade + 1)) + ")";
    f.order = decade;
    return f;
  }
  if (d.values.size() <= 10) {
    f.bucket = value_text(*v);
    f.order = x;
    return f;
  }
  double lo = INFINITY, hi = -INFINITY;
  for (const json& e : d.values) lo = std::min(lo, e.get<double>()), hi = std::max(hi, e.get<double>());
  const double w = (hi - lo) / 4;
  const int k = w > 0 ? std::clamp(static_cast<int>(std::floor((x - lo) / w)), 0, 3) : 0;
  f.bucket = "[" + g(lo + k * w) + ", " + g(lo + (k + 1) * w) + (k == 3 ? "]" : ")");
  f.order = k;
  return f;
}

}  // namespace

std::vector<Factor> factors_of(const SearchSpace& space, const json& config) {
  std::vector<Factor> out;
  for (const Dimension& d : space.dimensions()) out.push_back(factor_of(d, find_field(config, d.field)));
  return out;
}

std::string percent(double x) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * x);
  return buf;
}

SweepRates sweep_rates(const std::vector<RunRow>& searched, const SearchSpace& space) {
  SweepRates rates;
  const std::vector<Dimension>& dims = space.dimensions();
  std::vector<size_t> numeric_dims;  // the map's axes: indices of its two dimensions
  for (const std::string& axis : space.map_axes()) {
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i].field == axis) numeric_dims.push_back(i);
    }
  }
  if (numeric_dims.size() == 2) rates.map_x = dims[numeric_dims[0]].field, rates.map_y = dims[numeric_dims[1]].field;
  std::map<std::pair<std::string, std::string>, FactorRate> cells;
  std::map<std::string, FactorRate> xs, ys;
  for (const RunRow& r : searched) {
    const bool bad = !failure_class(r.summary.verdict).empty();
    auto count = [bad](RateCell& cell) {
      cell.failed += bad;
      ++cell.runs;
    };
    count(rates.all);
    if (bad) ++rates.by_outcome[to_string(r.summary.verdict.outcome)];
    const std::vector<Factor> factors = factors_of(space, json::parse(r.config_json));
    for (const Factor& f : factors) {
      FactorRate& c = cells[{f.field, f.bucket}];
      c.field = f.field, c.bucket = f.bucket, c.order = f.order;
      count(c.cell);
    }
    if (!rates.map_x.empty()) {
      const Factor& x = factors[numeric_dims[0]];
      const Factor& y = factors[numeric_dims[1]];
      count(rates.map[{x.bucket, y.bucket}]);
      xs[x.bucket] = {x.field, x.bucket, x.order, {}};
      ys[y.bucket] = {y.field, y.bucket, y.order, {}};
    }
  }
  auto by_order = [](const FactorRate& a, const FactorRate& b) { return a.order < b.order; };
  for (const Dimension& d : dims) {
    std::vector<FactorRate> of_dim;
    for (const auto& [key, c] : cells) {
      if (key.first == d.field) of_dim.push_back(c);
    }
    std::stable_sort(of_dim.begin(), of_dim.end(), by_order);
    rates.factors.insert(rates.factors.end(), of_dim.begin(), of_dim.end());
  }
  for (const auto& [b, c] : xs) rates.map_x_buckets.push_back(c);
  for (const auto& [b, c] : ys) rates.map_y_buckets.push_back(c);
  std::stable_sort(rates.map_x_buckets.begin(), rates.map_x_buckets.end(), by_order);
  std::stable_sort(rates.map_y_buckets.begin(), rates.map_y_buckets.end(), by_order);
  return rates;
}

namespace {

std::string duration_text(double seconds) {
  char buf[32];
  const int s = static_cast<int>(std::lround(seconds));
  if (s >= 60) std::snprintf(buf, sizeof buf, "%dm%02ds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  return buf;
}


// A progress line on a terminal: runs done, failures so far, ETA.
class Progress {
 public:
  Progress(bool on, int64_t total) : on_(on && ::isatty(STDERR_FILENO)), total_(total), start_(Clock::now()) {}
  void update(int64_t done, int64_t failures, int64_t done_here) {
    if (!on_) return;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double eta = done_here > 0 ? elapsed / double(done_here) * double(total_ - done) : 0;
    const int width = 24, filled = total_ > 0 ? int(width * done / total_) : width;
    std::fprintf(stderr, "\r  [%s%s] %lld/%lld runs, %lld failed, ETA %s   ", std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), '-').c_str(), static_cast<long long>(done),
                 static_cast<long long>(total_), static_cast<long long>(failures),
                 done_here > 0 ? duration_text(eta).c_str() : "?");
  }
  void note(const std::string& text) {
    if (on_) std::fprintf(stderr, "\r  %-70s", text.c_str());
  }
  void done() {
    if (on_) std::fprintf(stderr, "\r%90s\r", "");
  }

 private:
  bool on_;
  int64_t total_;
  Clock::time_point start_;
};

struct FailureGroup {
  std::string signature;
  int64_t occurrences = 0;
  RunRow first;  // the search run with this signature of the lowest sample index
};

// The children's scratch folder goes when it is empty (a failed burst leaves its log there).
void remove_if_empty(const std::string& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec) && fs::is_empty(dir, ec)) fs::remove(dir, ec);
}

}  // namespace

std::string record_and_replay(const std::string& binary, const TrainingConfig& config, const std::string& path,
                              const std::string& expected_class, double timeout_seconds, const std::string& work_dir,
                              bool* ok) {
  *ok = false;
  fs::create_directories(work_dir);
  const std::string stem = work_dir + "/repro-" + config_hash(config).hex().substr(0, 12);
  save_config(config, stem + ".config.json");
  ChildExit recorded;
  run_children({{{binary, "burst", "--config", stem + ".config.json", "--result", stem + ".result.json", "--repro", path,
                  "--hashes"},
                 timeout_seconds,
                 stem + ".log"}},
               1, [&](size_t, const ChildExit& e) { recorded = e; });
  std::string verdict;
  if (recorded.exit_code != 0 || !fs::exists(path)) {
    verdict = "the repro could not be recorded: " + recorded.describe() + " " + tail_of(stem + ".log", 300);
  } else if (const Repro repro = read_repro(path); failure_class(repro.verdict) != expected_class) {
    verdict = "the config failed differently when recorded: " + fault_signature(repro.verdict) + ", not " + expected_class;
  } else {
    std::vector<std::string> argv = {binary, "replay", path};
    if (repro.checkpoint) argv.push_back("--from-checkpoint");
    ChildExit replayed;
    run_children({{argv, timeout_seconds, stem + ".replay.log"}}, 1, [&](size_t, const ChildExit& e) { replayed = e; });
    std::istringstream log(tail_of(stem + ".replay.log", 4000));
    std::string summary;
    for (std::string line; std::getline(log, line);) {
      if (line.rfind("replayed ", 0) == 0) summary = line.substr(line.find(" from step ") + 1);
      if (line.rfind("reproduced", 0) == 0 || line.rfind("not reproduced", 0) == 0) verdict = line;
    }
    *ok = replayed.exit_code == 0;
    if (verdict.empty()) verdict = "the replay did not finish: " + replayed.describe();
    else if (!summary.empty()) verdict += " (replayed " + summary + ")";
  }
  for (const char* ext : {".config.json", ".result.json", ".log", ".replay.log"}) {
    std::error_code ec;
    fs::remove(stem + ext, ec);
  }
  return verdict;
}

std::string one_failure_with(const std::string& signature) {
  return "one failure with " + signature + (signature.empty() ? "" : ": it shrank to the same minimal config");
}

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

int finish_sweep(const SweepOptions& o, const std::string& dir, SweepStore& store, const std::string& binary,
                 Evaluator& children, EvalCache& cache, const Budget& budget, Clock::time_point start,
                 int64_t search_bursts, std::ostream& out) {
  Progress progress(o.progress, 0);
  // ---- distinct failures ----
  std::vector<RunRow> searched;
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
    return a.occurrences != b.occurrences ? a.occurrences > b.occurrences : a.first.sample < b.first.sample;
  });

  // ---- shrink, repro, replay ----
  int64_t shrink_bursts = 0, shrunk = 0;
  // Each config a shrink passed through, and the failure whose shrink it was:
  // a later shrink that reaches one is that failure from there on.
  std::map<std::string, std::string> passed_by;
  std::map<std::string, std::string> minimal_of;  // a minimal config's JSON -> the first failure shrunk to it
  struct ToRecord {
    FailureRow row;
    std::string failure_class;
  };
  std::vector<ToRecord> to_record;  // distinct minimal configs without a repro yet
  auto pass = [&](const TrainingConfig& c, const std::string& signature) {
    passed_by.emplace(config_hash(c).hex(), signature);
  };
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
      std::string joined;
      const auto note = [&](const ShrinkResult& s) {
        progress.note("shrinking " + g.signature + ": " + std::to_string(s.evaluations) + " bursts, " +
                      std::to_string(s.accepted) + " steps");
      };
      const ShrinkResult r =
          passes ? shrink(o.space, o.space.point_of(start_config), g.first.summary, children, cache, budget, note,
                          [&](const SpacePoint& p) {
                            const auto it = passed_by.find(config_hash(o.space.config(p)).hex());
                            if (it != passed_by.end()) joined = it->second;
                            return it != passed_by.end();
                          })
                 : shrink_tree(o.space, o.space.point_of(start_config), g.first.summary, children, cache, budget, note);
      progress.done();
      for (const SpacePoint& p : r.path) pass(o.space.config(p), g.signature);
      const std::optional<FailureRow> other = r.joined ? store.failure(joined) : std::nullopt;
      f.minimal_config_json = other ? other->minimal_config_json : config_to_json(o.space.config(r.minimal)).dump();
      f.shrink_evaluations = r.evaluations;
      f.shrink_steps = r.accepted;
      f.budget_exhausted = r.budget_exhausted;
      shrink_bursts += r.evaluations;
      store.put_failure(f);
    }
    pass(config_from_json(json::parse(f.minimal_config_json), store.path()), g.signature);
    if (const auto [first, fresh] = minimal_of.emplace(f.minimal_config_json, g.signature); !fresh) {
      f.replay = one_failure_with(first->second);  // its repro is the other's
      f.repro_path.clear();
      store.put_failure(f);
      continue;
    }
    if (f.repro_path.empty() || !fs::exists(f.repro_path)) {
      to_record.push_back({f, failure_class(g.first.summary.verdict)});
    }
  }
  // ---- repros: recorded and replayed, as many at once as there are slots ----
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
                                       to_record[i].failure_class, o.timeout_seconds, dir + "/work", &ok);
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

  const int64_t ahead_unused = cache.held();  // trained on idle slots, never asked for
  // ---- summary ----
  const SweepRates rates = sweep_rates(searched, o.space);
  const int64_t n = rates.all.runs, failed = rates.all.failed;
  const auto [lo, hi] = wilson_interval(failed, n);
  out << "\n" << n << " runs, " << failed << " failed: " << percent(n ? double(failed) / double(n) : 0)
      << " (95% Wilson interval " << percent(lo) << " to " << percent(hi) << ")";
  for (const auto& [outcome, count] : rates.by_outcome) out << ", " << count << " " << outcome;
  out << "\nbursts this invocation: " << search_bursts << " search, " << shrink_bursts << " shrink"
      << (ahead_unused > 0 ? " (+" + std::to_string(ahead_unused) + " trained on idle slots and not needed)" : "")
      << "; total in the database: "
      << store.count("search") << " search, " << store.count("shrink") << " shrink; "
      << duration_text(std::chrono::duration<double>(Clock::now() - start).count()) << "\n\n";
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
  const TrainingConfig simplest = o.space.simplest();
  const std::vector<FailureRow> rows = store.failures();
  int64_t folded = 0;
  for (const FailureRow& f : rows) folded += f.replay.rfind(one_failure_with(""), 0) == 0;
  out << "\n" << rows.size() << " distinct failure(s) by fault signature";
  if (folded > 0) out << ", " << int64_t(rows.size()) - folded << " after shrinking (" << folded << " shrank to another's minimal config)";
  out << "\n";
  int index = 0;
  for (const FailureGroup& g : ordered) {
    const auto row = std::find_if(rows.begin(), rows.end(), [&](const FailureRow& f) { return f.signature == g.signature; });
    if (row == rows.end()) continue;
    out << "\n" << ++index << ". " << g.signature << ": " << g.occurrences << " of " << n << " runs (first: sample "
        << g.first.sample << ")\n";
    if (const std::string note = environment_note(g.first.summary); !note.empty()) out << "   " << note << "\n";
    if (row->minimal_config_json.empty()) {
      out << "   not shrunk (--max-shrinks " << o.max_shrinks << " or the time budget)\n";
      continue;
    }
    if (row->replay.rfind(one_failure_with(""), 0) == 0) {
      out << "   " << row->replay << " (" << row->shrink_evaluations << " shrink bursts)\n";
      continue;
    }
    const TrainingConfig minimal = config_from_json(json::parse(row->minimal_config_json), store.path());
    out << "   minimal config (fields away from the space's simplest values):\n";
    const std::vector<std::string> diff = config_diff(simplest, minimal);
    if (diff.empty()) out << "     (none: the simplest config of the space fails)\n";
    for (const std::string& d : diff) out << "     " << d << "\n";
    out << "   shrink: " << row->shrink_evaluations << " bursts, " << row->shrink_steps << " steps accepted"
        << (row->budget_exhausted ? " (budget spent: may not be minimal)" : " (a local minimum)") << "\n";
    if (row->repro_path.empty()) {
      out << "   " << row->replay << "\n";
      continue;
    }
    const Repro repro = read_repro(row->repro_path);
    const Verdict& v = repro.verdict;
    out << "   fails: " << to_string(v.outcome);
    if (v.onset_step) out << ", onset step " << *v.onset_step;
    if (v.failure_step) out << ", non-finite at step " << *v.failure_step;
    if (v.fault) out << ", " << v.fault->describe();
    out << "\n   repro:  " << row->repro_path << "\n   replay: " << row->replay << "\n";
    out << "   replay it: " << program_name() << " replay " << row->repro_path << (repro.checkpoint ? " --from-checkpoint" : "") << "\n";
    out << "   draft regression test:\n";
    std::istringstream test(draft_regression_test(repro, row->repro_path));
    for (std::string l; std::getline(test, l);) out << "     " << l << "\n";
  }
  remove_if_empty(dir + "/work");
  try {
    const ReportFacts report = write_sweep_report(dir);
    out << "\nreport: " << report.path << " (one offline page: open it in a browser)\n";
  } catch (const std::exception& e) {
    out << "\nno report written: " << e.what() << "\n";
  }
  return failed > 0 ? kExitFinding : kExitOk;
}

std::string shard_folder(const std::string& out_dir, int64_t index, int64_t count) {
  return out_dir + "/shard-" + std::to_string(index) + "-of-" + std::to_string(count);
}

std::string shard_text(int64_t index, int64_t count) { return std::to_string(index) + "/" + std::to_string(count); }

int run_sweep(const SweepOptions& o, std::ostream& out) {
  const auto start = Clock::now();
  Budget budget;
  budget.evaluations = o.shrink_evaluations;
  if (o.budget_seconds > 0) {
    budget.deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.budget_seconds));
  }
  const bool sharded = o.shard_count > 1;
  const std::string dir = sharded ? shard_folder(o.out_dir, o.shard_index, o.shard_count) : o.out_dir;
  fs::create_directories(dir + "/repros");
  SweepStore store(dir + "/sweep.db", o.space.to_json().dump(), o.seed);
  const std::string binary = o.binary.empty() ? self_executable() : o.binary;
  const std::string build = build_id(binary);
  if (sharded) {
    // A shard's database is only ever filled by one build: merge checks the shards agree on it.
    if (const auto recorded = store.meta("build"); recorded && *recorded != build) {
      throw InputError(store.path(), "build", *recorded, "was filled by another build of spikehunt than this one (" + build + ")",
                       "resume the shard with the build that started it, or run the sharded sweep again in a fresh --out");
    }
    store.set_meta("shard", shard_text(o.shard_index, o.shard_count));
  }
  if (!store.meta("build")) store.set_meta("build", build);
  store.set_meta("runs", std::to_string(o.runs));
  ChildEvaluator children(binary, o.jobs, o.timeout_seconds, dir + "/work", o.pool);
  EvalCache cache(&store);
  int64_t mine = 0;  // the samples this process searches
  for (int64_t i = 0; i < o.runs; ++i) mine += i % o.shard_count == o.shard_index;
  out << "sweep: seed " << o.seed << ", " << o.runs << " runs over " << o.space_source << " ("
      << o.space.dimensions().size() << " dimensions), " << o.jobs << " at a time; database " << store.path() << "\n";
  if (sharded) {
    out << "shard " << shard_text(o.shard_index, o.shard_count) << ": samples i with i mod " << o.shard_count << " = "
        << o.shard_index << ", " << mine << " of the " << o.runs << " runs\n";
  }

  // ---- search ----
  std::vector<int64_t> pending;
  int64_t done = 0, failures = 0;
  for (int64_t i = o.shard_index; i < o.runs; i += o.shard_count) {
    if (store.has_sample(i)) ++done;
    else pending.push_back(i);
  }
  for (const RunRow& r : store.runs("search")) {
    if (r.sample < o.runs && !failure_class(r.summary.verdict).empty()) ++failures;
  }
  if (done > 0) out << "resuming: " << done << " of " << mine << " runs already in the database\n";
  std::vector<TrainingConfig> to_run;
  std::vector<int64_t> to_run_sample;
  for (int64_t i : pending) {
    const TrainingConfig c = o.space.config(sample_point(o.space, o.seed, uint64_t(i)));
    if (std::optional<BurstSummary> hit = cache.find(config_hash(c).hex())) {  // trained before: not again
      cache.add("search", i, c, *hit);
      ++done;
      failures += !failure_class(hit->verdict).empty();
      continue;
    }
    to_run.push_back(c);
    to_run_sample.push_back(i);
  }
  Progress progress(o.progress, mine);
  int64_t done_here = 0, search_bursts = 0;
  progress.update(done, failures, done_here);
  children.evaluate(
      to_run,
      [&](size_t k, const BurstSummary& s) {
        cache.add("search", to_run_sample[k], to_run[k], s);  // one transaction per finished run
        ++done, ++done_here, ++search_bursts;
        failures += !failure_class(s.verdict).empty();
        progress.update(done, failures, done_here);
      },
      [&] { return budget.expired(); });
  progress.done();
  if (done < mine) {
    out << "time budget spent after " << done << " of " << mine
        << " runs; the same command resumes from the database\n";
  }
  if (sharded && !o.shard_shrinks) {
    out << "\nshard " << shard_text(o.shard_index, o.shard_count) << ": " << done << " of " << mine << " runs, "
        << failures << " failed; bursts this invocation: " << search_bursts << "; "
        << duration_text(std::chrono::duration<double>(Clock::now() - start).count()) << "\n"
        << "merge the shards (shrink, repro, replay, report) when all have run:\n  " << program_name() << " merge "
        << o.out_dir << " " << o.out_dir << "/shard-*-of-" << o.shard_count << "\n";
    remove_if_empty(dir + "/work");
    return failures > 0 ? kExitFinding : kExitOk;
  }
  return finish_sweep(o, dir, store, binary, children, cache, budget, start, search_bursts, out);
}

int run_shrink(const ShrinkOptions& o, std::ostream& out) {
  const std::string binary = o.binary.empty() ? self_executable() : o.binary;
  const std::string hash = config_hash(o.config).hex();
  const std::string out_dir = o.out_dir.empty() ? "results/shrink-" + hash.substr(0, 8) : o.out_dir;
  fs::create_directories(out_dir);
  const SearchSpace space = o.space.around(o.config);
  ChildEvaluator children(binary, o.jobs, o.timeout_seconds, out_dir + "/work", o.pool);
  EvalCache cache;
  out << "shrinking " << o.source << " (config hash " << hash.substr(0, 16) << ") over " << space.dimensions().size()
      << " dimensions, " << o.jobs << " bursts at a time, at most " << o.evaluations << " bursts\n";
  BurstSummary start;
  children.evaluate({o.config}, [&](size_t, const BurstSummary& s) { start = s; });
  cache.add("check", -1, o.config, start);
  const std::string target = failure_class(start.verdict);
  if (target.empty()) {
    out << "the config is healthy (" << start.verdict.steps_run << " steps): nothing to shrink\n";
    return kExitOk;
  }
  out << "it fails: " << fault_signature(start.verdict) << "\n";
  Budget budget;
  budget.evaluations = o.evaluations;
  const ShrinkResult r = shrink(space, space.point_of(o.config), start, children, cache, budget);
  const TrainingConfig minimal = space.config(r.minimal);
  out << "\nminimal config, as a diff from the original (" << r.accepted << " shrink steps, " << r.evaluations + 1
      << " bursts with the check of the original, " << r.memo_hits << " memo hits, " << r.implied
      << " not run (below a candidate that did not fail this way)"
      << (r.budget_exhausted ? "; budget spent: may not be minimal" : "; a local minimum") << "):\n";
  const std::vector<std::string> diff = config_diff(o.config, minimal);
  if (diff.empty()) out << "  (no change: every simpler candidate stopped failing this way)\n";
  for (const std::string& d : diff) out << "  " << d << "\n";
  const std::string path = out_dir + "/minimal.repro.json";
  save_config(minimal, out_dir + "/minimal.config.json");
  bool ok = false;
  const std::string verdict = record_and_replay(binary, minimal, path, target, o.timeout_seconds, out_dir + "/work", &ok);
  remove_if_empty(out_dir + "/work");
  out << "\nminimal config: " << out_dir << "/minimal.config.json\n";
  if (fs::exists(path)) {
    const Repro repro = read_repro(path);
    out << "repro:  " << path << "\nreplay: " << verdict << "\n";
    out << "replay it: " << program_name() << " replay " << path << (repro.checkpoint ? " --from-checkpoint" : "") << "\n";
    out << "draft regression test:\n" << draft_regression_test(repro, path);
  } else {
    out << verdict << "\n";
  }
  return kExitFinding;
}

}  // namespace spikehunt
