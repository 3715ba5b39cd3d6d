// doctor/experiments.cpp — the doctor as a shrinker of the program: when the
// program as written does not learn, short bursts with one part of it swapped
// for a reference that any correct program of its kind could use (the data,
// the initialization, the loss, the step, the optimizer, the model), and the
// smallest swap that makes it learn names the faulty part. Learning is read
// the way a user reads it, on held-out data in eval mode without gradients,
// by a task skill that is 0 at chance (task_skill); the evaluation is a part
// too: a model that learns in training mode and not in eval mode.
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

namespace spikehunt::doctor_detail {

using json = nlohmann::json;

// ---- the task's skill and its reference loss ----

namespace {

bool integer_ids(const torch::Tensor& y) {
  return y.defined() && !y.is_floating_point() && !y.is_complex() && y.scalar_type() != torch::kBool;
}

bool binary_values(const torch::Tensor& y) {
  return y.is_floating_point() && ((y == 0) | (y == 1)).all().item<bool>();
}

// Area under the ROC curve of scores for 0/1 labels (ties counted half); NAN with one class.
double auc(const torch::Tensor& scores, const torch::Tensor& labels) {
  const torch::Tensor s = scores.to(torch::kFloat64).flatten(), y = labels.to(torch::kFloat64).flatten();
  const int64_t pos = y.sum().item<int64_t>(), n = y.numel();
  if (pos == 0 || pos == n) return NAN;
  // Mean rank of the positives (average ranks for ties).
  const torch::Tensor order = std::get<1>(s.sort());
  const torch::Tensor sorted = s.index_select(0, order);
  std::vector<double> ranks(static_cast<size_t>(n));
  const double* v = sorted.data_ptr<double>();
  const int64_t* o = order.data_ptr<int64_t>();
  for (int64_t i = 0; i < n;) {
    int64_t j = i;
    while (j + 1 < n && v[j + 1] == v[i]) ++j;
    for (int64_t k = i; k <= j; ++k) ranks[size_t(o[k])] = 0.5 * double(i + j) + 1;
    i = j + 1;
  }
  const double* yy = y.data_ptr<double>();
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += yy[i] > 0.5 ? ranks[size_t(i)] : 0;
  return (sum - double(pos) * double(pos + 1) / 2) / (double(pos) * double(n - pos));
}

}  // namespace

Skill task_skill(const torch::Tensor& outputs, const torch::Tensor& targets) {
  Skill k;
  if (!outputs.defined() || !targets.defined() || outputs.dim() == 0 || targets.dim() == 0) return k;
  torch::NoGradGuard no_grad;
  const torch::Tensor out = outputs.detach().to(torch::kCPU).to(torch::kFloat64);
  const torch::Tensor y = targets.detach().to(torch::kCPU);
  if (!torch::isfinite(out).all().item<bool>()) {
    k.metric = "non-finite outputs";
    return k;
  }
  // Class ids: (B) against (B, C), or (B, T) against (B, T, C); ids outside [0, C) (an ignore index) left out.
  if (integer_ids(y) && out.dim() == y.dim() + 1 && out.sizes().slice(0, y.dim()) == y.sizes() && out.size(-1) > 1) {
    const int64_t c = out.size(-1);
    const torch::Tensor ids = y.to(torch::kInt64).flatten();
    const torch::Tensor keep = (ids >= 0) & (ids < c);
    if (keep.sum().item<int64_t>() == 0) return k;
    const torch::Tensor labels = ids.masked_select(keep);
    const torch::Tensor predicted = out.reshape({-1, c}).argmax(1).masked_select(keep);
    const double accuracy = (predicted == labels).to(torch::kFloat64).mean().item<double>();
    const double majority =
        torch::bincount(labels, {}, c).max().item<double>() / double(labels.numel());
    k.metric = "accuracy";
    k.raw = accuracy;
    k.chance = majority;
    k.value = majority < 1 ? (accuracy - majority) / (1 - majority) : 0;
    return k;
  }
  if (!y.is_floating_point() || out.numel() != y.numel() || out.size(0) != y.size(0)) return k;
  const torch::Tensor o2 = out.reshape({out.size(0), -1}), y2 = y.to(torch::kFloat64).reshape({y.size(0), -1});
  if (binary_values(y2)) {  // binary or multi-label targets: the mean AUC of the columns that hold both
    double sum = 0;
    int n = 0;
    for (int64_t j = 0; j < o2.size(1); ++j) {
      const double a = auc(o2.select(1, j), y2.select(1, j));
      if (std::isfinite(a)) sum += a, ++n;
    }
    if (n == 0) return k;
    k.metric = "AUC";
    k.raw = sum / n;
    k.chance = 0.5;
    k.value = 2 * k.raw - 1;
    return k;
  }
  // Real targets: the mean correlation of each output column with its target.
  double sum = 0;
  int n = 0;
  for (int64_t j = 0; j < o2.size(1); ++j) {
    const torch::Tensor a = o2.select(1, j) - o2.select(1, j).mean(), b = y2.select(1, j) - y2.select(1, j).mean();
    const double den = std::sqrt(a.square().sum().item<double>() * b.square().sum().item<double>());
    if (den > 0) sum += (a * b).sum().item<double>() / den, ++n;
    else if (b.square().sum().item<double>() > 0) ++n;  // a constant output: no correlation
  }
  if (n == 0) return k;
  k.metric = "correlation";
  k.raw = sum / n;
  k.chance = 0;
  k.value = k.raw;
  return k;
}

std::string reference_loss_name(const torch::Tensor& outputs, const torch::Tensor& targets) {
  if (!outputs.defined() || !targets.defined() || outputs.dim() == 0) return "";
  if (integer_ids(targets) && outputs.dim() == targets.dim() + 1 && outputs.size(-1) > 1 &&
      outputs.sizes().slice(0, targets.dim()) == targets.sizes()) {
    return "cross-entropy";
  }
  if (targets.is_floating_point() && outputs.numel() == targets.numel()) {
    return binary_values(targets) ? "binary cross-entropy on the logits" : "mean squared error";
  }
  return "";
}

torch::Tensor reference_loss(const torch::Tensor& outputs, const torch::Tensor& targets) {
  namespace F = torch::nn::functional;
  const std::string name = reference_loss_name(outputs, targets);
  if (name == "cross-entropy") {
    return F::cross_entropy(outputs.reshape({-1, outputs.size(-1)}).to(torch::kFloat32),
                            targets.reshape({-1}).to(torch::kInt64), F::CrossEntropyFuncOptions().ignore_index(-100));
  }
  if (name == "binary cross-entropy on the logits") {
    return F::binary_cross_entropy_with_logits(outputs.reshape(targets.sizes()).to(torch::kFloat32),
                                               targets.to(torch::kFloat32));
  }
  if (name == "mean squared error") return F::mse_loss(outputs.reshape(targets.sizes()).to(torch::kFloat32), targets.to(torch::kFloat32));
  return {};
}

namespace {

// ---- the references ----

// Adam (lr 1e-3, betas 0.9 / 0.999, eps 1e-8) on fp32 copies of whatever
// parameters it is given, written back to them after each step.
class ReferenceAdam : public torch::optim::Optimizer {
 public:
  static constexpr double kLr = 1e-3;
  explicit ReferenceAdam(std::vector<torch::Tensor> params)
      : torch::optim::Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                                std::make_unique<torch::optim::AdamOptions>(kLr)) {
    for (const torch::Tensor& p : param_groups()[0].params()) {
      master_.push_back(p.detach().to(torch::kFloat32).clone());
      m_.push_back(torch::zeros_like(master_.back()));
      v_.push_back(torch::zeros_like(master_.back()));
    }
  }
  torch::Tensor step(LossClosure = nullptr) override {
    torch::NoGradGuard no_grad;
    ++t_;
    const double c1 = 1 - std::pow(0.9, double(t_)), c2 = 1 - std::pow(0.999, double(t_));
    const std::vector<torch::Tensor>& params = param_groups()[0].params();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].grad().defined()) continue;
      const torch::Tensor g = params[i].grad().to(torch::kFloat32);
      m_[i].mul_(0.9).add_(g, 0.1);
      v_[i].mul_(0.999).addcmul_(g, g, 0.001);
      master_[i].addcdiv_(m_[i] / c1, (v_[i] / c2).sqrt_().add_(1e-8), -kLr);
      params[i].copy_(master_[i]);
    }
    return {};
  }

 private:
  std::vector<torch::Tensor> master_, m_, v_;
  int64_t t_ = 0;
};

