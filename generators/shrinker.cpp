#include "generators/shrinker.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>

#include "generators/gen.h"
#include "harness/results.h"

namespace spikehunt {

namespace {

// One shrink's bookkeeping: the current failing point, the memo, the budget.
class Shrinker {
 public:
  // `ahead`: run for the shrink in order that comes later (shrink_ahead):
  // results are only held, never released into the memo.
  Shrinker(const SearchSpace& space, const BurstSummary& start_summary, Evaluator& evaluator, EvalCache& cache,
           const Budget& budget, ShrinkResult* result, bool ahead)
      : space_(space), evaluator_(evaluator), cache_(cache), budget_(budget), r_(*result),
        target_(fault_signature(start_summary.verdict)), target_class_(failure_class(start_summary.verdict)),
        ahead_(ahead) {
    for (int64_t i = 0; i < space.digits(); ++i) ordered_.push_back(ordered(space.dimensions()[size_t(space.dimension_of(i))]));
  }

  // A dimension whose values, in their order from the simplest, make a
  // failure less likely the simpler they are (a learning rate, a momentum,
  // batches, epochs): log ranges and ranges but seeds. Sets, task orders and
  // seeds are not ordered that way.
  static bool ordered(const Dimension& d) {
    return d.numeric_range() && d.field != "seed";
  }
  bool is_ordered(size_t digit) const { return ordered_[digit]; }

  // A candidate at or below (on ordered values; equal on the others) one
  // that was seen healthy or failing in another class does not fail this
  // way either: no burst.
  bool implied_healthy(const SpacePoint& q) const {
    for (const SpacePoint& r : rejected_) {
      bool below = true;
      for (size_t i = 0; i < q.size() && below; ++i) below = ordered_[i] ? q[i] <= r[i] : q[i] == r[i];
      if (below) return true;
    }
    return false;
  }

