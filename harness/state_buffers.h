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

#include <string>
#include <vector>

#include "harness/record.h"
#include "scenarios/scenario.h"

namespace spikehunt {

// A copy of one of the state's tensors made ahead of time (the monitor
// writes them as it reads the parameters and optimizer state after a step:
// Monitor::copy_after_into), with the tensor it copied and that tensor's
// version counter then: still its value while both are the same.
struct StateCopy {
  std::string name;  // capture_state's: "model.<param>", "optim.<param>.<buffer>"
  torch::Tensor copy;
  const void* source = nullptr;
  int64_t version = -1;
};

// Whether `buffer` can hold a copy of t as it is: defined, contiguous, and
// t's sizes, dtype and device.
bool holds_copy_of(const torch::Tensor& buffer, const torch::Tensor& t);

// `into` becomes capture_state(scenario): the same names, order and values.
// With `ready`, a tensor whose copy there is still its value is taken from
// it instead of copied, and the buffer it replaces goes back to `ready` for
// the next copy ahead. Returns how many were taken from `ready`.
size_t capture_state_into(Scenario& scenario, std::vector<NamedTensor>& into, std::vector<StateCopy>* ready = nullptr);

}  // namespace spikehunt
