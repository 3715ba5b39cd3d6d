// fashion.h — a user's own training code on Fashion-MNIST, the way users
// write it: an idx reader of their own (zlib), their own MLP module, their own
// batching and loss, SGD or Adam from the config. One knob, params.bug, plants
// one of the classic bugs below (a declared string parameter, so a typo in its
// value is an error with a suggestion); the doctor's top-ranked cause for each
// is pinned in fashion_bugs_test.cpp.
//   none                healthy
//   lr_units            the learning rate read as "per mille" and multiplied by 1000 (overflow)
//   raw_pixels          the loader forgets to divide by 255
//   softmax_twice       forward returns softmax(logits) and the loss is cross_entropy
//   softmax_in_loss     the loss is cross_entropy(softmax(logits)): softmax twice, inside the loss
//   five_outputs        the output layer has 5 units for 10 classes
//   labels_float        the labels are handed to cross_entropy as float
//   dead_bias           the first layer's bias initialized to -4 (its ReLUs never fire)
//   sharp_log_softmax   a hand-written -log(softmax(logits / 0.02)) without epsilon
//   imbalanced          a filter bug keeps mostly class 0 (86% of the training set)
//   off_by_one_labels   the training labels are read one class off
//   detached_hidden     the first layer's output is detach()ed before the second
//   saturated_sigmoid   sigmoid hidden units with a gate's bias init (-8): saturated at 0
//   deep_sigmoid        eight sigmoid layers
//   blank_image_nan     per-image standardization divides blank images by a zero std
//   head_not_optimized  the optimizer is built over the hidden layers only
// Bugs that were reported publicly, written here as their authors did (the
// source of each in fashion.cpp):
//   functional_dropout      functional dropout after the first layer, on in eval mode too
//   validation_leaves_eval  validation every 20 steps calls eval() and never train()
//   nll_on_softmax          forward returns softmax probabilities, the loss is nll_loss
//   hand_written_softmax    the loss's softmax is exp(x) / sum(exp(x)), no max subtracted
//   labels_all_zero         the labels are looked up by a key that never matches: all 0
//   test_not_normalized     the held-out images are scaled to [0, 1] but not standardized
//   shuffled_apart          images and labels shuffled with two different permutations
//   softmax_over_batch      the output's softmax is taken over dim 0 (the batch)
//   grads_never_zeroed      the step applies the sum of every gradient so far
//   step_never_applied      optimizer_step() steps only the learning-rate scheduler
//   lr_decay_per_batch      a StepLR meant per epoch is stepped every batch
//   head_stepped_in_step    (healthy) the head's optimizer is stepped inside optimizer_step(), undeclared
// Other knobs: params.hidden (units per hidden layer), params.train_images.
#pragma once

#include <spikehunt/spikehunt.h>

struct FashionData {
  torch::Tensor train_x, train_y, test_x, test_y;  // (N, 784) float32 pixels 0..255, (N) int64
};
// The first `train` and `test` images of Debian's Fashion-MNIST (/usr/share/datasets/fashion-mnist).
const FashionData& fashion_data(int64_t train, int64_t test);

class FashionScenario : public spikehunt::Scenario {
 public:
  explicit FashionScenario(const spikehunt::TrainingConfig& config);

  torch::nn::Module& model() override { return *net_; }
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }
  torch::Tensor forward(const torch::Tensor& inputs, const spikehunt::Tap& tap) override;
  torch::Tensor loss(const torch::Tensor& outputs, const torch::Tensor& targets) override;
  std::optional<spikehunt::Batch> next_batch() override;
  std::vector<spikehunt::Batch> heldout(int64_t max_samples) override;
  int64_t planned_steps() const override { return steps_; }
  void optimizer_step() override;
  std::vector<std::string> phase_names() const override { return {"train"}; }

 private:
  struct Net : torch::nn::Module {
    Net(int64_t hidden, int64_t depth, int64_t outputs);
    std::vector<torch::nn::Linear> hidden;
    torch::nn::Linear out{nullptr};
  };
  torch::Tensor prepare(const torch::Tensor& pixels) const;
  void validate();

  std::string bug_;
  torch::Tensor x_, y_, test_x_, test_y_;
  std::shared_ptr<Net> net_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_, head_optimizer_;
  std::unique_ptr<torch::optim::StepLR> scheduler_;
  std::vector<torch::Tensor> gradient_sums_;
  int64_t batch_size_, steps_, step_ = 0;
  torch::Tensor order_;
};

// Registers FashionScenario as "fashion" with its declared params.
void register_fashion();
