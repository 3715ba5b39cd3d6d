// ranks.h — the collectives a data-parallel burst needs between its ranks
// (one process each), over c10d's TCPStore: rank 0 serves the store on a
// free port, the other ranks connect to it. Each collective is an exchange
// of every rank's bytes; every rank then reduces the rows in rank order, so
// every rank holds the same bits and a run is deterministic (the torch
// wheel's LibTorch has gloo compiled in but ships no gloo headers, so C++
// cannot make a ProcessGroupGloo: docs/decisions.md).
// Example:
//   Ranks ranks(0, 2, /*port=*/0);          // rank 0: serves; ranks.port() for the others
//   Ranks ranks(1, 2, port);                // rank 1
//   ranks.average(grads);                   // in place: the mean over the ranks
//   std::vector<double> all = ranks.gather(mine);  // every rank's, in rank order
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace at {
class Tensor;
}

namespace spikehunt {

class Ranks {
 public:
  // Throws std::runtime_error when the store cannot be served or reached.
  Ranks(int64_t rank, int64_t world, int port, double timeout_seconds = 600);
  ~Ranks();
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  int64_t rank() const { return rank_; }
  int64_t world() const { return world_; }
  int port() const;  // the store's port (rank 0's, chosen when it was 0)

  // Called about once a second while a collective waits for another rank;
  // throws to give up (rank 0 checks that its child ranks still run).
  void set_watchdog(std::function<void()> check) { watchdog_ = std::move(check); }

  // All-gather: every rank's vector (all of one length) in rank order.
  std::vector<double> gather(const std::vector<double>& mine);
  // All-reduce in place: each tensor becomes the mean of its value on every
  // rank, summed in float64 in rank order (tensors on any device; undefined
  // ones are skipped, and must be undefined on every rank).
  void average(const std::vector<at::Tensor>& tensors);

 private:
  std::vector<std::vector<uint8_t>> exchange(const std::vector<uint8_t>& mine);

  struct Store;
  std::unique_ptr<Store> store_;
  int64_t rank_, world_;
  double timeout_seconds_;
  int64_t seq_ = 0;
  std::function<void()> watchdog_;
};

}  // namespace spikehunt
