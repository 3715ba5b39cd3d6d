#include "harness/burst.h"
#include "harness/burst_steps.h"
#include "harness/state_buffers.h"

#include <malloc.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <cstdlib>

#include <ATen/autocast_mode.h>

#include "base/error.h"
#include "base/files.h"
#include "harness/health.h"
#include "harness/monitor.h"
#include "harness/ranks.h"
#include "harness/warnings.h"
#include "scenarios/catalog.h"
#include "scenarios/lr_schedule.h"
#include "scenarios/optimizers.h"

namespace spikehunt {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// This rank's shard of each micro-batch: rows [n·rank/world, n·(rank+1)/world).
std::vector<Batch> shard(std::vector<Batch> batches, const Ranks& ranks) {
  for (Batch& b : batches) {
    const int64_t n = b.inputs.size(0);
    const int64_t from = n * ranks.rank() / ranks.world(), to = n * (ranks.rank() + 1) / ranks.world();
    if (to <= from) {
      const std::string m = "a batch of " + std::to_string(n) + " rows cannot be split over " +
                            std::to_string(ranks.world()) + " ranks (world_size)";
      throw TrainingError("data", m, "", m);
    }
    for (torch::Tensor* t : {&b.inputs, &b.targets, &b.host_inputs, &b.host_targets}) {
      if (t->defined() && t->dim() > 0 && t->size(0) == n) *t = t->narrow(0, from, to - from);
    }
  }
  return batches;
}

}  // namespace

void set_crashed(Verdict& v, const TrainingError& e) {
  v.outcome = Outcome::kCrashed;
  v.message = e.message();
  v.crash_stage = e.stage();
  v.crash_cause = e.cause();
}

// ---- the burst ----

BurstSteps::BurstSteps(Scenario& scenario, const HealthRules& rules, const BurstOptions& options)
    : scenario_(scenario),
      rules_(rules),
      options_(options),
      monitor_(scenario, rules),
      result_{Verdict{}, Trace(options.trace_capacity), {}, std::nullopt, std::nullopt},
      step_(options.start_step) {
  monitor_.set_fail_fast(options.fail_fast);
  if (options.resume) {
    monitor_.restore(*options.resume);
    result_.verdict.hash_chain = options.resume->chain;
  }
}

void BurstSteps::begin(const std::vector<Batch>& batches) {
  if (options_.keep_states && !result_.verdict.onset_step) {
    // Copied after the last step as the monitor read it (ready_), or into the last step's buffers.
    // Something changed the state between the steps (a loop that also trains
    // unwatched steps) when none of the copies ahead was taken: then copy here
    // alone, and try copying ahead again every 16 steps.
    copy_ahead_ = capture_state_into(scenario_, entering_.tensors, &ready_) > 0 || step_ % 16 == 0;
    entering_.step = step_;
    // The judge entering the step, as an object: its JSON (MonitorState) only
    // for the step that turns out to be the onset.
    entering_.monitor.chain = monitor_.hash_chain();
    if (entering_judge_) *entering_judge_ = monitor_.judge();  // into the last step's windows
    else entering_judge_.emplace(monitor_.judge());
    monitor_.begin_step(step_, batches);
    monitor_.lend_before(entering_.tensors);  // the parameters' copies serve the update's measure too
    return;
  }
  monitor_.begin_step(step_, batches);
}

const StepRecord& BurstSteps::finish(double step_ms) {
  Verdict& v = result_.verdict;
  if (options_.keep_states && !v.onset_step && copy_ahead_) monitor_.copy_after_into(&ready_);  // the next step's entering state
  last_ = monitor_.finish_step();
  StepRecord& r = last_;
  ++step_;
  r.step_ms = step_ms;
  ++v.steps_run;
  v.hash_chain = monitor_.hash_chain();
  result_.step_hashes.push_back({r.input_hash, r.label_hash});
  if (r.health != Health::kFinite && !v.onset_step) {
    v.onset_step = r.step;
    v.onset_rules = r.rules;
    v.onset_hits = r.hits;
    v.movers = r.movers;
    v.outcome = Outcome::kExtreme;
    if (options_.keep_states) {
      entering_.monitor.judge = entering_judge_->state();
      result_.last_healthy = std::move(entering_);
      result_.first_bad = StateSnapshot{r.step, capture_state(scenario_), monitor_.state()};
      ready_.clear();  // no state is kept entering the steps after the onset: its copies go
      entering_judge_.reset();
    }
  }
  if (r.health == Health::kNonFinite) {
    v.outcome = Outcome::kNonFinite;
    v.failure_step = r.step;
    v.fault = r.fault;
    if (options_.keep_states && r.step != result_.first_bad->step) {
      result_.first_bad = StateSnapshot{r.step, capture_state(scenario_), monitor_.state()};
    }
  }
  result_.trace.push(r);
  if (options_.on_step) options_.on_step(r);
  over_ = r.health == Health::kNonFinite || (r.health == Health::kExtreme && rules_.stop_at == StopAt::kExtreme);
  return r;
}

