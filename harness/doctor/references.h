// doctor/references.h — the references the doctor's experiments put in place
// of a part of the program (internal to harness/doctor/): Adam on float32
// copies of the parameters (ReferenceAdam), a model any task of the program's
// input and output shapes can learn with (ReferenceModel), and float32 master
// weights for a program's own optimizer over low-precision parameters.
#pragma once

#include <cmath>
#include <map>

#include "harness/doctor/signs.h"

namespace spikehunt::doctor_detail {


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

inline bool low_precision(const torch::Tensor& t) {
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


}  // namespace spikehunt::doctor_detail
