#include "scenarios/optimizers.h"

#include <unordered_map>

namespace spikehunt {

namespace {

// LibTorch 2.x keys an optimizer's state by the parameter's TensorImpl.
void* key_of(const torch::Tensor& p) { return p.unsafeGetTensorImpl(); }

template <class O>
bool is(torch::optim::Optimizer& o) {
  return dynamic_cast<O*>(&o) != nullptr;
}

}  // namespace

// ---- building ----

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
      // LibTorch's AdamW multiplies θ by 1 − lr·λ; with independent decay the
      // group's λ is weight_decay / lr, so a scheduled lr gives 1 − factor·weight_decay.
      return std::make_unique<torch::optim::AdamW>(
          std::move(params), torch::optim::AdamWOptions(o.lr)
                                 .betas({o.betas[0], o.betas[1]})
                                 .eps(o.eps)
                                 .weight_decay(o.independent_weight_decay ? o.weight_decay / o.lr : o.weight_decay));
  }
  throw std::logic_error("unknown optimizer kind");
}

// ---- who updates what ----

std::vector<ParamSlot> parameter_slots(Scenario& scenario) {
  std::vector<ParamSlot> slots;
  const auto named = scenario.model().named_parameters();
  std::unordered_map<const void*, size_t> index(named.size());
  for (const auto& item : named) {
    index[item.value().unsafeGetTensorImpl()] = slots.size();
    slots.push_back({item.key(), item.value(), -1, -1});
  }
  const std::vector<NamedOptimizer> optimizers = scenario.optimizers();
  for (size_t o = 0; o < optimizers.size(); ++o) {
    auto& groups = optimizers[o].optimizer->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      for (const torch::Tensor& p : groups[g].params()) {
        const auto it = index.find(p.unsafeGetTensorImpl());
        if (it == index.end()) {
          throw std::logic_error("optimizer \"" + optimizers[o].name + "\" updates a tensor of shape " +
                                 c10::str(p.sizes()) + " that is not a parameter of model(): register it in the "
                                 "model (register_parameter / register_module) so it is monitored and checkpointed");
        }
        ParamSlot& s = slots[it->second];
        if (s.optimizer >= 0 && (s.optimizer != int(o) || s.group != int(g))) {
          throw std::logic_error("parameter " + s.name + " is updated by two optimizers or groups (\"" +
                                 optimizers[size_t(s.optimizer)].name + "\" and \"" + optimizers[o].name + "\")");
        }
        s.optimizer = int(o);
        s.group = int(g);
      }
    }
  }
  return slots;
}

// ---- per-parameter state ----

namespace {

template <class AdamState>
bool read_adam(torch::optim::OptimizerParamState* state, ParamState* out) {
  auto* a = dynamic_cast<AdamState*>(state);
  if (a == nullptr) return false;
  out->buffers = {{"exp_avg", a->exp_avg()}, {"exp_avg_sq", a->exp_avg_sq()}};
  if (a->max_exp_avg_sq().defined()) out->buffers.push_back({"max_exp_avg_sq", a->max_exp_avg_sq()});
  out->step = a->step();
  return true;
}

torch::Tensor buffer(const ParamState& s, const char* name) {
  for (const NamedTensor& b : s.buffers) {
    if (b.name == name) return b.tensor;
  }
  return {};
}

template <class AdamState>
std::unique_ptr<torch::optim::OptimizerParamState> adam_state(const ParamState& s) {
  auto a = std::make_unique<AdamState>();
  a->exp_avg(buffer(s, "exp_avg")).exp_avg_sq(buffer(s, "exp_avg_sq")).step(s.step.value_or(0));
  if (torch::Tensor m = buffer(s, "max_exp_avg_sq"); m.defined()) a->max_exp_avg_sq(m);
  return a;
}

}  // namespace

