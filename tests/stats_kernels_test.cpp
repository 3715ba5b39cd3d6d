// The float32 statistics kernels: every ISA variant this CPU runs gives the
// same bits, and NaN / ±Inf land where the monitor expects them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <ATen/Parallel.h>

#include "base/stats_kernels.h"

namespace spikehunt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng) * std::ldexp(1.0f, int(rng() % 40) - 20);  // magnitudes 1e-6..1e6
  return v;
}

// The sum in the kernels' 16 lanes and order, written plainly: element i in
// lane i % 16 over whole blocks of 32, the lanes in order, then the rest.
SumSqMax reference(const std::vector<float>& v) {
  double lanes[16] = {};
  SumSqMax r;
  const size_t body = v.size() / 32 * 32;
  for (size_t i = 0; i < body; ++i) lanes[i % 16] += double(v[i]) * double(v[i]);
  for (double lane : lanes) r.sumsq += lane;
  for (size_t i = body; i < v.size(); ++i) r.sumsq += double(v[i]) * double(v[i]);
  for (float x : v) r.max = std::max(r.max, std::fabs(x));
  return r;
}

TEST(StatsKernels, EveryIsaVariantGivesTheReferenceBits) {
  const std::vector<Isa> isas = supported_isas();
  ASSERT_EQ(isas.front(), Isa::kBaseline);
  ASSERT_EQ(isas.back(), best_isa());
  for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(32), size_t(33), size_t(1000), size_t(65536 + 17)}) {
    const std::vector<float> v = random_floats(n, uint32_t(n));
    const SumSqMax want = reference(v);
    for (Isa isa : isas) {
      const SumSqMax got = sumsq_max(v.data(), int64_t(n), isa);
      EXPECT_EQ(got.sumsq, want.sumsq) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(got.max, want.max) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(max_abs(v.data(), int64_t(n), isa), want.max) << isa_name(isa) << " n=" << n;
    }
  }
}

TEST(StatsKernels, NanAndInfAnywhereAreReported) {
  const size_t n = 100;  // 3 vector iterations and a 4-element tail
  for (Isa isa : supported_isas()) {
    for (size_t at : {size_t(0), size_t(40), size_t(95), size_t(97)}) {
      std::vector<float> v = random_floats(n, 7);
      v[at] = std::nanf("");
      EXPECT_TRUE(std::isnan(sumsq_max(v.data(), int64_t(n), isa).sumsq)) << isa_name(isa) << " at " << at;
      EXPECT_TRUE(std::isnan(max_abs(v.data(), int64_t(n), isa))) << isa_name(isa) << " at " << at;
      v[at] = -kInf;
      EXPECT_EQ(sumsq_max(v.data(), int64_t(n), isa).sumsq, double(kInf)) << isa_name(isa) << " at " << at;
      EXPECT_EQ(sumsq_max(v.data(), int64_t(n), isa).max, kInf) << isa_name(isa) << " at " << at;
      EXPECT_EQ(max_abs(v.data(), int64_t(n), isa), kInf) << isa_name(isa) << " at " << at;
      // An Inf and a NaN together: NaN wins, wherever each is.
      v[(at + 50) % n] = std::nanf("");
      EXPECT_TRUE(std::isnan(max_abs(v.data(), int64_t(n), isa))) << isa_name(isa) << " at " << at;
    }
  }
}

TEST(StatsKernels, HugeFloatsSquareInDoubleAndDenormalsCount) {
  std::vector<float> v(64, 3e38f);
  v[5] = -3e38f;
  for (Isa isa : supported_isas()) {
    const SumSqMax s = sumsq_max(v.data(), int64_t(v.size()), isa);
    EXPECT_TRUE(std::isfinite(s.sumsq)) << isa_name(isa);
    EXPECT_EQ(s.sumsq, 64 * double(3e38f) * double(3e38f)) << isa_name(isa);
  }
  const std::vector<float> tiny(40, -1e-40f);
  for (Isa isa : supported_isas()) {
    EXPECT_EQ(max_abs(tiny.data(), int64_t(tiny.size()), isa), 1e-40f) << isa_name(isa);
    EXPECT_GT(sumsq_max(tiny.data(), int64_t(tiny.size()), isa).sumsq, 0.0) << isa_name(isa);
  }
}

TEST(StatsKernels, LargeInputsRunOnEveryIntraOpThreadWithTheSameBits) {
  // Regression: at::parallel_for is inline, and the file was once built
  // without -fopenmp: the "parallel" statistics ran on one thread.
  const int threads = at::get_num_threads();
  const std::vector<float> v = random_floats(1000003, 11);  // 16 chunks of 64Ki and a ragged end
  at::set_num_threads(1);
  EXPECT_EQ(parallel_threads_used(int64_t(v.size())), 1);
  const SumSqMax one = sumsq_max_parallel(v.data(), int64_t(v.size()));
  const float one_max = max_abs_parallel(v.data(), int64_t(v.size()));
  at::set_num_threads(2);
  EXPECT_EQ(parallel_threads_used(int64_t(v.size())), 2);
  EXPECT_EQ(parallel_threads_used(1000), 1) << "small inputs stay on the calling thread";
  const SumSqMax two = sumsq_max_parallel(v.data(), int64_t(v.size()));
  EXPECT_EQ(one.sumsq, two.sumsq);
  EXPECT_EQ(one.max, two.max);
  EXPECT_EQ(one_max, max_abs_parallel(v.data(), int64_t(v.size())));
  EXPECT_EQ(one_max, reference(v).max);
  at::set_num_threads(threads);
}

}  // namespace
}  // namespace spikehunt
