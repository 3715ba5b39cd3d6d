// optimizers.h — what the harness does with a scenario's optimizers, however
// many: build one from the config, map every model parameter to the
// optimizer and group that update it, read and rebuild each parameter's
// optimizer state (SGD momentum; Adam and AdamW moments with their step
// counts; RMSprop averages; Adagrad sums) for the monitor and the
// checkpoints, and read or set a group's learning rate.
// Example:
//   for (const ParamSlot& p : parameter_slots(scenario)) ...   // "fc1.weight" -> optimizer 0, group 1
//   std::optional<ParamState> s = param_state(*optimizer, p.tensor);
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "scenarios/config.h"
#include "scenarios/scenario.h"

namespace spikehunt {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& o,
                                                        std::vector<torch::Tensor> params);

// A model parameter and who updates it.
struct ParamSlot {
  std::string name;      // "fc1.weight"
  torch::Tensor tensor;
  int optimizer = -1;    // index into Scenario::optimizers(); -1: no optimizer updates it
  int group = -1;        // param group within that optimizer
};
// Every model parameter in model order. Throws std::logic_error when an
// optimizer updates a tensor that is not a parameter of model(), or a
// parameter is in two optimizers (the scenario contract, scenario.h).
std::vector<ParamSlot> parameter_slots(Scenario& scenario);

// One parameter's optimizer state: its buffers by name ("momentum_buffer",
// "exp_avg", ...) and its step count where the optimizer keeps one.
struct ParamState {
  std::vector<NamedTensor> buffers;
  std::optional<int64_t> step;
  // Or the count as a tensor, as torch.optim keeps it (on the parameter's
  // device for its fused and capturable kernels): read without a host copy.
  torch::Tensor step_tensor;
};
// An optimizer spikehunt did not build that keeps its per-parameter state
// its own way (a Python torch.optim optimizer, python/): it reads, writes and
// names that state itself, and the functions below ask it.
class ForeignOptimizer : public torch::optim::Optimizer {
 public:
  using torch::optim::Optimizer::Optimizer;
  virtual std::optional<ParamState> read_state(const torch::Tensor& param) = 0;
  virtual void write_state(const torch::Tensor& param, const ParamState& state) = 0;
  virtual void clear_states() = 0;
  virtual std::vector<std::string> buffer_names() = 0;
  virtual bool keeps_step() = 0;
  virtual std::string kind() const { return "optimizer"; }  // its class's name ("AdamW")
  // A group's numeric settings by name ("lr", "momentum", "weight_decay", "eps",
  // "beta1", "beta2", "nesterov" as 0/1, ...); empty when it cannot tell.
  virtual std::map<std::string, double> settings(size_t group) { return {}; }
  // Sets one of them (a name the group has); false when it cannot.
  virtual bool set_setting(size_t group, const std::string& name, double value) { return false; }
};

// What the optimizer is, read from the object: "sgd", "adam", "adamw",
// "rmsprop", "adagrad", a foreign optimizer's class ("AdamW"), else "optimizer".
std::string optimizer_kind(torch::optim::Optimizer& optimizer);

// nullopt: no state yet, or an optimizer type spikehunt does not know.
std::optional<ParamState> param_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param);
// The buffer names an optimizer keeps per parameter (empty: a type spikehunt does not know).
std::vector<std::string> state_buffer_names(torch::optim::Optimizer& optimizer);
bool keeps_step_count(torch::optim::Optimizer& optimizer);
// Whether the optimizer divides each coordinate's step by a running scale of
// its own gradients (Adam, AdamW, NAdam, RAdam, Adamax, RMSprop, Adagrad,
// Adadelta: a second-moment or sum-of-squares buffer), so a step moves every
// coordinate by about the learning rate whatever the gradient's size. SGD's
// step is the learning rate times the gradient (or its momentum).
bool normalizes_updates(torch::optim::Optimizer& optimizer);
// Rebuilds one parameter's state in the optimizer's own state type.
void set_param_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param, const ParamState& state);
// Forgets every parameter's state (a checkpoint is restored next).
void clear_param_states(torch::optim::Optimizer& optimizer);

// The state tensors of one optimizer for the given named parameters, named
// "<parameter>.<buffer>", in the parameters' order.
std::vector<NamedTensor> optimizer_state_of(torch::optim::Optimizer& optimizer,
                                            const std::vector<NamedTensor>& params);

double group_lr(torch::optim::OptimizerParamGroup& group);
void set_group_lr(torch::optim::OptimizerParamGroup& group, double lr);

// A group's numeric settings by name, as torch.optim names them: "lr",
// "momentum", "dampening", "nesterov", "weight_decay", "eps", "beta1",
// "beta2", "amsgrad", "alpha", "maximize" (booleans as 0 or 1); for LibTorch's
// SGD, Adam, AdamW, RMSprop and Adagrad, and a foreign optimizer's own; empty
// for a type spikehunt does not know.
std::map<std::string, double> group_settings(torch::optim::Optimizer& optimizer, size_t group);
// Sets every group's weight decay to 0 (the doctor's overfit check); the groups it changed.
int set_weight_decay_off(torch::optim::Optimizer& optimizer);

}  // namespace spikehunt
