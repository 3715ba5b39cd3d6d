#include "spirals.h"

#include <cmath>
#include <random>

namespace {

// n points per class of three spiral arms with a little noise, from `seed`.
void make_spirals(uint64_t seed, int64_t per_class, torch::Tensor* points, torch::Tensor* labels) {
  std::mt19937_64 rng(seed);
  auto uniform = [&rng] { return double(rng() >> 11) * 0x1.0p-53; };  // the same on every platform
  *points = torch::empty({3 * per_class, 2});
  *labels = torch::empty({3 * per_class}, torch::kInt64);
  auto p = points->accessor<float, 2>();
  auto l = labels->accessor<int64_t, 1>();
  for (int64_t k = 0; k < 3; ++k) {
    for (int64_t i = 0; i < per_class; ++i) {
      const double t = double(i) / double(per_class), theta = 2.0944 * double(k) + 4.0 * t + 0.25 * (uniform() - 0.5);
      const int64_t row = k * per_class + i;
      p[row][0] = float(t * std::cos(theta));
      p[row][1] = float(t * std::sin(theta));
      l[row] = k;
    }
  }
  // One fixed shuffle, so batches mix the classes.
  std::vector<int64_t> order(size_t(3 * per_class));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[size_t(rng() % (i + 1))]);
  const torch::Tensor index = torch::tensor(order, torch::kInt64);
  *points = points->index_select(0, index).contiguous();
  *labels = labels->index_select(0, index).contiguous();
}

}  // namespace

SpiralsScenario::Net::Net(int64_t width) {
  fc1 = register_module("fc1", torch::nn::Linear(2, width));
  fc2 = register_module("fc2", torch::nn::Linear(width, width));
  out = register_module("out", torch::nn::Linear(width, 3));
}

SpiralsScenario::SpiralsScenario(const spikehunt::TrainingConfig& config)
    : slope_(config.activation.slope),
      smoothing_(config.params.number("label_smoothing")),
      steps_per_epoch_(config.max_batches_per_epoch > 0 ? config.max_batches_per_epoch : 30),
      epochs_(config.protocol.epochs_per_phase) {
  bind_config(config);  // next_batch() reads batch_size from config()
  make_spirals(config.seed, 300, &points_, &labels_);
  make_spirals(config.seed + 1000003, 100, &test_points_, &test_labels_);
  torch::manual_seed(config.seed);
  net_ = std::make_shared<Net>(config.params.integer("width"));
  std::vector<torch::Tensor> hidden = net_->fc1->parameters();
  for (const torch::Tensor& p : net_->fc2->parameters()) hidden.push_back(p);
  body_ = spikehunt::make_optimizer(config.optimizer, hidden);
  head_ = std::make_unique<torch::optim::Adam>(net_->out->parameters(),
                                               torch::optim::AdamOptions(config.params.number("head_lr")));
}

torch::Tensor SpiralsScenario::forward(const torch::Tensor& x, const spikehunt::Tap& tap) {
  torch::Tensor h = torch::leaky_relu(net_->fc1(x), slope_);
  tap("hidden1", h);
  h = torch::leaky_relu(net_->fc2(h), slope_);
  tap("hidden2", h);
  torch::Tensor logits = net_->out(h);
  tap("logits", logits);
  return logits;
}

// Cross-entropy against labels smoothed toward the uniform distribution.
torch::Tensor SpiralsScenario::loss(const torch::Tensor& outputs, const torch::Tensor& targets) {
  const torch::Tensor logp = torch::log_softmax(outputs, 1);
  const torch::Tensor nll = -logp.gather(1, targets.unsqueeze(1)).squeeze(1);
  return ((1 - smoothing_) * nll - smoothing_ * logp.mean(1)).mean();
}

spikehunt::Batch SpiralsScenario::batch_at(int64_t step) const {
  const int64_t n = points_.size(0), b = std::min<int64_t>(config().batch_size, n);
  const int64_t start = (step * b) % (n - b + 1);
  spikehunt::Batch batch;
  batch.inputs = points_.narrow(0, start, b);
  batch.targets = labels_.narrow(0, start, b);
  batch.step = step;
  batch.epoch = step / steps_per_epoch_;
  batch.batch = step % steps_per_epoch_;
  return batch;
}

std::optional<spikehunt::Batch> SpiralsScenario::next_batch() {
  if (step_ >= planned_steps()) return std::nullopt;
  return batch_at(step_++);
}

std::vector<spikehunt::Batch> SpiralsScenario::heldout(int64_t max_samples) {
  spikehunt::Batch batch;
  const int64_t n = std::min<int64_t>(max_samples, test_points_.size(0));
  batch.inputs = test_points_.narrow(0, 0, n);
  batch.targets = test_labels_.narrow(0, 0, n);
  return {batch};
}

void register_spirals() {
  using spikehunt::ParamSpec;
  spikehunt::register_scenario(
      "spirals", [](const spikehunt::TrainingConfig& c) { return std::make_unique<SpiralsScenario>(c); },
      {ParamSpec::integer("width", 64, 4, 1024, "units in each of the two hidden layers"),
       ParamSpec::number("label_smoothing", 0.0, 0.0, 0.5, "share of each label spread over all classes"),
       ParamSpec::number("head_lr", 0.01, 1e-6, 10.0, "Adam's learning rate for the output layer")});
}
