#include "harness/state.h"
#include "harness/state_buffers.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <mutex>

#include "base/error.h"
#include "scenarios/optimizers.h"

namespace spikehunt {

namespace {

std::string shape_text(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace

namespace {

// Calls copy(name, live tensor) for each of the state's tensors in capture_state's
// order, and keep(name, value) for the values made fresh each time (step counts, RNG).
template <class Copy, class Keep>
void visit_state(Scenario& scenario, Copy&& copy, Keep&& keep) {
  torch::NoGradGuard no_grad;
  // The parameters in the model's order, each with its optimizer: one walk of the model's tree.
  const std::vector<ParamSlot> slots = parameter_slots(scenario);
  for (const ParamSlot& p : slots) copy("model." + p.name, p.tensor.detach());
  for (const auto& b : scenario.model().named_buffers()) copy("model." + b.key(), b.value().detach());
  const std::vector<NamedOptimizer> optimizers = scenario.optimizers();
  for (const NamedOptimizer& o : optimizers) {
    // The C++ state first: a Python optimizer keeps none there, and naming its buffers walks its state.
    if (!o.optimizer->state().empty() && state_buffer_names(*o.optimizer).empty()) {
      throw std::logic_error("optimizer \"" + o.name + "\" is of a type whose state spikehunt cannot checkpoint "
                             "(SGD, Adam, AdamW, RMSprop and Adagrad it can): run without checkpoints");
    }
  }
  std::vector<NamedTensor> steps;
  for (const ParamSlot& p : slots) {
    if (p.optimizer < 0) continue;
    std::optional<ParamState> s = param_state(*optimizers[size_t(p.optimizer)].optimizer, p.tensor);
    if (!s) continue;
    for (const NamedTensor& b : s->buffers) copy("optim." + p.name + "." + b.name, b.tensor.detach());
    if (s->step) steps.push_back({"optim." + p.name + ".step", torch::tensor(*s->step, torch::kInt64)});
    else if (s->step_tensor.defined()) steps.push_back({"optim." + p.name + ".step", s->step_tensor.to(torch::kInt64).reshape({})});
  }
  for (NamedTensor& t : steps) keep(std::move(t.name), std::move(t.tensor));  // Adam's step counts after the buffers
  keep("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
}

}  // namespace

std::vector<NamedTensor> capture_state(Scenario& scenario) {
  std::vector<NamedTensor> out;
  visit_state(
      scenario, [&](std::string name, const torch::Tensor& t) { out.push_back({std::move(name), t.clone()}); },
      [&](std::string name, torch::Tensor t) { out.push_back({std::move(name), std::move(t)}); });
  return out;
}

bool holds_copy_of(const torch::Tensor& buffer, const torch::Tensor& t) {
  return buffer.defined() && buffer.sizes() == t.sizes() && buffer.dtype() == t.dtype() && buffer.device() == t.device() &&
         buffer.is_contiguous();
}

size_t capture_state_into(Scenario& scenario, std::vector<NamedTensor>& into, std::vector<StateCopy>* ready) {
  std::vector<NamedTensor> old = std::move(into);
  into.clear();
  size_t i = 0, taken = 0;
  auto reusable = [&](const std::string& name, const torch::Tensor& t) -> torch::Tensor {
    if (i < old.size() && old[i].name == name && holds_copy_of(old[i].tensor, t)) return old[i].tensor;
    return {};
  };
  // The copies ahead come in the order the state is visited: look after the last one found first.
  size_t cursor = 0;
  auto copied_ahead = [&](const std::string& name) -> StateCopy* {
    if (ready == nullptr) return nullptr;
    if (cursor < ready->size() && (*ready)[cursor].name == name) return &(*ready)[cursor++];
    const auto it = std::find_if(ready->begin(), ready->end(), [&](const StateCopy& c) { return c.name == name; });
    if (it == ready->end()) return nullptr;
    cursor = size_t(it - ready->begin()) + 1;
    return &*it;
  };
  visit_state(
      scenario,
      [&](std::string name, const torch::Tensor& t) {
        torch::Tensor buffer = reusable(name, t);
        StateCopy* ahead = copied_ahead(name);
        if (ahead != nullptr && ahead->source == t.data_ptr() && ahead->version == int64_t(t._version()) &&
            holds_copy_of(ahead->copy, t)) {
          StateCopy& c = *ahead;  // copied ahead and still the tensor's value: swap buffers
          into.push_back({std::move(name), c.copy});
          c.copy = buffer;
          c.source = nullptr;
          c.version = -1;
          ++taken;
        } else {
          into.push_back({std::move(name), buffer.defined() ? buffer.copy_(t) : t.clone()});
        }
        ++i;
      },
      [&](std::string name, torch::Tensor t) {
        into.push_back({std::move(name), std::move(t)});
        ++i;
      });
  return taken;
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

  const std::vector<NamedOptimizer> optimizers = scenario.optimizers();
  for (const NamedOptimizer& o : optimizers) clear_param_states(*o.optimizer);
  for (const ParamSlot& p : parameter_slots(scenario)) {
    if (p.optimizer < 0) continue;
    torch::optim::Optimizer& optimizer = *optimizers[size_t(p.optimizer)].optimizer;
    const std::string prefix = "optim." + p.name + ".";
    ParamState state;
    for (const std::string& name : state_buffer_names(optimizer)) {
      if (by_name.count(prefix + name)) state.buffers.push_back({name, require(prefix + name, p.tensor)});
    }
    torch::Tensor step = take(prefix + "step");
    if (state.buffers.empty()) continue;
    if (keeps_step_count(optimizer)) {
      if (!step.defined() || step.numel() != 1) {
        throw InputError(source, prefix + "step", "", "is missing beside " + prefix + state.buffers.front().name);
      }
      state.step = step.to(torch::kCPU).to(torch::kInt64).item<int64_t>();
    }
    set_param_state(optimizer, p.tensor, state);
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
