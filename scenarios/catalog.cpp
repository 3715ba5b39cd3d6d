#include "scenarios/catalog.h"

#include <cxxabi.h>

#include <algorithm>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <typeinfo>

#include "base/error.h"
#include "base/rng.h"
#include "scenarios/config.h"
#include "scenarios/models.h"
#include "scenarios/protocol.h"

namespace spikehunt {

// ---- devices ----

torch::Device resolve_device(DeviceKind kind) {
  if (kind == DeviceKind::kCpu) return torch::kCPU;
  if (!torch::cuda::is_available()) {
    throw InputError("config", "device", "\"cuda\"",
                     "is not available: this LibTorch has no CUDA or no GPU is visible",
                     "use \"device\": \"cpu\", or build against a CUDA LibTorch (docs/benchmarks.md, \"On a GPU\")");
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
    : dataset_(std::move(dataset)),
      device_(resolve_device(config.device)),
      model_(make_model(config)),
      schedule_(config.protocol, dataset_->train.labels, config.batch_size, config.max_batches_per_epoch,
                config.seed) {
  bind_config(config);
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
  const int64_t batch_size = config().batch_size;
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    std::vector<int64_t> indices;
    for (int64_t i = begin; i < std::min(n, begin + batch_size); ++i) indices.push_back(i);
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

// ---- the text scenario ----

std::pair<torch::Tensor, torch::Tensor> gather_text_batch(const std::vector<uint8_t>& stream,
                                                          const std::vector<int64_t>& starts, int64_t context) {
  const int64_t b = int64_t(starts.size());
  torch::Tensor x = torch::empty({b, context}, torch::kInt64);
  torch::Tensor y = torch::empty({b, context}, torch::kInt64);
  int64_t* xp = x.data_ptr<int64_t>();
  int64_t* yp = y.data_ptr<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    const uint8_t* src = stream.data() + starts[size_t(i)];
    for (int64_t k = 0; k < context; ++k) {
      xp[i * context + k] = src[k];
      yp[i * context + k] = src[k + 1];
    }
  }
  return {x, y};
}

TextScenario::TextScenario(const TrainingConfig& config, std::shared_ptr<const Dataset> dataset)
    : dataset_(std::move(dataset)),
      device_(resolve_device(config.device)),
      model_(make_model(config)),
      context_(config.model.gpt.context),
      windows_((int64_t(dataset_->text.train.size()) - 1) / config.model.gpt.context),
      per_epoch_(windows_ / config.batch_size),
      epochs_(config.protocol.epochs_per_phase) {
  bind_config(config);
  if (per_epoch_ < 1) {
    throw InputError(dataset_->source, "batch_size", std::to_string(config.batch_size),
                     "is more than the " + std::to_string(windows_) + " windows of " + std::to_string(context_ + 1) +
                         " bytes in the training text",
                     "use a smaller batch_size or model.gpt.context, or more text");
  }
  if (config.max_batches_per_epoch > 0) per_epoch_ = std::min(per_epoch_, config.max_batches_per_epoch);
  model_->to(device_);
  optimizer_ = make_optimizer(config.optimizer, model_->parameters());
}

torch::Tensor TextScenario::loss(const torch::Tensor& outputs, const torch::Tensor& targets) {
  return gpt_loss(outputs, targets, config().model.gpt.z_loss);
}

Batch TextScenario::make_batch(const std::vector<uint8_t>& stream, const std::vector<int64_t>& starts) {
  Batch b;
  std::tie(b.host_inputs, b.host_targets) = gather_text_batch(stream, starts, context_);
  b.inputs = b.host_inputs.to(device_);
  b.targets = b.host_targets.to(device_);
  return b;
}

std::optional<Batch> TextScenario::next_batch() {
  if (next_ >= planned_steps()) return std::nullopt;
  const int64_t epoch = next_ / per_epoch_, batch = next_ % per_epoch_;
  if (epoch != order_epoch_) {
    order_.resize(size_t(windows_));
    for (int64_t i = 0; i < windows_; ++i) order_[size_t(i)] = i;
    Rng rng(config().seed, uint64_t(epoch) + 1);
    shuffle(order_, rng);
    order_epoch_ = epoch;
  }
  const int64_t bs = config().batch_size;
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < bs; ++i) starts.push_back(order_[size_t(batch * bs + i)] * context_);
  Batch b = make_batch(dataset_->text.train, starts);
  b.step = next_++;
  b.phase = 0;
  b.epoch = epoch;
  b.batch = batch;
  return b;
}

std::vector<Batch> TextScenario::heldout(int64_t max_samples) {
  std::vector<Batch> out;
  const int64_t windows = std::min<int64_t>(max_samples, (int64_t(dataset_->text.heldout.size()) - 1) / context_);
  const int64_t bs = config().batch_size;
  for (int64_t begin = 0; begin < windows; begin += bs) {
    std::vector<int64_t> starts;
    for (int64_t i = begin; i < std::min(windows, begin + bs); ++i) starts.push_back(i * context_);
    out.push_back(make_batch(dataset_->text.heldout, starts));
  }
  return out;
}

int64_t TextScenario::skip_batches(int64_t n) {
  const int64_t skipped = std::max<int64_t>(0, std::min(n, planned_steps() - next_));
  next_ += skipped;
  return skipped;
}

namespace {

// The bytes this process may still take (MemAvailable), or 0 when unknown.
double available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(1 << 30));
  return text;
}

// A built-in model's float32 memory at its config, estimated before anything is allocated:
// parameters with their gradients and two optimizer buffers each (Adam's; SGD's momentum takes
// one), and the activations a step keeps for backward (a GPT block's per token ~34 x width floats
// plus its attention scores, Korthikanti et al. 2022; an MLP layer's ~3 x width a sample). A config
// in range whose estimate is past what the machine has left is bad input naming its fields, instead
// of an allocation that fails deep in LibTorch (or the machine swapping).
void fits_memory(const TrainingConfig& c) {
  if (c.device != DeviceKind::kCpu) return;  // a GPU's memory is the device's: LibTorch says it
  double params = 0, activations = 0;
  std::string fields;
  const double batch = double(c.batch_size);
  if (c.model.kind == "gpt") {
    const GptConfig& g = c.model.gpt;
    const double d = double(g.width), layers = double(g.layers), t = double(g.context), v = double(kTextVocab);
    params = v * d * (g.tied_embeddings ? 1 : 2) + t * d + layers * (12 * d * d + 13 * d) + 2 * d;
    activations = batch * t * (layers * (34 * d + 5 * double(g.heads) * t) + 2 * v);
    fields = "model.gpt.width = " + std::to_string(g.width) + ", model.gpt.layers = " + std::to_string(g.layers) +
             ", model.gpt.context = " + std::to_string(g.context) + " and batch_size = " + std::to_string(c.batch_size);
  } else if (c.model.kind == "mlp") {
    const double w = double(c.model.mlp_width), depth = double(c.model.mlp_depth), in = 3 * 32 * 32;
    params = in * w + (depth - 1) * (w * w + w) + w * 10;
    activations = batch * (in + 3 * w * depth);
    fields = "model.mlp_width = " + std::to_string(c.model.mlp_width) + ", model.mlp_depth = " +
             std::to_string(c.model.mlp_depth) + " and batch_size = " + std::to_string(c.batch_size);
  } else {
    return;  // the small CNN's size is fixed but for its batch, bounded by the config's range
  }
  const double state = 4 * 4 * params, kept = 4 * activations;
  const double available = available_bytes();
  if (available <= 0 || state + kept <= available) return;
  throw InputError("config", c.model.kind == "gpt" ? "model.gpt" : "model", "",
                   "with " + fields + " the model needs about " + gib(state + kept) + " (" + gib(state) +
                       " for its parameters, gradients and optimizer state, " + gib(kept) +
                       " of activations a step) and this machine has " + gib(available) + " available",
                   "make the model or the batch smaller (the estimate is float32, before anything was allocated)");
}

}  // namespace

