// fuzz_repro — repro files. Never crashes; a repro that parses must survive
// a write and a second read unchanged.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "harness/repro_file.h"

using namespace spikehunt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const Repro r = parse_repro(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.repro.json");
    const std::string once = repro_to_json(r);
    const std::string twice = repro_to_json(parse_repro(once, "round trip"));
    if (once != twice) {
      std::fprintf(stderr, "repro does not round-trip:\n%s\n%s\n", once.c_str(), twice.c_str());
      std::abort();
    }
  } catch (const InputError& e) {
    (void)e.what();
  }
  return 0;
}
