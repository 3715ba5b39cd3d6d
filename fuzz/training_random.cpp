// training_random — the same tiny bursts as fuzz_training, drawn by the
// RapidCheck generator over the same space instead of by libFuzzer; prints
// the same tally. For the numerical-coverage comparison (fuzz/compare.sh).
//   training_random BURSTS [SEED]
#include <cstdio>
#include <cstdlib>

#include <ATen/Parallel.h>

#include "generators/gen.h"
#include "training_burst.h"

using namespace spikehunt;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: training_random BURSTS [SEED]\n");
    return 2;
  }
  at::set_num_threads(1);
  const int64_t bursts = std::atoll(argv[1]);
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  const SearchSpace& space = fuzz::training_space();
  fuzz::Tally tally;
  for (int64_t i = 0; i < bursts; ++i) tally.add(fuzz::run_tiny_burst(space.config(sample_point(space, seed, uint64_t(i)))));
  std::printf("%s\n", tally.json().c_str());
  return 0;
}
