#include "base/stats_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <utility>

// Not LibTorch's headers, only its thread pool: this file is compiled with
// -fopenmp (see CMakeLists.txt); without it at::parallel_for runs serially.
#include <ATen/Parallel.h>

namespace spikehunt {
namespace {

// One generic body per kernel over the target's native vectors: W floats
// (4 SSE2, 8 AVX2, 16 AVX-512). The sum of squares keeps 16 logical double
// lanes whatever W is (element i always goes to lane i % 16, lanes summed in a
// fixed order at the end), so every variant does the same arithmetic.
constexpr int kLanes = 16;
constexpr int64_t kStep = 2 * kLanes;  // floats per iteration

template <int W>
struct Vec {
  typedef float F __attribute__((vector_size(4 * W)));
  typedef float H __attribute__((vector_size(2 * W)));   // half a register of floats
  typedef double D __attribute__((vector_size(4 * W)));  // W/2 doubles
};

template <class V>
__attribute__((always_inline)) inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// max that skips NaN (a NaN never compares greater): lanes never hold NaN.
template <class F>
__attribute__((always_inline)) inline F max_abs_lanes(F m, F a) {
  a = a < 0 ? -a : a;
  return a > m ? a : m;
}

__attribute__((always_inline)) inline float fold_max(float m, float a) { return a > m ? a : m; }

// The element sources a sum-of-squares pass reads: V is a vector of floats
// (a whole or half register), at() the same element as a scalar for the tail.
struct Plain {  // p[i]
  const float* p;
  template <class V>
  __attribute__((always_inline)) V get(int64_t i) const { return load<V>(p + i); }
  float at(int64_t i) const { return p[i]; }
};

struct Difference {  // x[i] - y[i], in float, as LibTorch's sub writes it
  const float *x, *y;
  template <class V>
  __attribute__((always_inline)) V get(int64_t i) const { return load<V>(x + i) - load<V>(y + i); }
  float at(int64_t i) const { return x[i] - y[i]; }
};

struct SquareRatio {  // g[i]² / v[i], and 0 where v[i] <= 0, as g.square().div_(v).masked_fill_(v <= 0, 0)
  const float *g, *v;
  template <class V>
  __attribute__((always_inline)) V get(int64_t i) const {
    const V a = load<V>(g + i), d = load<V>(v + i);
    const V q = (a * a) / d;
    return d <= 0 ? V{} : q;
  }
  float at(int64_t i) const { return v[i] <= 0 ? 0.0f : (g[i] * g[i]) / v[i]; }
};

// One source's sum-of-squares and max lanes: block() takes kStep elements at
// i, end() folds the lanes in their fixed order and adds the tail [i, n).
template <int W, class Source>
struct SumSqMaxLanes {
  using F = typename Vec<W>::F;
  using H = typename Vec<W>::H;
  using D = typename Vec<W>::D;
  static constexpr int kAcc = kLanes / (W / 2);  // double registers holding the 16 lanes
  D s[kAcc] = {};
  F m = {};