// A burst another process ran (Scenario::run_elsewhere): its folder read back,
// each step's record handed to on_step as if it had run here. It starts at
// step 0 and keeps no states (a command replays from step 0).
BurstResult burst_from_folder(const std::string& folder, const BurstOptions& options) {
  if (options.start_step > 0 || options.resume) {
    throw InputError(folder, "checkpoint", std::to_string(options.start_step),
                     "cannot be resumed: a burst run in another process replays from step 0 only",
                     "drop --from-checkpoint");
  }
  BurstResult result{Verdict{}, Trace(options.trace_capacity), {}, std::nullopt, std::nullopt};
  const std::string trace = folder + "/trace.jsonl", verdict = folder + "/verdict.json";
  const std::string lines = read_file(trace);
  size_t at = 0;
  while (at < lines.size()) {
    size_t end = lines.find('\n', at);
    if (end == std::string::npos) end = lines.size();
    if (end > at) {
      const StepRecord r = step_record_from_json(nlohmann::json::parse(lines.substr(at, end - at)), trace);
      result.step_hashes.push_back({r.input_hash, r.label_hash});
      if (options.on_step) options.on_step(r);
      result.trace.push(r);
    }
    at = end + 1;
  }
  result.verdict = verdict_from_json(nlohmann::json::parse(read_file(verdict)), verdict);
  return result;
}

BurstResult run_burst(Scenario& scenario, const HealthRules& rules, const BurstOptions& options) {
  std::string elsewhere;
  try {
    in_training_code("setup", {}, [&] { elsewhere = scenario.run_elsewhere(); });
  } catch (const TrainingError& e) {
    BurstResult crashed{Verdict{}, Trace(options.trace_capacity), {}, std::nullopt, std::nullopt};
    set_crashed(crashed.verdict, e);
    return crashed;
  }
  if (!elsewhere.empty()) return burst_from_folder(elsewhere, options);
  if (options.ranks == nullptr && scenario.config().world_size > 1) {
    return run_burst_ranked(scenario, rules, options);  // this process is rank 0 of several (ranks.h)
  }
  WarningCounter warnings;  // LibTorch's warnings counted, not printed each step, and kept in the verdict
  const auto start = Clock::now();
  std::optional<Trainer> trainer;
  std::optional<BurstSteps> steps;
  BurstResult plain{Verdict{}, Trace(options.trace_capacity), {}, std::nullopt, std::nullopt};
  auto done = [&](BurstResult& result) {
    result.verdict.wall_seconds = ms_since(start) / 1000.0;
    result.verdict.warnings = warnings.counts();
    return std::move(result);
  };
  try {  // the scenario breaks its contract (scenario.h), or its code throws
    in_training_code("setup", {}, [&] {
      trainer.emplace(scenario);
      plain.verdict.planned_steps = trainer->planned_steps();
      if (options.monitor) steps.emplace(scenario, rules, options);
      if (options.before_optimizer_step || options.after_optimizer_step) {
        trainer->set_around_optimizer_step(options.before_optimizer_step, options.after_optimizer_step);
      }
      if (Ranks* ranks = options.ranks) {
        trainer->set_after_backward([ranks, &scenario] {
          std::vector<torch::Tensor> grads;
          for (const torch::Tensor& p : scenario.model().parameters()) grads.push_back(p.grad());
          ranks->average(grads);
        });
        if (steps) {
          steps->monitor().set_ranks(ranks->rank(), ranks->world(),
                                     [ranks](const std::vector<double>& mine) { return ranks->gather(mine); });
        }
      }
    });
  } catch (const TrainingError& e) {
    set_crashed(plain.verdict, e);
    return done(plain);
  }
  BurstResult& result = steps ? steps->result() : plain;
  result.verdict.planned_steps = plain.verdict.planned_steps;
  Verdict& v = result.verdict;
  int64_t step = options.start_step;
  try {
    while (options.max_steps < 0 || v.steps_run < options.max_steps) {
      if (options.stop && options.stop->load()) {
        result.interrupted = true;
        break;
      }
      std::vector<Batch> batches = trainer->next_batches();
      if (batches.empty()) break;
      if (options.ranks) batches = shard(std::move(batches), *options.ranks);
      const auto t0 = Clock::now();
      if (!steps) {
        trainer->step(step++, batches, nullptr);
        ++v.steps_run;
        continue;
      }
      try {
        steps->begin(batches);
        trainer->step(steps->next_step(), batches, &steps->monitor());
      } catch (const Monitor::FailFast&) {
        // cut short at its first non-finite statistic; recorded below as it stands
      }
      steps->finish(ms_since(t0));
      // Every rank's record is the global step's; rank 0's monitor decides, so a
      // rank that resumed with fresh health windows stops where rank 0 does.
      if (options.ranks ? options.ranks->from_rank0(steps->over() ? 1 : 0) != 0 : steps->over()) break;
    }
  } catch (const TrainingError& e) {
    set_crashed(v, e);
  }
  return done(result);
}