  // Takes the first of `candidates` (each strictly simpler than the current
  // point) that fails with the target's fault signature, deciding in order as one job
  // would: returns its index, or -1. Up to parallelism() bursts run at once —
  // a window of candidates, and in the last window `ahead` (what the
  // procedure tries next if none fails) on the slots left idle — but a
  // result enters the memo and counts against the budget only when the
  // decision in order reaches it (the cache holds the rest), and a
  // candidate implied healthy by an earlier rejection of its window is not
  // counted either: decisions, counts and budget are those of -j 1.
  int take_first(const std::vector<SpacePoint>& candidates, const std::vector<SpacePoint>& ahead = {}) {
    const size_t window = size_t(std::max(evaluator_.parallelism(), 1));
    for (size_t from = 0; from < candidates.size() && !done(); from += window) {
      const size_t to = std::min(candidates.size(), from + window);
      // The window's configs and hashes, computed once for both loops below.
      std::vector<TrainingConfig> configs;
      std::vector<std::string> hashes;
      for (size_t i = from; i < to; ++i) {
        configs.push_back(space_.config(candidates[i]));
        hashes.push_back(config_hash(configs.back()).hex());
      }
      auto known = [&](const std::string& hash) {
        std::optional<BurstSummary> s = cache_.find(hash);
        return s ? s : cache_.peek(hash);
      };
      std::vector<TrainingConfig> to_run;
      std::vector<std::string> to_run_hash;
      // A config not known yet, trained when a slot and the budget allow.
      auto want = [&](TrainingConfig c, std::string hash) {
        if (to_run.size() >= window || std::count(to_run_hash.begin(), to_run_hash.end(), hash)) return;
        if (budget_.expired() || r_.evaluations + int64_t(to_run.size()) >= budget_.evaluations) return;
        to_run.push_back(std::move(c));
        to_run_hash.push_back(std::move(hash));
      };
      // A candidate whose result is known (the memo, or held) and taken
      // decides the window: nothing after it is needed.
      bool decided = false;
      for (size_t i = from; i < to && !decided; ++i) {
        if (const std::optional<BurstSummary> k = known(hashes[i - from])) {
          decided = !implied_healthy(candidates[i]) && fault_signature(k->verdict) == target_;
        } else if (!implied_healthy(candidates[i])) {
          want(configs[i - from], hashes[i - from]);
        }
      }
      // Idle slots go ahead only beside a burst that runs anyway (never to wait for them alone).
      if (!decided && !to_run.empty() && to == candidates.size()) {
        for (const SpacePoint& a : ahead) {
          if (implied_healthy(a)) continue;
          TrainingConfig c = space_.config(a);
          std::string hash = config_hash(c).hex();
          if (!known(hash)) want(std::move(c), std::move(hash));
        }
      }
      evaluator_.evaluate(to_run, [&](size_t k, const BurstSummary& s) {
        cache_.hold(to_run_hash[k], s);
        ++r_.ran;
      });
      for (size_t i = from; i < to; ++i) {
        if (implied_healthy(candidates[i])) {
          ++r_.implied;
          continue;
        }
        const std::string& hash = hashes[i - from];
        std::optional<BurstSummary> summary = cache_.find(hash);
        if (summary) {
          ++r_.memo_hits;
        } else if (r_.evaluations < budget_.evaluations && (summary = ahead_ ? cache_.peek(hash) : cache_.release(hash))) {
          if (!ahead_) cache_.add("shrink", -1, configs[i - from], *summary);
          ++r_.evaluations;
        } else {  // not run: the budget or the deadline ran out before it
          exhausted_ = true;
          return -1;
        }
        if (fault_signature(summary->verdict) == target_) {
          r_.minimal = candidates[i];
          r_.summary = *summary;
          r_.path.push_back(candidates[i]);
          ++r_.accepted;
          return int(i);
        }
        // Healthy, or failing in another class: nothing below it fails in the
        // target's. A candidate that fails in the same class at another
        // tensor or rule implies nothing (a lower rate may fail later, where
        // the start did), so it is not a rejection below which to skip.
        if (failure_class(summary->verdict) != target_class_) rejected_.push_back(candidates[i]);
      }
    }
    return -1;
  }
  bool take(const SpacePoint& candidate, const std::vector<SpacePoint>& ahead = {}) {
    return take_first({candidate}, ahead) == 0;
  }
  bool exhausted() const { return exhausted_; }
  // Stop: the budget or the deadline is spent.
  bool done() const { return exhausted_; }

 private:
  const SearchSpace& space_;
  Evaluator& evaluator_;
  EvalCache& cache_;
  const Budget& budget_;
  ShrinkResult& r_;
  std::string target_;  // the start's fault signature: a candidate is taken only when it fails with it
  std::string target_class_;  // its class: what a lower rate, momentum, batch count is assumed not to reach again
  bool ahead_;
  bool exhausted_ = false;
  std::vector<bool> ordered_;        // per digit
  std::vector<SpacePoint> rejected_; // candidates seen healthy or failing in another class
};

// Where each dimension's digits start in a point, and how far a point is
// from the simplest along a dimension (0: at its simplest).
struct DimensionLayout {
  explicit DimensionLayout(const SearchSpace& space) : space(space) {
    const std::vector<Dimension>& dims = space.dimensions();
    for (int64_t i = 0, at = 0; i < int64_t(dims.size()); at += dims[size_t(i)].arity(), ++i) first_digit.push_back(at);
  }
  double distance(const SpacePoint& p, size_t d) const {
    double sum = 0;
    for (int64_t i = first_digit[d]; i < first_digit[d] + space.dimensions()[d].arity(); ++i) {
      sum += double(p[size_t(i)]) / double(std::max<int64_t>(space.digit_limit(i) - 1, 1));
    }
    return sum;
  }
  // The dimensions away from their simplest value, the farthest first.
  std::vector<size_t> farthest_first(const SpacePoint& p) const {
    std::vector<size_t> order;
    for (size_t d = 0; d < space.dimensions().size(); ++d) {
      if (distance(p, d) > 0) order.push_back(d);
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return distance(p, a) > distance(p, b); });
    return order;
  }
  SpacePoint reset(SpacePoint p, size_t d) const {
    std::fill(p.begin() + first_digit[d], p.begin() + first_digit[d] + space.dimensions()[d].arity(), 0);
    return p;
  }
  const SearchSpace& space;
  std::vector<int64_t> first_digit;  // of each dimension
};


}  // namespace

