// memo.h — no configuration is trained twice: every burst by config hash, in
// memory and (when given) in the sweep database, and beside it the bursts
// trained ahead on idle slots, held until a shrink's decisions ask for them
// (committed to the database's held table as each finishes, so a resumed
// sweep finds them trained).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "generators/store.h"
#include "harness/record.h"
#include "scenarios/config.h"

namespace spikehunt {

// Every burst by config hash, in memory and (when given) in the sweep database.
// Beside it, bursts trained on parallel slots before a shrink asked for them
// (`pending`): not in the memo, the runs or any budget until one does; with a
// store each is committed as held (SweepStore::hold) as it finishes, and a
// cache opened on the store again (a resume after a kill) holds them again.
class EvalCache {
 public:
  explicit EvalCache(SweepStore* store = nullptr);
  std::optional<BurstSummary> find(const std::string& config_hash);
  // Remembers and (with a store) commits one run: one transaction.
  void add(const std::string& kind, int64_t sample, const TrainingConfig& config, const BurstSummary& summary);

  void hold(const std::string& config_hash, const BurstSummary& summary);
  bool holds(const std::string& config_hash) const;
  std::optional<BurstSummary> peek(const std::string& config_hash) const;  // and keep holding it
  std::optional<BurstSummary> release(const std::string& config_hash);     // and forget it
  int64_t held() const;  // held by this cache, not asked for (those it found held in the store are not counted)
  // Bursts an earlier process trained ahead (found held in the store) that a
  // decision of this one took: trained once, before a kill, not again.
  int64_t taken_from_earlier() const;

 private:
  mutable std::mutex mu_;  // shrinks run ahead in threads of their own (shrink_ahead)
  SweepStore* store_;
  std::map<std::string, BurstSummary> memory_;
  std::map<std::string, BurstSummary> pending_;
  std::set<std::string> found_held_;  // pending_ entries held by an earlier process
  int64_t taken_from_earlier_ = 0;
};

}  // namespace spikehunt
