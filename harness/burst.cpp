#include "harness/burst.h"

#include <malloc.h>

#include <chrono>
#include <cstdlib>

#include "harness/monitor.h"
#include "scenarios/catalog.h"

namespace spikehunt {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

void clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads, norms;
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) {
      grads.push_back(p.grad());
      norms.push_back(p.grad().norm(2));
    }
  }
  if (grads.empty()) return;
  const torch::Tensor total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
  const torch::Tensor coef = torch::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
  for (torch::Tensor& g : grads) g.mul_(coef);
}

torch::Tensor train_step(Scenario& s, const Batch& b, Monitor* monitor) {
  s.optimizer().zero_grad();
  torch::Tensor out = s.forward(b.inputs, monitor ? monitor->tap() : Tap());
  torch::Tensor loss = s.loss(out, b.targets);
  if (monitor) monitor->after_loss(loss);
  loss.backward();
  if (monitor) monitor->after_backward();
  if (s.grad_clip() > 0) clip_grad_norm(s.model().parameters(), s.grad_clip());
  s.optimizer_step();
  return loss;
}

BurstResult run_burst(Scenario& scenario, const HealthRules& rules, const BurstOptions& options) {
  BurstResult result{Verdict{}, Trace(options.trace_capacity), {}, std::nullopt, std::nullopt};
  Verdict& v = result.verdict;
  v.planned_steps = scenario.planned_steps();
  const auto start = Clock::now();
  std::optional<Monitor> monitor;
  if (options.monitor) monitor.emplace(scenario, rules);
  if (monitor) monitor->set_fail_fast(options.fail_fast);
  if (monitor && options.resume) {
    monitor->restore(*options.resume);
    v.hash_chain = options.resume->chain;
  }
  StateSnapshot entering;  // the state entering the current step, until the onset

  try {
    while (options.max_steps < 0 || v.steps_run < options.max_steps) {
      std::optional<Batch> batch = scenario.next_batch();
      if (!batch) break;
      const auto t0 = Clock::now();
      if (!monitor) {
        train_step(scenario, *batch, nullptr);
        ++v.steps_run;
        continue;
      }
      if (options.keep_states && !v.onset_step) entering = {batch->step, capture_state(scenario), monitor->state()};
      try {
        monitor->begin_step(*batch);
        train_step(scenario, *batch, &*monitor);
      } catch (const Monitor::FailFast&) {
        // cut short at its first non-finite statistic; recorded below as it stands
      }
      StepRecord r = monitor->finish_step();
      r.step_ms = ms_since(t0);
      ++v.steps_run;
      v.hash_chain = monitor->hash_chain();
      result.step_hashes.push_back({r.input_hash, r.label_hash});

      const bool bad = r.health != Health::kFinite;
      if (bad && !v.onset_step) {
        v.onset_step = r.step;
        v.onset_rules = r.rules;
        v.outcome = Outcome::kExtreme;
        if (options.keep_states) {
          result.last_healthy = std::move(entering);
          result.first_bad = StateSnapshot{r.step, capture_state(scenario), monitor->state()};
        }
      }
      if (r.health == Health::kNonFinite) {
        v.outcome = Outcome::kNonFinite;
        v.failure_step = r.step;
        v.fault = r.fault;
        if (options.keep_states && r.step != result.first_bad->step) {
          result.first_bad = StateSnapshot{r.step, capture_state(scenario), monitor->state()};
        }
      }
      result.trace.push(r);
      if (options.on_step) options.on_step(r);
      if (r.health == Health::kNonFinite) break;
      if (r.health == Health::kExtreme && rules.stop_at == StopAt::kExtreme) break;
    }
  } catch (const c10::Error& e) {
    v.outcome = Outcome::kCrashed;
    v.message = e.what_without_backtrace();
  }
  v.wall_seconds = ms_since(start) / 1000.0;
  return result;
}

void configure_runtime(const TrainingConfig& config) {
  at::set_num_threads(static_cast<int>(config.threads));
  // glibc hands LibTorch's large activation buffers back to the kernel after
  // every step and faults them in again on the next (~2,500 minor faults, ~12 MB
  // a simple_cnn step): keep them in the heap instead. SPIKEHUNT_SYSTEM_MALLOC=1
  // leaves glibc's defaults (for comparison: bench/README).
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

BurstResult run_config(const TrainingConfig& config, const BurstOptions& options) {
  configure_runtime(config);
  std::unique_ptr<Scenario> scenario = make_scenario(config);
  return run_burst(*scenario, config.health, options);
}

}  // namespace spikehunt
