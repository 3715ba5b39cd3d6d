// monitor_stats.h — internal to the monitor: the statistics of CPU float32
// tensors computed together (StatsQueue: a step's many small parameters
// shared across the intra-op threads) and the helpers the monitor's slots
// use. The per-tensor statistics monitor.h declares (max_abs_stat,
// tensor_stats, count_non_finite, summarize) are in monitor_stats.cpp.
#pragma once

#include <utility>
#include <vector>

#include <torch/torch.h>

#include "base/stats_kernels.h"

namespace spikehunt::monitor_detail {

// {L2 norm, max |x|}; both NaN if any element was NaN.
inline std::pair<double, double> norm_max(const SumSqMax& s) {
  if (std::isnan(s.sumsq)) return {s.sumsq, s.sumsq};
  return {std::sqrt(s.sumsq), double(s.max)};
}

inline std::pair<double, double> stats_f32(const float* p, int64_t n) { return norm_max(sumsq_max_parallel(p, n)); }

inline bool fused(const torch::Tensor& t) { return t.is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous(); }

// The statistics of CPU float32 tensors, queued while their slots are laid
// out and computed together (sumsq_max_tasks), so the intra-op threads share
// a step's many small parameters instead of one thread reading them in turn.
class StatsQueue {
 public:
  // slot2: kDifferenceAndPlain's second result (y's statistics).
  // copy: where to copy what the task reads (StatsTask::copy), when defined.
  void add(StatsTask::Kind kind, const torch::Tensor& x, const torch::Tensor* y, int slot, int slot2 = -1,
           const torch::Tensor& copy = {}) {
    StatsTask task{kind, x.data_ptr<float>(), y != nullptr ? y->data_ptr<float>() : nullptr, x.numel(), nullptr};
    if (copy.defined()) task.copy = copy.data_ptr<float>();
    tasks_.push_back(task);
    slots_.push_back({slot, slot2});
  }
  // Each result into values[slot] and values[slot + 1]: {norm, max}.
  void run(std::vector<double>& values) {
    std::vector<SumSqMaxPair> out(tasks_.size());
    for (size_t j = 0; j < tasks_.size(); ++j) {
      tasks_[j].out = &out[j].first;
      tasks_[j].out2 = &out[j].second;
    }
    sumsq_max_tasks(tasks_);
    for (size_t j = 0; j < tasks_.size(); ++j) {
      const auto [slot, slot2] = slots_[j];
      std::tie(values[size_t(slot)], values[size_t(slot) + 1]) = norm_max(out[j].first);
      if (slot2 >= 0) std::tie(values[size_t(slot2)], values[size_t(slot2) + 1]) = norm_max(out[j].second);
    }
    tasks_.clear();
    slots_.clear();
  }

 private:
  std::vector<StatsTask> tasks_;
  std::vector<std::pair<int, int>> slots_;
};

}  // namespace spikehunt::monitor_detail
