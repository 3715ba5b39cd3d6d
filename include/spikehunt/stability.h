/// stability.h — "training stays healthy over this space" as a property:
/// samples a search space, trains each config in this process, and shrinks
/// the first failure to a minimal config with its repro. What the GoogleTest
/// macros in <spikehunt/gtest.h> check.
///
/// Public names: check_stability, StabilityOptions, StabilityResult,
/// SearchSpace (load, builtin, around, config, simplest).
#pragma once

#include "spikehunt/config.h"

#include "generators/space.h"
#include "generators/stability.h"
