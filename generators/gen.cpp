#include "generators/gen.h"

#include <algorithm>
#include <memory>

#include "base/rng.h"

namespace spikehunt {

rc::Gen<int64_t> gen_digit(int64_t limit) {
  return rc::Gen<int64_t>([limit](const rc::Random& random, int /*size*/) {
    rc::Random r = random;
    Rng rng(r.next());
    const int64_t d = static_cast<int64_t>(rng.below(static_cast<uint64_t>(std::max<int64_t>(limit, 1))));
    return rc::shrinkable::shrinkRecur(d, [](int64_t v) { return rc::shrink::towards<int64_t>(v, 0); });
  });
}

std::vector<SpacePoint> shrink_candidates(const SearchSpace& space, const SpacePoint& p) {
  std::vector<SpacePoint> out;
  auto add = [&](SpacePoint q) {
    if (q != p && std::find(out.begin(), out.end(), q) == out.end()) out.push_back(std::move(q));
  };
  // Whole dimensions back to their simplest value: fewer fields differ.
  int64_t at = 0;
  for (const Dimension& d : space.dimensions()) {
    SpacePoint q = p;
    std::fill(q.begin() + at, q.begin() + at + d.arity(), 0);
    add(std::move(q));
    at += d.arity();
  }
  // Then each digit toward 0: a smaller distance.
  for (size_t i = 0; i < p.size(); ++i) {
    for (const int64_t v : to_vector(rc::shrink::towards<int64_t>(p[i], 0))) {
      SpacePoint q = p;
      q[i] = v;
      add(std::move(q));
    }
  }
  return out;
}

rc::Shrinkable<SpacePoint> shrinkable_point(const SearchSpace& space, SpacePoint p) {
  auto shared = std::make_shared<const SearchSpace>(space);
  return rc::shrinkable::shrinkRecur(std::move(p), [shared](const SpacePoint& q) {
    return rc::seq::fromContainer(shrink_candidates(*shared, q));
  });
}

rc::Gen<SpacePoint> gen_point(const SearchSpace& space) {
  auto shared = std::make_shared<const SearchSpace>(space);
  return rc::Gen<SpacePoint>([shared](const rc::Random& random, int /*size*/) {
    rc::Random r = random;
    Rng rng(r.next());
    SpacePoint p(static_cast<size_t>(shared->digits()));
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] = static_cast<int64_t>(rng.below(static_cast<uint64_t>(shared->digit_limit(int64_t(i)))));
    }
    return shrinkable_point(*shared, std::move(p));
  });
}

rc::Gen<TrainingConfig> gen_config(const SearchSpace& space) {
  auto shared = std::make_shared<const SearchSpace>(space);
  return rc::gen::map(rc::gen::suchThat(gen_point(space), [shared](const SpacePoint& p) { return shared->valid(p); }),
                      [shared](const SpacePoint& p) { return shared->config(p); });
}

SpacePoint sample_point(const SearchSpace& space, uint64_t seed, uint64_t index) {
  const rc::Gen<SpacePoint> gen = gen_point(space);
  for (uint64_t attempt = 0; attempt < 100; ++attempt) {
    uint64_t x = seed;
    uint64_t key = splitmix64(x) ^ (index * 0x9e3779b97f4a7c15ULL);
    key = splitmix64(key) ^ (attempt * 0xbf58476d1ce4e5b9ULL);
    SpacePoint p = gen(rc::Random(splitmix64(key)), rc::kNominalSize).value();
    if (space.valid(p)) return p;
  }
  throw InputError("<search space>", "dimensions", "", "gave 100 invalid configs in a row",
                   "the dimensions combine into configs that fail validation; narrow them");
}

}  // namespace spikehunt