ShrinkResult shrink_passes(const SearchSpace& space, const SpacePoint& start, const BurstSummary& start_summary,
                           Evaluator& evaluator, EvalCache& cache, const Budget& budget,
                           const std::function<void(const ShrinkResult&)>& progress, bool ahead) {
  ShrinkResult result;
  result.start = result.minimal = start;
  result.summary = start_summary;
  if (failure_class(start_summary.verdict).empty()) return result;  // nothing fails: nothing to shrink
  Shrinker shrinker(space, start_summary, evaluator, cache, budget, &result, ahead);
  const DimensionLayout layout(space);
  std::vector<bool> bisected(start.size(), false);  // a digit's boundary was searched in an earlier pass
  while (true) {
    const SpacePoint pass_start = result.minimal;
    // 1. Whole dimensions back to their simplest value, the farthest first,
    //    until a round takes none: each taken one is a field fewer away from
    //    the simplest config, which minimality counts first, so fields go
    //    before any value moves to the edge of the failure.
    for (bool took = true; took && !shrinker.done();) {
      took = false;
      std::vector<size_t> order = layout.farthest_first(result.minimal);
      while (!order.empty() && !shrinker.done()) {
        std::vector<SpacePoint> resets;
        std::vector<size_t> of;
        for (size_t d : order) {
          SpacePoint q = layout.reset(result.minimal, d);
          if (space.valid(q)) resets.push_back(std::move(q)), of.push_back(d);
        }
        const int taken = shrinker.take_first(resets);
        if (taken < 0) break;
        took = true;
        // Those before it are tried again next round; those after it now, from the new point.
        order.erase(order.begin(), std::find(order.begin(), order.end(), of[size_t(taken)]) + 1);
      }
    }
    // 2. Each digit still away from 0: binary search for the smallest value
    //    that still fails (values are ordered by distance from the simplest).
    //    A digit searched in an earlier pass first tries one step down.
    // The first candidate the loop below tries at a digit after `i` when
    // nothing at `i` fails (the point stays): what an idle slot runs ahead.
    auto next_after = [&](size_t i) -> std::vector<SpacePoint> {
      for (size_t j = i + 1; j < result.minimal.size(); ++j) {
        if (result.minimal[j] == 0) continue;
        SpacePoint q = result.minimal;
        q[j] = !shrinker.is_ordered(j) ? 1 : bisected[j] ? q[j] - 1 : q[j] / 2;
        if (q[j] == 0 || !space.valid(q)) return {};
        return {q};
      }
      return {};
    };
    for (size_t i = 0; i < result.minimal.size() && !shrinker.done(); ++i) {
      if (result.minimal[i] == 0) continue;
      if (!shrinker.is_ordered(i)) {  // a seed, a set, a task order: each simpler value, the simplest first
        std::vector<SpacePoint> simpler;
        for (int64_t v = 1; v < result.minimal[i]; ++v) {
          SpacePoint q = result.minimal;
          q[i] = v;
          if (space.valid(q)) simpler.push_back(std::move(q));
        }
        shrinker.take_first(simpler, next_after(i));
        continue;
      }
      int64_t lo = 0;  // fails no more (or is the reset, tried above)
      if (bisected[i]) {
        SpacePoint q = result.minimal;
        q[i] -= 1;
        if (q[i] == 0 || !space.valid(q) || !shrinker.take(q, next_after(i))) continue;  // a step down does not fail: stay
      }
      bisected[i] = true;
      int64_t hi = result.minimal[i];  // fails
      while (hi - lo > 1 && !shrinker.done()) {
        const int64_t mid = lo + (hi - lo) / 2;
        SpacePoint q = result.minimal;
        q[i] = mid;
        // Ahead: the next probe if mid does not fail (the likelier way in
        // sweeps: the boundary sits near the failing value), then if it does.
        std::vector<SpacePoint> ahead;
        for (const int64_t next : {mid + (hi - mid) / 2, lo + (mid - lo) / 2}) {
          SpacePoint n = result.minimal;
          n[i] = next;
          if (next != mid && next != lo && next != hi && space.valid(n)) ahead.push_back(std::move(n));
        }
        if (space.valid(q) && shrinker.take(q, ahead)) hi = mid;
        else lo = mid;
      }
    }
    if (progress) progress(result);
    if (shrinker.exhausted()) {
      result.budget_exhausted = true;
      break;
    }
    if (result.minimal == pass_start) break;  // a pass took nothing: no reset and no step down fails the same way
  }
  return result;
}

