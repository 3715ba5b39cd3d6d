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
#include <string>
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
  // Every rank gets rank 0's `mine` (a leader's decision: stop here or go on).
  double from_rank0(double mine);
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

// ---- a data-parallel burst over processes ----

class Scenario;
struct BurstOptions;
struct BurstResult;
struct HealthRules;
struct TrainingConfig;

// run_burst of a scenario whose config has world_size > 1, as rank 0: serves
// the ranks' store, starts ranks 1.. as this program's hidden `rank` verb
// (the config, rank 0's state when the burst resumes mid-run), runs its own
// shard, and waits for them. Every rank runs the same steps (rank 0's
// monitor decides where the burst stops); rank 0's result is the burst's. A
// rank that ends early makes the burst crashed, naming the rank and its log.
BurstResult run_burst_ranked(Scenario& scenario, const HealthRules& rules, const BurstOptions& options);

// The hidden verb's side (cli/rank.cpp): rank `rank` of `world`, connecting
// to rank 0's store at `port`; with `state_file`, the scenario starts from
// rank 0's state at `start_step`. Returns the exit code.
int run_rank(const TrainingConfig& config, int64_t rank, int64_t world, int port, const std::string& state_file,
             int64_t start_step);

}  // namespace spikehunt
