#include "scenarios/scenario.h"

#include <algorithm>
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
