// fuzz_space — search-space JSON. Never crashes; a space that parses must map
// its simplest and largest points to configs (or a clear InputError), and a
// valid point must be found again from its config.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "generators/space.h"

using namespace spikehunt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j =
      nlohmann::json::parse(std::string(reinterpret_cast<const char*>(data), size), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    const SearchSpace space = SearchSpace::from_json(j, "fuzz-space.json");
    SpacePoint low(size_t(space.digits()), 0), high(size_t(space.digits()), 0);
    for (size_t i = 0; i < high.size(); ++i) high[i] = space.digit_limit(int64_t(i)) - 1;
    for (const SpacePoint& p : {low, high}) {
      if (!space.valid(p)) continue;
      const TrainingConfig c = space.config(p);
      if (space.point_of(c) != p) {
        std::fprintf(stderr, "point_of(config(p)) != p for %s\n", space.config_json(p).dump().c_str());
        std::abort();
      }
      (void)space.around(c).point_of(c);
      if (space.fields_differing(p) < 0 || space.distance(p) < 0) std::abort();
    }
  } catch (const InputError& e) {
    (void)e.what();
  }
  return 0;
}
