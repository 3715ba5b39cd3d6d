// doctor/swaps.cpp — the program with one part swapped for a reference
// (SwapScenario: the data drawn at random from its own samples, the modules'
// own initialization, the reference loss, a tenth of the learning rate, the
// harness's own step, Adam, a reference model) and one short burst of it
// (run_trial), measured as the user measures: held-out, eval mode, no grad.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include <ATen/CPUGeneratorImpl.h>

#include "base/number_format.h"
#include "harness/doctor/signs.h"
#include "harness/trainer.h"
#include "scenarios/models.h"
#include "scenarios/optimizers.h"

#include "harness/doctor/references.h"

namespace spikehunt::doctor_detail {

namespace {

int64_t vocabulary_of(const std::vector<Batch>& batches) {
  int64_t top = 0;
  for (const Batch& b : batches) {
    if (!b.inputs.is_floating_point()) top = std::max(top, b.inputs.max().item<int64_t>());
  }
  return top + 1;
}

class SwapScenario : public Scenario {
 public:
  SwapScenario(std::unique_ptr<Scenario> inner, Swap swap, const Probe& probe, int64_t steps, double lr_factor = 0.1)
      : inner_(std::move(inner)), swap_(swap), lr_factor_(lr_factor) {
    TrainingConfig c = inner_->config();
    if (swap == Swap::kStep || swap == Swap::kOptimizer || swap == Swap::kModel) c.schedule = ScheduleConfig{};
    bind_config(c);
    const Batch& first = probe.batches.front();
    if (swap == Swap::kInit) {
      std::vector<std::pair<std::string, double>> before;
      {
        torch::NoGradGuard no_grad;
        for (const auto& p : inner_->model().named_parameters()) {
          if (p.value().numel() > 1) before.emplace_back(p.key(), p.value().to(torch::kFloat64).std().item<double>());
        }
      }
      torch::manual_seed(inner_->config().seed);
      reset_ = guarded("setup", [&] { return inner_->reset_parameters(); });
      if (reset_.empty()) throw Unavailable("no module of the model has a reset_parameters() of its own");
      // What the program's initialization does differently from the modules' defaults: the spread of each tensor.
      torch::NoGradGuard no_grad;
      size_t i = 0;
      for (const auto& p : inner_->model().named_parameters()) {
        if (p.value().numel() <= 1) continue;
        const double now = p.value().to(torch::kFloat64).std().item<double>(), was = before[i++].second;
        const bool differs = (was == 0) != (now == 0) || (was > 0 && now > 0 && (was / now > 3 || now / was > 3));
        if (differs && init_differs_.size() < 4) {
          init_differs_.push_back(p.key() + " std " + fmt(was) + " (default " + fmt(now) + ")");
        }
      }
    } else if (swap == Swap::kLoss) {
      const torch::Tensor out = fixed_outputs(*inner_, first);
      loss_name_ = reference_loss_name(out, first.targets);
      if (loss_name_.empty()) {
        throw Unavailable("no reference loss for outputs " + c10::str(out.sizes()) + " against targets " +
                          c10::str(first.targets.sizes()) + " (" + std::string(c10::toString(first.targets.scalar_type())) + ")");
      }
    } else if (swap == Swap::kOptimizer) {
      std::vector<torch::Tensor> trainable;
      for (const torch::Tensor& p : inner_->model().parameters()) {
        if (p.requires_grad()) trainable.push_back(p);
      }
      if (trainable.empty()) throw Unavailable("model() has no trainable parameter");
      reference_ = std::make_unique<ReferenceAdam>(trainable);
    } else if (swap == Swap::kModel) {
      const torch::Tensor out = fixed_outputs(*inner_, first);
      if (out.dim() == 0 || out.size(0) != first.inputs.size(0)) throw Unavailable("the outputs are not one a sample");
      torch::manual_seed(inner_->config().seed);
      model_ = std::make_shared<ReferenceModel>(first.inputs, out, vocabulary_of(probe.batches));
      reference_ = std::make_unique<ReferenceAdam>(model_->parameters());
    } else if (swap == Swap::kData) {
      collect_pool(std::max<int64_t>(4 * steps, 64));
    } else if (swap == Swap::kLrDown) {
      for (const NamedOptimizer& o : inner_->optimizers()) {
        for (auto& group : o.optimizer->param_groups()) {
          if (lr_text_.empty()) lr_text_ = fmt(group_lr(group)) + " -> " + fmt(group_lr(group) * lr_factor_);
        }
      }
    }
  }

