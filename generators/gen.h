// gen.h — RapidCheck generators over a SearchSpace.
// gen_point draws every digit uniformly (so lr is log-uniform over a log
// range) and ignores RapidCheck's size on purpose: a sweep samples the whole
// space at every size. Its shrinks are strictly simpler points, simplest
// first: each dimension reset to its simplest value, then each digit moved
// toward 0 (RapidCheck's halving sequence), so a greedy walk ends at a local
// minimum of (dimensions away from simplest, distance from simplest).
// Example:
//   rc::Shrinkable<SpacePoint> s = gen_point(space)(rc::Random(7));
//   for (const auto& simpler : to_vector(s.shrinks())) ...
#pragma once

#include <rapidcheck.h>

#include "generators/space.h"

namespace spikehunt {

rc::Gen<SpacePoint> gen_point(const SearchSpace& space);
// Valid configs of the space (invalid combinations are discarded).
rc::Gen<TrainingConfig> gen_config(const SearchSpace& space);
// One digit: uniform in [0, limit), shrinking toward 0.
rc::Gen<int64_t> gen_digit(int64_t limit);

// The shrink candidates of `p`, simplest first, each strictly simpler.
std::vector<SpacePoint> shrink_candidates(const SearchSpace& space, const SpacePoint& p);
rc::Shrinkable<SpacePoint> shrinkable_point(const SearchSpace& space, SpacePoint p);

// Every element of a RapidCheck sequence (Debian's RapidCheck has no seq::toVector).
template <class T>
std::vector<T> to_vector(rc::Seq<T> seq) {
  std::vector<T> out;
  while (rc::Maybe<T> x = seq.next()) out.push_back(std::move(*x));
  return out;
}

// Sample `index` of a sweep with `seed`: deterministic, independent of the
// other samples (so a resumed sweep draws the same points), and valid
// (invalid draws are redrawn from a derived seed). Throws InputError when
// 100 draws in a row are invalid.
SpacePoint sample_point(const SearchSpace& space, uint64_t seed, uint64_t index);

}  // namespace spikehunt
