#include "generators/driver.h"

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "generators/gen.h"
#include "harness/child.h"
#include "harness/results.h"
#include "scenarios/files.h"

namespace spikehunt {

namespace fs = std::filesystem;

// ---- evaluators ----

ChildEvaluator::ChildEvaluator(std::string binary, int jobs, double timeout_seconds, std::string work_dir)
    : binary_(std::move(binary)), work_dir_(std::move(work_dir)), jobs_(std::max(jobs, 1)), timeout_(timeout_seconds) {
  fs::create_directories(work_dir_);
}

void ChildEvaluator::evaluate(const std::vector<TrainingConfig>& configs,
                              const std::function<void(size_t, const BurstSummary&)>& on_result,
                              const std::function<bool()>& stop) {
  std::vector<ChildSpec> specs;
  std::vector<std::string> stems;
  for (const TrainingConfig& c : configs) {
    const std::string stem = work_dir_ + "/burst-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++);
    save_config(c, stem + ".config.json");
    std::vector<std::string> argv = {binary_, "burst", "--config", stem + ".config.json", "--result", stem + ".result.json"};
    argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
    specs.push_back({std::move(argv), timeout_, stem + ".log"});
    stems.push_back(stem);
  }
  run_children(specs, jobs_, [&](size_t i, const ChildExit& e) {
    const std::string& stem = stems[i];
    BurstSummary s;
    bool read = false;
    if (e.exit_code == 0 && e.signal == 0) {
      try {
        s = summary_from_json(nlohmann::json::parse(read_file(stem + ".result.json")), stem + ".result.json");
        read = true;
      } catch (const std::exception&) {
      }
    }
    if (!read) {
      s.verdict.outcome = e.timed_out ? Outcome::kTimeout : Outcome::kCrashed;
      std::string log = tail_of(stem + ".log", 600);
      while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.pop_back();
      s.verdict.message = e.describe() + (log.empty() ? "" : ": " + log);
      s.verdict.wall_seconds = e.wall_seconds;
    }
    for (const char* ext : {".config.json", ".result.json", ".log"}) {
      std::error_code ec;
      fs::remove(stem + ext, ec);
    }
    on_result(i, s);
  }, stop);
}

void FunctionEvaluator::evaluate(const std::vector<TrainingConfig>& configs,
                                 const std::function<void(size_t, const BurstSummary&)>& on_result,
                                 const std::function<bool()>& stop) {
  for (size_t i = 0; i < configs.size(); ++i) {
    if (stop && stop()) return;
    ++calls_;
    on_result(i, f_(configs[i]));
  }
}

// ---- memo ----

std::optional<BurstSummary> EvalCache::find(const std::string& config_hash) {
  auto it = memory_.find(config_hash);
  if (it != memory_.end()) return it->second;
  if (store_ != nullptr) {
    if (std::optional<BurstSummary> s = store_->find(config_hash)) {
      memory_[config_hash] = *s;
      return s;
    }
  }
  return std::nullopt;
}

void EvalCache::add(const std::string& kind, int64_t sample, const TrainingConfig& config, const BurstSummary& summary) {
  const std::string hash = config_hash(config).hex();
  memory_[hash] = summary;
  if (store_ != nullptr) {
    RunRow row;
    row.kind = kind;
    row.sample = sample;
    row.config_json = config_to_json(config).dump();
    row.config_hash = hash;
    row.summary = summary;
    store_->add_run(std::move(row));
  }
}

// ---- shrinking ----

ShrinkResult shrink(const SearchSpace& space, const SpacePoint& start, const BurstSummary& start_summary,
                    Evaluator& evaluator, EvalCache& cache, const Budget& budget,
                    const std::function<void(const ShrinkResult&)>& progress) {
  ShrinkResult result;
  result.start = result.minimal = start;
  result.summary = start_summary;
  const std::string target = failure_class(start_summary.verdict);
  if (target.empty()) return result;  // nothing fails: nothing to shrink
  rc::Shrinkable<SpacePoint> current = shrinkable_point(space, start);
  const size_t window = size_t(std::max(evaluator.parallelism(), 1));
  while (true) {
    rc::Seq<rc::Shrinkable<SpacePoint>> candidates = current.shrinks();
    bool accepted = false, exhausted = false;
    while (!accepted && !exhausted) {
      // The next window of valid candidates, in the tree's order.
      std::vector<rc::Shrinkable<SpacePoint>> batch;
      while (batch.size() < window) {
        rc::Maybe<rc::Shrinkable<SpacePoint>> c = candidates.next();
        if (!c) break;
        if (space.valid(c->value())) batch.push_back(std::move(*c));
      }
      if (batch.empty()) break;
      std::vector<std::optional<BurstSummary>> summaries(batch.size());
      std::vector<TrainingConfig> to_run;
      std::vector<size_t> to_run_index;
      for (size_t i = 0; i < batch.size(); ++i) {
        const TrainingConfig c = space.config(batch[i].value());
        if (std::optional<BurstSummary> hit = cache.find(config_hash(c).hex())) {
          summaries[i] = hit;
          ++result.memo_hits;
        } else if (result.evaluations + int64_t(to_run.size()) < budget.evaluations && !budget.expired()) {
          to_run.push_back(c);
          to_run_index.push_back(i);
        } else {
          exhausted = true;
        }
      }
      evaluator.evaluate(to_run, [&](size_t k, const BurstSummary& s) {
        summaries[to_run_index[k]] = s;
        cache.add("shrink", -1, to_run[k], s);
        ++result.evaluations;
      });
      for (size_t i = 0; i < batch.size(); ++i) {
        if (!summaries[i]) break;  // not evaluated: the budget ran out before it
        if (failure_class(summaries[i]->verdict) == target) {
          current = batch[i];
          result.minimal = current.value();
          result.summary = *summaries[i];
          ++result.accepted;
          accepted = true;
          break;
        }
      }
    }
    if (progress) progress(result);
    if (exhausted && !accepted) {
      result.budget_exhausted = true;
      break;
    }
    if (!accepted) break;  // no simpler candidate fails the same way: a local minimum
  }
  return result;
}

}  // namespace spikehunt
