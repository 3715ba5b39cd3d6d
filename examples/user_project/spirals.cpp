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
    : config_(config),
      steps_per_epoch_(config.max_batches_per_epoch > 0 ? config.max_batches_per_epoch : 30),
      epochs_(config.protocol.epochs_per_phase) {
  make_spirals(config.seed, 300, &points_, &labels_);
  make_spirals(config.seed + 1000003, 100, &test_points_, &test_labels_);
  torch::manual_seed(config.seed);
  net_ = std::make_shared<Net>(config.model.mlp_width);
  optimizer_ = spikehunt::make_optimizer(config.optimizer, net_->parameters());
}

torch::Tensor SpiralsScenario::forward(const torch::Tensor& x, const spikehunt::Tap& tap) {
  const double slope = config_.activation.slope;
  torch::Tensor h = torch::leaky_relu(net_->fc1(x), slope);
  tap("hidden1", h);
  h = torch::leaky_relu(net_->fc2(h), slope);
  tap("hidden2", h);
  torch::Tensor logits = net_->out(h);
  tap("logits", logits);
  return logits;
}

spikehunt::Batch SpiralsScenario::batch_at(int64_t step) const {
  const int64_t n = points_.size(0), b = std::min<int64_t>(config_.batch_size, n);
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

void SpiralsScenario::optimizer_step() {
  // The user's own update rule: linear warm-up of the learning rate.
  // The scenario's own state: updates so far (a checkpoint resumes it through skip_batches()).
  const double lr = config_.optimizer.lr * std::min(1.0, double(++updates_) / 10.0);
  for (auto& group : optimizer_->param_groups()) {
    if (auto* o = dynamic_cast<torch::optim::SGDOptions*>(&group.options())) o->lr(lr);
    if (auto* o = dynamic_cast<torch::optim::AdamOptions*>(&group.options())) o->lr(lr);
    if (auto* o = dynamic_cast<torch::optim::AdamWOptions*>(&group.options())) o->lr(lr);
  }
  optimizer_->step();
}

void register_spirals() {
  spikehunt::register_scenario("spirals", [](const spikehunt::TrainingConfig& c) {
    return std::make_unique<SpiralsScenario>(c);
  });
}
