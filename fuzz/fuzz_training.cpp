// fuzz_training — bytes become a TrainingConfig of the fuzz space (two bytes
// per digit of a SpacePoint, little-endian, modulo the digit's range), which
// trains a tiny burst under the monitor. A structure-aware mutator works on
// the digits (redraw a few dimensions, nudge one, or cross two parents
// dimension by dimension) and falls back to libFuzzer's byte mutations. Feedback is numerical: libFuzzer's extra counters get the
// buckets of how extreme a state the burst reached (training_burst.h); the
// harness libraries are g++-built and uninstrumented, so these counters are
// the coverage that matters. A non-finite or extreme burst is a finding, not
// a crash: the first of each fault signature is written as a repro file and
// counted. Only harness bugs crash.
// Environment:
//   SPIKEHUNT_FUZZ_FEEDBACK=0      leave the extra counters empty (random mutation only)
//   SPIKEHUNT_FUZZ_REPROS=DIR      where repro files go (default: fuzz-repros)
//   SPIKEHUNT_FUZZ_STATS=FILE      write {"bursts", "features", "faults"} there at exit
//   SPIKEHUNT_FUZZ_MAX_BURSTS=N    stop after N bursts (for comparisons: same number of bursts)
//   SPIKEHUNT_FUZZ_PLAIN=1         train without the monitor (to measure its cost)
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <random>

#include "base/files.h"
#include "harness/repro.h"
#include "training_burst.h"

using namespace spikehunt;

__attribute__((used, section("__libfuzzer_extra_counters"))) static uint8_t g_counters[fuzz::kFeatures];

namespace {

bool g_feedback = true, g_plain = false;
int64_t g_max_bursts = 0;
std::string g_repros = "fuzz-repros", g_stats;
fuzz::Tally g_tally;

void write_stats() {
  if (g_stats.empty()) return;
  std::ofstream(g_stats) << g_tally.json() << "\n";
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  if (const char* v = std::getenv("SPIKEHUNT_FUZZ_FEEDBACK")) g_feedback = std::string(v) != "0";
  if (const char* v = std::getenv("SPIKEHUNT_FUZZ_PLAIN")) g_plain = std::string(v) == "1";
  if (const char* v = std::getenv("SPIKEHUNT_FUZZ_REPROS")) g_repros = v;
  if (const char* v = std::getenv("SPIKEHUNT_FUZZ_STATS")) g_stats = v;
  if (const char* v = std::getenv("SPIKEHUNT_FUZZ_MAX_BURSTS")) g_max_bursts = std::atoll(v);
  std::atexit(write_stats);
  return 0;
}

namespace {

// Two bytes a digit, little-endian, modulo its range; missing bytes are 0.
SpacePoint decode(const SearchSpace& space, const uint8_t* data, size_t size) {
  SpacePoint p(size_t(space.digits()), 0);
  for (size_t i = 0; i < p.size(); ++i) {
    const uint32_t lo = 2 * i < size ? data[2 * i] : 0, hi = 2 * i + 1 < size ? data[2 * i + 1] : 0;
    p[i] = int64_t((lo | (hi << 8)) % uint32_t(space.digit_limit(int64_t(i))));
  }
  return p;
}

size_t encode(const SpacePoint& p, uint8_t* data, size_t max_size) {
  const size_t n = std::min(max_size, 2 * p.size());
  for (size_t i = 0; i < n; ++i) data[i] = uint8_t((uint64_t(p[i / 2]) >> (8 * (i % 2))) & 0xff);
  return n;
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  const SearchSpace& space = fuzz::training_space();
  std::minstd_rand rng(seed);
  const int how = int(rng() % 4);
  if (how == 0) return LLVMFuzzerMutate(data, size, max_size);  // byte level
  SpacePoint p = decode(space, data, size);
  const size_t n = p.size();
  if (how == 1) {  // nudge one digit by up to ±3
    const size_t i = rng() % n;
    const int64_t limit = space.digit_limit(int64_t(i));
    p[i] = std::clamp<int64_t>(p[i] + int64_t(rng() % 7) - 3, 0, limit - 1);
  } else {  // redraw 1 to 3 digits uniformly
    for (unsigned k = 0, count = 1 + rng() % 3; k < count; ++k) {
      const size_t i = rng() % n;
      p[i] = int64_t(rng() % uint64_t(space.digit_limit(int64_t(i))));
    }
  }
  return encode(p, data, max_size);
}

extern "C" size_t LLVMFuzzerCustomCrossOver(const uint8_t* a, size_t a_size, const uint8_t* b, size_t b_size,
                                            uint8_t* out, size_t max_out, unsigned int seed) {
  const SearchSpace& space = fuzz::training_space();
  std::minstd_rand rng(seed);
  const SpacePoint x = decode(space, a, a_size), y = decode(space, b, b_size);
  SpacePoint child = x;
  size_t at = 0;
  for (const Dimension& d : space.dimensions()) {  // whole dimensions from either parent
    if (rng() % 2) std::copy(y.begin() + long(at), y.begin() + long(at + size_t(d.arity())), child.begin() + long(at));
    at += size_t(d.arity());
  }
  return encode(child, out, max_out);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const SearchSpace& space = fuzz::training_space();
  const SpacePoint point = decode(space, data, size);
  if (!space.valid(point)) return -1;  // not a config: keep it out of the corpus
  const TrainingConfig config = space.config(point);
  const fuzz::BurstFeatures f = fuzz::run_tiny_burst(config, !g_plain);
  if (g_feedback) {
    for (int feature : f.features) g_counters[feature] = 1;
  }
  if (g_tally.add(f)) {
    std::filesystem::create_directories(g_repros);
    Repro repro;
    repro.config = config;
    repro.environment = environment("cpu", config.threads);
    repro.verdict = f.verdict;
    repro.step_hashes = f.step_hashes;
    write_repro(g_repros + "/" + file_safe(f.signature) + ".repro.json", repro, std::nullopt);
  }
  if (g_max_bursts > 0 && g_tally.bursts() >= g_max_bursts) {
    write_stats();
    std::fflush(nullptr);
    ::_exit(0);
  }
  return 0;
}
