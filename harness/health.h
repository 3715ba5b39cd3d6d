// health.h — classifies a step as finite, extreme or non_finite from its
// statistics, with named rules (see HealthRules in scenarios/config.h):
//   non_finite             any statistic is NaN or ±Inf
//   loss_limit             loss > limit
//   grad_norm_limit        global grad norm > limit
//   max_grad_limit         max |grad| > limit
//   activation_limit       max |activation| > limit
//   optimizer_state_limit  max |momentum / Adam moment| > limit
//   param_jump_limit       a weight (≥ 2-dim parameter) whose norm changed by
//                          more than limit × its norm in one step
//   loss_spike, grad_norm_spike, activation_spike
//                          z-score of log10(value) against the trailing window
//                          > spike_z, and value > the rule's floor
// Spike windows hold only finite, non-extreme steps of the current protocol
// phase (a new domain is a new regime: the windows restart at each phase
// boundary) and stay silent until full.
// Example:
//   HealthJudge judge(config.health);
//   judge.judge(record);   // sets record.health and record.rules
#pragma once

#include <deque>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/record.h"
#include "scenarios/config.h"

namespace spikehunt {

// The spread of a window is at least this many decades, so a flat window
// does not turn a 2x move into a spike.
constexpr double kMinLogStd = 0.1;

// A trailing window of log10 magnitudes with its z-score.
class SpikeWindow {
 public:
  explicit SpikeWindow(size_t capacity) : capacity_(capacity) {}
  bool full() const { return values_.size() >= capacity_; }
  const std::deque<double>& values() const { return values_; }  // log10, oldest first
  void assign(const std::vector<double>& log_values);
  // z-score of log10(value) against the window (0 when value <= 0).
  double z(double value) const;
  void add(double value);
  void clear() { values_.clear(); }

 private:
  size_t capacity_;
  std::deque<double> values_;  // log10 of positive values
};

class HealthJudge {
 public:
  explicit HealthJudge(const HealthRules& rules);
  void judge(StepRecord& r);

  // The phase and windows, for checkpoints: a judge restored from them judges
  // the next steps exactly as the original would have.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  HealthRules rules_;
  SpikeWindow loss_, grad_norm_, activation_;
  int64_t phase_ = -1;  // the phase the windows describe
};

}  // namespace spikehunt
