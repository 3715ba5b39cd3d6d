// state_buffers.h — capture_state (state.h) into buffers kept between steps.
// A burst that keeps the state entering every step until the onset (for the
// last healthy checkpoint) copies the model and optimizer state once a step;
// fresh tensors each time cost more than the copy (glibc maps large blocks
// afresh, and the kernel zeroes every page), so the copy reuses the last
// one's memory wherever a tensor's name, shape, dtype and device are the same.
// Example:
//   std::vector<NamedTensor> entering;
//   capture_state_into(scenario, entering);   // each step; same names and order as capture_state
#pragma once

#include <vector>

#include "harness/record.h"
#include "scenarios/scenario.h"

namespace spikehunt {

// `into` becomes capture_state(scenario): the same names, order and values.
void capture_state_into(Scenario& scenario, std::vector<NamedTensor>& into);

}  // namespace spikehunt
