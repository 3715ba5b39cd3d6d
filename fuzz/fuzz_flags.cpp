// fuzz_flags — the command-line parsers behind lr-sensitivity and sharded
// sweeps: --lrs (a learning-rate grid), --vary (FIELD=V1,V2,...), --shard
// (I/N) and the SLURM_ARRAY_* variables a task reads its shard from. Never
// crashes; each input either parses into what its contract promises or is
// an InputError:
//   parse_lrs:        at least one rate, each in (0, 10], none twice;
//   parse_vary:       a field and at least one value;
//   parse_shard:      0 <= I < N;
//   shard_from_slurm: none outside an array task, else 0 <= I < N.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include <fuzzer/FuzzedDataProvider.h>

#include "base/error.h"
#include "cli/flags.h"

using namespace spikehunt;

namespace {

[[noreturn]] void broken(const char* what, const std::string& input) {
  std::fprintf(stderr, "%s: %s\n", what, input.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string lrs = in.ConsumeRandomLengthString(200);
  const std::string vary = in.ConsumeRandomLengthString(200);
  const std::string shard = in.ConsumeRandomLengthString(40);
  std::map<std::string, std::string> env;
  for (const char* name : {"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN",
                           "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP"}) {
    if (in.ConsumeBool()) env[name] = in.ConsumeRandomLengthString(24);
  }
  try {
    const std::vector<double> grid = parse_lrs(lrs);
    if (grid.empty()) broken("an empty grid parsed", lrs);
    std::set<double> seen;
    for (double lr : grid) {
      if (!(lr > 0 && lr <= 10)) broken("a rate outside (0, 10] parsed", lrs);
      if (!seen.insert(lr).second) broken("a rate twice parsed", lrs);
    }
  } catch (const InputError& e) {
    (void)e.what();
  }
  try {
    const LrVary v = parse_vary(vary);
    if (v.field.empty() || v.values.empty()) broken("a --vary without field or values parsed", vary);
  } catch (const InputError& e) {
    (void)e.what();
  }
  try {
    const auto [i, n] = parse_shard(shard);
    if (!(0 <= i && i < n)) broken("a shard outside [0, N) parsed", shard);
  } catch (const InputError& e) {
    (void)e.what();
  }
  try {
    const auto got = shard_from_slurm([&](const char* name) -> const char* {
      const auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    if (got && !(0 <= got->first && got->first < got->second)) broken("a Slurm shard outside [0, N)", shard);
    if (got && !env.count("SLURM_ARRAY_TASK_ID")) broken("a shard without SLURM_ARRAY_TASK_ID", shard);
  } catch (const InputError& e) {
    (void)e.what();
  }
  return 0;
}
