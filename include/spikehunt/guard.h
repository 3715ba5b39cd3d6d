/// guard.h — regressions in stability: a pinned suite of configs recorded as
/// a baseline, then checked against it with tolerances.
///
/// Public names: guard_record, guard_check, GuardOptions, GuardSuite,
/// GuardCase, GuardTolerances, GuardRun, GuardFinding, load_guard_suite,
/// guard_run, guard_runs, guard_compare, read_guard_baseline,
/// write_guard_baseline.
#pragma once

#include "spikehunt/config.h"

#include "harness/guard.h"
