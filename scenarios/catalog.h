// catalog.h — the built-in scenario: a model from models.h, an optimizer, a
// dataset and the sequential-domain protocol, all from one TrainingConfig.
// Example:
//   auto scenario = make_scenario(config);           // loads config.dataset
//   auto scenario = make_scenario(config, dataset);  // shares a loaded one
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "scenarios/config.h"
#include "scenarios/dataset.h"
#include "scenarios/models.h"
#include "scenarios/optimizers.h"
#include "scenarios/protocol.h"
#include "scenarios/registry.h"
#include "scenarios/scenario.h"

namespace spikehunt {

// Throws InputError when config.device is cuda and no CUDA device is present.
torch::Device resolve_device(DeviceKind kind);

// The built-in scenario: a model from models.h, the config's optimizer, its
// dataset and the sequential-domain protocol. The planted-bug scenarios
// (planted.h) derive from it.
class StandardScenario : public Scenario {
 public:
  StandardScenario(const TrainingConfig& config, std::shared_ptr<const Dataset> dataset);

  torch::nn::Module& model() override { return *model_; }
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }
  torch::Tensor forward(const torch::Tensor& inputs, const Tap& tap) override { return model_->forward(inputs, tap); }
  std::optional<Batch> next_batch() override;
  std::vector<Batch> heldout(int64_t max_samples) override;  // the dataset's test split, in order
  int64_t skip_batches(int64_t n) override;
  int64_t planned_steps() const override { return schedule_.total_steps(); }
  std::vector<std::string> phase_names() const override;
  torch::Device device() const override { return device_; }

 protected:
  Batch make_batch(const ImageSet& set, const std::vector<int64_t>& indices);

  std::shared_ptr<const Dataset> dataset_;
  torch::Device device_;
  std::shared_ptr<TappedModel> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  Schedule schedule_;
};

// The built-in text scenario (model kind "gpt" on dataset kind "text"): one
// phase, "text", of protocol.epochs_per_phase epochs. The training stream is
// cut into non-overlapping windows of context + 1 bytes; each epoch visits
// them in a seeded order, batch_size windows per batch (max_batches_per_epoch
// of them when set). A batch is (inputs, targets) = (window[0:T], window[1:T+1])
// as (B, T) int64 token ids; the loss is gpt_loss (cross-entropy + z-loss).
// Held-out batches are the held-out stream's windows in order.
class TextScenario : public Scenario {
 public:
  TextScenario(const TrainingConfig& config, std::shared_ptr<const Dataset> dataset);

  torch::nn::Module& model() override { return *model_; }
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }
  torch::Tensor forward(const torch::Tensor& inputs, const Tap& tap) override { return model_->forward(inputs, tap); }
  torch::Tensor loss(const torch::Tensor& outputs, const torch::Tensor& targets) override;
  std::optional<Batch> next_batch() override;
  std::vector<Batch> heldout(int64_t max_samples) override;
  int64_t skip_batches(int64_t n) override;
  int64_t planned_steps() const override { return epochs_ * per_epoch_; }
  std::vector<std::string> phase_names() const override { return {"text"}; }
  int64_t num_classes() const override { return kTextVocab; }
  torch::Device device() const override { return device_; }

 private:
  Batch make_batch(const std::vector<uint8_t>& stream, const std::vector<int64_t>& starts);

  std::shared_ptr<const Dataset> dataset_;
  torch::Device device_;
  std::shared_ptr<TappedModel> model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  int64_t context_, windows_, per_epoch_, epochs_;
  int64_t next_ = 0;                  // batches handed out
  int64_t order_epoch_ = -1;          // the epoch order_ is for
  std::vector<int64_t> order_;        // window indices in this epoch's order
};

// Builds config.scenario: the standard one (with shared_dataset(config.dataset))
// or a registered one.
std::unique_ptr<Scenario> make_scenario(const TrainingConfig& config);
// A built-in model's (GPT, MLP) float32 memory at config, estimated before
// anything is allocated, against what this machine has left: InputError
// naming the fields and the estimate (file "config") when it does not fit.
// make_scenario checks it; a sweep checks each config before a worker gets it.
void check_fits_memory(const TrainingConfig& config);
// config's dataset, loaded (synthetic generation, idx decoding, text) once per
// process and shared read-only by every scenario of the same dataset config:
// a persistent worker pays for it on its first burst only. The 4 most
// recently used are kept. A file changed on disk meanwhile is not reread.
std::shared_ptr<const Dataset> shared_dataset(const DatasetConfig& config);
// The same, sharing a loaded dataset with the standard scenario.
std::unique_ptr<Scenario> make_scenario(const TrainingConfig& config,
                                        std::shared_ptr<const Dataset> dataset);

// Builds (inputs (B, T) int64, targets (B, T) int64) on the CPU from window
// starts into a byte stream: inputs stream[s : s+T], targets stream[s+1 : s+T+1].
std::pair<torch::Tensor, torch::Tensor> gather_text_batch(const std::vector<uint8_t>& stream,
                                                          const std::vector<int64_t>& starts, int64_t context);

// Builds (inputs (B,1,28,28) float32 = pixel/255, targets (B) int64) on the
// CPU from sample indices.
std::pair<torch::Tensor, torch::Tensor> gather_batch(const ImageSet& set,
                                                     const std::vector<int64_t>& indices);

}  // namespace spikehunt
