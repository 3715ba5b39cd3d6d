#include "scenarios/catalog.h"

#include <c10/util/string_utils.h>

#include <map>

#include "scenarios/models.h"
#include "scenarios/protocol.h"

namespace spikehunt {

// ---- Scenario defaults ----

torch::Tensor Scenario::loss(const torch::Tensor& outputs, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(outputs, targets);
}

int64_t Scenario::skip_batches(int64_t n) {
  int64_t skipped = 0;
  while (skipped < n && next_batch()) ++skipped;
  return skipped;
}

std::vector<NamedTensor> Scenario::optimizer_state() {
  return optimizer_state_of(optimizer(), named_parameters(model()));
}

std::vector<NamedTensor> named_parameters(torch::nn::Module& model) {
  std::vector<NamedTensor> out;
  for (const auto& item : model.named_parameters()) out.push_back({item.key(), item.value()});
  return out;
}

namespace {

// Adam and AdamW keep the same moments in unrelated state types.
template <class AdamState>
bool add_moments(torch::optim::OptimizerParamState* state, const std::string& name, std::vector<NamedTensor>* out) {
  auto* a = dynamic_cast<AdamState*>(state);
  if (a == nullptr) return false;
  out->push_back({name + ".exp_avg", a->exp_avg()});
  out->push_back({name + ".exp_avg_sq", a->exp_avg_sq()});
  if (a->max_exp_avg_sq().defined()) out->push_back({name + ".max_exp_avg_sq", a->max_exp_avg_sq()});
  return true;
}

}  // namespace

std::vector<NamedTensor> optimizer_state_of(torch::optim::Optimizer& optimizer,
                                            const std::vector<NamedTensor>& params) {
  std::vector<NamedTensor> out;
  auto& state = optimizer.state();
  for (const NamedTensor& p : params) {
    auto it = state.find(c10::guts::to_string(p.tensor.unsafeGetTensorImpl()));
    if (it == state.end()) continue;
    if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
      if (s->momentum_buffer().defined()) out.push_back({p.name + ".momentum_buffer", s->momentum_buffer()});
    } else if (!add_moments<torch::optim::AdamParamState>(it->second.get(), p.name, &out)) {
      add_moments<torch::optim::AdamWParamState>(it->second.get(), p.name, &out);
    }
  }
  return out;
}

// ---- optimizers and devices ----

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& o,
                                                        std::vector<torch::Tensor> params) {
  switch (o.kind) {
    case OptimizerKind::kSgd:
      return std::make_unique<torch::optim::SGD>(
          std::move(params), torch::optim::SGDOptions(o.lr)
                                 .momentum(o.momentum)
                                 .nesterov(o.nesterov)
                                 .weight_decay(o.weight_decay));
    case OptimizerKind::kAdam:
      return std::make_unique<torch::optim::Adam>(
          std::move(params), torch::optim::AdamOptions(o.lr)
                                 .betas({o.betas[0], o.betas[1]})
                                 .eps(o.eps)
                                 .weight_decay(o.weight_decay));
    case OptimizerKind::kAdamW:
      return std::make_unique<torch::optim::AdamW>(
          std::move(params), torch::optim::AdamWOptions(o.lr)
                                 .betas({o.betas[0], o.betas[1]})
                                 .eps(o.eps)
                                 .weight_decay(o.weight_decay));
  }
  throw std::logic_error("unknown optimizer kind");
}

torch::Device resolve_device(DeviceKind kind) {
  if (kind == DeviceKind::kCpu) return torch::kCPU;
  if (!torch::cuda::is_available()) {
    throw InputError("config", "device", "\"cuda\"",
                     "is not available: this LibTorch has no CUDA or no GPU is visible",
                     "use \"device\": \"cpu\", or build against a CUDA LibTorch (README: GPU)");
  }
  return torch::Device(torch::kCUDA, 0);
}

