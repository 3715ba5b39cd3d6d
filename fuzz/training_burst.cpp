#include "training_burst.h"

#include <cmath>
#include <functional>

#include <nlohmann/json.hpp>

#include "harness/burst.h"
#include "scenarios/catalog.h"
#include "scenarios/health_rules.h"

namespace spikehunt::fuzz {

const SearchSpace& training_space() {
  static const SearchSpace space = SearchSpace::from_json(nlohmann::json::parse(R"({
    "base": {"name": "fuzz", "model": {"kind": "mlp"}, "threads": 1, "batch_size": 8,
             "dataset": {"synthetic_train_per_class": 8, "synthetic_test_per_class": 1}},
    "dimensions": {
      "model.mlp_depth": {"range": [1, 3]},
      "model.mlp_width": {"set": [8, 4, 16]},
      "optimizer.kind": {"set": ["sgd", "adam", "adamw"]},
      "optimizer.lr": {"log_range": [0.0001, 10]},
      "optimizer.momentum": {"range": [0, 0.99], "step": 0.01},
      "optimizer.weight_decay": {"set": [0, 0.01, 0.1]},
      "optimizer.eps": {"set": [1e-8, 1e-4, 1e-12]},
      "activation.kind": {"set": ["relu", "leaky_relu", "gelu", "tanh", "sigmoid"]},
      "activation.slope": {"range": [0, 1], "step": 0.05},
      "protocol.task_order": {"permutations": true},
      "protocol.epochs_per_phase": {"range": [1, 2]},
      "max_batches_per_epoch": {"range": [1, 4]},
      "batch_size": {"set": [8, 4, 16]},
      "grad_clip": {"set": [0, 0.1, 1, 10]},
      "seed": {"range": [0, 1000]}
    }})"),
                                                          "<fuzz training space>");
  return space;
}

namespace {

// Half-decade buckets: 1 for values up to 1e-20, ..., 124 for 1e41.5 and
// above; 0 for zero, 125 NaN, 126 ±Inf.
int log_bucket(double x) {
  if (std::isnan(x)) return 125;
  if (std::isinf(x)) return 126;
  if (!(x > 0)) return 0;
  return std::clamp(static_cast<int>(std::floor(2 * std::log10(x))) + 41, 1, 124);
}

std::shared_ptr<const Dataset> tiny_dataset() {
  static const auto data = std::make_shared<const Dataset>(make_synthetic_dataset(8, 1));
  return data;
}

}  // namespace

BurstFeatures run_tiny_burst(const TrainingConfig& config, bool monitor) {
  BurstFeatures f;
  std::unique_ptr<Scenario> scenario = make_scenario(config, tiny_dataset());
  BurstOptions options;
  options.monitor = monitor;
  int health = 0;
  std::set<int> rules;
  int top[4] = {0, 0, 0, 0};
  options.on_step = [&](const StepRecord& r) {
    const double values[4] = {r.grad_norm, r.activation_max, r.state_max, std::fabs(r.loss)};
    for (int k = 0; k < 4; ++k) top[k] = std::max(top[k], log_bucket(values[k]));
    health = std::max(health, static_cast<int>(r.health));
    for (const std::string& rule : r.rules) {  // every rule of the registry, by its row
      const std::vector<HealthRuleSpec>& all = health_rules();
      for (size_t i = 0; i < all.size(); ++i) {
        if (rule == all[i].name) rules.insert(static_cast<int>(i));
      }
    }
  };
  BurstResult r = run_burst(*scenario, config.health, options);
  f.verdict = r.verdict;
  f.step_hashes = r.step_hashes;
  f.signature = fault_signature(r.verdict);
  if (!monitor) return f;
  // Only magnitudes past what healthy training reaches get buckets of their
  // own (grad norm and optimizer state from 1, activations from 10, loss from
  // 3): below that the fuzzer has nothing to climb toward.
  const int floors[4] = {log_bucket(1.0), log_bucket(10.0), log_bucket(1.0), log_bucket(3.0)};
  for (int k = 0; k < 4; ++k) f.features.push_back(128 * k + std::max(top[k], floors[k]));
  f.features.push_back(512 + health);
  if (r.verdict.fault) {
    const int tensor = static_cast<int>(std::hash<std::string>{}(r.verdict.fault->tensor) % 16);
    f.features.push_back(520 + static_cast<int>(r.verdict.fault->stage) * 16 + tensor);
  }
  for (int rule : rules) {  // a feature per rule fired, by its row of the registry
    if (704 + rule < kFeatures) f.features.push_back(704 + rule);
  }
  if (auto lead = r.verdict.lead_time()) f.features.push_back(600 + static_cast<int>(std::min<int64_t>(*lead, 63)));
  if (r.verdict.outcome == Outcome::kCrashed) f.features.push_back(700);
  return f;
}

bool Tally::add(const BurstFeatures& f) {
  ++bursts_;
  features_.insert(f.features.begin(), f.features.end());
  return !f.signature.empty() && faults_.insert(f.signature).second;
}

std::string Tally::json() const {
  return nlohmann::json{{"bursts", bursts_},
                        {"features", features_.size()},
                        {"faults", faults_.size()},
                        {"signatures", std::vector<std::string>(faults_.begin(), faults_.end())}}
      .dump();
}

}  // namespace spikehunt::fuzz