ShrinkResult shrink(const SearchSpace& space, const SpacePoint& start, const BurstSummary& start_summary,
                    Evaluator& evaluator, EvalCache& cache, const Budget& budget,
                    const std::function<void(const ShrinkResult&)>& progress) {
  return shrink_passes(space, start, start_summary, evaluator, cache, budget, progress, false);
}

// The shrinker before the passes, kept to compare with (sweep --shrinker
// tree): RapidCheck's shrink tree, walked greedily, a window of
// parallelism() candidates at a time, each run one counted.
ShrinkResult shrink_tree(const SearchSpace& space, const SpacePoint& start, const BurstSummary& start_summary,
                         Evaluator& evaluator, EvalCache& cache, const Budget& budget,
                         const std::function<void(const ShrinkResult&)>& progress) {
  ShrinkResult result;
  result.start = result.minimal = start;
  result.summary = start_summary;
  const std::string target = fault_signature(start_summary.verdict);
  if (target.empty()) return result;  // nothing fails: nothing to shrink
  rc::Shrinkable<SpacePoint> current = shrinkable_point(space, start);
  const size_t window = size_t(std::max(evaluator.parallelism(), 1));
  while (true) {
    rc::Seq<rc::Shrinkable<SpacePoint>> candidates = current.shrinks();
    bool accepted = false, exhausted = false;
    while (!accepted && !exhausted) {
      // The next window of valid candidates, in the tree's order.
      std::vector<rc::Shrinkable<SpacePoint>> batch;
      while (batch.size() < window) {
        rc::Maybe<rc::Shrinkable<SpacePoint>> c = candidates.next();
        if (!c) break;
        if (space.valid(c->value())) batch.push_back(std::move(*c));
      }
      if (batch.empty()) break;
      std::vector<std::optional<BurstSummary>> summaries(batch.size());
      std::vector<TrainingConfig> to_run;
      std::vector<size_t> to_run_index;
      for (size_t i = 0; i < batch.size(); ++i) {
        const TrainingConfig c = space.config(batch[i].value());
        if (std::optional<BurstSummary> hit = cache.find(config_hash(c).hex())) {
          summaries[i] = hit;
          ++result.memo_hits;
        } else if (result.evaluations + int64_t(to_run.size()) < budget.evaluations && !budget.expired()) {
          to_run.push_back(c);
          to_run_index.push_back(i);
        } else {
          exhausted = true;
        }
      }
      evaluator.evaluate(to_run, [&](size_t k, const BurstSummary& s) {
        summaries[to_run_index[k]] = s;
        cache.add("shrink", -1, to_run[k], s);
        ++result.evaluations;
        ++result.ran;
      });
      for (size_t i = 0; i < batch.size(); ++i) {
        if (!summaries[i]) break;  // not evaluated: the budget ran out before it
        if (fault_signature(summaries[i]->verdict) == target) {
          current = batch[i];
          result.minimal = current.value();
          result.summary = *summaries[i];
          result.path.push_back(result.minimal);
          ++result.accepted;
          accepted = true;
          break;
        }
      }
    }
    if (progress) progress(result);
    if (exhausted && !accepted) {
      result.budget_exhausted = true;
      break;
    }
    if (!accepted) break;  // no simpler candidate fails the same way: a local minimum
  }
  return result;
}

}  // namespace spikehunt