std::pair<torch::Tensor, torch::Tensor> gather_batch(const ImageSet& set,
                                                     const std::vector<int64_t>& indices) {
  const int64_t b = static_cast<int64_t>(indices.size());
  const int64_t pixels = set.rows * set.cols;
  torch::Tensor x = torch::empty({b, 1, set.rows, set.cols}, torch::kFloat32);
  torch::Tensor y = torch::empty({b}, torch::kInt64);
  float* xp = x.data_ptr<float>();
  int64_t* yp = y.data_ptr<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    const uint8_t* src = set.images.data() + indices[i] * pixels;
    for (int64_t k = 0; k < pixels; ++k) xp[i * pixels + k] = static_cast<float>(src[k]) / 255.0f;
    yp[i] = set.labels[indices[i]];
  }
  return {x, y};
}

// ---- the built-in scenario ----

StandardScenario::StandardScenario(const TrainingConfig& config, std::shared_ptr<const Dataset> dataset)
    : config_(config),
      dataset_(std::move(dataset)),
      device_(resolve_device(config.device)),
      model_(make_model(config)),
      schedule_(config.protocol, dataset_->train.labels, config.batch_size, config.max_batches_per_epoch,
                config.seed) {
  model_->to(device_);
  optimizer_ = make_optimizer(config.optimizer, model_->parameters());
}

Batch StandardScenario::make_batch(const ImageSet& set, const std::vector<int64_t>& indices) {
  Batch b;
  std::tie(b.host_inputs, b.host_targets) = gather_batch(set, indices);
  b.inputs = b.host_inputs.to(device_);
  b.targets = b.host_targets.to(device_);
  return b;
}

std::optional<Batch> StandardScenario::next_batch() {
  std::optional<Slot> slot = schedule_.next();
  if (!slot) return std::nullopt;
  Batch b = make_batch(dataset_->train, slot->indices);
  b.step = slot->step;
  b.phase = slot->phase;
  b.epoch = slot->epoch;
  b.batch = slot->batch;
  return b;
}

std::vector<Batch> StandardScenario::heldout(int64_t max_samples) {
  std::vector<Batch> out;
  const int64_t n = std::min<int64_t>(max_samples, dataset_->test.size());
  for (int64_t begin = 0; begin < n; begin += config_.batch_size) {
    std::vector<int64_t> indices;
    for (int64_t i = begin; i < std::min(n, begin + config_.batch_size); ++i) indices.push_back(i);
    out.push_back(make_batch(dataset_->test, indices));
  }
  return out;
}

int64_t StandardScenario::skip_batches(int64_t n) {  // the schedule alone: no batch tensors built
  int64_t skipped = 0;
  while (skipped < n && schedule_.next()) ++skipped;
  return skipped;
}

std::vector<std::string> StandardScenario::phase_names() const {
  std::vector<std::string> names;
  for (const Phase& p : schedule_.phases()) names.push_back(p.name);
  return names;
}

namespace {

std::map<std::string, ScenarioMaker>& registry() {
  static std::map<std::string, ScenarioMaker> makers;
  return makers;
}

}  // namespace

void register_scenario(const std::string& name, ScenarioMaker make) {
  if (name == "standard" || name.empty()) throw std::invalid_argument("register_scenario: \"" + name + "\" is reserved");
  registry()[name] = std::move(make);
  add_scenario_name(name);
}

std::unique_ptr<Scenario> make_scenario(const TrainingConfig& config,
                                        std::shared_ptr<const Dataset> dataset) {
  if (config.scenario == "standard") return std::make_unique<StandardScenario>(config, std::move(dataset));
  return make_scenario(config);
}

std::unique_ptr<Scenario> make_scenario(const TrainingConfig& config) {
  if (config.scenario == "standard") {
    return make_scenario(config, std::make_shared<const Dataset>(load_dataset(config.dataset)));
  }
  auto it = registry().find(config.scenario);
  if (it == registry().end()) {
    throw InputError("config", "scenario", "\"" + config.scenario + "\"", "is not registered in this program",
                     "register it with spikehunt::register_scenario() before running");
  }
  return it->second(config);
}

}  // namespace spikehunt