// A model any task of these shapes can learn with: float inputs flattened
// through one hidden layer of 128 ReLU units; token ids embedded (64) and
// mapped per position, or averaged over the positions for one output a sample.
class ReferenceModel : public torch::nn::Module {
 public:
  ReferenceModel(const torch::Tensor& inputs, const torch::Tensor& outputs, int64_t vocabulary)
      : out_tail_(outputs.sizes().slice(1).vec()) {
    const int64_t out_numel = outputs[0].numel();
    if (inputs.is_floating_point()) {
      in_ = register_module("hidden", torch::nn::Linear(inputs[0].numel(), 128));
      out_ = register_module("out", torch::nn::Linear(128, out_numel));
    } else {
      per_position_ = outputs.dim() == inputs.dim() + 1 && outputs.sizes().slice(0, inputs.dim()) == inputs.sizes();
      embedding_ = register_module("embedding", torch::nn::Embedding(vocabulary, 64));
      out_ = register_module("out", torch::nn::Linear(64, per_position_ ? outputs.size(-1) : out_numel));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0);
    if (in_) {
      std::vector<int64_t> shape = {b};
      shape.insert(shape.end(), out_tail_.begin(), out_tail_.end());
      return out_(torch::relu(in_(x.reshape({b, -1}).to(torch::kFloat32)))).reshape(shape);
    }
    const torch::Tensor e = embedding_(x.to(torch::kInt64));
    if (per_position_) return out_(e);
    std::vector<int64_t> shape = {b};
    shape.insert(shape.end(), out_tail_.begin(), out_tail_.end());
    return out_(e.reshape({b, -1, e.size(-1)}).mean(1)).reshape(shape);
  }

