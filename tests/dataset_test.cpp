// Tests scenarios/dataset.h (idx reader, synthetic data), base/rng.h and
// scenarios/protocol.h.
#include <zlib.h>

#include <algorithm>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "base/hash.h"
#include "base/rng.h"
#include "scenarios/dataset.h"
#include "scenarios/protocol.h"
#include "test_util.h"

namespace spikehunt {
namespace {

using testing::TempDir;

std::string idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, size_t data_bytes) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((d >> shift) & 0xff);
  }
  for (size_t i = 0; i < data_bytes; ++i) s += static_cast<char>(i % 10);
  return s;
}

std::string gzip(const std::string& raw) {
  z_stream s{};
  deflateInit2(&s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&s, raw.size()), '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  s.avail_in = static_cast<uInt>(raw.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  deflate(&s, Z_FINISH);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

std::string idx_error(const std::string& bytes) {
  try {
    parse_idx(bytes, "data/x-idx3-ubyte");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// ---- idx ----

TEST(Idx, ParsesRawAndGzip) {
  const std::string raw = idx_bytes(0x08, {3, 2, 2}, 12);
  for (const std::string& bytes : {raw, gzip(raw)}) {
    const IdxArray a = parse_idx(bytes, "x");
    EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 2, 2}));
    ASSERT_EQ(a.data.size(), 12u);
    EXPECT_EQ(a.data[11], 1);
  }
}

TEST(Idx, RejectsBadMagicTypeDimensionsAndCounts) {
  EXPECT_NE(idx_error("\x01\x02\x08\x01").find("magic = 0x01020801 is not an idx magic number"), std::string::npos);
  EXPECT_NE(idx_error(idx_bytes(0x0D, {2}, 8)).find("type = 0x0d is not supported"), std::string::npos);
  EXPECT_NE(idx_error(idx_bytes(0x08, {}, 0)).find("dimensions = 0 is not in [1, 4]"), std::string::npos);
  EXPECT_NE(idx_error("\0\0").find("is too short for an idx header"), std::string::npos);
  EXPECT_NE(idx_error(idx_bytes(0x08, {5, 2}, 0).substr(0, 9)).find("header = 9 bytes is truncated"),
            std::string::npos);
  const std::string truncated = idx_error(idx_bytes(0x08, {10, 28, 28}, 100));
  EXPECT_NE(truncated.find("data/x-idx3-ubyte: data = 100 bytes is truncated: the header promises 7840 bytes"),
            std::string::npos)
      << truncated;
  EXPECT_NE(idx_error(idx_bytes(0x08, {4}, 6)).find("has 2 bytes after the 4"), std::string::npos);
}

TEST(Idx, RejectsCorruptAndTruncatedGzip) {
  const std::string gz = gzip(idx_bytes(0x08, {1000}, 1000));
  EXPECT_NE(idx_error(gz.substr(0, gz.size() / 2)).find("truncated gzip stream"), std::string::npos);
  std::string corrupt = gz;
  for (size_t i = 12; i < corrupt.size() - 8; ++i) corrupt[i] = static_cast<char>(0xff);
  EXPECT_NE(idx_error(corrupt).find("gzip stream"), std::string::npos);
}

