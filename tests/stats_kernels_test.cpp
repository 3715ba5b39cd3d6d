// The float32 statistics kernels: every ISA variant this CPU runs gives the
// same bits, and NaN / ±Inf land where the monitor expects them.
#include <gtest/gtest.h>

#include <algorithm>
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

// The fused expressions give the bits of materializing the expression in
// float (as LibTorch's sub / square, div_, masked_fill_ write it) and taking
// its statistics, on every variant, in the vector body and in the tail, in
// one pass and in parallel chunks, with 0, negative, NaN and Inf operands.
TEST(StatsKernels, FusedDifferenceAndSquareRatioGiveTheBitsOfTheWrittenExpression) {
  for (size_t n : {size_t(0), size_t(1), size_t(33), size_t(1000), size_t(2 * 65536 + 77)}) {
    std::vector<float> x = random_floats(n, uint32_t(n) + 1), y = random_floats(n, uint32_t(n) + 2);
    std::vector<float> g = random_floats(n, uint32_t(n) + 3), v = random_floats(n, uint32_t(n) + 4);
    for (size_t i = 0; i < n; ++i) {
      v[i] = i % 7 == 0 ? 0.0f : i % 5 == 0 ? -std::fabs(v[i]) : std::fabs(v[i]);  // some 0, some < 0
      if (i % 3 == 0) y[i] = x[i];                                                  // no change: exact zeros
    }
    std::vector<float> d(n), q(n);
    for (size_t i = 0; i < n; ++i) {
      d[i] = x[i] - y[i];
      q[i] = v[i] <= 0 ? 0.0f : (g[i] * g[i]) / v[i];
    }
    const SumSqMax want_d = reference(d), want_q = reference(q);
    for (Isa isa : supported_isas()) {
      const SumSqMax got_d = sumsq_max_difference(x.data(), y.data(), int64_t(n), isa);
      const SumSqMax got_q = sumsq_max_square_ratio(g.data(), v.data(), int64_t(n), isa);
      EXPECT_EQ(got_d.sumsq, want_d.sumsq) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(got_d.max, want_d.max) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(got_q.sumsq, want_q.sumsq) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(got_q.max, want_q.max) << isa_name(isa) << " n=" << n;
    }
    for (Isa isa : supported_isas()) {  // the step and the parameter after it from one pass
      const SumSqMaxPair both = sumsq_max_difference_and_plain(x.data(), y.data(), int64_t(n), isa);
      EXPECT_EQ(both.first.sumsq, want_d.sumsq) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(both.first.max, want_d.max) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(both.second.sumsq, reference(y).sumsq) << isa_name(isa) << " n=" << n;
      EXPECT_EQ(both.second.max, reference(y).max) << isa_name(isa) << " n=" << n;
    }
    const SumSqMaxPair par_both = sumsq_max_difference_and_plain_parallel(x.data(), y.data(), int64_t(n));
    EXPECT_EQ(par_both.first.sumsq, sumsq_max_parallel(d.data(), int64_t(n)).sumsq) << "n=" << n;
    EXPECT_EQ(par_both.second.sumsq, sumsq_max_parallel(y.data(), int64_t(n)).sumsq) << "n=" << n;
    EXPECT_EQ(par_both.second.max, sumsq_max_parallel(y.data(), int64_t(n)).max) << "n=" << n;
    const SumSqMax par_d = sumsq_max_difference_parallel(x.data(), y.data(), int64_t(n));
    const SumSqMax par_q = sumsq_max_square_ratio_parallel(g.data(), v.data(), int64_t(n));
    const SumSqMax seq_d = sumsq_max_parallel(d.data(), int64_t(n)), seq_q = sumsq_max_parallel(q.data(), int64_t(n));
    EXPECT_EQ(par_d.sumsq, seq_d.sumsq) << "n=" << n;
    EXPECT_EQ(par_d.max, seq_d.max) << "n=" << n;
    EXPECT_EQ(par_q.sumsq, seq_q.sumsq) << "n=" << n;
    EXPECT_EQ(par_q.max, seq_q.max) << "n=" << n;
  }
  const size_t n = 100;
  for (Isa isa : supported_isas()) {
    for (size_t at : {size_t(3), size_t(97)}) {  // the vector body and the tail
      std::vector<float> x = random_floats(n, 5), y = x, g = random_floats(n, 6), v(n, 1.0f);
      x[at] = kInf;
      y[at] = kInf;  // Inf - Inf is NaN, as sub_ writes it
      EXPECT_TRUE(std::isnan(sumsq_max_difference(x.data(), y.data(), int64_t(n), isa).sumsq)) << isa_name(isa);
      y[at] = 0.0f;
      EXPECT_EQ(sumsq_max_difference(x.data(), y.data(), int64_t(n), isa).max, kInf) << isa_name(isa);
      v[at] = std::nanf("");  // a NaN second moment is not masked: the ratio is NaN
      EXPECT_TRUE(std::isnan(sumsq_max_square_ratio(g.data(), v.data(), int64_t(n), isa).sumsq)) << isa_name(isa);
      v[at] = 0.0f;
      g[at] = std::nanf("");  // masked where v is 0, as masked_fill_ does
      EXPECT_FALSE(std::isnan(sumsq_max_square_ratio(g.data(), v.data(), int64_t(n), isa).sumsq)) << isa_name(isa);
      v[at] = 1e-30f;  // a huge ratio overflows float to Inf, as div_ does
      g[at] = 1e10f;
      EXPECT_EQ(sumsq_max_square_ratio(g.data(), v.data(), int64_t(n), isa).max, kInf) << isa_name(isa);
    }
  }
}