 private:
  std::vector<int64_t> out_tail_;
  bool per_position_ = false;
  torch::nn::Linear in_{nullptr}, out_{nullptr};
  torch::nn::Embedding embedding_{nullptr};
};

bool low_precision(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf;
}

// Steps one of the scenario's own optimizers; its low-precision parameters
// (bf16, fp16) on fp32 copies kept here, rounded back after each step.
class MasterWeights {
 public:
  void step(torch::optim::Optimizer& optimizer) {
    struct Swapped {
      torch::Tensor param, low, grad;
    };
    std::vector<Swapped> swapped;
    {
      torch::NoGradGuard no_grad;
      for (auto& group : optimizer.param_groups()) {
        for (torch::Tensor& p : group.params()) {
          if (!low_precision(p)) continue;
          auto [it, fresh] = master_.try_emplace(p.unsafeGetTensorImpl());
          if (fresh) it->second = p.detach().to(torch::kFloat32).clone();
          const torch::Tensor grad = p.grad();
          swapped.push_back({p, p.detach(), grad});
          p.set_data(it->second);
          if (grad.defined()) p.mutable_grad() = grad.to(torch::kFloat32);
        }
      }
    }
    optimizer.step();
    torch::NoGradGuard no_grad;
    for (Swapped& s : swapped) {
      torch::Tensor master = s.param.detach();
      master_[s.param.unsafeGetTensorImpl()] = master;
      s.low.copy_(master);
      s.param.set_data(s.low);
      s.param.mutable_grad() = s.grad;
    }
  }
  bool any(torch::optim::Optimizer& optimizer) const {
    for (auto& group : optimizer.param_groups()) {
      for (const torch::Tensor& p : group.params()) {
        if (low_precision(p)) return true;
      }
    }
    return false;
  }

 private:
  std::map<const void*, torch::Tensor> master_;
};

// ---- the program with one part swapped ----

int64_t vocabulary_of(const std::vector<Batch>& batches) {
  int64_t top = 0;
  for (const Batch& b : batches) {
    if (!b.inputs.is_floating_point()) top = std::max(top, b.inputs.max().item<int64_t>());
  }
  return top + 1;
}

