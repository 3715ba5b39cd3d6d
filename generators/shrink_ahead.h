// shrink_ahead.h — the shrinks of a sweep's failures run at once on the
// evaluator's slots, before they run in order (finish.h): they change how
// long the shrinks in order take, not what they find.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "generators/shrinker.h"

namespace spikehunt {

// The shrinks of several failures at once, before they run in order: one
// thread each, sharing the evaluator's slots (the first one's bursts first,
// each shrink filling its share of them: parallelism() over the shrinks still
// running), a config two of them ask for trained once. Every burst is only
// held in the cache, none counted. The shrinks in order then find their bursts trained and
// decide as without this, so it changes how long they take, not what they
// find. Returns the bursts it trained.
int64_t shrink_ahead(const SearchSpace& space, const std::vector<std::pair<SpacePoint, BurstSummary>>& starts,
                     Evaluator& evaluator, EvalCache& cache, const Budget& budget);

}  // namespace spikehunt
