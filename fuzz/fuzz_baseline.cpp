// fuzz_baseline — guard baselines (what `guard record` writes and `guard
// check` reads). Never crashes; a file either reads or is an InputError
// naming it, and a baseline that reads holds one loss and one pair of step
// hashes per step run in every config, and is written and read back to the
// same configs, names, losses and hash chains.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/error.h"
#include "base/files.h"
#include "harness/guard.h"

using namespace spikehunt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/fuzz-baseline-" + std::to_string(::getpid()) + ".json";
  write_file_atomic(path, std::string(reinterpret_cast<const char*>(data), size));
  GuardBaseline b;
  try {
    b = read_guard_baseline(path);
  } catch (const InputError& e) {
    (void)e.what();
    return 0;
  }
  for (const GuardRun& r : b.runs) {
    const int64_t steps = r.summary.verdict.steps_run;
    if (int64_t(r.losses.size()) != steps || int64_t(r.summary.step_hashes.size()) != steps) {
      std::fprintf(stderr, "a baseline whose lists are not one per step run was read\n");
      std::abort();
    }
  }
  if (b.runs.empty()) return 0;
  write_guard_baseline(path, b.runs);
  const GuardBaseline again = read_guard_baseline(path);
  if (again.runs.size() != b.runs.size()) std::abort();
  for (size_t i = 0; i < b.runs.size(); ++i) {
    const GuardRun &x = b.runs[i], &y = again.runs[i];
    bool same = x.name == y.name && x.losses.size() == y.losses.size() &&
                x.summary.verdict.hash_chain == y.summary.verdict.hash_chain &&
                config_to_json(x.config) == config_to_json(y.config);
    for (size_t k = 0; same && k < x.losses.size(); ++k) {
      same = std::memcmp(&x.losses[k], &y.losses[k], sizeof(double)) == 0 ||
             (std::isnan(x.losses[k]) && std::isnan(y.losses[k]));
    }
    if (!same) {
      std::fprintf(stderr, "config %zu (%s) changed when written and read back\n", i, x.name.c_str());
      std::abort();
    }
  }
  return 0;
}
