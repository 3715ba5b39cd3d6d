// protocol.h — the sequential-domain protocol: one phase per domain in task
// order (training only on that domain's classes), then a relaxation phase on
// all classes of the experiment (the union of the domains). Each epoch
// shuffles its phase's samples with our own PRNG, seeded from (seed, phase,
// epoch), so any epoch's order is known without replaying the ones before it.
// Example (A = 0–4, B = 5–9, order [1, 0]):
//   Schedule s(config.protocol, train.labels, /*batch_size=*/64, /*max_batches=*/40, seed);
//   while (auto slot = s.next()) { /* slot->indices: up to 64 sample indices */ }
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scenarios/config.h"

namespace spikehunt {

struct Phase {
  std::string name;              // "A", "B", ... or "relax"
  std::vector<int64_t> classes;  // the labels this phase trains on
  int64_t epochs = 1;
};

// The phases in training order.
std::vector<Phase> plan_phases(const ProtocolConfig& p);

struct Slot {
  int64_t step = 0;    // global optimizer step, from 0
  int64_t phase = 0;   // index into the phases
  int64_t epoch = 0;   // within the phase, from 0
  int64_t batch = 0;   // within the epoch, from 0
  std::vector<int64_t> indices;  // training sample indices, in batch order
};

class Schedule {
 public:
  Schedule(const ProtocolConfig& protocol, const std::vector<uint8_t>& labels, int64_t batch_size,
           int64_t max_batches_per_epoch, uint64_t seed);

  // The next batch, or nullopt when the protocol is done.
  std::optional<Slot> next();

  const std::vector<Phase>& phases() const { return phases_; }
  int64_t batches_per_epoch(int64_t phase) const;
  int64_t total_steps() const;

 private:
  void start_epoch();

  std::vector<Phase> phases_;
  std::vector<std::vector<int64_t>> members_;  // per phase: sample indices whose label is in it
  int64_t batch_size_;
  int64_t max_batches_;
  uint64_t seed_;
  // cursor
  int64_t step_ = 0, phase_ = 0, epoch_ = 0, batch_ = 0;
  std::vector<int64_t> order_;  // this epoch's shuffled indices
};

}  // namespace spikehunt
