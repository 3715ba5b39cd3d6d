// memo.h — no configuration is trained twice: every burst by config hash, in
// memory and (when given) in the sweep database, and beside it the bursts
// trained ahead on idle slots, held until a shrink's decisions ask for them.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "generators/store.h"
#include "harness/record.h"
#include "scenarios/config.h"

namespace spikehunt {

// Every burst by config hash, in memory and (when given) in the sweep database.
// Beside it, bursts trained on parallel slots before a shrink asked for them
// (`pending`): not in the memo, the database or any budget until one does.
class EvalCache {
 public:
  explicit EvalCache(SweepStore* store = nullptr) : store_(store) {}
  std::optional<BurstSummary> find(const std::string& config_hash);
  // Remembers and (with a store) commits one run: one transaction.
  void add(const std::string& kind, int64_t sample, const TrainingConfig& config, const BurstSummary& summary);

  void hold(const std::string& config_hash, const BurstSummary& summary);
  bool holds(const std::string& config_hash) const;
  std::optional<BurstSummary> peek(const std::string& config_hash) const;  // and keep holding it
  std::optional<BurstSummary> release(const std::string& config_hash);     // and forget it
  int64_t held() const;                                                    // trained, never asked for

 private:
  mutable std::mutex mu_;  // shrinks run ahead in threads of their own (shrink_ahead)
  SweepStore* store_;
  std::map<std::string, BurstSummary> memory_;
  std::map<std::string, BurstSummary> pending_;
};

}  // namespace spikehunt