  struct Unavailable : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  torch::nn::Module& model() override { return model_ ? *model_ : inner_->model(); }
  std::vector<NamedOptimizer> optimizers() override {
    if (reference_) return {{"reference", reference_.get()}};
    return inner_->optimizers();
  }
  torch::Tensor forward(const torch::Tensor& inputs, const Tap& tap) override {
    return model_ ? model_->forward(inputs) : inner_->forward(inputs, tap);
  }
  torch::Tensor loss(const torch::Tensor& outputs, const torch::Tensor& targets) override {
    return swap_ == Swap::kLoss ? reference_loss(outputs, targets) : inner_->loss(outputs, targets);
  }
  std::optional<Batch> next_batch() override { return swap_ == Swap::kData ? draw() : inner_->next_batch(); }
  std::vector<Batch> heldout(int64_t max_samples) override { return inner_->heldout(max_samples); }
  int64_t planned_steps() const override { return inner_->planned_steps(); }
  std::vector<std::string> phase_names() const override { return inner_->phase_names(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  torch::Device device() const override { return inner_->device(); }
  double grad_clip() const override { return inner_->grad_clip(); }
  void optimizer_step() override {
    if (reference_) return void(reference_->step());
    if (swap_ == Swap::kLrDown) {
      // Each group at a tenth of the learning rate it holds, for the step; a scheduler that sets a new one
      // in optimizer_step() keeps its own, which the next step takes a tenth of again.
      std::vector<std::pair<torch::optim::OptimizerParamGroup*, double>> held;
      for (const NamedOptimizer& o : inner_->optimizers()) {
        for (auto& group : o.optimizer->param_groups()) {
          const double lr = group_lr(group);
          held.emplace_back(&group, lr);
          set_group_lr(group, lr * lr_factor_);
        }
      }
      inner_->optimizer_step();
      for (auto& [group, lr] : held) {
        if (group_lr(*group) == lr * lr_factor_) set_group_lr(*group, lr);
      }
      return;
    }
    if (swap_ != Swap::kStep) return inner_->optimizer_step();
    for (const NamedOptimizer& o : inner_->optimizers()) masters_.step(*o.optimizer);
  }

  // What was put in place of the part, in words.
  std::string what() {
    switch (swap_) {
      case Swap::kData:
        return "the data drawn at random from " + std::to_string(pool_samples_) + " of the program's own training samples " +
               (pool_rows_ ? "with their own targets" : "(whole batches shuffled)");
      case Swap::kInit: return "the parameters re-initialized by each module's own reset_parameters() (" + list(reset_, 4) + ")";
      case Swap::kLoss: return "the loss replaced by " + loss_name_ + " on the same outputs and targets";
      case Swap::kLrDown:
        return "the program's own optimizers at " + std::string(lr_factor_ == 0.1 ? "a tenth" : lr_factor_ == 0.01 ? "a hundredth"
                                                                                            : "a thousandth") +
               " of their learning rate (" + lr_text_ + ")";
      case Swap::kStep: {
        bool lowp = false;
        for (const NamedOptimizer& o : inner_->optimizers()) lowp = lowp || masters_.any(*o.optimizer);
        return std::string("the step replaced by the harness's own: the program's optimizers stepped once each") +
               (lowp ? " on float32 copies of the low-precision parameters" : "") + ", nothing else in optimizer_step()";
      }
      case Swap::kOptimizer:
        return "the optimizer replaced by Adam (lr " + fmt(ReferenceAdam::kLr) + ") on all " +
               std::to_string(reference_->param_groups()[0].params().size()) +
               " trainable parameter tensors of model(), stepped by the harness";
      case Swap::kModel: return "the model replaced by a reference one of the same input and output shapes (" +
                                std::to_string(parameter_count(*model_)) + " parameters) under Adam (lr " +
                                fmt(ReferenceAdam::kLr) + ")";
    }
    return "";
  }

 private:
  void collect_pool(int64_t max_batches) {
    for (int64_t i = 0; i < max_batches; ++i) {
      std::optional<Batch> b = guarded("data", [&] { return inner_->next_batch(); });
      if (!b) break;
      pool_.push_back(std::move(*b));
    }
    if (pool_.empty()) throw Unavailable("the program gives no training batch");
    bool rows = true;
    for (const Batch& b : pool_) {
      rows = rows && b.inputs.dim() >= 1 && b.targets.dim() >= 1 && b.inputs.size(0) == b.targets.size(0) &&
             b.inputs.sizes().slice(1) == pool_[0].inputs.sizes().slice(1) &&
             b.targets.sizes().slice(1) == pool_[0].targets.sizes().slice(1) &&
             b.inputs.scalar_type() == pool_[0].inputs.scalar_type() && b.targets.scalar_type() == pool_[0].targets.scalar_type();
    }
    pool_rows_ = rows;
    if (rows) {
      std::vector<torch::Tensor> xs, ys;
      for (const Batch& b : pool_) xs.push_back(b.inputs), ys.push_back(b.targets);
      x_ = torch::cat(xs), y_ = torch::cat(ys);
      // Each sample once (batches drawn over several epochs repeat them), kept with its own target.
      std::set<std::pair<uint64_t, uint64_t>> seen;
      std::vector<int64_t> keep;
      const std::vector<Hash128> inputs = sample_hashes(x_), targets = sample_hashes(y_.reshape({y_.size(0), -1}));
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (seen.insert({inputs[i].high ^ (targets[i].low * 31), inputs[i].low ^ targets[i].high}).second) keep.push_back(int64_t(i));
      }
      const torch::Tensor idx = torch::tensor(keep, torch::kInt64).to(x_.device());
      x_ = x_.index_select(0, idx), y_ = y_.index_select(0, idx.to(y_.device()));
      pool_samples_ = x_.size(0);
    } else {
      for (const Batch& b : pool_) pool_samples_ += b.inputs.dim() ? b.inputs.size(0) : 1;
    }
    batch_size_ = pool_[0].inputs.dim() ? pool_[0].inputs.size(0) : 1;
    generator_ = at::make_generator<at::CPUGeneratorImpl>(inner_->config().seed + 7);
  }

  std::optional<Batch> draw() {
    Batch b;
    if (pool_rows_) {
      const int64_t n = x_.size(0);
      if (at_ + batch_size_ > n || !order_.defined()) order_ = torch::randperm(n, generator_), at_ = 0;
      const torch::Tensor idx = order_.slice(0, at_, at_ + batch_size_).to(x_.device());
      at_ += batch_size_;
      b.inputs = x_.index_select(0, idx), b.targets = y_.index_select(0, idx);
    } else {
      if (at_ >= int64_t(pool_.size()) || !order_.defined()) order_ = torch::randperm(int64_t(pool_.size()), generator_), at_ = 0;
      b = pool_[size_t(order_[at_++].item<int64_t>())];
    }
    b.step = b.batch = drawn_++;
    return b;
  }

  std::unique_ptr<Scenario> inner_;
  Swap swap_;
  std::vector<std::string> reset_;
 public:
  std::vector<std::string> init_differs_;  // the program's init against the defaults, where they differ

 private:
  std::string loss_name_, lr_text_;
 public:
  double lr_factor_ = 0.1;  // kLrDown: the share of the learning rate each step takes

 private:
  std::unique_ptr<torch::optim::Optimizer> reference_;
  std::shared_ptr<ReferenceModel> model_;
  MasterWeights masters_;
  std::vector<Batch> pool_;
  bool pool_rows_ = false;
  torch::Tensor x_, y_, order_;
  int64_t pool_samples_ = 0, batch_size_ = 1, at_ = 0, drawn_ = 0;
  at::Generator generator_;
};

}  // namespace

const char* swap_name(Swap s) {
  switch (s) {
    case Swap::kData: return "data";
    case Swap::kInit: return "init";
    case Swap::kLoss: return "loss";
    case Swap::kLrDown: return "learning_rate";
    case Swap::kStep: return "step";
    case Swap::kOptimizer: return "optimizer";
    case Swap::kModel: return "model";
  }
  return "";
}

// The parts a swap replaces: the step swap drops what optimizer_step() does
// besides stepping (a scheduler of its own), the optimizer swap the step too,
// the model swap the model's own optimizer and initialization with it.
std::vector<std::string> swap_parts(Swap s) {
  switch (s) {
    case Swap::kData: return {"data"};
    case Swap::kInit: return {"init"};
    case Swap::kLoss: return {"loss"};
    case Swap::kLrDown: return {"optimizer"};
    case Swap::kStep: return {"step", "schedule"};
    case Swap::kOptimizer: return {"optimizer", "schedule", "step"};
    case Swap::kModel: return {"model", "init", "optimizer", "schedule", "step"};
  }
  return {};
}

// Held-out skill of the scenario's outputs, in eval mode (as users evaluate) or training mode, without
// gradients. A training-mode pass leaves the model's buffers (batch norm's running statistics) as they were.
Skill heldout_skill(Scenario& s, const std::vector<Batch>& heldout, bool eval_mode) {
  std::vector<torch::Tensor> outs, ys;
  {
    torch::NoGradGuard no_grad;
    const bool was = s.model().is_training();
    std::vector<std::pair<torch::Tensor, torch::Tensor>> buffers;
    if (!eval_mode) {
      for (const torch::Tensor& b : s.model().buffers()) buffers.emplace_back(b, b.clone());
    }
    struct Restore {
      Scenario& s;
      bool was;
      std::vector<std::pair<torch::Tensor, torch::Tensor>>& buffers;
      ~Restore() {
        for (auto& [b, copy] : buffers) b.copy_(copy);
        s.model().train(was);
      }
    } restore{s, was, buffers};
    s.model().train(!eval_mode);
    KeepRng rng;
    rng.reseed(1234);
    for (const Batch& b : heldout) {
      outs.push_back(guarded("forward", [&] { return s.forward(b.inputs, Tap()); }).detach());
      ys.push_back(b.targets);
    }
  }
  if (outs.empty()) return {};
  for (size_t i = 1; i < outs.size(); ++i) {
    if (outs[i].sizes().slice(1) != outs[0].sizes().slice(1) || ys[i].sizes().slice(1) != ys[0].sizes().slice(1)) {
      return task_skill(outs[0], ys[0]);
    }
  }
  return task_skill(torch::cat(outs), torch::cat(ys));
}

bool Trial::learned() const {
  if (!ran || !finite || !std::isfinite(skill_end) || skill_end < 0.2) return false;
  if (!std::isfinite(skill_start) || skill_end >= skill_start + 0.15) return true;
  return skill_start >= 0.2 && skill_end >= skill_start - 0.05;  // a model that starts out able (pretrained) keeps it
}

bool Trial::loss_falling() const {
  // From the loss before any update (the first step's): a run whose loss spikes and comes back to where it
  // started has not learned.
  const double start = losses.empty() ? loss_first : losses.front();
  if (!std::isfinite(start) || !std::isfinite(loss_last) || start <= 0 || loss_last > 0.95 * start) return false;
  if (loss_last <= 0.8 * start) return true;
  // A small fall must be a trend: the slope over the last half of the steps 2 standard errors below 0.
  // (The whole run when its last half is too short to fit a slope to; a fall alone when the run is.)
  const size_t n = losses.size(), from = n - n / 2 >= 8 ? n / 2 : 0;
  if (n < 8) return true;
  double mx = 0, my = 0;
  for (size_t i = from; i < n; ++i) mx += double(i), my += losses[i];
  mx /= double(n - from), my /= double(n - from);
  double sxy = 0, sxx = 0;
  for (size_t i = from; i < n; ++i) sxy += (double(i) - mx) * (losses[i] - my), sxx += (double(i) - mx) * (double(i) - mx);
  const double slope = sxy / sxx;
  double residual = 0;
  for (size_t i = from; i < n; ++i) {
    const double e = losses[i] - (my + slope * (double(i) - mx));
    residual += e * e;
  }
  const double se = std::sqrt(residual / double(n - from - 2) / sxx);
  return std::isfinite(slope) && slope < 0 && (se == 0 || slope / se <= -2);
}

std::string Trial::skill_text(bool end) const {
  const double raw = end ? raw_end : raw_start;
  if (!std::isfinite(raw)) return finite ? "not measured" : "non-finite";
  return metric == "accuracy" ? percent(raw) : fmt(raw);
}

Trial run_trial(const ScenarioFactory& make, Swap swap, const Probe& p, int64_t steps, double lr_factor) {
  Trial t;
  t.swap = swap_name(swap);
  try {
    std::unique_ptr<Scenario> inner = guarded("setup", make);
    SwapScenario s(std::move(inner), swap, p, steps, lr_factor);
    t.what = s.what();
    if (!s.init_differs_.empty()) t.detail = "the program's initialization differs from the defaults: " + list(s.init_differs_, 4);
    Skill start = heldout_skill(s, p.heldout, true);
    t.metric = start.metric, t.skill_start = start.value, t.raw_start = start.raw;
    Trainer trainer(s, /*schedule=*/true);
    std::vector<double> losses;
    for (int64_t i = 0; i < steps; ++i) {
      const std::vector<Batch> batches = trainer.next_batches();
      if (batches.empty()) break;
      const double loss = trainer.step(i, batches, nullptr).item<double>();
      losses.push_back(loss);
      if (!std::isfinite(loss)) {
        t.finite = false;
        break;
      }
    }
    t.steps = int64_t(losses.size());
    t.losses = losses;
    t.ran = true;
    const size_t tenth = std::max<size_t>(losses.size() / 10, 1);
    if (!losses.empty()) {
      t.loss_first = std::accumulate(losses.begin(), losses.begin() + long(std::min(tenth, losses.size())), 0.0) / double(tenth);
      t.loss_last = std::accumulate(losses.end() - long(std::min(tenth, losses.size())), losses.end(), 0.0) / double(tenth);
    }
    if (t.finite) {
      const Skill end = heldout_skill(s, p.heldout, true);
      t.skill_end = end.value, t.raw_end = end.raw;
      t.finite = end.metric != "non-finite outputs";
      t.skill_end_train = heldout_skill(s, p.heldout, false).value;
    }
  } catch (const SwapScenario::Unavailable& e) {
    t.error = e.what();
  } catch (const TrainingError& e) {
    t.ran = false;
    t.error = "the program's code threw in the " + e.stage() + " stage: " + e.message();
  } catch (const std::exception& e) {
    t.ran = false;
    t.error = e.what();
  }
  return t;
}

// ---- reading the trials ----


}  // namespace spikehunt::doctor_detail
