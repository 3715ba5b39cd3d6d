// fuzz_merge_row — a shard database's row as `merge` reads it before joining
// anything: its config_json and summary_json texts (the first line of the
// input is the config, the rest the summary). Never crashes; each text is
// either read or an InputError naming the database and the field, and a
// summary that reads is written and read back to the same JSON.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "generators/store.h"

using namespace spikehunt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string config = input.substr(0, newline);
  const std::string summary = newline == std::string::npos ? "" : input.substr(newline + 1);
  try {
    (void)config_to_json(config_from_text(config, "shard.db", "runs (sample 0).config_json"));
  } catch (const InputError& e) {
    (void)e.what();
  }
  try {
    const BurstSummary s = summary_from_text(summary, "shard.db", "runs (id 1).summary_json");
    const std::string text = to_json(s).dump();
    const std::string again = to_json(summary_from_text(text, "shard.db", "again")).dump();
    if (again != text) {
      std::fprintf(stderr, "a summary changed when written and read back:\n%s\n%s\n", text.c_str(), again.c_str());
      std::abort();
    }
  } catch (const InputError& e) {
    (void)e.what();
  }
  return 0;
}
