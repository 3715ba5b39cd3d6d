/// gtest.h — GoogleTest assertions over a scenario's stability.
/// Public names: SPIKEHUNT_EXPECT_STABLE, SPIKEHUNT_ASSERT_STABLE.
//
//   TEST(MyTraining, StaysStableOverTheSpace) {
//     spikehunt::StabilityOptions o;
//     o.runs = 6;
//     SPIKEHUNT_EXPECT_STABLE(spikehunt::SearchSpace::load("my_space.json"), o);
//   }
//
// Samples o.runs configs of the space and trains each in this process under
// the monitor; on the first one that goes extreme, non-finite or crashes it
// shrinks it (o.shrink_evaluations bursts at most), records the minimal
// config's repro under o.out_dir, and fails the test with the minimal config,
// the failure and the replay command.
#pragma once

#include <gtest/gtest.h>

#include "spikehunt/stability.h"

#define SPIKEHUNT_STABILITY_(space, options, fail)                                                  \
  do {                                                                                               \
    const ::spikehunt::StabilityResult spikehunt_result_ = ::spikehunt::check_stability(space, options); \
    if (!spikehunt_result_.stable) fail() << spikehunt_result_.message;                             \
  } while (0)

// Non-fatal: the test goes on.
#define SPIKEHUNT_EXPECT_STABLE(space, options) SPIKEHUNT_STABILITY_(space, options, ADD_FAILURE)
// Fatal: the test returns.
#define SPIKEHUNT_ASSERT_STABLE(space, options) SPIKEHUNT_STABILITY_(space, options, GTEST_FAIL)