  __attribute__((always_inline)) void block(const Source& src, int64_t i) {
    for (int half = 0; half < 2; ++half) {  // lane k gets element k, then k + 16: in order
      for (int a = 0; a < kAcc; ++a) {
        const D d = __builtin_convertvector(src.template get<H>(i + half * kLanes + a * (W / 2)), D);
        s[a] += d * d;  // exact: a float's square fits a double's mantissa
      }
    }
    for (int k = 0; k < kStep / W; ++k) m = max_abs_lanes(m, src.template get<F>(i + k * W));
  }
  __attribute__((always_inline)) SumSqMax end(const Source& src, int64_t i, int64_t n) const {
    SumSqMax r;
    for (int a = 0; a < kAcc; ++a) {
      for (int l = 0; l < W / 2; ++l) r.sumsq += s[a][l];  // lanes 0..15 in order
    }
    for (int l = 0; l < W; ++l) r.max = fold_max(r.max, m[l]);
    for (; i < n; ++i) {
      const float x = src.at(i);
      const double d = x;
      r.sumsq += d * d;
      r.max = fold_max(r.max, std::fabs(x));
    }
    return r;
  }
};

template <int W, class Source>
__attribute__((always_inline)) inline SumSqMax sumsq_max_body(Source src, int64_t n) {
  SumSqMaxLanes<W, Source> lanes;
  int64_t i = 0;
  for (; i + kStep <= n; i += kStep) lanes.block(src, i);
  return lanes.end(src, i, n);
}

// Two sources' statistics from one pass over memory they share (a step's
// before − after and the after alone): each with the bits of its single form.
template <int W, class A, class B>
__attribute__((always_inline)) inline SumSqMaxPair sumsq_max_pair_body(std::pair<A, B> src, int64_t n) {
  SumSqMaxLanes<W, A> a;
  SumSqMaxLanes<W, B> b;
  int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    a.block(src.first, i);
    b.block(src.second, i);
  }
  return {a.end(src.first, i, n), b.end(src.second, i, n)};
}

// The end of a max |x| pass: mx over the non-NaN elements of p[0, n), and
// whether any was NaN or ±Inf. Tells an Inf from a NaN by looking again.
__attribute__((always_inline)) inline float resolve_max(float mx, bool non_finite, const float* p, int64_t n) {
  if (!non_finite) return mx;
  if (!std::isinf(mx)) return NAN;  // non-finite but no Inf: a NaN
  for (int64_t j = 0; j < n; ++j) {  // an Inf, and maybe a NaN too: look
    if (std::isnan(p[j])) return p[j];
  }
  return mx;
}

template <int W>
__attribute__((always_inline)) inline float max_abs_body(const float* p, int64_t n) {
  using F = typename Vec<W>::F;
  F m0 = {}, m1 = {}, z = {};
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const F a = load<F>(p + i), b = load<F>(p + i + W);
    z += (a - a) + (b - b);  // stays 0 unless an element is NaN or ±Inf
    m0 = max_abs_lanes(m0, a);
    m1 = max_abs_lanes(m1, b);
  }
  float mx = 0;
  int non_finite = 0;  // an integer reduction: GCC 12 folds a NaN test over float lanes into a min that drops NaN
  for (int k = 0; k < W; ++k) {
    mx = fold_max(fold_max(mx, m0[k]), m1[k]);
    non_finite |= std::isnan(z[k]) ? 1 : 0;
  }
  for (; i < n; ++i) {
    non_finite |= std::isfinite(p[i]) ? 0 : 1;
    mx = fold_max(mx, std::fabs(p[i]));
  }
  return resolve_max(mx, non_finite != 0, p, n);
}

// out = leaky_relu(x, slope) with LibTorch's arithmetic (x > 0 ? x : x * slope),
// and max |out| taken from the registers as they are written.
template <int W>
__attribute__((always_inline)) inline float leaky_relu_body(const float* x, float* out, int64_t n, float slope) {
  using F = typename Vec<W>::F;
  F m = {}, z = {};
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const F a = load<F>(x + i);
    const F r = a > 0 ? a : a * slope;
    std::memcpy(out + i, &r, sizeof r);
    z += r - r;
    m = max_abs_lanes(m, r);
  }
  float mx = 0;
  int non_finite = 0;
  for (int k = 0; k < W; ++k) {
    mx = fold_max(mx, m[k]);
    non_finite |= std::isnan(z[k]) ? 1 : 0;
  }
  for (; i < n; ++i) {
    out[i] = x[i] > 0 ? x[i] : x[i] * slope;
    non_finite |= std::isfinite(out[i]) ? 0 : 1;
    mx = fold_max(mx, std::fabs(out[i]));
  }
  return resolve_max(mx, non_finite != 0, out, n);
}

template <class Source>
SumSqMax sumsq_max_baseline(Source src, int64_t n) {
  return sumsq_max_body<4>(src, n);
}
template <class Sources>
SumSqMaxPair sumsq_max_pair_baseline(Sources src, int64_t n) {
  return sumsq_max_pair_body<4>(src, n);
}
float max_abs_baseline(const float* p, int64_t n) { return max_abs_body<4>(p, n); }
float leaky_relu_baseline(const float* x, float* out, int64_t n, float slope) {
  return leaky_relu_body<4>(x, out, n, slope);
}

