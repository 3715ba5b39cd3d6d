#include "scenarios/protocol.h"

#include <algorithm>
#include <set>

#include "base/rng.h"

namespace spikehunt {

std::vector<Phase> plan_phases(const ProtocolConfig& p) {
  std::vector<Phase> phases;
  for (int64_t d : p.task_order) {
    phases.push_back({std::string(1, char('A' + d)), p.domains.at(d), p.epochs_per_phase});
  }
  if (p.relaxation_epochs > 0) {  // every class of the experiment: the union of the domains
    std::set<int64_t> all;
    for (const auto& domain : p.domains) all.insert(domain.begin(), domain.end());
    phases.push_back({"relax", std::vector<int64_t>(all.begin(), all.end()), p.relaxation_epochs});
  }
  return phases;
}

Schedule::Schedule(const ProtocolConfig& protocol, const std::vector<uint8_t>& labels, int64_t batch_size,
                   int64_t max_batches_per_epoch, uint64_t seed)
    : phases_(plan_phases(protocol)),
      batch_size_(batch_size),
      max_batches_(max_batches_per_epoch),
      seed_(seed) {
  for (const Phase& ph : phases_) {
    bool in_phase[256] = {};
    for (int64_t c : ph.classes) in_phase[c & 255] = true;
    std::vector<int64_t> m;
    for (size_t i = 0; i < labels.size(); ++i) {
      if (in_phase[labels[i]]) m.push_back(static_cast<int64_t>(i));
    }
    members_.push_back(std::move(m));
  }
  // Skip leading phases with no samples.
  while (phase_ < int64_t(phases_.size()) && batches_per_epoch(phase_) == 0) ++phase_;
  if (phase_ < int64_t(phases_.size())) start_epoch();
}

int64_t Schedule::batches_per_epoch(int64_t phase) const {
  const int64_t n = static_cast<int64_t>(members_[phase].size());
  const int64_t full = (n + batch_size_ - 1) / batch_size_;
  return max_batches_ > 0 ? std::min(full, max_batches_) : full;
}

int64_t Schedule::total_steps() const {
  int64_t total = 0;
  for (size_t p = 0; p < phases_.size(); ++p) total += phases_[p].epochs * batches_per_epoch(p);
  return total;
}

void Schedule::start_epoch() {
  order_ = members_[phase_];
  Rng rng(seed_, /*stream=*/(uint64_t(phase_) << 32) | uint64_t(epoch_));
  shuffle(order_, rng);
  batch_ = 0;
}

std::optional<Slot> Schedule::next() {
  if (phase_ >= int64_t(phases_.size())) return std::nullopt;
  Slot s;
  s.step = step_++;
  s.phase = phase_;
  s.epoch = epoch_;
  s.batch = batch_;
  const int64_t begin = batch_ * batch_size_;
  const int64_t end = std::min<int64_t>(begin + batch_size_, order_.size());
  s.indices.assign(order_.begin() + begin, order_.begin() + end);
  // Advance the cursor.
  if (++batch_ >= batches_per_epoch(phase_)) {
    if (++epoch_ >= phases_[phase_].epochs) {
      epoch_ = 0;
      do {
        ++phase_;
      } while (phase_ < int64_t(phases_.size()) && batches_per_epoch(phase_) == 0);
    }
    if (phase_ < int64_t(phases_.size())) start_epoch();
  }
  return s;
}

}  // namespace spikehunt
