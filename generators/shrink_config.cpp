#include "generators/shrink_config.h"

#include <filesystem>
#include <vector>

#include "base/error.h"
#include "base/files.h"
#include "base/out_lock.h"
#include "generators/record_replay.h"
#include "generators/shrinker.h"
#include "harness/repro.h"
#include "harness/results.h"

namespace spikehunt {

namespace fs = std::filesystem;

int run_shrink(const ShrinkOptions& o, std::ostream& out) {
  const std::string binary = o.binary.empty() ? self_executable() : o.binary;
  const std::string hash = config_hash(o.config).hex();
  const std::string out_dir = o.out_dir.empty() ? "results/shrink-" + hash.substr(0, 8) : o.out_dir;
  const OutLock lock = OutLock::folder(out_dir, "shrink");
  const SearchSpace space = o.space.around(o.config);
  ChildEvaluator children(binary, o.jobs, o.timeout_seconds, out_dir + "/work", o.pool);
  EvalCache cache;
  out << "shrinking " << o.source << " (config hash " << hash.substr(0, 16) << ") over " << space.dimensions().size()
      << " dimensions, " << o.jobs << " bursts at a time, at most " << o.evaluations << " bursts\n";
  BurstSummary start;
  children.evaluate({o.config}, [&](size_t, const BurstSummary& s) { start = s; });
  cache.add("check", -1, o.config, start);
  const std::string target = fault_signature(start.verdict);
  if (target.empty()) {
    out << "the config is healthy (" << start.verdict.steps_run << " steps): nothing to shrink\n";
    return kExitOk;
  }
  out << "it fails: " << target << "\n";
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
  if (const std::string retried = describe_retries(children.retries()); !retried.empty()) out << retried << "\n";
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