class SwapScenario : public Scenario {
 public:
  SwapScenario(std::unique_ptr<Scenario> inner, Swap swap, const Probe& probe, int64_t steps)
      : inner_(std::move(inner)), swap_(swap) {
    TrainingConfig c = inner_->config();
    if (swap == Swap::kStep || swap == Swap::kOptimizer || swap == Swap::kModel) c.schedule = ScheduleConfig{};
    bind_config(c);
    const Batch& first = probe.batches.front();
    if (swap == Swap::kInit) {
      torch::manual_seed(inner_->config().seed);
      reset_ = guarded("setup", [&] { return inner_->reset_parameters(); });
      if (reset_.empty()) throw Unavailable("no module of the model has a reset_parameters() of its own");
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
          if (lr_text_.empty()) lr_text_ = fmt(group_lr(group)) + " -> " + fmt(group_lr(group) * 0.1);
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
          set_group_lr(group, lr * 0.1);
        }
      }
      inner_->optimizer_step();
      for (auto& [group, lr] : held) {
        if (group_lr(*group) == lr * 0.1) set_group_lr(*group, lr);
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
      case Swap::kLrDown: return "the program's own optimizers at a tenth of their learning rate (" + lr_text_ + ")";
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
  std::string loss_name_, lr_text_;
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
  const size_t n = losses.size(), from = n / 2;
  if (n - from < 8) return false;
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

Trial run_trial(const ScenarioFactory& make, Swap swap, const Probe& p, int64_t steps) {
  Trial t;
  t.swap = swap_name(swap);
  try {
    std::unique_ptr<Scenario> inner = guarded("setup", make);
    SwapScenario s(std::move(inner), swap, p, steps);
    t.what = s.what();
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

namespace {

bool failing(const Trial& b) {
  if (!b.finite) return true;
  if (!std::isfinite(b.skill_end)) return false;
  if (b.skill_end <= -0.2) return true;  // it learns the opposite
  if (b.extreme) return true;  // the monitor flagged a step: what does a swap do to it?
  if (std::isfinite(b.skill_start) && b.skill_end < b.skill_start - 0.2) return true;  // it unlearns what it could
  return b.skill_end < 0.2 && b.skill_end - (std::isfinite(b.skill_start) ? b.skill_start : 0) < 0.1 && !b.loss_falling();
}

std::string learning_text(const Trial& t, int64_t steps) {
  std::string s = "held-out " + t.metric + " " + t.skill_text(false) + " -> " + t.skill_text(true);
  if (std::isfinite(t.loss_first) && std::isfinite(t.loss_last)) s += ", its loss " + fmt(t.loss_first) + " -> " + fmt(t.loss_last);
  if (!t.finite) s += ", non-finite after " + std::to_string(t.steps) + " steps";
  else s += " in " + std::to_string(steps) + " steps";
  return s;
}

}  // namespace

Experiments run_experiments(const ScenarioFactory& make, const Probe& p, const Watched& w, int64_t steps) {
  Experiments e;
  Trial& b = e.baseline;
  b.swap = "";
  b.what = "the program as written";
  b.ran = !w.records.empty();
  b.steps = int64_t(w.records.size());
  b.finite = !w.verdict.failure_step;
  b.extreme = w.verdict.onset_step.has_value();
  b.metric = w.skill_start.metric;
  b.skill_start = w.skill_start.value, b.raw_start = w.skill_start.raw;
  b.skill_end = w.skill_end.value, b.raw_end = w.skill_end.raw;
  b.skill_end_train = w.skill_end_train.value, b.raw_end_train = w.skill_end_train.raw;
  for (const StepRecord& r : w.records) b.losses.push_back(r.loss);
  if (!w.records.empty()) {
    const size_t n = w.records.size(), tenth = std::max<size_t>(n / 10, 1);
    double first = 0, last = 0;
    for (size_t i = 0; i < tenth; ++i) first += w.records[i].loss, last += w.records[n - 1 - i].loss;
    b.loss_first = first / double(tenth), b.loss_last = last / double(tenth);
  }
  if (b.metric.empty() || (!std::isfinite(b.skill_start) && b.finite)) {
    e.unmeasured = "no held-out skill to read: the outputs and targets are not class ids, binary targets or real "
                   "values of the outputs' size";
    return e;
  }
  // The evaluation: learned in training mode, not in eval mode.
  if (b.finite && std::isfinite(b.skill_end_train) && std::isfinite(b.skill_end) && b.skill_end_train >= 0.3 &&
      b.skill_end <= b.skill_end_train - 0.25) {
    e.parts = {"evaluation"};
    return e;
  }
  e.failing = failing(b);
  if (!e.failing) return e;
  {  // The program's optimizers as they are set, for the text.
    std::unique_ptr<Scenario> s = guarded("setup", make);
    for (const NamedOptimizer& o : s->optimizers()) {
      const std::map<std::string, double> set = group_settings(*o.optimizer, 0);
      std::string d = optimizer_kind(*o.optimizer);
      for (const char* k : {"lr", "momentum", "weight_decay", "eps", "beta1", "beta2"}) {
        if (set.count(k) && (set.at(k) != 0 || std::string(k) == "lr")) d += std::string(" ") + k + " " + fmt(set.at(k));
      }
      e.program_optimizer += (e.program_optimizer.empty() ? "" : "; ") + d;
    }
  }
  for (Swap s : {Swap::kData, Swap::kInit, Swap::kLoss, Swap::kLrDown, Swap::kStep, Swap::kOptimizer, Swap::kModel}) {
    if (s == Swap::kLrDown && b.finite && !b.extreme) continue;  // for a run that blew up or went extreme
    e.swaps.push_back(run_trial(make, s, p, std::max<int64_t>(b.steps, steps)));
  }
  // The winning swaps, then the smallest of them: none whose parts hold another winner's.
  std::vector<const Trial*> winners;
  for (const Trial& t : e.swaps) {
    const bool better = !b.finite || !std::isfinite(b.skill_end) || t.skill_end >= b.skill_end + 0.15;
    if (t.learned() && better) winners.push_back(&t);
  }
  auto parts_of = [](const Trial& t) {
    for (Swap s : {Swap::kData, Swap::kInit, Swap::kLoss, Swap::kLrDown, Swap::kStep, Swap::kOptimizer, Swap::kModel}) {
      if (t.swap == swap_name(s)) return swap_parts(s);
    }
    return std::vector<std::string>{};
  };
  for (const Trial* t : winners) {
    const std::vector<std::string> mine = parts_of(*t);
    bool minimal = true;
    for (const Trial* o : winners) {
      if (o == t) continue;
      const std::vector<std::string> theirs = parts_of(*o);
      minimal = minimal && !(theirs.size() < mine.size() &&
                             std::all_of(theirs.begin(), theirs.end(), [&](const std::string& x) {
                               return std::find(mine.begin(), mine.end(), x) != mine.end();
                             }));
    }
    if (minimal) e.winners.push_back(t->swap);
  }
  for (const std::string& w2 : e.winners) {
    for (const Trial& t : e.swaps) {
      if (t.swap != w2) continue;
      for (const std::string& part : parts_of(t)) {
        if (std::find(e.parts.begin(), e.parts.end(), part) == e.parts.end()) e.parts.push_back(part);
      }
    }
  }
  return e;
}

// ---- the sign ----

VitalSign faulty_part(const Experiments& e, int64_t steps) {
  VitalSign v = sign("faulty_part");
  const Trial& b = e.baseline;
  json trials = json::array();
  for (const Trial* t : [&] {
         std::vector<const Trial*> all = {&b};
         for (const Trial& s : e.swaps) all.push_back(&s);
         return all;
       }()) {
    trials.push_back({{"swap", t->swap.empty() ? "none" : t->swap}, {"what", t->what}, {"ran", t->ran}, {"error", t->error},
                      {"steps", t->steps}, {"finite", t->finite}, {"metric", t->metric},
                      {"skill_start", number(t->skill_start)}, {"skill_end", number(t->skill_end)},
                      {"skill_end_train_mode", number(t->skill_end_train)}, {"metric_start", number(t->raw_start)},
                      {"metric_end", number(t->raw_end)}, {"loss_first", number(t->loss_first)},
                      {"loss_last", number(t->loss_last)}, {"learned", t->learned()}});
  }
  v.data = {{"trials", trials}, {"failing", e.failing}, {"parts", e.parts}, {"winners", e.winners}};
  if (!e.unmeasured.empty()) return skipped("faulty_part", e.unmeasured);
  v.evidence = "the program as written: " + learning_text(b, b.steps);
  if (e.parts == std::vector<std::string>{"evaluation"}) {
    v.part = "evaluation";
    v.named = {"evaluation"};
    v.evidence += "; in training mode (without gradients) the held-out " + b.metric + " is " +
                  (b.metric == "accuracy" ? percent(b.raw_end_train) : fmt(b.raw_end_train));
    fail(v, kRankExperiment,
         "the faulty part is the evaluation: after " + std::to_string(b.steps) + " steps the model predicts the held-out "
             "data with " + b.metric + " " + (b.metric == "accuracy" ? percent(b.raw_end_train) : fmt(b.raw_end_train)) +
             " in training mode but " + b.skill_text(true) + " in eval mode, as users evaluate it (model.eval(), no "
             "gradients): what runs only in eval mode (another copy of the weights such as an EMA, a branch on "
             "self.training, a mode-dependent layer) does not follow the training",
         "evaluate the weights that train, or check what forward() does when self.training is False");
    return v;
  }
  if (!e.failing) {
    v.evidence += b.loss_falling() && b.skill_end < 0.2 ? ": it learns (its loss falls), no part swapped"
                                                        : ": it learns, no part swapped";
    return v;
  }
  std::string tried;
  for (const Trial& t : e.swaps) {
    tried += "; " + t.what + ": " + (t.ran ? learning_text(t, t.steps) : "not run (" + t.error + ")");
  }
  v.evidence += tried;
  if (e.winners.empty()) {
    // Nothing swapped made it learn either: too short for the experiment to tell, or two parts at once.
    VitalSign none = skipped("faulty_part", v.evidence + ": no single part swapped for a reference makes it learn in " +
                                                std::to_string(b.steps) + " steps either, so the experiment names no part "
                                                "(a longer run, doctor --steps, or two faulty parts at once)");
    none.data = v.data;
    return none;
  }
  const Trial* win = nullptr;
  for (const Trial& t : e.swaps) {
    if (t.swap == e.winners.front()) win = &t;
  }
  std::vector<std::string> stay;
  for (const Trial& t : e.swaps) {
    if (t.ran && !t.learned()) stay.push_back(t.swap);
  }
  v.part = win->swap;
  v.named = e.winners;
  const bool inverted = b.finite && std::isfinite(b.skill_end) && b.skill_end <= -0.2;
  // One narrow swap names the part; a broad one (an optimizer that normalizes its steps works around faults
  // elsewhere), or several parts each making it learn (a fragile run that any change tips), name it weakly.
  const bool broad = !e.strong();
  std::vector<std::string> parts;
  for (const std::string& w : e.winners) parts.push_back(w == "learning_rate" ? "optimizer's learning rate" : w);
  std::string cause = "the faulty part is the " + list(parts, 3) + ": with " + win->what + ", " +
                      learning_text(*win, win->steps) + ", where the program as written gives " + learning_text(b, b.steps);
  if (!e.program_optimizer.empty() &&
      (std::find(e.winners.begin(), e.winners.end(), "optimizer") != e.winners.end() ||
       std::find(e.winners.begin(), e.winners.end(), "learning_rate") != e.winners.end())) {
    cause += " (the program's optimizer: " + e.program_optimizer + ")";
  }
  if (inverted) cause += " (below chance: its outputs rank the classes the opposite way, as if its targets were inverted)";
  if (!stay.empty()) cause += "; swapping the " + list(stay, 6) + " does not make it learn";
  v.data["broad"] = broad;
  fail(v, broad ? kRankExperimentBroad : kRankExperiment, cause,
       "compare that part of the program with the reference that worked: the other signs say what in it differs");
  return v;
}

}  // namespace spikehunt::doctor_detail