void configure_runtime(const TrainingConfig& config) {
  at::set_num_threads(static_cast<int>(config.threads));
  // glibc hands LibTorch's large activation buffers back to the kernel after
  // every step and faults them in again on the next (~2,500 minor faults, ~12 MB
  // a simple_cnn step): keep them in the heap instead. SPIKEHUNT_SYSTEM_MALLOC=1
  // leaves glibc's defaults (for comparison: docs/benchmarks.md).
  static const bool tuned = [] {
    const char* off = std::getenv("SPIKEHUNT_SYSTEM_MALLOC");
    if (off != nullptr && std::string(off) == "1") return false;
    ::mallopt(M_MMAP_THRESHOLD, 256 << 20);
    ::mallopt(M_TRIM_THRESHOLD, 512 << 20);
    return true;
  }();
  (void)tuned;
  if (config.device == DeviceKind::kCuda) {
    // cuBLAS reproducibility needs a fixed workspace, set before its first use.
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  }
}

double heldout_loss(Scenario& scenario, int64_t max_samples, int64_t* samples) {
  torch::NoGradGuard no_grad;
  const std::vector<Batch> batches = scenario.heldout(max_samples);
  if (samples != nullptr) {
    *samples = 0;
    for (const Batch& b : batches) *samples += b.inputs.size(0);
  }
  double sum = 0;
  int64_t n = 0;
  for (const Batch& b : batches) {
    Autocast autocast(scenario.config().precision, b.inputs.device());
    const double loss = scenario.loss(scenario.forward(b.inputs, Tap()), b.targets).item<double>();
    if (!std::isfinite(loss)) return std::numeric_limits<double>::infinity();
    sum += loss * double(b.inputs.size(0));
    n += b.inputs.size(0);
  }
  return n == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / double(n);
}

int64_t heldout_samples(const TrainingConfig& config, int64_t max_samples) {
  configure_runtime(config);
  const std::unique_ptr<Scenario> scenario = make_scenario(config);
  int64_t n = 0;
  for (const Batch& b : scenario->heldout(max_samples)) n += b.inputs.size(0);
  return n;
}

BurstSummary run_config_measured(const TrainingConfig& config, int64_t heldout_samples) {
  configure_runtime(config);
  std::unique_ptr<Scenario> scenario;
  RunMetrics m;
  try {
    scenario = in_training_code("setup", {}, [&] { return make_scenario(config); });
    m.init_loss = in_training_code("forward", {}, [&] {
      return heldout_loss(*scenario, heldout_samples, &m.heldout_samples);
    });
  } catch (const TrainingError& e) {
    Verdict v;
    set_crashed(v, e);
    return summary_of(v, {});
  }
  BurstOptions options;
  std::vector<double> train_losses;  // the losses when the scenario has no held-out data
  options.on_step = [&](const StepRecord& r) {
    m.last_train_loss = r.loss;
    train_losses.push_back(r.loss);
    for (const TapStats& t : r.taps) {
      if (tap_is_attention_logits(t.name)) m.max_attention_logit = std::max(m.max_attention_logit, t.max_abs);
      else if (tap_is_logit_z(t.name)) m.max_logit_z = std::max(m.max_logit_z, t.max_abs);
    }
  };
  BurstResult r = run_burst(*scenario, config.health, options);
  if (m.heldout_samples == 0) {  // no held-out data (a command, a scenario without heldout()): the
    // training loss measures it instead: step 0's, and the mean of the last (up to) 10 steps'
    m.init_loss = train_losses.empty() ? std::numeric_limits<double>::quiet_NaN() : train_losses.front();
  }
  if (r.verdict.outcome == Outcome::kNonFinite) {
    m.final_loss = std::numeric_limits<double>::infinity();
  } else if (m.heldout_samples == 0) {
    const size_t last = std::min<size_t>(10, train_losses.size());
    double sum = 0;
    for (size_t i = train_losses.size() - last; i < train_losses.size(); ++i) sum += train_losses[i];
    m.final_loss = last == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / double(last);
  } else {
    try {
      m.final_loss = in_training_code("forward", {}, [&] { return heldout_loss(*scenario, heldout_samples); });
    } catch (const TrainingError& e) {
      set_crashed(r.verdict, e);
    }
  }
  BurstSummary summary = summary_of(r.verdict, std::move(r.step_hashes));
  summary.metrics = m;
  return summary;
}

BurstResult run_config(const TrainingConfig& config, const BurstOptions& options) {
  configure_runtime(config);
  std::unique_ptr<Scenario> scenario;
  try {
    scenario = in_training_code("setup", {}, [&] { return make_scenario(config); });
  } catch (const TrainingError& e) {  // the scenario's own constructor threw
    BurstResult r{Verdict{}, Trace(options.trace_capacity), {}, std::nullopt, std::nullopt};
    set_crashed(r.verdict, e);
    return r;
  }
  return run_burst(*scenario, config.health, options);
}

}  // namespace spikehunt