#if defined(__x86_64__)
template <class Source>
__attribute__((target("avx2,fma"))) SumSqMax sumsq_max_avx2(Source src, int64_t n) {
  return sumsq_max_body<8>(src, n);
}
template <class Source>
__attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma"))) SumSqMax sumsq_max_avx512(Source src, int64_t n) {
  return sumsq_max_body<16>(src, n);
}
template <class Sources>
__attribute__((target("avx2,fma"))) SumSqMaxPair sumsq_max_pair_avx2(Sources src, int64_t n) {
  return sumsq_max_pair_body<8>(src, n);
}
template <class Sources>
__attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma"))) SumSqMaxPair sumsq_max_pair_avx512(Sources src, int64_t n) {
  return sumsq_max_pair_body<16>(src, n);
}

__attribute__((target("avx2,fma"))) float max_abs_avx2(const float* p, int64_t n) { return max_abs_body<8>(p, n); }
__attribute__((target("avx2,fma"))) float leaky_relu_avx2(const float* x, float* out, int64_t n, float slope) {
  return leaky_relu_body<8>(x, out, n, slope);
}
__attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma"))) float max_abs_avx512(const float* p, int64_t n) {
  return max_abs_body<16>(p, n);
}
__attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma"))) float leaky_relu_avx512(const float* x, float* out, int64_t n,
                                                                                      float slope) {
  return leaky_relu_body<16>(x, out, n, slope);
}

Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kBaseline;
}
#else
// Elsewhere only the baseline body runs (the compiler's own vectorization).
Isa detect() { return Isa::kBaseline; }
template <class Source>
SumSqMax sumsq_max_avx2(Source src, int64_t n) {
  return sumsq_max_body<4>(src, n);
}
template <class Source>
SumSqMax sumsq_max_avx512(Source src, int64_t n) {
  return sumsq_max_body<4>(src, n);
}
template <class Sources>
SumSqMaxPair sumsq_max_pair_avx2(Sources src, int64_t n) {
  return sumsq_max_pair_body<4>(src, n);
}
template <class Sources>
SumSqMaxPair sumsq_max_pair_avx512(Sources src, int64_t n) {
  return sumsq_max_pair_body<4>(src, n);
}
float max_abs_avx2(const float* p, int64_t n) { return max_abs_body<4>(p, n); }
float max_abs_avx512(const float* p, int64_t n) { return max_abs_body<4>(p, n); }
float leaky_relu_avx2(const float* x, float* out, int64_t n, float slope) { return leaky_relu_body<4>(x, out, n, slope); }
float leaky_relu_avx512(const float* x, float* out, int64_t n, float slope) { return leaky_relu_body<4>(x, out, n, slope); }
#endif

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kBaseline: break;
  }
  return "baseline";
}

Isa best_isa() {
  static const Isa isa = detect();
  return isa;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out = {Isa::kBaseline};
  if (best_isa() != Isa::kBaseline) out.push_back(Isa::kAvx2);
  if (best_isa() == Isa::kAvx512) out.push_back(Isa::kAvx512);
  return out;
}

namespace {

// The variant of a kernel for isa.
template <class Fn>
Fn variant(Isa isa, Fn baseline, Fn avx2, Fn avx512) {
  return isa == Isa::kAvx512 ? avx512 : isa == Isa::kAvx2 ? avx2 : baseline;
}

}  // namespace

namespace {

template <class Source>
SumSqMax sumsq_max_of(Source src, int64_t n, Isa isa) {
  return variant(isa, sumsq_max_baseline<Source>, sumsq_max_avx2<Source>, sumsq_max_avx512<Source>)(src, n);
}

}  // namespace

SumSqMax sumsq_max(const float* p, int64_t n, Isa isa) { return sumsq_max_of(Plain{p}, n, isa); }

SumSqMax sumsq_max_difference(const float* x, const float* y, int64_t n, Isa isa) {
  return sumsq_max_of(Difference{x, y}, n, isa);
}

