// scenario.h — what the harness trains: a model with taps, its optimizers,
// its data, and its loss. The built-in catalog (catalog.h) implements it from
// a TrainingConfig; user code implements it to put its own training under the
// monitor.
//
// The contract of one optimizer step (harness/burst.h, Trainer, runs it):
//   1. the harness zeroes the gradients of every optimizer's parameters (and
//      of the whole model) — a scenario never calls zero_grad() itself;
//   2. for each of config().accumulation_steps micro-batches from
//      next_batch(): forward(inputs, tap), loss(outputs, targets), and
//      (loss / accumulation_steps).backward() — gradients add up;
//   3. the harness clips the global gradient norm to grad_clip() (0: off);
//   4. it sets the learning rate of every group of every optimizer from
//      config().schedule (a group's own lr × the schedule's factor; a
//      constant schedule leaves them alone);
//   5. it calls optimizer_step(), which steps every optimizer by default.
// A scenario must not call backward(), zero_grad() or step() inside
// forward() or loss(), must not keep tensors of one step's graph for the next,
// and every tensor an optimizer updates must be a parameter of model() (the
// monitor and the checkpoints name parameters by their place in the model).
// Anything it throws becomes a finding naming the stage (setup, data,
// forward, loss, backward, optimizer_step), not an internal error.
//
// Tap: how a model exposes activations. LibTorch has no module hooks in C++,
// so a model's forward calls tap("fc1_act", t) explicitly; a default Tap is
// off and costs one branch.
// Example:
//   torch::Tensor forward(const torch::Tensor& x, const Tap& tap) {
//     auto h = torch::relu(fc1(x));  tap("fc1_act", h);
//     auto y = fc2(h);               tap("fc2_logits", y);
//     return y;
//   }
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "scenarios/config.h"

namespace spikehunt {

class TapSink {
 public:
  virtual ~TapSink() = default;
  virtual void on_tap(const char* name, const torch::Tensor& t) = 0;
  // t's max |x| was taken while t was written (a fused activation): a sink
  // may keep it instead of reading t again. The default reads t.
  virtual void on_tap_max(const char* name, const torch::Tensor& t, double max_abs) { on_tap(name, t); }
  // Whether on_tap_max reads only max_abs while it is finite (t's size and
  // device aside): then a model may pass a tensor that differs from the
  // tapped value outside what max_abs covers (an attention score before its
  // causal mask) and skip writing the tapped value at all.
  virtual bool reads_max_only() const { return false; }
};

class Tap {
 public:
  Tap() = default;  // off
  explicit Tap(TapSink* sink) : sink_(sink) {}
  void operator()(const char* name, const torch::Tensor& t) const {
    if (sink_ != nullptr) sink_->on_tap(name, t);
  }
  void operator()(const char* name, const torch::Tensor& t, double max_abs) const {
    if (sink_ != nullptr) sink_->on_tap_max(name, t, max_abs);
  }
  bool on() const { return sink_ != nullptr; }
  bool reads_max_only() const { return sink_ != nullptr && sink_->reads_max_only(); }

 private:
  TapSink* sink_ = nullptr;
};

struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

// One module's output in one forward pass (Scenario::module_outputs).
struct ModuleOutput {
  std::string name;            // "block.0", or a tap's name
  std::string kind;            // the module's class ("Linear", "LayerNorm"); "" for a tap
  bool inputs_finite = true;   // every floating-point tensor it was given was finite
  int64_t numel = 0;           // the output's elements
  int64_t non_finite = 0;      // of them NaN or Inf
  int64_t nan = 0, pos_inf = 0, neg_inf = 0;  // the non-finite ones by kind
  double rms = 0, max_abs = 0; // over the finite ones
  double input_rms = NAN;      // of its first floating-point input (NAN: not read)
  int64_t fan_in = 0;          // a Linear's or convolution's inputs per output unit (0: not one)
  double weight_std = NAN;     // a Linear's or convolution's weight's standard deviation
};

// An optimizer of a scenario, by the name the monitor and reports use.
struct NamedOptimizer {
  std::string name;                              // e.g. "optimizer", "body", "head"
  torch::optim::Optimizer* optimizer = nullptr;  // owned by the scenario
};

struct Batch {
  torch::Tensor inputs;        // e.g. (B, 1, 28, 28) float32 images or (B, T) int64 tokens, on the scenario's device
  torch::Tensor targets;       // (B) int64 class ids, or (B, T) next tokens, on the scenario's device
  torch::Tensor host_inputs;   // the CPU tensors the batch was built from; the harness
  torch::Tensor host_targets;  //   hashes these (undefined: it copies inputs to the host)
  int64_t step = 0;            // the scenario's batch counter, from 0 (the harness numbers optimizer steps itself)
  int64_t phase = 0;           // index into phase_names()
  int64_t epoch = 0;           // within the phase
  int64_t batch = 0;           // within the epoch
};

class Scenario {
 public:
  virtual ~Scenario() = default;

