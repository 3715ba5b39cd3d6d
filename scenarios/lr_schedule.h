// lr_schedule.h — the learning rate over the steps (ScheduleConfig in
// config.h), as a pure function of the optimizer step: the harness sets every
// group of every optimizer to (the lr the group was built with) × factor(s)
// before each optimizer step, so a burst resumed from a checkpoint at step s
// continues the schedule exactly where it was.
//   warm-up   s < W:  (s + 1) / W                    (W = warmup_steps)
//   constant          1
//   linear            1 − (1 − m)·p                  (m = min_lr / optimizer.lr)
//   cosine            m + (1 − m)·(1 + cos(π·p)) / 2
//   step              gamma ^ floor((s − W) / step_size)
// with p = (s − W) / (T − W) clamped to [0, 1], T = decay_steps, or the last
// planned step when decay_steps is 0.
// Example:
//   const double lr = config.optimizer.lr * lr_factor(config.schedule, config.optimizer.lr, step, 120);
#pragma once

#include <cstdint>

#include "scenarios/config.h"

namespace spikehunt {

// The factor at optimizer step `step` (from 0) of a run of `total_steps`;
// `base_lr` is optimizer.lr (min_lr is given against it).
double lr_factor(const ScheduleConfig& schedule, double base_lr, int64_t step, int64_t total_steps);

// True when the schedule never changes a learning rate (constant, no warm-up):
// the harness then leaves the optimizers' learning rates alone.
bool lr_is_constant(const ScheduleConfig& schedule);

}  // namespace spikehunt