SumSqMax sumsq_max_square_ratio(const float* g, const float* v, int64_t n, Isa isa) {
  return sumsq_max_of(SquareRatio{g, v}, n, isa);
}

SumSqMaxPair sumsq_max_difference_and_plain(const float* x, const float* y, int64_t n, Isa isa) {
  using Sources = std::pair<Difference, Plain>;
  return variant(isa, sumsq_max_pair_baseline<Sources>, sumsq_max_pair_avx2<Sources>,
                 sumsq_max_pair_avx512<Sources>)(Sources{Difference{x, y}, Plain{y}}, n);
}

float max_abs(const float* p, int64_t n, Isa isa) {
  return variant(isa, max_abs_baseline, max_abs_avx2, max_abs_avx512)(p, n);
}

float leaky_relu_max_abs(const float* x, float* out, int64_t n, float slope, Isa isa) {
  return variant(isa, leaky_relu_baseline, leaky_relu_avx2, leaky_relu_avx512)(x, out, n, slope);
}

namespace {

constexpr int64_t kChunk = int64_t{1} << 16;

// kernel(offset, count) over [0, n) in chunks; the partial results combined in order.
template <class R, class Kernel, class Combine>
R chunked(int64_t n, Kernel kernel, Combine combine) {
  if (n < 2 * kChunk) return kernel(0, n);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<R> part(static_cast<size_t>(chunks));
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    // Each thread's last chunk first: the tail of its share of a tensor just
    // written by an equally split LibTorch op is the part still in its cache.
    for (int64_t c = end; c-- > begin;) part[size_t(c)] = kernel(c * kChunk, std::min(kChunk, n - c * kChunk));
  });
  R r = part[0];
  for (size_t c = 1; c < part.size(); ++c) r = combine(r, part[c]);
  return r;
}

float max_keeping_nan(float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

}  // namespace

namespace {

SumSqMax combine_sumsq_max(SumSqMax a, SumSqMax b) { return {a.sumsq + b.sumsq, std::max(a.max, b.max)}; }
SumSqMaxPair combine_pair(const SumSqMaxPair& a, const SumSqMaxPair& b) {
  return {combine_sumsq_max(a.first, b.first), combine_sumsq_max(a.second, b.second)};
}

}  // namespace

SumSqMax sumsq_max_parallel(const float* p, int64_t n) {
  const Isa isa = best_isa();
  return chunked<SumSqMax>(
      n, [=](int64_t offset, int64_t count) { return sumsq_max(p + offset, count, isa); }, combine_sumsq_max);
}

SumSqMax sumsq_max_difference_parallel(const float* x, const float* y, int64_t n) {
  const Isa isa = best_isa();
  return chunked<SumSqMax>(
      n, [=](int64_t offset, int64_t count) { return sumsq_max_difference(x + offset, y + offset, count, isa); },
      combine_sumsq_max);
}

SumSqMax sumsq_max_square_ratio_parallel(const float* g, const float* v, int64_t n) {
  const Isa isa = best_isa();
  return chunked<SumSqMax>(
      n, [=](int64_t offset, int64_t count) { return sumsq_max_square_ratio(g + offset, v + offset, count, isa); },
      combine_sumsq_max);
}

SumSqMaxPair sumsq_max_difference_and_plain_parallel(const float* x, const float* y, int64_t n) {
  const Isa isa = best_isa();
  return chunked<SumSqMaxPair>(
      n, [=](int64_t offset, int64_t count) { return sumsq_max_difference_and_plain(x + offset, y + offset, count, isa); },
      combine_pair);
}

float max_abs_parallel(const float* p, int64_t n) {
  const Isa isa = best_isa();
  return chunked<float>(
      n, [=](int64_t offset, int64_t count) { return max_abs(p + offset, count, isa); },
      max_keeping_nan);
}

float leaky_relu_max_abs_parallel(const float* x, float* out, int64_t n, float slope) {
  const Isa isa = best_isa();
  return chunked<float>(
      n, [=](int64_t offset, int64_t count) { return leaky_relu_max_abs(x + offset, out + offset, count, slope, isa); },
      max_keeping_nan);
}