std::optional<ParamState> param_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  if (auto* foreign = dynamic_cast<ForeignOptimizer*>(&optimizer)) return foreign->read_state(param);
  auto& state = optimizer.state();
  const auto it = state.find(key_of(param));
  if (it == state.end()) return std::nullopt;
  torch::optim::OptimizerParamState* s = it->second.get();
  ParamState out;
  if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(s)) {
    if (!sgd->momentum_buffer().defined()) return std::nullopt;
    out.buffers = {{"momentum_buffer", sgd->momentum_buffer()}};
  } else if (read_adam<torch::optim::AdamParamState>(s, &out) || read_adam<torch::optim::AdamWParamState>(s, &out)) {
  } else if (auto* rms = dynamic_cast<torch::optim::RMSpropParamState*>(s)) {
    out.buffers = {{"square_avg", rms->square_avg()}};
    if (rms->momentum_buffer().defined()) out.buffers.push_back({"momentum_buffer", rms->momentum_buffer()});
    if (rms->grad_avg().defined()) out.buffers.push_back({"grad_avg", rms->grad_avg()});
    out.step = rms->step();
  } else if (auto* ada = dynamic_cast<torch::optim::AdagradParamState*>(s)) {
    out.buffers = {{"sum", ada->sum()}};
    out.step = ada->step();
  } else {
    return std::nullopt;
  }
  return out;
}

std::vector<std::string> state_buffer_names(torch::optim::Optimizer& o) {
  if (auto* foreign = dynamic_cast<ForeignOptimizer*>(&o)) return foreign->buffer_names();
  if (is<torch::optim::SGD>(o)) return {"momentum_buffer"};
  if (is<torch::optim::Adam>(o) || is<torch::optim::AdamW>(o)) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  if (is<torch::optim::RMSprop>(o)) return {"square_avg", "momentum_buffer", "grad_avg"};
  if (is<torch::optim::Adagrad>(o)) return {"sum"};
  return {};
}

bool keeps_step_count(torch::optim::Optimizer& o) {
  if (auto* foreign = dynamic_cast<ForeignOptimizer*>(&o)) return foreign->keeps_step();
  return is<torch::optim::Adam>(o) || is<torch::optim::AdamW>(o) || is<torch::optim::RMSprop>(o) ||
         is<torch::optim::Adagrad>(o);
}

bool normalizes_updates(torch::optim::Optimizer& o) {
  for (const std::string& b : state_buffer_names(o)) {
    if (b == "exp_avg_sq" || b == "square_avg" || b == "sum" || b == "exp_inf") return true;
  }
  return false;
}

void set_param_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param, const ParamState& s) {
  if (auto* foreign = dynamic_cast<ForeignOptimizer*>(&optimizer)) return foreign->write_state(param, s);
  std::unique_ptr<torch::optim::OptimizerParamState> state;
  if (is<torch::optim::SGD>(optimizer)) {
    auto sgd = std::make_unique<torch::optim::SGDParamState>();
    sgd->momentum_buffer(buffer(s, "momentum_buffer"));
    state = std::move(sgd);
  } else if (is<torch::optim::Adam>(optimizer)) {
    state = adam_state<torch::optim::AdamParamState>(s);
  } else if (is<torch::optim::AdamW>(optimizer)) {
    state = adam_state<torch::optim::AdamWParamState>(s);
  } else if (is<torch::optim::RMSprop>(optimizer)) {
    auto rms = std::make_unique<torch::optim::RMSpropParamState>();
    rms->square_avg(buffer(s, "square_avg")).step(s.step.value_or(0));
    if (torch::Tensor m = buffer(s, "momentum_buffer"); m.defined()) rms->momentum_buffer(m);
    if (torch::Tensor g = buffer(s, "grad_avg"); g.defined()) rms->grad_avg(g);
    state = std::move(rms);
  } else if (is<torch::optim::Adagrad>(optimizer)) {
    auto ada = std::make_unique<torch::optim::AdagradParamState>();
    ada->sum(buffer(s, "sum")).step(s.step.value_or(0));
    state = std::move(ada);
  } else {
    throw std::logic_error("set_param_state: an optimizer type spikehunt does not know");
  }
  optimizer.state()[key_of(param)] = std::move(state);
}

void clear_param_states(torch::optim::Optimizer& optimizer) {
  if (auto* foreign = dynamic_cast<ForeignOptimizer*>(&optimizer)) return foreign->clear_states();
  optimizer.state().clear();
}

