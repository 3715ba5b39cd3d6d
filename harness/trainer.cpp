#include "harness/trainer.h"

#include <cmath>

#include <ATen/autocast_mode.h>

#include "harness/monitor.h"
#include "scenarios/lr_schedule.h"
#include "scenarios/optimizers.h"

namespace spikehunt {

void clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads, norms;
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) {
      grads.push_back(p.grad());
      norms.push_back(p.grad().norm(2));
    }
  }
  if (grads.empty()) return;
  const torch::Tensor total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
  const torch::Tensor coef = torch::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
  for (torch::Tensor& g : grads) g.mul_(coef);
}

// ---- precision ----

Autocast::Autocast(Precision p, const torch::Device& device)
    : on_(p != Precision::kFp32), device_type_(device.type()) {
  if (!on_) return;
  const at::ScalarType dtype = p == Precision::kFp16 ? at::kHalf : at::kBFloat16;
  was_on_ = at::autocast::is_autocast_enabled(device_type_);
  was_dtype_ = at::autocast::get_autocast_dtype(device_type_);
  at::autocast::set_autocast_dtype(device_type_, dtype);
  at::autocast::set_autocast_enabled(device_type_, true);
  at::autocast::increment_nesting();
}

Autocast::~Autocast() {
  if (!on_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, was_on_);
  at::autocast::set_autocast_dtype(device_type_, was_dtype_);
}

bool LossScaler::unscale(const std::vector<torch::Tensor>& params) const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flags;
  for (const torch::Tensor& p : params) {
    if (!p.grad().defined()) continue;
    p.grad().mul_(1.0 / scale_);
    flags.push_back(torch::logical_not(torch::isfinite(p.grad())).any());
  }
  if (flags.empty()) return false;
  return torch::stack(flags).any().item<bool>();  // the one host sync
}

void LossScaler::update(bool overflow) {
  if (overflow) {
    scale_ *= o_.backoff_factor;
    good_ = 0;
  } else if (++good_ >= o_.growth_interval) {
    scale_ *= o_.growth_factor;
    good_ = 0;
  }
}

// ---- the trainer ----

Trainer::Trainer(Scenario& scenario, bool schedule)
    : s_(scenario), k_(std::max<int64_t>(1, scenario.config().accumulation_steps)), schedule_(schedule) {
  if (scenario.config().precision == Precision::kFp16) scaler_.emplace();
  for (const NamedOptimizer& o : s_.optimizers()) {
    std::vector<double> lrs;
    for (auto& group : o.optimizer->param_groups()) lrs.push_back(group_lr(group));
    base_lr_.push_back(std::move(lrs));
  }
}

torch::Tensor train_step(Scenario& scenario, const Batch& batch, Monitor* monitor) {
  Trainer trainer(scenario, /*schedule=*/false);
  return trainer.step(batch.step, {batch}, monitor);
}

int64_t planned_optimizer_steps(const Scenario& s) {
  const int64_t k = std::max<int64_t>(1, s.config().accumulation_steps);
  return (s.planned_steps() + k - 1) / k;
}

int64_t Trainer::planned_steps() const { return planned_optimizer_steps(s_); }

std::vector<Batch> Trainer::next_batches() {
  std::vector<Batch> batches;
  in_training_code("data", context_, [&] {
    while (int64_t(batches.size()) < k_) {
      std::optional<Batch> b = s_.next_batch();
      if (!b) break;
      batches.push_back(std::move(*b));
    }
  });
  return batches;
}

int64_t Trainer::skip_steps(int64_t n) {
  const int64_t batches = s_.skip_batches(n * k_);
  return batches / k_;
}

void Trainer::apply_schedule(int64_t step) {
  const TrainingConfig& c = s_.config();
  if (!schedule_ || lr_is_constant(c.schedule)) return;
  const double factor = lr_factor(c.schedule, c.optimizer.lr, step, planned_steps());
  const std::vector<NamedOptimizer> optimizers = s_.optimizers();
  for (size_t o = 0; o < optimizers.size() && o < base_lr_.size(); ++o) {
    auto& groups = optimizers[o].optimizer->param_groups();
    for (size_t g = 0; g < groups.size() && g < base_lr_[o].size(); ++g) set_group_lr(groups[g], base_lr_[o][g] * factor);
  }
}

torch::Tensor Trainer::step(int64_t step, const std::vector<Batch>& batches, Monitor* monitor) {
  const char* stage = "forward";
  return in_training_code(stage, context_, [&] {  // Monitor::FailFast is no exception: it passes through
    s_.model().zero_grad();  // the model holds every optimizer's parameters (scenario.h)
    torch::Tensor total;
    const Precision precision = s_.config().precision;
    for (const Batch& b : batches) {
      context_ = batch_context(b.host_inputs.defined() ? b.host_inputs : b.inputs,
                               b.host_targets.defined() ? b.host_targets : b.targets);
      torch::Tensor loss;
      {
        Autocast autocast(precision, b.inputs.device());
        stage = "forward";
        const torch::Tensor out = s_.forward(b.inputs, monitor ? monitor->tap() : Tap());
        context_.output_shape = out.sizes().vec();
        if (monitor) monitor->after_forward(out);
        stage = "loss";
        loss = s_.loss(out, b.targets);
      }
      if (monitor) monitor->after_loss(loss);
      stage = "backward";
      if (scaler_) (loss * (scaler_->scale() / double(batches.size()))).backward();
      else if (batches.size() == 1) loss.backward();
      else (loss / double(batches.size())).backward();
      total = total.defined() ? total + loss.detach() : loss.detach();
    }
    if (after_backward_) after_backward_();
    bool skipped = false;
    if (scaler_) {
      stage = "optimizer_step";
      const std::vector<torch::Tensor> params = s_.model().parameters();
      skipped = scaler_->unscale(params);
      if (skipped) {
        torch::NoGradGuard no_grad;
        for (const torch::Tensor& p : params) {
          if (p.grad().defined()) p.grad().zero_();
        }
      }
      if (monitor) monitor->note_loss_scale(scaler_->scale(), skipped);
      scaler_->update(skipped);
    }
    if (monitor) monitor->after_backward();
    stage = "optimizer_step";
    if (!skipped) {
      if (s_.grad_clip() > 0) clip_grad_norm(s_.model().parameters(), s_.grad_clip());
      apply_schedule(step);
      if (before_step_) before_step_();
      s_.optimizer_step();
      if (after_step_) after_step_();
    }
    return batches.size() == 1 ? total : total / double(batches.size());
  });
}

}  // namespace spikehunt