TEST(StatsKernels, TasksComputedTogetherGiveTheBitsOfEachAloneOnAnyThreadCount) {
  const int threads = at::get_num_threads();
  std::vector<std::vector<float>> data;
  for (size_t n : {size_t(5), size_t(300), size_t(4097), size_t(3 * 65536 + 5), size_t(64), size_t(0)}) {
    data.push_back(random_floats(n, uint32_t(n) + 9));
  }
  std::vector<float> v = data[3];
  for (float& x : v) x = std::fabs(x);
  for (int t : {1, 2}) {
    at::set_num_threads(t);
    std::vector<StatsTask> tasks;
    std::vector<SumSqMax> want;
    for (size_t k = 0; k < data.size(); ++k) {
      const std::vector<float>& d = data[k];
      tasks.push_back({StatsTask::kPlain, d.data(), nullptr, int64_t(d.size()), nullptr});
      want.push_back(sumsq_max_parallel(d.data(), int64_t(d.size())));
    }
    tasks.push_back({StatsTask::kDifference, data[3].data(), v.data(), int64_t(v.size()), nullptr});
    want.push_back(sumsq_max_difference_parallel(data[3].data(), v.data(), int64_t(v.size())));
    tasks.push_back({StatsTask::kSquareRatio, data[3].data(), v.data(), int64_t(v.size()), nullptr});
    want.push_back(sumsq_max_square_ratio_parallel(data[3].data(), v.data(), int64_t(v.size())));
    tasks.push_back({StatsTask::kDifference, data[1].data(), data[1].data(), int64_t(data[1].size()), nullptr});
    want.push_back(SumSqMax{0.0, 0.0f});  // x - x
    // x - v into out and v into out2, small and large
    for (size_t k : {size_t(1), size_t(3)}) {
      std::vector<float>& y = k == 3 ? v : data[0];
      const int64_t n = std::min<int64_t>(int64_t(data[k].size()), int64_t(y.size()));
      tasks.push_back({StatsTask::kDifferenceAndPlain, data[k].data(), y.data(), n, nullptr});
      want.push_back(sumsq_max_difference_parallel(data[k].data(), y.data(), n));
    }
    std::vector<SumSqMax> got(tasks.size(), SumSqMax{-1.0, -1.0f}), got2(tasks.size(), SumSqMax{-1.0, -1.0f});
    for (size_t k = 0; k < tasks.size(); ++k) tasks[k].out = &got[k], tasks[k].out2 = &got2[k];
    sumsq_max_tasks(tasks);
    for (size_t k = 0; k < tasks.size(); ++k) {
      EXPECT_EQ(got[k].sumsq, want[k].sumsq) << "task " << k << ", " << t << " thread(s)";
      EXPECT_EQ(got[k].max, want[k].max) << "task " << k << ", " << t << " thread(s)";
      if (tasks[k].kind != StatsTask::kDifferenceAndPlain) {
        EXPECT_EQ(got2[k].sumsq, -1.0) << "task " << k << ": only the paired kind writes out2";
        continue;
      }
      const SumSqMax y = sumsq_max_parallel(tasks[k].y, tasks[k].n);
      EXPECT_EQ(got2[k].sumsq, y.sumsq) << "task " << k << ", " << t << " thread(s)";
      EXPECT_EQ(got2[k].max, y.max) << "task " << k << ", " << t << " thread(s)";
    }
  }
  at::set_num_threads(threads);
}

TEST(StatsKernels, TheLowerTriangleMaxReadsOnlyTheLowerTriangles) {
  const int64_t matrices = 37, rows = 19, cols = 19;  // 37 causal score matrices, odd sizes for the tails
  std::vector<float> v = random_floats(size_t(matrices * rows * cols), 3);
  float want = 0;
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        float& x = v[size_t((m * rows + r) * cols + c)];
        if (c > r) x = m % 2 == 0 ? std::nanf("") : 1e30f;  // above the diagonal: never read
        else want = std::max(want, std::fabs(x));
      }
    }
  }
  EXPECT_EQ(lower_triangle_max_abs_parallel(v.data(), matrices, rows, cols), want);
  EXPECT_EQ(lower_triangle_max_abs_parallel(v.data(), 0, rows, cols), 0.0f);
  v[size_t((5 * rows + 7) * cols + 7)] = -kInf;  // on a diagonal
  EXPECT_EQ(lower_triangle_max_abs_parallel(v.data(), matrices, rows, cols), kInf);
  v[size_t((36 * rows + 18) * cols + 0)] = std::nanf("");  // the last row's first element
  EXPECT_TRUE(std::isnan(lower_triangle_max_abs_parallel(v.data(), matrices, rows, cols)));
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
