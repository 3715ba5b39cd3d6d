// planted.h — planted properties for the shrinker: pure functions of the
// config, no training, so the minimal failing boundary is known exactly.
// Shared by tests/driver_test.cpp and bench/burst_bench.cpp.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "generators/gen.h"
#include "generators/space.h"
#include "harness/record.h"

namespace spikehunt {

inline SearchSpace planted_space() {
  return SearchSpace::from_json(nlohmann::json::parse(R"({
    "dimensions": {
      "optimizer.lr": {"log_range": [0.01, 1.0]},
      "optimizer.momentum": {"range": [0, 0.99], "step": 0.01},
      "activation.kind": {"set": ["relu", "leaky_relu", "gelu", "tanh"]},
      "protocol.task_order": {"permutations": true},
      "seed": {"range": [0, 9]},
      "max_batches_per_epoch": {"range": [5, 30]}
    }})"),
                                "planted");
}

inline BurstSummary verdict_of(Outcome outcome, Stage stage = Stage::kForward, const std::string& tensor = "fc1_act") {
  BurstSummary s;
  s.verdict.outcome = outcome;
  if (outcome == Outcome::kNonFinite) s.verdict.fault = Fault{tensor, stage, 1, 0, 0, 10};
  return s;
}

// Non-finite in the forward pass iff lr >= 0.3 and momentum >= 0.5; extreme
// iff lr >= 0.12 (and not non-finite); healthy otherwise.
inline BurstSummary planted(const TrainingConfig& c) {
  if (c.optimizer.lr >= 0.3 && c.optimizer.momentum >= 0.5) return verdict_of(Outcome::kNonFinite);
  if (c.optimizer.lr >= 0.12) return verdict_of(Outcome::kExtreme);
  return verdict_of(Outcome::kHealthy);
}

// A planted pair of nearby failures: planted()'s non-finite region split by
// momentum — at fc2_logits from momentum 0.8 up, at fc1_act below it. A
// shrink of the fc2_logits failure that took any non-finite candidate would
// end at fc1_act's boundary (momentum 0.5).
inline BurstSummary planted_pair(const TrainingConfig& c) {
  BurstSummary s = planted(c);
  if (s.verdict.fault && c.optimizer.momentum >= 0.8) s.verdict.fault->tensor = "fc2_logits";
  return s;
}

// A start far from simplest: every dimension away from its simplest value.
inline SpacePoint far_point(const SearchSpace& s, const std::function<bool(const TrainingConfig&)>& wanted) {
  for (uint64_t i = 0;; ++i) {
    const SpacePoint p = sample_point(s, 11, i);
    if (s.fields_differing(p) == int64_t(s.dimensions().size()) && wanted(s.config(p))) return p;
  }
}

inline SpacePoint non_finite_start(const SearchSpace& s) {
  return far_point(s, [](const TrainingConfig& c) { return planted(c).verdict.outcome == Outcome::kNonFinite; });
}

// Another far non-finite start, with another seed than `a`.
inline SpacePoint other_non_finite_start(const SearchSpace& s, const SpacePoint& a) {
  return far_point(s, [&](const TrainingConfig& c) {
    return planted(c).verdict.outcome == Outcome::kNonFinite && s.config(a).seed != c.seed;
  });
}

}  // namespace spikehunt