std::vector<NamedTensor> optimizer_state_of(torch::optim::Optimizer& optimizer,
                                            const std::vector<NamedTensor>& params) {
  std::vector<NamedTensor> out;
  for (const NamedTensor& p : params) {
    if (std::optional<ParamState> s = param_state(optimizer, p.tensor)) {
      for (NamedTensor& b : s->buffers) out.push_back({p.name + "." + b.name, std::move(b.tensor)});
    }
  }
  return out;
}

// ---- learning rates ----

std::string optimizer_kind(torch::optim::Optimizer& optimizer) {
  if (auto* f = dynamic_cast<ForeignOptimizer*>(&optimizer)) return f->kind();
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) return "sgd";
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) return "adamw";
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) return "adam";
  if (dynamic_cast<torch::optim::RMSprop*>(&optimizer)) return "rmsprop";
  if (dynamic_cast<torch::optim::Adagrad*>(&optimizer)) return "adagrad";
  return "optimizer";
}

double group_lr(torch::optim::OptimizerParamGroup& group) { return group.options().get_lr(); }

std::map<std::string, double> group_settings(torch::optim::Optimizer& optimizer, size_t g) {
  if (auto* f = dynamic_cast<ForeignOptimizer*>(&optimizer)) return f->settings(g);
  if (g >= optimizer.param_groups().size()) return {};
  torch::optim::OptimizerOptions& o = optimizer.param_groups()[g].options();
  if (auto* x = dynamic_cast<torch::optim::SGDOptions*>(&o)) {
    return {{"lr", x->lr()}, {"momentum", x->momentum()}, {"dampening", x->dampening()},
            {"weight_decay", x->weight_decay()}, {"nesterov", x->nesterov() ? 1.0 : 0.0}};
  }
  if (auto* x = dynamic_cast<torch::optim::AdamWOptions*>(&o)) {
    return {{"lr", x->lr()}, {"beta1", std::get<0>(x->betas())}, {"beta2", std::get<1>(x->betas())},
            {"eps", x->eps()}, {"weight_decay", x->weight_decay()}, {"amsgrad", x->amsgrad() ? 1.0 : 0.0}};
  }
  if (auto* x = dynamic_cast<torch::optim::AdamOptions*>(&o)) {
    return {{"lr", x->lr()}, {"beta1", std::get<0>(x->betas())}, {"beta2", std::get<1>(x->betas())},
            {"eps", x->eps()}, {"weight_decay", x->weight_decay()}, {"amsgrad", x->amsgrad() ? 1.0 : 0.0}};
  }
  if (auto* x = dynamic_cast<torch::optim::RMSpropOptions*>(&o)) {
    return {{"lr", x->lr()}, {"alpha", x->alpha()}, {"eps", x->eps()}, {"weight_decay", x->weight_decay()},
            {"momentum", x->momentum()}};
  }
  if (auto* x = dynamic_cast<torch::optim::AdagradOptions*>(&o)) {
    return {{"lr", x->lr()}, {"eps", x->eps()}, {"weight_decay", x->weight_decay()}};
  }
  return {};
}

int set_weight_decay_off(torch::optim::Optimizer& optimizer) {
  int changed = 0;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const std::map<std::string, double> s = group_settings(optimizer, g);
    const auto wd = s.find("weight_decay");
    if (wd == s.end() || wd->second == 0) continue;
    if (auto* f = dynamic_cast<ForeignOptimizer*>(&optimizer)) {
      changed += f->set_setting(g, "weight_decay", 0);
      continue;
    }
    torch::optim::OptimizerOptions& o = optimizer.param_groups()[g].options();
    if (auto* x = dynamic_cast<torch::optim::SGDOptions*>(&o)) x->weight_decay(0), ++changed;
    else if (auto* x = dynamic_cast<torch::optim::AdamWOptions*>(&o)) x->weight_decay(0), ++changed;
    else if (auto* x = dynamic_cast<torch::optim::AdamOptions*>(&o)) x->weight_decay(0), ++changed;
    else if (auto* x = dynamic_cast<torch::optim::RMSpropOptions*>(&o)) x->weight_decay(0), ++changed;
    else if (auto* x = dynamic_cast<torch::optim::AdagradOptions*>(&o)) x->weight_decay(0), ++changed;
  }
  return changed;
}
void set_group_lr(torch::optim::OptimizerParamGroup& group, double lr) { group.options().set_lr(lr); }

}  // namespace spikehunt
