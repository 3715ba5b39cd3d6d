// monitor_ranks.cpp — the monitor under data-parallel training: the ranks
// (Monitor::set_ranks) and the one gather a step (Monitor::gather_ranks) that
// makes every rank's record the same global step.
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "harness/monitor.h"

namespace spikehunt {

// ---- data-parallel ----

void Monitor::set_ranks(int64_t rank, int64_t world, Gather gather) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw std::invalid_argument("Monitor::set_ranks: rank " + std::to_string(rank) + " of a world of " +
                                std::to_string(world));
  }
  rank_ = rank;
  world_ = world;
  gather_ = std::move(gather);
}

namespace {

// Hash bits travel through the gather's doubles unchanged: it moves bytes, no arithmetic.
double bits_of(uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}
uint64_t bits_in(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

}  // namespace

std::optional<Fault> Monitor::gather_ranks() {
  // This rank's first non-finite tensor, counted here (only its rank has the tensor).
  int64_t first = -1;
  NonFiniteCounts counts;
  for (size_t k = 0; k < checks_.size(); ++k) {
    const Check& c = checks_[k];
    if (std::isfinite(values_[size_t(c.slot)])) continue;
    first = int64_t(k);
    counts = c.counts ? *c.counts : count_non_finite(c.tensor);
    break;
  }
  // [n values, n label counts, n checks] [values] [input hash, label hash] [fault] [label counts]
  const size_t n = values_.size(), classes = record_.label_histogram.size();
  std::vector<double> mine = {double(n), double(classes), double(checks_.size())};
  mine.insert(mine.end(), values_.begin(), values_.end());
  for (const Hash128& h : {local_inputs_, local_labels_}) {
    mine.push_back(bits_of(h.high));
    mine.push_back(bits_of(h.low));
  }
  mine.insert(mine.end(), {double(first), double(counts.nan), double(counts.pos_inf), double(counts.neg_inf)});
  for (int64_t c : record_.label_histogram) mine.push_back(double(c));
  const size_t width = mine.size();
  const std::vector<double> all = gather_(mine);
  if (all.size() != width * size_t(world_)) {
    throw std::runtime_error("data-parallel step " + std::to_string(record_.step) + ": the gather returned " +
                             std::to_string(all.size()) + " values for " + std::to_string(world_) + " ranks of " +
                             std::to_string(width) + " (do all ranks run the same model, taps and batch layout?)");
  }
  auto row = [&](int64_t r) { return all.data() + size_t(r) * width; };
  for (int64_t r = 0; r < world_; ++r) {
    if (!std::equal(row(r), row(r) + 3, mine.data())) {
      throw std::runtime_error("data-parallel step " + std::to_string(record_.step) + ": rank " + std::to_string(r) +
                               " measured " + std::to_string(int64_t(row(r)[0])) + " statistics of " +
                               std::to_string(int64_t(row(r)[2])) + " tensors, rank " + std::to_string(rank_) +
                               " " + std::to_string(n) + " of " + std::to_string(checks_.size()) +
                               ": the ranks run different models, taps or micro-batches");
    }
  }
  // Every statistic: its max over the ranks (NaN if any is NaN); the loss: the ranks' mean.
  // Replicated values (gradients after the all-reduce, parameters, state) are equal on every rank.
  std::vector<char> is_loss(n, 0);
  for (int slot : loss_slots_) is_loss[size_t(slot)] = 1;
  for (size_t i = 0; i < n; ++i) {
    double acc = is_loss[i] ? 0.0 : -std::numeric_limits<double>::infinity();
    for (int64_t r = 0; r < world_; ++r) {
      const double x = row(r)[3 + i];
      if (is_loss[i]) acc += x;
      else acc = std::isnan(x) || std::isnan(acc) ? NAN : std::max(acc, x);
    }
    values_[i] = is_loss[i] ? acc / double(world_) : acc;
  }
  Hasher inputs, labels;
  for (int64_t r = 0; r < world_; ++r) {
    const double* h = row(r) + 3 + n;
    const Hash128 in{bits_in(h[0]), bits_in(h[1])}, lab{bits_in(h[2]), bits_in(h[3])};
    inputs.update(&in, sizeof in);
    labels.update(&lab, sizeof lab);
  }
  record_.input_hash = inputs.digest();
  record_.label_hash = labels.digest();
  chain_ = chain(chain_, record_.input_hash, record_.label_hash);
  for (size_t c = 0; c < classes; ++c) {
    int64_t sum = 0;
    for (int64_t r = 0; r < world_; ++r) sum += int64_t(row(r)[3 + n + 8 + c]);
    record_.label_histogram[c] = sum;
  }
  // The first tensor in stage order that is non-finite on some rank; of those ranks, the lowest.
  std::optional<Fault> fault;
  int64_t best = -1, best_rank = -1;
  for (int64_t r = 0; r < world_; ++r) {
    const int64_t k = int64_t(row(r)[3 + n + 4]);
    if (k >= 0 && (best < 0 || k < best)) best = k, best_rank = r;
  }
  if (best >= 0) {
    const double* f = row(best_rank) + 3 + n + 4;
    const Check& c = checks_[size_t(best)];
    fault = Fault{c.name, c.stage, int64_t(f[1]), int64_t(f[2]), int64_t(f[3]), c.numel, best_rank};
  }
  return fault;
}

}  // namespace spikehunt
