#include "scenarios/planted.h"

#include <algorithm>

#include "base/files.h"

namespace spikehunt {

const std::vector<std::string>& planted_bug_names() {
  static const std::vector<std::string> names = {"healthy",       "detached_logits",        "log_zero_loss",
                                                 "shifted_labels", "imbalanced_majority",   "vanishing_deep_sigmoid",
                                                 "exploding_no_clip", "dead_relu"};
  return names;
}

TrainingConfig planted_config(const std::string& name) {
  const auto& names = planted_bug_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    throw InputError("--planted", "--planted", name, "is not a planted-bug scenario", "choose one of: " + list);
  }
  std::vector<std::string> sets = {"name=planted:" + name,
                                   "model.kind=mlp",
                                   "model.mlp_depth=2",
                                   "model.mlp_width=64",
                                   "activation.kind=relu",
                                   "optimizer.lr=0.05",
                                   "optimizer.momentum=0.9",
                                   "protocol.domains=[[0,1,2,3,4,5,6,7,8,9]]",
                                   "protocol.task_order=[0]",
                                   "protocol.epochs_per_phase=20",
                                   "protocol.relaxation_epochs=0",
                                   "max_batches_per_epoch=0",
                                   "seed=0"};
  if (name == "vanishing_deep_sigmoid") {
    sets.insert(sets.end(), {"model.mlp_depth=10", "activation.kind=sigmoid"});
  } else if (name == "exploding_no_clip") {
    sets.insert(sets.end(), {"model.mlp_depth=6", "model.mlp_width=256", "activation.kind=leaky_relu",
                             "activation.slope=0.2", "optimizer.lr=0.1", "grad_clip=0"});
  }
  return default_config(sets);
}

namespace {

class PlantedScenario : public StandardScenario {
 public:
  PlantedScenario(const std::string& name, const TrainingConfig& c, std::shared_ptr<const Dataset> data)
      : StandardScenario(c, std::move(data)), name_(name) {
    torch::NoGradGuard no_grad;
    if (name_ == "dead_relu") {
      for (auto& p : model_->named_parameters()) {
        if (p.key() == "fc1.bias") p.value().fill_(-10.0);
      }
    } else if (name_ == "exploding_no_clip") {
      for (auto& p : model_->named_parameters()) {
        if (p.value().dim() >= 2) p.value().mul_(3.0);
      }
    }
  }

  torch::Tensor forward(const torch::Tensor& inputs, const Tap& tap) override {
    torch::Tensor logits = StandardScenario::forward(inputs, tap);
    if (name_ == "detached_logits") return logits.detach() + 0.0 * logits;
    return logits;
  }

  torch::Tensor loss(const torch::Tensor& outputs, const torch::Tensor& targets) override {
    if (name_ == "log_zero_loss") {
      const torch::Tensor onehot = torch::one_hot(targets, outputs.size(1)).to(outputs.scalar_type());
      return -(onehot * torch::log(torch::softmax(10.0 * outputs, 1))).sum(1).mean();
    }
    return StandardScenario::loss(outputs, targets);
  }

  std::optional<Batch> next_batch() override {
    std::optional<Batch> b = StandardScenario::next_batch();
    if (b && name_ == "shifted_labels") {
      b->host_targets = (b->host_targets + 1) % num_classes();
      b->targets = b->host_targets.to(device_);
    }
    return b;
  }

 private:
  std::string name_;
};

// 95% class 0: all of its images, and a few of the others.
ImageSet majority_subset(const ImageSet& set) {
  int64_t zeros = 0;
  for (uint8_t y : set.labels) zeros += y == 0;
  const int64_t others = std::max<int64_t>(1, zeros * 5 / 95);
  ImageSet out;
  out.rows = set.rows;
  out.cols = set.cols;
  int64_t kept_others = 0;
  for (int64_t i = 0; i < set.size(); ++i) {
    const bool keep = set.labels[i] == 0 || kept_others < others;
    if (!keep) continue;
    kept_others += set.labels[i] != 0;
    out.labels.push_back(set.labels[i]);
    out.images.insert(out.images.end(), set.images.begin() + i * 784, set.images.begin() + (i + 1) * 784);
  }
  return out;
}

}  // namespace

std::unique_ptr<Scenario> make_planted_scenario(const std::string& name) {
  const TrainingConfig c = planted_config(name);
  auto data = std::make_shared<Dataset>(load_dataset(c.dataset));
  if (name == "imbalanced_majority") {
    data->train = majority_subset(data->train);
    data->test = majority_subset(data->test);
  }
  return std::make_unique<PlantedScenario>(name, c, std::move(data));
}

}  // namespace spikehunt
