// fuzz_monitor — differential test of the monitor's statistics. Bytes become
// float32 / float64 / bfloat16 / float16 tensors of random shapes (contiguous
// or transposed) and raw bit patterns; the monitor's finiteness, NaN/±Inf
// counts and max |x| must equal an element-by-element double-precision
// reference exactly, and its L2 norm must be within 1e-9 relative (both are
// accumulated in double, in different orders; a float64 tensor whose true
// norm exceeds the largest double reports +Inf). Any mismatch aborts.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fuzzer/FuzzedDataProvider.h>

#include "harness/monitor.h"

using namespace spikehunt;

namespace {

struct Reference {
  int64_t nan = 0, pos_inf = 0, neg_inf = 0;
  double max_abs = 0;
  long double sum_sq = 0;
};

Reference reference(const torch::Tensor& t) {
  Reference r;
  const torch::Tensor d = t.to(torch::kFloat64).contiguous();  // widening: exact for every input dtype
  const double* p = d.data_ptr<double>();
  for (int64_t i = 0; i < d.numel(); ++i) {
    const double x = p[i];
    if (std::isnan(x)) {
      ++r.nan;
      continue;
    }
    if (std::isinf(x)) ++(x > 0 ? r.pos_inf : r.neg_inf);
    r.max_abs = std::max(r.max_abs, std::fabs(x));
    r.sum_sq += static_cast<long double>(x) * x;
  }
  return r;
}

[[noreturn]] void mismatch(const char* what, double got, double want, const torch::Tensor& t) {
  std::fprintf(stderr, "monitor mismatch in %s: got %.17g, reference %.17g (dtype %s, numel %lld)\n", what, got, want,
               c10::toString(t.scalar_type()), static_cast<long long>(t.numel()));
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  static const torch::ScalarType kTypes[] = {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kFloat16};
  const torch::ScalarType type = kTypes[p.ConsumeIntegralInRange<int>(0, 3)];
  const int dims = p.ConsumeIntegralInRange<int>(0, 3);
  std::vector<int64_t> shape;
  int64_t numel = 1;
  for (int d = 0; d < dims; ++d) {
    const int64_t s = p.ConsumeIntegralInRange<int64_t>(0, 64);
    shape.push_back(numel * s > 4096 ? 1 : s);
    numel *= shape.back();
  }
  const bool transpose = dims >= 2 && p.ConsumeBool();
  // A palette of values that matter, placed over the raw bits now and then.
  const int specials = p.ConsumeIntegralInRange<int>(0, 8);
  std::vector<std::pair<int64_t, double>> placed;
  static const double kPalette[] = {std::numeric_limits<double>::quiet_NaN(), INFINITY, -INFINITY, 0.0, -0.0, 1e36,
                                    -3.4e38, 1e-40, 1e-310, 1e300, 65504, 3e38};
  for (int i = 0; i < specials && numel > 0; ++i) {
    placed.emplace_back(p.ConsumeIntegralInRange<int64_t>(0, numel - 1), kPalette[p.ConsumeIntegralInRange<int>(0, 11)]);
  }
  torch::Tensor t = torch::empty(shape, type);
  std::vector<uint8_t> bytes = p.ConsumeRemainingBytes<uint8_t>();
  bytes.resize(size_t(t.nbytes()), 0);
  if (t.nbytes() > 0) std::memcpy(t.data_ptr(), bytes.data(), size_t(t.nbytes()));
  for (const auto& [index, value] : placed) {  // rounded to the dtype (overflowing to ±Inf) by a tensor copy
    t.view({-1})[index].copy_(torch::scalar_tensor(value, torch::kFloat64));
  }
  if (transpose) t = t.transpose(0, 1);

  const Reference ref = reference(t);
  const TensorSummary s = summarize(t);
  if (s.numel != t.numel()) mismatch("numel", double(s.numel), double(t.numel()), t);
  if (s.counts.nan != ref.nan) mismatch("NaN count", double(s.counts.nan), double(ref.nan), t);
  if (s.counts.pos_inf != ref.pos_inf) mismatch("+Inf count", double(s.counts.pos_inf), double(ref.pos_inf), t);
  if (s.counts.neg_inf != ref.neg_inf) mismatch("-Inf count", double(s.counts.neg_inf), double(ref.neg_inf), t);
  const double max_stat = max_abs_stat(t).item<double>();
  if (ref.nan > 0) {
    if (!std::isnan(s.max_abs) || !std::isnan(s.norm) || !std::isnan(max_stat)) mismatch("NaN propagation", s.max_abs, NAN, t);
    return 0;
  }
  if (s.max_abs != ref.max_abs) mismatch("max |x|", s.max_abs, ref.max_abs, t);
  if (max_stat != ref.max_abs) mismatch("max_abs_stat", max_stat, ref.max_abs, t);
  const double want = static_cast<double>(std::sqrt(ref.sum_sq));
  if (ref.pos_inf + ref.neg_inf > 0) {
    if (!std::isinf(s.norm)) mismatch("norm of a tensor with Inf", s.norm, want, t);
  } else if (std::isinf(want)) {  // the true norm exceeds the largest double (float64 near 1e308)
    if (!std::isinf(s.norm)) mismatch("norm beyond the double range", s.norm, want, t);
  } else if (want == 0) {
    if (s.norm != 0) mismatch("norm of zeros", s.norm, want, t);
  } else if (!(std::fabs(s.norm - want) <= 1e-9 * want)) {
    mismatch("L2 norm (relative tolerance 1e-9)", s.norm, want, t);
  }
  return 0;
}