void check_fits_memory(const TrainingConfig& config) {
  if (config.scenario == "standard") fits_memory(config);
}

std::unique_ptr<Scenario> make_scenario(const TrainingConfig& config,
                                        std::shared_ptr<const Dataset> dataset) {
  check_fits_memory(config);
  if (config.scenario == "standard" && config.dataset.kind == DatasetKind::kText) {
    return std::make_unique<TextScenario>(config, std::move(dataset));
  }
  if (config.scenario == "standard") return std::make_unique<StandardScenario>(config, std::move(dataset));
  return make_scenario(config);
}

std::shared_ptr<const Dataset> shared_dataset(const DatasetConfig& config) {
  // Keyed by the dataset's whole config (kind, paths, sizes, seed); the few
  // most recent kept, so a worker's memory stays bounded.
  constexpr size_t kKept = 4;
  static std::mutex mutex;
  static std::vector<std::pair<std::string, std::shared_ptr<const Dataset>>> kept;
  TrainingConfig holder;
  holder.dataset = config;
  const std::string key = config_to_json(holder)["dataset"].dump();
  std::lock_guard<std::mutex> lock(mutex);
  for (size_t i = 0; i < kept.size(); ++i) {
    if (kept[i].first != key) continue;
    std::rotate(kept.begin(), kept.begin() + long(i), kept.begin() + long(i) + 1);  // most recent first
    return kept.front().second;
  }
  auto dataset = std::make_shared<const Dataset>(load_dataset(config));
  kept.insert(kept.begin(), {key, dataset});
  if (kept.size() > kKept) kept.pop_back();
  return dataset;
}

namespace {

std::string demangled(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

}  // namespace

std::unique_ptr<Scenario> make_scenario(const TrainingConfig& config) {
  if (config.scenario == "standard") return make_scenario(config, shared_dataset(config.dataset));
  const ScenarioMaker make = scenario_maker(config.scenario);
  if (!make) {
    throw InputError("config", "scenario", "\"" + config.scenario + "\"", "is not registered in this program",
                     "register it with spikehunt::register_scenario() before running");
  }
  std::unique_ptr<Scenario> s = make(config);
  if (!s) throw std::logic_error("the maker of scenario \"" + config.scenario + "\" returned no scenario");
  s->bind_config(config);
  set_scenario_class(config.scenario, demangled(typeid(*s).name()));
  return s;
}

}  // namespace spikehunt
