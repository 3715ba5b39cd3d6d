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

#include "base/child.h"
#include "base/dotted_path.h"
#include "base/error.h"
#include "base/files.h"
#include "base/number_format.h"
#include "base/out_lock.h"
#include "generators/finish.h"
#include "generators/gen.h"
#include "generators/html_report.h"
#include "generators/progress.h"
#include "generators/shrinker.h"
#include "generators/store.h"
#include "harness/report.h"
#include "harness/repro.h"
#include "harness/results.h"

namespace spikehunt {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

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
  refuse_foreign_report(dir + "/report.html", "--out");  // the user's own page there is never replaced
  const OutLock lock = OutLock::folder(dir, sharded ? "sweep --shard " + shard_text(o.shard_index, o.shard_count) : "sweep");
  fs::create_directories(dir + "/repros");
  for (const std::string& d : {dir, dir + "/repros"}) remove_stale_temporaries(d);  // a killed writer's, under our lock
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
  if (const auto recorded = store.meta("build"); recorded && *recorded != build && !sharded) {
    if (!o.allow_code_change) {
      throw InputError(store.path(), "build", *recorded,
                       "is the code this sweep started with, and this program is build " + build +
                           ": resuming would mix two versions of the code in one sweep",
                       "finish it with the code it started with, start a fresh --out, or pass --allow-code-change "
                       "(then said in the summary and the report)");
    }
    const std::string before = store.meta("code_changed").value_or("");
    store.set_meta("code_changed", (before.empty() ? *recorded : before) + " -> " + build);
    out << "resuming over changed code (--allow-code-change): the runs so far trained build " << *recorded
        << ", the rest train " << build << "\n";
  }
  if (!store.meta("build")) store.set_meta("build", build);
  store.set_meta("runs", std::to_string(o.runs));
  ChildEvaluator children(binary, o.jobs, o.timeout_seconds, dir + "/work", o.pool);
  // A worker whose code changed since the start refuses. Only for workers that are this program: another
  // executable (a wrapper script, a test's fake) may start other code whose build this one cannot know.
  if (binary == self_executable()) children.expect_build(build);
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
  return finish_sweep(FinishContext{o, dir, store, binary, children, cache, budget, start, search_bursts}, out);
}

}  // namespace spikehunt