TEST(Idx, ReadsTheDebianFashionMnist) {
  // scripts/setup.sh installs dataset-fashion-mnist: its absence is a broken setup, not a skip.
  const Dataset d = load_idx_dataset("/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(d.train.size(), 60000);
  EXPECT_EQ(d.test.size(), 10000);
  EXPECT_EQ(d.train.images.size(), 60000u * 784);
  std::map<int, int> counts;
  for (uint8_t y : d.train.labels) ++counts[y];
  EXPECT_EQ(counts.size(), 10u);
  for (const auto& [label, n] : counts) EXPECT_EQ(n, 6000) << "label " << label;
}

TEST(Idx, DatasetErrorsNameTheFileAndField) {
  TempDir dir;
  auto error_of = [&] {
    try {
      load_idx_dataset(dir.path());
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of().find("holds neither train-images-idx3-ubyte nor train-images-idx3-ubyte.gz"),
            std::string::npos);
  testing::write_bytes(dir.file("train-images-idx3-ubyte"), idx_bytes(0x08, {3, 28, 28}, 3 * 784));
  testing::write_bytes(dir.file("train-labels-idx1-ubyte"), idx_bytes(0x08, {2}, 2));
  testing::write_bytes(dir.file("t10k-images-idx3-ubyte"), idx_bytes(0x08, {1, 28, 28}, 784));
  testing::write_bytes(dir.file("t10k-labels-idx1-ubyte.gz"), gzip(idx_bytes(0x08, {1}, 1)));
  EXPECT_NE(error_of().find("train-labels-idx1-ubyte: count = 2 differs from the 3 images"), std::string::npos);
  std::string labels = idx_bytes(0x08, {3}, 3);
  labels.back() = 12;
  testing::write_bytes(dir.file("train-labels-idx1-ubyte"), labels);
  EXPECT_NE(error_of().find("label[2] = 12 is not a class in [0, 9]"), std::string::npos) << error_of();
  labels.back() = 9;
  testing::write_bytes(dir.file("train-labels-idx1-ubyte"), labels);
  const Dataset d = load_idx_dataset(dir.path());
  EXPECT_EQ(d.train.size(), 3);
  EXPECT_EQ(d.test.size(), 1);
  EXPECT_NE(std::string([&] {
              try {
                load_idx_dataset(dir.file("nope"));
              } catch (const InputError& e) {
                return std::string(e.what());
              }
              return std::string();
            }()).find("dataset.path"),
            std::string::npos);
}

// ---- synthetic ----

TEST(Synthetic, IsDeterministicBalancedAndClassDistinct) {
  const Dataset a = make_synthetic_dataset(20, 5);
  const Dataset b = make_synthetic_dataset(20, 5);
  EXPECT_EQ(a.train.images, b.train.images);
  EXPECT_EQ(a.test.images, b.test.images);
  EXPECT_EQ(a.train.size(), 200);
  EXPECT_EQ(a.test.size(), 50);
  std::vector<int> counts(10);
  for (uint8_t y : a.train.labels) ++counts[y];
  for (int n : counts) EXPECT_EQ(n, 20);
  EXPECT_NE(a.train.images, std::vector<uint8_t>(a.train.images.size(), 0));
  // Class means differ more between classes than samples vary within one.
  auto mean_image = [&](int cls) {
    std::vector<double> m(784, 0);
    for (int64_t i = 0; i < a.train.size(); ++i) {
      if (a.train.labels[i] != cls) continue;
      for (int k = 0; k < 784; ++k) m[k] += a.train.images[i * 784 + k] / 20.0;
    }
    return m;
  };
  const auto m0 = mean_image(0), m1 = mean_image(1);
  double between = 0;
  for (int k = 0; k < 784; ++k) between += (m0[k] - m1[k]) * (m0[k] - m1[k]);
  EXPECT_GT(between, 1e5);
}

// The synthetic data is part of every repro's hashes: its bytes are pinned,
// so a change to the generator (or a platform where it differs) is caught here.
TEST(Synthetic, BytesArePinned) {
  const Dataset d = make_synthetic_dataset(50, 10);
  EXPECT_EQ(hash_bytes(d.train.images.data(), d.train.images.size()).hex(), "67b5d4c2949ac533cd35ac66e9cc4931");
  EXPECT_EQ(hash_bytes(d.test.images.data(), d.test.images.size()).hex(), "7c65b6f8f7d08dfa446d3bf93320617a");
}

// ---- rng ----

TEST(Rng, MatchesAnIndependentImplementation) {
  // Reference values from a Python transcription of xoshiro256** seeded through splitmix64.
  Rng r(0);
  EXPECT_EQ(r.next(), 0x7310f727f4c4e906ULL);
  EXPECT_EQ(r.next(), 0xb8b10a03af167a79ULL);
  EXPECT_EQ(r.next(), 0x6a89bf956571035cULL);
  Rng s(42, 7);
  std::vector<uint64_t> draws;
  for (int i = 0; i < 10; ++i) draws.push_back(s.below(10));
  EXPECT_EQ(draws, (std::vector<uint64_t>{5, 3, 8, 5, 9, 0, 9, 6, 6, 8}));
  std::vector<int> v = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  Rng t(1, 0);
  shuffle(v, t);
  EXPECT_EQ(v, (std::vector<int>{4, 6, 1, 7, 2, 3, 0, 8, 5, 9}));
}

TEST(Rng, ClosedRangeStaysInRangeAndReachesBothEnds) {
  Rng r(3);
  std::set<int64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const int64_t x = r.closed(-2, 2);
    ASSERT_GE(x, -2);
    ASSERT_LE(x, 2);
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), 5u);
}

