#include "generators/stability.h"

#include <filesystem>
#include <sstream>

#include "base/files.h"
#include "generators/gen.h"
#include "generators/shrinker.h"
#include "harness/burst.h"
#include "harness/repro.h"

namespace spikehunt {

namespace fs = std::filesystem;

StabilityResult check_stability(const SearchSpace& space, const StabilityOptions& o) {
  FunctionEvaluator in_process([](const TrainingConfig& c) {
    BurstResult r = run_config(c, BurstOptions{});
    BurstSummary s = summary_of(r.verdict, std::move(r.step_hashes));
    s.step_hashes.clear();  // the memo keeps verdicts and first hashes only
    return s;
  });
  EvalCache cache;
  StabilityResult result;
  for (int64_t i = 0; i < o.runs; ++i) {
    const SpacePoint point = sample_point(space, o.seed, uint64_t(i));
    const TrainingConfig config = space.config(point);
    BurstSummary summary;
    in_process.evaluate({config}, [&](size_t, const BurstSummary& s) { summary = s; });
    cache.add("search", i, config, summary);
    ++result.runs;
    if (failure_class(summary.verdict).empty()) continue;

    result.stable = false;
    result.failed_sample = i;
    Budget budget;
    budget.evaluations = o.shrink_evaluations;
    const ShrinkResult shrunk = shrink(space, point, summary, in_process, cache, budget);
    result.minimal = space.config(shrunk.minimal);
    fs::create_directories(o.out_dir);
    result.repro_path = (fs::path(o.out_dir) / (file_safe(fault_signature(shrunk.summary.verdict)) + ".repro.json")).string();
    const Repro repro = record_repro(result.minimal, result.repro_path);
    result.verdict = repro.verdict;

    std::ostringstream m;
    m << "training is not stable: sample " << i << " of " << o.runs << " (seed " << o.seed << ") failed: "
      << fault_signature(summary.verdict) << "\n";
    m << "minimal config after " << shrunk.evaluations << " shrink bursts"
      << (shrunk.budget_exhausted ? " (budget spent: may not be minimal)" : "") << ", as a diff from the space's simplest:\n";
    const std::vector<std::string> diff = config_diff(space.simplest(), result.minimal);
    if (diff.empty()) m << "  (none: the simplest config of the space fails)\n";
    for (const std::string& d : diff) m << "  " << d << "\n";
    const Verdict& v = repro.verdict;
    m << "fails: " << to_string(v.outcome);
    if (v.onset_step) m << ", onset step " << *v.onset_step;
    if (v.failure_step) m << ", non-finite at step " << *v.failure_step;
    if (v.fault) m << ", " << v.fault->describe();
    m << "\nrepro: " << result.repro_path << "\nreplay it: "
      << (result.minimal.scenario == "standard" ? std::string("spikehunt") : std::string("<your program>")) << " replay "
      << result.repro_path << (repro.checkpoint ? " --from-checkpoint" : "");
    if (result.minimal.scenario != "standard") {
      m << "  (a program that registers scenario \"" << result.minimal.scenario << "\" and calls spikehunt::cli_main)";
    }
    m << "\n";
    result.message = m.str();
    return result;
  }
  std::ostringstream m;
  m << "stable: " << result.runs << " sampled configs (seed " << o.seed << ") stayed healthy";
  result.message = m.str();
  return result;
}

}  // namespace spikehunt
