// stats_kernels.h — the monitor's float32 statistics over contiguous memory:
// {sum of squares, max |x|} and max |x| alone.
//
// Each kernel is one body compiled three times (x86-64 baseline, AVX2,
// AVX-512) and picked once at run time for the CPU. Every variant does the
// same arithmetic in the same lanes (16 double accumulators of exact float
// squares, summed in a fixed order), so the result is bit-identical whichever
// variant runs: a repro replayed on another x86-64 machine sees the same
// norms. Example:
//   const SumSqMax s = sumsq_max(p, n);  // s.sumsq is NaN iff any element is NaN
//   const float m = max_abs(p, n);       // NaN iff any element is NaN
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spikehunt {

struct SumSqMax {
  double sumsq = 0;  // in double: squares of float32 never overflow it; NaN if any NaN
  float max = 0;     // max |x| over the non-NaN elements (+Inf if any ±Inf)
};

struct SumSqMaxPair {  // two statistics from one pass
  SumSqMax first, second;
};

enum class Isa { kBaseline, kAvx2, kAvx512 };
const char* isa_name(Isa isa);
Isa best_isa();                     // the widest variant this CPU runs
std::vector<Isa> supported_isas();  // every variant this CPU runs, baseline first

SumSqMax sumsq_max(const float* p, int64_t n, Isa isa);
// The same statistics of an elementwise expression computed in float as
// LibTorch computes it, in one pass and without writing it anywhere:
//   x - y                               (a step: before - after)
//   g² / v, and 0 where v <= 0          (g.square().div_(v).masked_fill_(v <= 0, 0))
SumSqMax sumsq_max_difference(const float* x, const float* y, int64_t n, Isa isa);
SumSqMax sumsq_max_square_ratio(const float* g, const float* v, int64_t n, Isa isa);
// {statistics of x - y, statistics of y} from one read of x and y (a step:
// before - after, and after), each with the bits of the single forms.
SumSqMaxPair sumsq_max_difference_and_plain(const float* x, const float* y, int64_t n, Isa isa);
float max_abs(const float* p, int64_t n, Isa isa);  // NaN if any element is NaN
// out[i] = x[i] > 0 ? x[i] : x[i] * slope — bit for bit LibTorch's leaky_relu —
// returning max |out| (NaN if any NaN) from the same pass: a tapped
// activation costs no second read of its output.
float leaky_relu_max_abs(const float* x, float* out, int64_t n, float slope, Isa isa);
inline SumSqMax sumsq_max(const float* p, int64_t n) { return sumsq_max(p, n, best_isa()); }
inline float max_abs(const float* p, int64_t n) { return max_abs(p, n, best_isa()); }

SumSqMax sumsq_max_parallel(const float* p, int64_t n);
SumSqMax sumsq_max_difference_parallel(const float* x, const float* y, int64_t n);
SumSqMax sumsq_max_square_ratio_parallel(const float* g, const float* v, int64_t n);
SumSqMaxPair sumsq_max_difference_and_plain_parallel(const float* x, const float* y, int64_t n);
float max_abs_parallel(const float* p, int64_t n);
float leaky_relu_max_abs_parallel(const float* x, float* out, int64_t n, float slope);
// Many statistics computed together: each task's {sum of squares, max} of
// x (kPlain), of x - y (kDifference) or of x² / y (kSquareRatio, the forms
// above) into *out; kDifferenceAndPlain: x - y into *out and y into *out2. The small tasks are shared out among the intra-op
// threads, a whole task to a thread; a large one splits into its own chunks.
// Each result has the bits of the single forms, whichever thread computed it.
struct StatsTask {
  enum Kind { kPlain, kDifference, kSquareRatio, kDifferenceAndPlain };
  Kind kind = kPlain;
  const float* x = nullptr;
  const float* y = nullptr;
  int64_t n = 0;
  SumSqMax* out = nullptr;
  SumSqMax* out2 = nullptr;  // kDifferenceAndPlain: y's
  // kPlain and kDifferenceAndPlain: n floats of what was read (x, or y)
  // copied here in the same pass, chunk by chunk while in cache; else null.
  float* copy = nullptr;
};
void sumsq_max_tasks(const std::vector<StatsTask>& tasks);
// max |x| over the lower triangle (the diagonal included) of each of
// `matrices` contiguous rows × cols matrices: a causal attention score's
// max without writing the masked copy. NaN if any element read is NaN.
float lower_triangle_max_abs_parallel(const float* p, int64_t matrices, int64_t rows, int64_t cols);
// How many intra-op threads the *_parallel forms use for n elements (tests:
// this file must be built with OpenMP or at::parallel_for runs serially).
int parallel_threads_used(int64_t n);

}  // namespace spikehunt
