#include "harness/health.h"

#include <algorithm>
#include <cmath>

namespace spikehunt {

double SpikeWindow::z(double value) const {
  if (!(value > 0) || values_.empty()) return 0;
  double mean = 0;
  for (double v : values_) mean += v;
  mean /= double(values_.size());
  double var = 0;
  for (double v : values_) var += (v - mean) * (v - mean);
  var /= double(values_.size());
  const double sd = std::max(std::sqrt(var), kMinLogStd);
  return (std::log10(value) - mean) / sd;
}

void SpikeWindow::add(double value) {
  if (!(value > 0)) value = 1e-300;  // an exact zero still counts as "small"
  values_.push_back(std::log10(value));
  if (values_.size() > capacity_) values_.pop_front();
}

void SpikeWindow::assign(const std::vector<double>& log_values) {
  values_.assign(log_values.begin(), log_values.end());
  while (values_.size() > capacity_) values_.pop_front();
}

nlohmann::json HealthJudge::state() const {
  auto list = [](const SpikeWindow& w) { return std::vector<double>(w.values().begin(), w.values().end()); };
  return {{"phase", phase_}, {"loss", list(loss_)}, {"grad_norm", list(grad_norm_)}, {"activation", list(activation_)}};
}

void HealthJudge::restore(const nlohmann::json& state) {
  phase_ = state.at("phase").get<int64_t>();
  loss_.assign(state.at("loss").get<std::vector<double>>());
  grad_norm_.assign(state.at("grad_norm").get<std::vector<double>>());
  activation_.assign(state.at("activation").get<std::vector<double>>());
}

HealthJudge::HealthJudge(const HealthRules& rules)
    : rules_(rules),
      loss_(size_t(rules.window)),
      grad_norm_(size_t(rules.window)),
      activation_(size_t(rules.window)) {}

namespace {

bool all_finite(const StepRecord& r) {
  auto ok = [](double v) { return std::isfinite(v); };
  if (!ok(r.loss) || !ok(r.grad_norm) || !ok(r.grad_max) || !ok(r.param_norm_after) ||
      !ok(r.state_norm) || !ok(r.state_max) || !ok(r.input_max) || !ok(r.activation_max)) {
    return false;
  }
  for (const TapStats& t : r.taps) {
    if (!ok(t.max_abs)) return false;
  }
  for (const LayerStats& l : r.layers) {
    if (!ok(l.grad_norm) || !ok(l.grad_max) || !ok(l.param_norm_after) || !ok(l.state_norm) ||
        !ok(l.state_max)) {
      return false;
    }
  }
  return true;
}

}  // namespace

void HealthJudge::judge(StepRecord& r) {
  r.rules.clear();
  if (r.phase != phase_) {
    phase_ = r.phase;
    loss_.clear();
    grad_norm_.clear();
    activation_.clear();
  }
  if (r.fault || !all_finite(r)) {
    r.health = Health::kNonFinite;
    r.rules.push_back("non_finite");
    return;
  }
  const HealthRules& h = rules_;
  auto limit = [&](const char* name, double value, double lim) {
    if (lim > 0 && value > lim) r.rules.push_back(name);
  };
  limit("loss_limit", r.loss, h.loss_limit);
  limit("grad_norm_limit", r.grad_norm, h.grad_norm_limit);
  limit("max_grad_limit", r.grad_max, h.max_grad_limit);
  limit("activation_limit", r.activation_max, h.activation_limit);
  limit("optimizer_state_limit", r.state_max, h.optimizer_state_limit);
  if (h.param_jump_limit > 0) {
    for (const LayerStats& l : r.layers) {
      if (!l.is_weight || !(l.param_norm_before > 0)) continue;
      const double jump = std::fabs(l.param_norm_after - l.param_norm_before) / l.param_norm_before;
      if (jump > h.param_jump_limit) {
        r.rules.push_back("param_jump_limit");
        break;
      }
    }
  }
  auto spike = [&](const char* name, SpikeWindow& w, double value, double floor) {
    if (h.spike_z > 0 && w.full() && value > floor && w.z(value) > h.spike_z) r.rules.push_back(name);
  };
  spike("loss_spike", loss_, r.loss, h.loss_spike_floor);
  spike("grad_norm_spike", grad_norm_, r.grad_norm, h.grad_norm_spike_floor);
  spike("activation_spike", activation_, r.activation_max, h.activation_spike_floor);

  r.health = r.rules.empty() ? Health::kFinite : Health::kExtreme;
  if (r.health == Health::kFinite) {
    loss_.add(r.loss);
    grad_norm_.add(r.grad_norm);
    activation_.add(r.activation_max);
  }
}

}  // namespace spikehunt