// ---- protocol ----

std::vector<uint8_t> labels_0_to_9(int per_class) {
  std::vector<uint8_t> y;
  for (int i = 0; i < per_class * 10; ++i) y.push_back(static_cast<uint8_t>(i % 10));
  return y;
}

TEST(Protocol, PhasesFollowTaskOrderThenRelax) {
  ProtocolConfig p;
  p.domains = {{0, 1}, {2, 3}, {4}};
  p.task_order = {2, 0, 1};
  const auto phases = plan_phases(p);
  ASSERT_EQ(phases.size(), 4u);
  EXPECT_EQ(phases[0].name, "C");
  EXPECT_EQ(phases[1].name, "A");
  EXPECT_EQ(phases[2].name, "B");
  EXPECT_EQ(phases[3].name, "relax");
  EXPECT_EQ(phases[3].classes, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Protocol, BatchesHoldOnlyTheirPhasesClassesAndCoverEachEpochOnce) {
  const std::vector<uint8_t> labels = labels_0_to_9(10);  // 100 samples
  ProtocolConfig p;
  p.task_order = {1, 0};
  p.epochs_per_phase = 2;
  Schedule s(p, labels, /*batch_size=*/16, /*max_batches_per_epoch=*/0, /*seed=*/5);
  EXPECT_EQ(s.total_steps(), 2 * 4 + 2 * 4 + 1 * 7);
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> seen;  // (phase, epoch) -> indices
  int64_t steps = 0;
  while (auto slot = s.next()) {
    EXPECT_EQ(slot->step, steps++);
    for (int64_t i : slot->indices) {
      const int y = labels[i];
      if (slot->phase == 0) {
        EXPECT_GE(y, 5) << "phase B holds classes 5-9";
      } else if (slot->phase == 1) {
        EXPECT_LT(y, 5) << "phase A holds classes 0-4";
      }
      seen[{slot->phase, slot->epoch}].push_back(i);
    }
  }
  EXPECT_EQ(steps, s.total_steps());
  for (auto& [key, indices] : seen) {
    std::sort(indices.begin(), indices.end());
    EXPECT_EQ(std::adjacent_find(indices.begin(), indices.end()), indices.end()) << "a sample twice in an epoch";
    EXPECT_EQ(indices.size(), key.first == 2 ? 100u : 50u);
  }
}

TEST(Protocol, OrderIsSeededDeterministicAndDiffersBetweenEpochs) {
  const std::vector<uint8_t> labels = labels_0_to_9(10);
  ProtocolConfig p;
  p.epochs_per_phase = 2;
  auto order = [&](uint64_t seed) {
    std::vector<std::vector<int64_t>> batches;
    Schedule s(p, labels, 8, 3, seed);
    while (auto slot = s.next()) batches.push_back(slot->indices);
    return batches;
  };
  EXPECT_EQ(order(1), order(1));
  EXPECT_NE(order(1), order(2));
  const auto b = order(1);
  ASSERT_EQ(b.size(), 2u * 3 * 2 + 3);  // max 3 batches an epoch
  EXPECT_NE(b[0], b[3]) << "epoch 1 reuses epoch 0's order";
}

}  // namespace
}  // namespace spikehunt
