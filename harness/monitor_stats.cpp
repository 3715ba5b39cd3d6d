// monitor_stats.cpp — the per-tensor statistics the monitor reads (monitor.h):
// max |x|, {L2 norm, max |x|} with NaN propagated, the non-finite counts.
#include <cmath>

#include "harness/monitor.h"
#include "harness/monitor_stats.h"

namespace spikehunt {

using namespace monitor_detail;

torch::Tensor max_abs_stat(const torch::Tensor& t) {
  if (t.numel() == 0) return torch::zeros({1}, t.options().dtype(torch::kFloat64));
  if (fused(t)) return torch::full({1}, max_abs_parallel(t.data_ptr<float>(), t.numel()), torch::kFloat64);
  if (t.is_cpu() && t.scalar_type() == torch::kHalf) {
    // LibTorch 1.13 had no aminmax for float16 on the CPU (found by fuzz_monitor); max() serves every version.
    return t.detach().abs().max().to(torch::kFloat64).reshape({1});
  }
  const auto [lo, hi] = torch::aminmax(t.detach());  // one vectorized pass; propagates NaN
  return torch::maximum(-lo, hi).to(torch::kFloat64).reshape({1});
}

torch::Tensor tensor_stats(const torch::Tensor& t) {
  torch::Tensor x = t.detach();
  if (x.numel() == 0) return torch::zeros({2}, x.options().dtype(torch::kFloat64));
  if (fused(x)) {
    const auto [norm, max] = stats_f32(x.data_ptr<float>(), x.numel());
    torch::Tensor out = torch::empty({2}, torch::kFloat64);
    out.data_ptr<double>()[0] = norm;
    out.data_ptr<double>()[1] = max;
    return out;
  }
  if (!x.is_floating_point()) x = x.to(torch::kFloat64);
  const torch::Tensor m = x.abs().max();  // max propagates NaN
  torch::Tensor norm;
  if (x.scalar_type() == torch::kFloat64) {
    // A double's square can overflow: scale by max |x| first; an Inf stays Inf.
    const torch::Tensor safe = torch::where(m > 0, m, torch::ones_like(m));
    norm = torch::where(torch::isinf(m), m, torch::linalg_vector_norm(x / safe, 2) * safe);
  } else {
    // Squares of float32/16/bf16 values fit a double: accumulate there.
    norm = torch::linalg_vector_norm(x, 2, c10::nullopt, false, torch::kFloat64);
  }
  return torch::stack({norm, m.to(torch::kFloat64)});
}

NonFiniteCounts count_non_finite(const torch::Tensor& t) {
  torch::Tensor x = t.detach();
  if (!x.is_floating_point() || x.numel() == 0) return {};
  return {torch::isnan(x).sum().item<int64_t>(), torch::isposinf(x).sum().item<int64_t>(),
          torch::isneginf(x).sum().item<int64_t>()};
}

TensorSummary summarize(const torch::Tensor& t) {
  TensorSummary s;
  s.numel = t.numel();
  if (s.numel == 0) return s;
  const torch::Tensor stats = tensor_stats(t).to(torch::kCPU);
  s.norm = stats[0].item<double>();
  s.max_abs = stats[1].item<double>();
  s.counts = count_non_finite(t);
  return s;
}

}  // namespace spikehunt
