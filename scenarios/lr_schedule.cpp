#include "scenarios/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace spikehunt {

bool lr_is_constant(const ScheduleConfig& s) { return s.kind == ScheduleKind::kConstant && s.warmup_steps == 0; }

double lr_factor(const ScheduleConfig& s, double base_lr, int64_t step, int64_t total_steps) {
  const int64_t w = s.warmup_steps;
  if (step < w) return double(step + 1) / double(w);
  const double m = base_lr > 0 ? std::min(1.0, s.min_lr / base_lr) : 0.0;
  const int64_t end = s.decay_steps > 0 ? s.decay_steps : std::max<int64_t>(total_steps - 1, 0);
  const double p = end > w ? std::clamp(double(step - w) / double(end - w), 0.0, 1.0) : 1.0;
  switch (s.kind) {
    case ScheduleKind::kConstant: return 1.0;
    case ScheduleKind::kLinear: return 1.0 - (1.0 - m) * p;
    case ScheduleKind::kCosine: return m + (1.0 - m) * 0.5 * (1.0 + std::cos(M_PI * p));
    case ScheduleKind::kStep: return std::pow(s.gamma, double((step - w) / std::max<int64_t>(s.step_size, 1)));
  }
  return 1.0;
}

}  // namespace spikehunt
