#include "generators/shrink_ahead.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "harness/results.h"

namespace spikehunt {

namespace {

// The evaluator's slots shared by shrinks that run at once, each in a thread
// of its own: dispatch() streams their bursts to the evaluator, the lowest
// rank's first, and a config that two of them ask for runs once.
class SharedSlots {
 public:
  SharedSlots(Evaluator& inner, int shrinks) : inner_(inner), active_(shrinks) {}

  // In the calling thread, until the last shrink has ended.
  void dispatch() {
    try {
      inner_.stream(
          [&](bool idle, bool* finished) -> std::optional<Evaluator::StreamJob> {
            std::unique_lock<std::mutex> lock(mu_);
            if (idle) cv_.wait(lock, [&] { return !queue_.empty() || active_ == 0; });
            if (queue_.empty()) {
              *finished = active_ == 0;
              return std::nullopt;
            }
            const auto first = std::min_element(queue_.begin(), queue_.end(), [](const Request& a, const Request& b) {
              return a.rank != b.rank ? a.rank < b.rank : a.id < b.id;
            });
            Request r = std::move(*first);
            queue_.erase(first);
            running_[r.id] = r.hash;
            return Evaluator::StreamJob{r.id, std::move(r.config)};
          },
          [&](size_t id, const BurstSummary& summary) {
            const std::lock_guard<std::mutex> lock(mu_);
            done_[running_.at(id)] = summary;
            running_.erase(id);
            ++trained_;
            cv_.notify_all();
          });
    } catch (const std::exception& e) {
      const std::lock_guard<std::mutex> lock(mu_);
      failed_ = e.what();
      cv_.notify_all();
      throw;
    }
  }

  // A shrink's bursts: runs those no one ran or asked for yet, and waits for all.
  std::vector<BurstSummary> run(int rank, const std::vector<TrainingConfig>& configs) {
    std::vector<std::string> hashes;
    std::unique_lock<std::mutex> lock(mu_);
    for (const TrainingConfig& c : configs) {
      hashes.push_back(config_hash(c).hex());
      const std::string& h = hashes.back();
      const bool asked = done_.count(h) > 0 ||
                         std::any_of(queue_.begin(), queue_.end(), [&](const Request& r) { return r.hash == h; }) ||
                         std::any_of(running_.begin(), running_.end(), [&](const auto& r) { return r.second == h; });
      if (!asked) queue_.push_back({rank, next_id_++, h, c});
    }
    cv_.notify_all();
    cv_.wait(lock, [&] {
      return !failed_.empty() || std::all_of(hashes.begin(), hashes.end(), [&](const std::string& h) { return done_.count(h) > 0; });
    });
    if (!failed_.empty()) throw std::runtime_error(failed_);
    std::vector<BurstSummary> out;
    for (const std::string& h : hashes) out.push_back(done_.at(h));
    return out;
  }

  int64_t trained() const {
    const std::lock_guard<std::mutex> lock(mu_);
    return trained_;
  }
  // A shrink ended (the last one lets dispatch() return).
  void leave() {
    const std::lock_guard<std::mutex> lock(mu_);
    --active_;
    cv_.notify_all();
  }
  // The slots each running shrink may fill: a window of that many (at least one).
  int share() const {
    const std::lock_guard<std::mutex> lock(mu_);
    return std::max(1, inner_.parallelism() / std::max(active_, 1));
  }

 private:
  struct Request {
    int rank;
    size_t id;
    std::string hash;
    TrainingConfig config;
  };
  Evaluator& inner_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int active_;                              // shrinks not yet ended
  size_t next_id_ = 0;
  std::vector<Request> queue_;              // asked for, not started
  std::map<size_t, std::string> running_;   // id -> config hash
  std::map<std::string, BurstSummary> done_;  // by config hash
  std::string failed_;                      // the evaluator threw this
  int64_t trained_ = 0;
};

// One shrink's view of the shared slots.
class SlotsEvaluator : public Evaluator {
 public:
  SlotsEvaluator(SharedSlots& slots, int rank) : slots_(slots), rank_(rank) {}
  int parallelism() const override { return slots_.share(); }
  void evaluate(const std::vector<TrainingConfig>& configs,
                const std::function<void(size_t, const BurstSummary&)>& on_result,
                const std::function<bool()>& = {}) override {
    const std::vector<BurstSummary> results = slots_.run(rank_, configs);
    for (size_t i = 0; i < results.size(); ++i) on_result(i, results[i]);
  }

 private:
  SharedSlots& slots_;
  int rank_;
};

}  // namespace

int64_t shrink_ahead(const SearchSpace& space, const std::vector<std::pair<SpacePoint, BurstSummary>>& starts,
                     Evaluator& evaluator, EvalCache& cache, const Budget& budget) {
  SharedSlots slots(evaluator, int(starts.size()));
  std::vector<std::string> errors(starts.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < starts.size(); ++k) {
    threads.emplace_back([&, k] {
      try {
        SlotsEvaluator mine(slots, int(k));
        shrink_passes(space, starts[k].first, starts[k].second, mine, cache, budget, {}, true);
      } catch (const std::exception& e) {
        errors[k] = e.what();
      }
      slots.leave();
    });
  }
  std::string failed;
  try {
    slots.dispatch();
  } catch (const std::exception& e) {
    failed = e.what();
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) {
    if (failed.empty()) failed = e;
  }
  if (!failed.empty()) throw std::runtime_error(failed);
  return slots.trained();
}

}  // namespace spikehunt