namespace {

SumSqMax stats_of(const StatsTask& t) {
  switch (t.kind) {
    case StatsTask::kDifference: return sumsq_max_difference_parallel(t.x, t.y, t.n);
    case StatsTask::kSquareRatio: return sumsq_max_square_ratio_parallel(t.x, t.y, t.n);
    case StatsTask::kPlain:
    case StatsTask::kDifferenceAndPlain: break;
  }
  return sumsq_max_parallel(t.x, t.n);
}

// A task that also copies what it read (StatsTask::copy): the same chunks as
// the _parallel forms (so the same bits), each copied right after its pass,
// while it is still in cache.
void run_copying_task(const StatsTask& t) {
  const Isa isa = best_isa();
  if (t.kind == StatsTask::kDifferenceAndPlain) {
    const SumSqMaxPair r = chunked<SumSqMaxPair>(
        t.n,
        [&](int64_t offset, int64_t count) {
          const SumSqMaxPair c = sumsq_max_difference_and_plain(t.x + offset, t.y + offset, count, isa);
          std::memcpy(t.copy + offset, t.y + offset, size_t(count) * sizeof(float));
          return c;
        },
        combine_pair);
    *t.out = r.first;
    *t.out2 = r.second;
    return;
  }
  *t.out = chunked<SumSqMax>(
      t.n,
      [&](int64_t offset, int64_t count) {
        const SumSqMax c = sumsq_max(t.x + offset, count, isa);
        std::memcpy(t.copy + offset, t.x + offset, size_t(count) * sizeof(float));
        return c;
      },
      combine_sumsq_max);
}

void run_task(const StatsTask& t) {
  if (t.copy != nullptr && (t.kind == StatsTask::kPlain || t.kind == StatsTask::kDifferenceAndPlain)) {
    run_copying_task(t);
    return;
  }
  if (t.kind == StatsTask::kDifferenceAndPlain) {
    const SumSqMaxPair r = sumsq_max_difference_and_plain_parallel(t.x, t.y, t.n);
    *t.out = r.first;
    *t.out2 = r.second;
    return;
  }
  *t.out = stats_of(t);
}

}  // namespace

void sumsq_max_tasks(const std::vector<StatsTask>& tasks) {
  std::vector<const StatsTask*> small;
  for (const StatsTask& t : tasks) {
    if (t.n >= 2 * kChunk) run_task(t);  // in parallel chunks of its own
    else small.push_back(&t);
  }
  // One task per iteration: a parameter's statistics take microseconds, and
  // the tensors of a step are many (a GPT block has twelve).
  at::parallel_for(0, int64_t(small.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) run_task(*small[size_t(i)]);
  });
}

float lower_triangle_max_abs_parallel(const float* p, int64_t matrices, int64_t rows, int64_t cols) {
  const Isa isa = best_isa();
  const int64_t size = rows * cols;
  std::vector<float> part(static_cast<size_t>(std::max<int64_t>(matrices, 0)), 0.0f);
  // A grain of whole matrices worth about one chunk of elements; max is
  // exact, so the split does not change the result.
  const int64_t grain = std::max<int64_t>(1, kChunk / std::max<int64_t>(size, 1));
  at::parallel_for(0, matrices, grain, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      float mx = 0;
      for (int64_t r = 0; r < rows; ++r) {
        mx = max_keeping_nan(mx, max_abs(p + m * size + r * cols, std::min(r + 1, cols), isa));
      }
      part[size_t(m)] = mx;
    }
  });
  float mx = 0;
  for (float x : part) mx = max_keeping_nan(mx, x);
  return mx;
}

int parallel_threads_used(int64_t n) {
  std::atomic<uint64_t> seen{0};
  chunked<int>(
      n,
      [&](int64_t, int64_t) {
        seen |= uint64_t{1} << std::min(at::get_thread_num(), 63);
        return 0;
      },
      [](int a, int) { return a; });
  return __builtin_popcountll(seen.load());
}

}  // namespace spikehunt