  virtual torch::nn::Module& model() = 0;
  // Override one of these two: optimizer() for a scenario with one optimizer,
  // optimizers() for several (then optimizer() is the first).
  virtual torch::optim::Optimizer& optimizer();
  // Every optimizer the harness zeroes, steps, monitors and checkpoints.
  // Default: {{"optimizer", &optimizer()}}.
  virtual std::vector<NamedOptimizer> optimizers();
  // Runs the model, calling tap(name, tensor) for every activation it exposes.
  virtual torch::Tensor forward(const torch::Tensor& inputs, const Tap& tap) = 0;
  // Mean cross-entropy by default.
  virtual torch::Tensor loss(const torch::Tensor& outputs, const torch::Tensor& targets);
  // The next training batch, or nullopt when the protocol is done.
  virtual std::optional<Batch> next_batch() = 0;
  // Held-out batches (data the model does not train on), up to `max_samples`
  // samples in all; empty when the scenario has none.
  virtual std::vector<Batch> heldout(int64_t max_samples) { return {}; }
  // Moves the data position `n` batches on without training (a checkpoint
  // resumes at its step); returns how many it skipped.
  virtual int64_t skip_batches(int64_t n);
  // Steps the whole protocol takes (for progress and the trace's planned length).
  virtual int64_t planned_steps() const = 0;
  virtual std::vector<std::string> phase_names() const = 0;
  virtual int64_t num_classes() const { return 10; }
  virtual torch::Device device() const { return torch::kCPU; }
  // Max global grad norm for clipping; 0: none. Default: config().grad_clip.
  virtual double grad_clip() const { return config_.grad_clip; }
  // Applies the gradients, after the harness set the scheduled learning
  // rates: steps every optimizer by default. Override it for an update of
  // your own (it must not zero gradients: the harness does).
  virtual void optimizer_step();

  // Every optimizer's per-parameter state tensors (momentum buffers, Adam
  // moments, ...), named "<parameter>.<buffer>", in parameter order. Empty
  // before the first step.
  virtual std::vector<NamedTensor> optimizer_state();

  // Submodules reached under more than one name (one module object registered
  // in several places, as nn.ModuleList([block] * 4) does): each group of
  // names, in model order; empty when none is. The default reads model()'s
  // tree; a Python scenario reads its torch.nn.Module's.
  virtual std::vector<std::vector<std::string>> shared_modules();

  // Re-initializes model() in place by each module's own reset_parameters()
  // (the framework's default initialization), keeping every tensor object
  // (the optimizers still hold them); returns the modules it reset, in model
  // order. The doctor's reference initialization. The default knows
  // LibTorch's Linear, convolutions, Embedding, the norms and the RNNs; a
  // Python scenario calls reset_parameters() of each torch.nn.Module that has one.
  virtual std::vector<std::string> reset_parameters();

  // Runs forward(inputs) once without gradients, in the model's current mode,
  // and reports each module's output in the order the modules finished (a
  // module's children before it). The default reports the taps, in the order
  // tapped; a Python scenario hooks every torch.nn.Module. The doctor reads it
  // to name the first module that makes NaN/Inf from finite inputs and the
  // scale of each layer's output at step 0.
  virtual std::vector<ModuleOutput> module_outputs(const torch::Tensor& inputs);

  // A scenario whose steps run in another process (a training command of the
  // user's under the monitor: python/spikehunt/_command_scenario.py) runs the
  // whole burst there and returns the folder its monitor wrote (trace.jsonl,
  // verdict.json), which run_burst reads back as the burst's records; the
  // default, "", is a scenario the harness trains itself.
  virtual std::string run_elsewhere() { return ""; }

  // The config the scenario was built from: make_scenario() binds it (a
  // scenario built directly has the defaults). The harness reads grad_clip,
  // schedule and accumulation_steps from it; a scenario reads its own knobs
  // from config().params.
  const TrainingConfig& config() const { return config_; }
  void bind_config(const TrainingConfig& config) { config_ = config; }

 private:
  TrainingConfig config_;
  bool resolving_ = false;  // optimizer() and optimizers() default to each other
};

std::vector<NamedTensor> named_parameters(torch::nn::Module& model);

}  // namespace spikehunt
