// spirals.h — a user's own training code: three interleaved 2-D spirals, a
// small MLP with taps, a cross-entropy with label smoothing of its own, and
// two optimizers: the config's optimizer for the hidden layers ("body") and
// Adam for the output layer ("head"). Its knobs are declared params
// (register_spirals), the learning-rate schedule and gradient accumulation
// come from the config and are applied by the harness.
#pragma once

#include <spikehunt/spikehunt.h>

class SpiralsScenario : public spikehunt::Scenario {
 public:
  // Reads seed, batch_size, max_batches_per_epoch (steps per epoch),
  // protocol.epochs_per_phase (epochs), activation.slope (leaky ReLU), the
  // optimizer, and params.width, params.label_smoothing, params.head_lr.
  explicit SpiralsScenario(const spikehunt::TrainingConfig& config);

  torch::nn::Module& model() override { return *net_; }
  std::vector<spikehunt::NamedOptimizer> optimizers() override {
    return {{"body", body_.get()}, {"head", head_.get()}};
  }
  torch::Tensor forward(const torch::Tensor& inputs, const spikehunt::Tap& tap) override;
  torch::Tensor loss(const torch::Tensor& outputs, const torch::Tensor& targets) override;
  std::optional<spikehunt::Batch> next_batch() override;
  std::vector<spikehunt::Batch> heldout(int64_t max_samples) override;
  int64_t planned_steps() const override { return steps_per_epoch_ * epochs_; }
  std::vector<std::string> phase_names() const override { return {"train"}; }
  int64_t num_classes() const override { return 3; }

 private:
  struct Net : torch::nn::Module {
    Net(int64_t width);
    torch::nn::Linear fc1{nullptr}, fc2{nullptr}, out{nullptr};
  };
  spikehunt::Batch batch_at(int64_t step) const;

  torch::Tensor points_, labels_, test_points_, test_labels_;
  std::shared_ptr<Net> net_;
  std::unique_ptr<torch::optim::Optimizer> body_, head_;
  double slope_, smoothing_;
  int64_t steps_per_epoch_, epochs_, step_ = 0;
};

// Registers SpiralsScenario as "spirals" with its declared params:
// configs with "scenario": "spirals" train it.
void register_spirals();
