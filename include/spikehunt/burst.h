/// burst.h — a burst: training steps under the monitor, and the verdict
/// (healthy, extreme with its onset, non_finite with the first non-finite
/// tensor, crashed with its stage, timeout).
///
/// Public names: run_config, run_burst, configure_runtime, BurstOptions,
/// BurstResult, Verdict, Outcome, Fault, StepRecord, Trainer,
/// planned_optimizer_steps, heldout_loss; train_step (deprecated).
///
///   spikehunt::BurstResult r = spikehunt::run_config(config, spikehunt::BurstOptions{});
///   if (r.verdict.outcome == spikehunt::Outcome::kNonFinite) std::cout << r.verdict.fault->describe();
#pragma once

#include <torch/torch.h>

#include "spikehunt/config.h"
#include "spikehunt/scenario.h"

#include "harness/burst.h"
#include "harness/monitor.h"
