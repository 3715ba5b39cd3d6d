// scenario.h — what the harness trains: a model with taps, its optimizer, its
// data, and its loss. The built-in catalog (catalog.h) implements it from a
// TrainingConfig; user code implements it to put its own training under the
// monitor.
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

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace spikehunt {

class TapSink {
 public:
  virtual ~TapSink() = default;
  virtual void on_tap(const char* name, const torch::Tensor& t) = 0;
  // t's max |x| was taken while t was written (a fused activation): a sink
  // may keep it instead of reading t again. The default reads t.
  virtual void on_tap_max(const char* name, const torch::Tensor& t, double max_abs) { on_tap(name, t); }
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

 private:
  TapSink* sink_ = nullptr;
};

struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

struct Batch {
  torch::Tensor inputs;        // (B, 1, 28, 28) float32, on the scenario's device
  torch::Tensor targets;       // (B) int64 class ids, on the scenario's device
  torch::Tensor host_inputs;   // the CPU tensors the batch was built from; the harness
  torch::Tensor host_targets;  //   hashes these (undefined: it copies inputs to the host)
  int64_t step = 0;            // global optimizer step, from 0
  int64_t phase = 0;           // index into phase_names()
  int64_t epoch = 0;           // within the phase
  int64_t batch = 0;           // within the epoch
};

class Scenario {
 public:
  virtual ~Scenario() = default;

  virtual torch::nn::Module& model() = 0;
  virtual torch::optim::Optimizer& optimizer() = 0;
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
  // Max global grad norm for clipping; 0: none.
  virtual double grad_clip() const { return 0.0; }
  // Applies the gradients: optimizer().step() by default; override to add a
  // scheduler, gradient accumulation or your own update.
  virtual void optimizer_step() { optimizer().step(); }

  // The optimizer's per-parameter state tensors (momentum buffers, Adam
  // moments), named "<parameter>.<buffer>". Empty before the first step.
  virtual std::vector<NamedTensor> optimizer_state();
};

// The state tensors of a LibTorch SGD, Adam or AdamW optimizer for the given
// named parameters (other optimizers: none).
std::vector<NamedTensor> optimizer_state_of(torch::optim::Optimizer& optimizer,
                                            const std::vector<NamedTensor>& params);

std::vector<NamedTensor> named_parameters(torch::nn::Module& model);

}  // namespace spikehunt
