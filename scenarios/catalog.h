// catalog.h — the built-in scenario: a model from models.h, an optimizer, a
// dataset and the sequential-domain protocol, all from one TrainingConfig.
// Example:
//   auto scenario = make_scenario(config);           // loads config.dataset
//   auto scenario = make_scenario(config, dataset);  // shares a loaded one
#pragma once

#include <memory>

#include "scenarios/config.h"
#include "scenarios/dataset.h"
#include "scenarios/scenario.h"

namespace spikehunt {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& o,
                                                        std::vector<torch::Tensor> params);

// Throws InputError when config.device is cuda and no CUDA device is present.
torch::Device resolve_device(DeviceKind kind);

std::unique_ptr<Scenario> make_scenario(const TrainingConfig& config);
std::unique_ptr<Scenario> make_scenario(const TrainingConfig& config,
                                        std::shared_ptr<const Dataset> dataset);

// Builds (inputs (B,1,28,28) float32 = pixel/255, targets (B) int64) on the
// CPU from sample indices.
std::pair<torch::Tensor, torch::Tensor> gather_batch(const ImageSet& set,
                                                     const std::vector<int64_t>& indices);

}  // namespace spikehunt
