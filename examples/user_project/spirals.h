// spirals.h — a user's own training code: three interleaved 2-D spirals, a
// small MLP with taps, cross-entropy, and an SGD/Adam update with a linear
// learning-rate warm-up (the scenario's own optimizer_step).
#pragma once

#include <spikehunt/spikehunt.h>

class SpiralsScenario : public spikehunt::Scenario {
 public:
  // Reads seed, batch_size, max_batches_per_epoch (steps per epoch),
  // protocol.epochs_per_phase (epochs), activation.slope (leaky ReLU),
  // model.mlp_width and the optimizer from the config.
  explicit SpiralsScenario(const spikehunt::TrainingConfig& config);

  torch::nn::Module& model() override { return *net_; }
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }
  torch::Tensor forward(const torch::Tensor& inputs, const spikehunt::Tap& tap) override;
  std::optional<spikehunt::Batch> next_batch() override;
  std::vector<spikehunt::Batch> heldout(int64_t max_samples) override;
  int64_t planned_steps() const override { return steps_per_epoch_ * epochs_; }
  std::vector<std::string> phase_names() const override { return {"train"}; }
  int64_t num_classes() const override { return 3; }
  void optimizer_step() override;  // warm-up over the first 10 steps, then the config's lr
  // A resumed checkpoint skips the batches before it: the warm-up resumes too.
  int64_t skip_batches(int64_t n) override {
    n = Scenario::skip_batches(n);
    updates_ += n;
    return n;
  }

 private:
  struct Net : torch::nn::Module {
    Net(int64_t width);
    torch::nn::Linear fc1{nullptr}, fc2{nullptr}, out{nullptr};
  };
  spikehunt::Batch batch_at(int64_t step) const;

  spikehunt::TrainingConfig config_;
  torch::Tensor points_, labels_, test_points_, test_labels_;
  std::shared_ptr<Net> net_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  int64_t steps_per_epoch_, epochs_, step_ = 0, updates_ = 0;
};

// Registers SpiralsScenario as "spirals": configs with "scenario": "spirals" train it.
void register_spirals();
