// trainer.h — the harness's side of the scenario contract (scenario.h): one
// optimizer step's zeroing, micro-batch accumulation, precision (autocast,
// fp16 loss scaling), clipping, learning-rate schedule and optimizer step.
// Example:
//   Trainer trainer(scenario);
//   for (int64_t s = 0; !(b = trainer.next_batches()).empty(); ++s) trainer.step(s, b, &monitor);
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "harness/training_error.h"
#include "scenarios/config.h"
#include "scenarios/scenario.h"

namespace spikehunt {

class Monitor;

// Autocast for one forward and loss under a precision: bf16 on the CPU, bf16
// or fp16 on CUDA; fp32 leaves it off. Restores what was set before.
class Autocast {
 public:
  Autocast(Precision p, const torch::Device& device);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool on_, was_on_ = false;
  at::DeviceType device_type_;  // autocast state is per device type (cpu, cuda)
  at::ScalarType was_dtype_ = at::kBFloat16;
};

// Clips gradients to a global L2 norm like torch::nn::utils::clip_grad_norm_,
// but without its host sync.
void clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

// Dynamic loss scaling for fp16 (LibTorch's C++ API has no GradScaler):
// the loss is multiplied by scale() before backward; unscale() divides every
// gradient by it and says whether any was non-finite (one host sync); then
// update(overflow) halves the scale after an overflow (the step is skipped)
// and doubles it after growth_interval steps in a row without one.
struct LossScaleOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(LossScaleOptions options = {}) : o_(options), scale_(options.init_scale) {}
  double scale() const { return scale_; }
  int64_t good_steps() const { return good_; }
  bool unscale(const std::vector<torch::Tensor>& params) const;
  void update(bool overflow);

 private:
  LossScaleOptions o_;
  double scale_;
  int64_t good_ = 0;  // steps since the last overflow or growth
};

// The harness's side of one optimizer step (the contract in scenario.h):
// zero the model's gradients; for each of config().accumulation_steps
// micro-batches forward, loss and (loss / k).backward(); clip to grad_clip();
// set every group's learning rate from config().schedule; optimizer_step().
// config().precision bf16 / fp16 runs forward and loss under autocast (the
// weights stay fp32); fp16 also scales the loss (LossScaler), and a step whose
// scaled gradients overflowed is skipped: its gradients are zeroed before the
// monitor reads them, the optimizer does not step, the record says skipped.
// What the scenario's code throws comes out as a TrainingError naming the stage.
class Trainer {
 public:
  // Remembers every optimizer group's learning rate as the schedule's base.
  // `schedule` false: leave the learning rates as they are (doctor's overfit check).
  explicit Trainer(Scenario& scenario, bool schedule = true);

  int64_t accumulation() const { return k_; }
  int64_t planned_steps() const;  // optimizer steps in the whole protocol
  // The next optimizer step's micro-batches (fewer at the very end; none when done).
  std::vector<Batch> next_batches();
  // Moves the data on by n optimizer steps without training; returns the steps skipped.
  int64_t skip_steps(int64_t n);
  // Trains optimizer step `step` on `batches`. With a monitor, the caller
  // brackets it with monitor->begin_step(step, batches) and finish_step().
  // Returns the mean loss over the micro-batches.
  torch::Tensor step(int64_t step, const std::vector<Batch>& batches, Monitor* monitor);
  // Sets every group to its base learning rate × the schedule's factor at `step`.
  void apply_schedule(int64_t step);
  const ErrorContext& context() const { return context_; }
  // Scales the loss from now on (fp16 turns it on by itself; tests plant
  // overflows on the CPU with it).
  void enable_loss_scaling(LossScaleOptions options = {}) { scaler_.emplace(options); }
  const std::optional<LossScaler>& loss_scaler() const { return scaler_; }
  // Called after the step's backward passes, before loss scaling, the
  // monitor's after_backward and clipping (a data-parallel burst averages
  // the gradients over its ranks there, as DistributedDataParallel does).
  void set_after_backward(std::function<void()> f) { after_backward_ = std::move(f); }
  // Called right before and right after optimizer_step() (after clipping and
  // the schedule; not for a step the loss scaler skipped): the doctor reads
  // the update itself there.
  void set_around_optimizer_step(std::function<void()> before, std::function<void()> after) {
    before_step_ = std::move(before), after_step_ = std::move(after);
  }

 private:
  Scenario& s_;
  int64_t k_;
  bool schedule_;
  std::optional<LossScaler> scaler_;
  std::vector<std::vector<double>> base_lr_;  // per optimizer, per group
  ErrorContext context_;
  std::function<void()> after_backward_, before_step_, after_step_;
};

// Deprecated since 0.2.0, removed in 0.3.0: one optimizer step of `batch`
// (what 0.1 called train_step): Trainer(scenario, /*schedule=*/false).step(
// batch.step, {batch}, monitor): zero the gradients, forward (taps to
// `monitor`), loss, backward, clip to scenario.grad_clip(), optimizer_step().
// With a monitor, bracket it with monitor->begin_step() and finish_step().
[[deprecated("use spikehunt::Trainer::step (spikehunt/burst.h)")]]
torch::Tensor train_step(Scenario& scenario, const Batch& batch, Monitor* monitor);

// Optimizer steps the scenario's protocol takes: its batches over config().accumulation_steps, rounded up.
int64_t planned_optimizer_steps(const Scenario& scenario);

}  // namespace spikehunt
