#include "generators/memo.h"

#include "harness/results.h"

namespace spikehunt {

EvalCache::EvalCache(SweepStore* store) : store_(store) {
  if (store_ == nullptr) return;
  for (auto& [hash, summary] : store_->held()) {
    pending_[hash] = std::move(summary);
    found_held_.insert(hash);
  }
}

std::optional<BurstSummary> EvalCache::find(const std::string& config_hash) {
  const std::lock_guard<std::mutex> lock(mu_);
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

void EvalCache::hold(const std::string& config_hash, const BurstSummary& summary) {
  const std::lock_guard<std::mutex> lock(mu_);
  pending_[config_hash] = summary;
  found_held_.erase(config_hash);
  if (store_ != nullptr) store_->hold(config_hash, summary);
}

bool EvalCache::holds(const std::string& config_hash) const {
  const std::lock_guard<std::mutex> lock(mu_);
  return pending_.count(config_hash) > 0;
}

int64_t EvalCache::held() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return int64_t(pending_.size() - found_held_.size());
}

int64_t EvalCache::taken_from_earlier() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return taken_from_earlier_;
}

std::optional<BurstSummary> EvalCache::peek(const std::string& config_hash) const {
  const std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(config_hash);
  if (it == pending_.end()) return std::nullopt;
  return it->second;
}

std::optional<BurstSummary> EvalCache::release(const std::string& config_hash) {
  const std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(config_hash);
  if (it == pending_.end()) return std::nullopt;
  BurstSummary s = std::move(it->second);
  pending_.erase(it);
  taken_from_earlier_ += int64_t(found_held_.erase(config_hash));
  return s;
}

void EvalCache::add(const std::string& kind, int64_t sample, const TrainingConfig& config, const BurstSummary& summary) {
  const std::string hash = config_hash(config).hex();
  const std::lock_guard<std::mutex> lock(mu_);
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

}  // namespace spikehunt
