// fuzz_config — config JSON and --set overrides. Input: the config text, then
// optionally NUL-separated "key=value" overrides. Never crashes; whatever
// parses and validates must round-trip through JSON exactly.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/config.h"

using namespace spikehunt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t nul = input.find('\0', start);
    parts.push_back(input.substr(start, nul == std::string::npos ? std::string::npos : nul - start));
    if (nul == std::string::npos) break;
    start = nul + 1;
  }
  nlohmann::json j = nlohmann::json::parse(parts[0], nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    apply_overrides(j, std::vector<std::string>(parts.begin() + 1, parts.end()));
    const TrainingConfig c = config_from_json(j, "fuzz.json");
    const std::vector<Problem> problems = validate(c);
    if (!problems.empty()) {
      (void)InputError("fuzz.json", problems).what();
      return 0;
    }
    const nlohmann::json out = config_to_json(c);
    const nlohmann::json back = config_to_json(config_from_json(nlohmann::json::parse(out.dump()), "round trip"));
    if (back != out) {
      std::fprintf(stderr, "config does not round-trip:\n%s\n%s\n", out.dump().c_str(), back.dump().c_str());
      std::abort();
    }
  } catch (const InputError& e) {
    (void)e.what();
  }
  return 0;
}
