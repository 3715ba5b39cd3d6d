#include "scenarios/scenario.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>

#include "scenarios/optimizers.h"

namespace spikehunt {

torch::Tensor Scenario::loss(const torch::Tensor& outputs, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(outputs, targets);
}

int64_t Scenario::skip_batches(int64_t n) {
  int64_t skipped = 0;
  while (skipped < n && next_batch()) ++skipped;
  return skipped;
}

namespace {

// optimizer() and optimizers() default to each other: a scenario overrides one.
struct Resolving {
  explicit Resolving(bool& flag) : flag_(flag) {
    if (flag_) throw std::logic_error("a Scenario must override optimizer() or optimizers()");
    flag_ = true;
  }
  ~Resolving() { flag_ = false; }
  bool& flag_;
};

}  // namespace

torch::optim::Optimizer& Scenario::optimizer() {
  Resolving guard(resolving_);
  const std::vector<NamedOptimizer> all = optimizers();
  if (all.empty() || all.front().optimizer == nullptr) throw std::logic_error("Scenario::optimizers() is empty");
  return *all.front().optimizer;
}

std::vector<NamedOptimizer> Scenario::optimizers() {
  Resolving guard(resolving_);
  return {{"optimizer", &optimizer()}};
}

void Scenario::optimizer_step() {
  for (const NamedOptimizer& o : optimizers()) o.optimizer->step();
}

std::vector<std::vector<std::string>> Scenario::shared_modules() {
  std::vector<std::vector<std::string>> groups;
  std::map<const torch::nn::Module*, size_t> seen;  // module -> its group
  for (const auto& m : model().named_modules("", /*include_self=*/false)) {
    const auto [it, fresh] = seen.emplace(m.value().get(), groups.size());
    if (fresh) groups.push_back({});
    groups[it->second].push_back(m.key());
  }
  groups.erase(std::remove_if(groups.begin(), groups.end(), [](const auto& g) { return g.size() < 2; }), groups.end());
  return groups;
}

namespace {

// Calls m->reset_parameters() when the module is one of the LibTorch classes T...; true if it was.
template <class... T>
bool reset_one_of(torch::nn::Module& module) {
  return ((dynamic_cast<T*>(&module) ? (dynamic_cast<T*>(&module)->reset_parameters(), true) : false) || ...);
}

ModuleOutput output_stats(const std::string& name, const torch::Tensor& t) {
  ModuleOutput o;
  o.name = name;
  if (!t.defined() || !t.is_floating_point() || t.numel() == 0) return o;
  torch::NoGradGuard no_grad;
  const torch::Tensor x = t.detach().to(torch::kFloat64);
  const torch::Tensor finite = torch::isfinite(x);
  o.numel = x.numel();
  o.non_finite = o.numel - finite.sum().item<int64_t>();
  o.nan = torch::isnan(x).sum().item<int64_t>();
  o.pos_inf = torch::isposinf(x).sum().item<int64_t>();
  o.neg_inf = torch::isneginf(x).sum().item<int64_t>();
  const torch::Tensor f = torch::where(finite, x, torch::zeros_like(x));
  const int64_t n = std::max<int64_t>(o.numel - o.non_finite, 1);
  o.rms = std::sqrt(f.square().sum().item<double>() / double(n));
  o.max_abs = f.abs().max().item<double>();
  return o;
}

// Each tap's output, in the order tapped (a tap seen twice keeps its first).
class OutputSink : public TapSink {
 public:
  void on_tap(const char* name, const torch::Tensor& t) override {
    for (const ModuleOutput& o : outputs) {
      if (o.name == name) return;
    }
    outputs.push_back(output_stats(name, t));
  }
  std::vector<ModuleOutput> outputs;
};

}  // namespace

std::vector<std::string> Scenario::reset_parameters() {
  using namespace torch::nn;
  std::vector<std::string> reset;
  torch::NoGradGuard no_grad;
  for (const auto& m : model().named_modules("", /*include_self=*/false)) {
    if (reset_one_of<LinearImpl, BilinearImpl, Conv1dImpl, Conv2dImpl, Conv3dImpl, ConvTranspose1dImpl,
                     ConvTranspose2dImpl, ConvTranspose3dImpl, EmbeddingImpl, BatchNorm1dImpl, BatchNorm2dImpl,
                     BatchNorm3dImpl, InstanceNorm1dImpl, InstanceNorm2dImpl, InstanceNorm3dImpl, LayerNormImpl,
                     GroupNormImpl, RNNImpl, LSTMImpl, GRUImpl>(*m.value())) {
      reset.push_back(m.key());
    }
  }
  return reset;
}

std::vector<ModuleOutput> Scenario::module_outputs(const torch::Tensor& inputs) {
  torch::NoGradGuard no_grad;
  OutputSink sink;
  forward(inputs, Tap(&sink));
  return sink.outputs;
}

std::vector<NamedTensor> Scenario::optimizer_state() {
  const std::vector<NamedOptimizer> all = optimizers();
  std::vector<NamedTensor> out;
  for (const ParamSlot& p : parameter_slots(*this)) {
    if (p.optimizer < 0) continue;
    if (std::optional<ParamState> s = param_state(*all[size_t(p.optimizer)].optimizer, p.tensor)) {
      for (NamedTensor& b : s->buffers) out.push_back({p.name + "." + b.name, std::move(b.tensor)});
    }
  }
  return out;
}

std::vector<NamedTensor> named_parameters(torch::nn::Module& model) {
  std::vector<NamedTensor> out;
  for (const auto& item : model.named_parameters()) out.push_back({item.key(), item.value()});
  return out;
}

}  // namespace spikehunt
