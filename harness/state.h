// state.h — everything a burst needs to continue from a step: model
// parameters and buffers ("model.<name>"), optimizer state with Adam's step
// counts ("optim.<param>.<buffer>"), LibTorch's CPU RNG ("rng.cpu"), and the
// monitor's hash chain and health windows (MonitorState, kept beside the
// tensors). The data position is the step number: a scenario skips that many
// batches without training.
// Example:
//   std::vector<NamedTensor> t = capture_state(scenario);   // on the device, no sync
//   ...
//   restore_state(other, t, "ckpt.safetensors");
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/record.h"
#include "scenarios/scenario.h"

namespace spikehunt {

// Copies model, optimizer and RNG state (model and optimizer tensors stay on
// their device; no host sync).
std::vector<NamedTensor> capture_state(Scenario& scenario);

// Puts captured state back: parameters and buffers by name (shapes must
// match), SGD / Adam / AdamW state rebuilt, the CPU RNG restored. Throws
// InputError naming `source` when a tensor is missing, extra or misshapen.
void restore_state(Scenario& scenario, const std::vector<NamedTensor>& tensors, const std::string& source);

}  // namespace spikehunt
