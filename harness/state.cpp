#include "harness/state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/string_utils.h>

#include <map>
#include <memory>
#include <optional>
#include <mutex>

#include "scenarios/error.h"

namespace spikehunt {

namespace {

std::string shape_text(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
  return s + "]";
}

std::string key_of(const torch::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

// Adam and AdamW keep the same state in unrelated types.
template <class AdamState>
std::optional<int64_t> adam_step(torch::optim::OptimizerParamState* state) {
  auto* a = dynamic_cast<AdamState*>(state);
  return a ? std::optional<int64_t>(a->step()) : std::nullopt;
}

template <class AdamState>
std::unique_ptr<torch::optim::OptimizerParamState> adam_state(const torch::Tensor& avg, const torch::Tensor& sq,
                                                              const torch::Tensor& max, int64_t step) {
  auto s = std::make_unique<AdamState>();
  s->exp_avg(avg).exp_avg_sq(sq).step(step);
  if (max.defined()) s->max_exp_avg_sq(max);
  return s;
}

}  // namespace

std::vector<NamedTensor> capture_state(Scenario& scenario) {
  torch::NoGradGuard no_grad;
  std::vector<NamedTensor> out;
  torch::nn::Module& model = scenario.model();
  for (const auto& p : model.named_parameters()) out.push_back({"model." + p.key(), p.value().detach().clone()});
  for (const auto& b : model.named_buffers()) out.push_back({"model." + b.key(), b.value().detach().clone()});
  for (const NamedTensor& s : optimizer_state_of(scenario.optimizer(), named_parameters(model))) {
    out.push_back({"optim." + s.name, s.tensor.detach().clone()});
  }
  auto& state = scenario.optimizer().state();
  for (const auto& p : model.named_parameters()) {  // Adam's step counts
    auto it = state.find(key_of(p.value()));
    if (it == state.end()) continue;
    std::optional<int64_t> step = adam_step<torch::optim::AdamParamState>(it->second.get());
    if (!step) step = adam_step<torch::optim::AdamWParamState>(it->second.get());
    if (step) out.push_back({"optim." + p.key() + ".step", torch::tensor(*step, torch::kInt64)});
  }
  out.push_back({"rng.cpu", at::detail::getDefaultCPUGenerator().get_state()});
  return out;
}
void restore_state(Scenario& scenario, const std::vector<NamedTensor>& tensors, const std::string& source) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> by_name;
  for (const NamedTensor& t : tensors) by_name[t.name] = t.tensor;
  auto take = [&](const std::string& name) -> torch::Tensor {
    auto it = by_name.find(name);
    if (it == by_name.end()) return {};
    torch::Tensor t = it->second;
    by_name.erase(it);
    return t;
  };
  auto require = [&](const std::string& name, const torch::Tensor& like) {
    torch::Tensor t = take(name);
    if (!t.defined()) {
      throw InputError(source, name, "", "is missing", "the checkpoint belongs to another model or config");
    }
    if (t.sizes() != like.sizes()) {
      throw InputError(source, name, shape_text(t), "does not match the model's " + shape_text(like));
    }
    return t.to(like.device(), like.scalar_type());
  };
  torch::nn::Module& model = scenario.model();
  for (const auto& p : model.named_parameters()) p.value().copy_(require("model." + p.key(), p.value()));
  for (const auto& b : model.named_buffers()) b.value().copy_(require("model." + b.key(), b.value()));

  torch::optim::Optimizer& optimizer = scenario.optimizer();
  auto& state = optimizer.state();
  state.clear();
  const bool sgd = dynamic_cast<torch::optim::SGD*>(&optimizer) != nullptr;
  const bool adam = dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr;
  const bool adamw = dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr;
  for (const auto& p : model.named_parameters()) {
    const std::string prefix = "optim." + p.key() + ".";
    const torch::Tensor& param = p.value();
    auto buffer = [&](const char* name) {
      return by_name.count(prefix + name) ? require(prefix + name, param) : torch::Tensor();
    };
    if (sgd) {
      torch::Tensor m = buffer("momentum_buffer");
      if (!m.defined()) continue;
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(m);
      state[key_of(param)] = std::move(s);
    } else if (adam || adamw) {
      torch::Tensor avg = buffer("exp_avg"), sq = buffer("exp_avg_sq"), mx = buffer("max_exp_avg_sq");
      torch::Tensor step = take(prefix + "step");
      if (!avg.defined()) continue;
      if (!sq.defined() || !step.defined() || step.numel() != 1) {
        throw InputError(source, prefix + "exp_avg_sq / step", "", "is missing beside " + prefix + "exp_avg");
      }
      const int64_t n = step.to(torch::kCPU).to(torch::kInt64).item<int64_t>();
      state[key_of(param)] = adam ? adam_state<torch::optim::AdamParamState>(avg, sq, mx, n)
                                  : adam_state<torch::optim::AdamWParamState>(avg, sq, mx, n);
    }
  }
  if (torch::Tensor rng = take("rng.cpu"); rng.defined()) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng.to(torch::kCPU).to(torch::kUInt8).contiguous());
  }
  if (!by_name.empty()) {
    throw InputError(source, by_name.begin()->first, "", "is not part of this model or optimizer",
                     "the checkpoint belongs to another model or config");
  }
}

}  // namespace spikehunt
