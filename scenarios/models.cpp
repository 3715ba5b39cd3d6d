#include "scenarios/models.h"

#include "scenarios/stats_kernels.h"

namespace spikehunt {

torch::Tensor activate(const ActivationConfig& a, const torch::Tensor& x) {
  switch (a.kind) {
    case ActivationKind::kRelu: return torch::relu(x);
    case ActivationKind::kLeakyRelu: return torch::leaky_relu(x, a.slope);
    case ActivationKind::kGelu: return torch::gelu(x);
    case ActivationKind::kTanh: return torch::tanh(x);
    case ActivationKind::kSigmoid: return torch::sigmoid(x);
  }
  return x;
}

namespace {

// LibTorch's leaky_relu with its own backward; the forward writes the output
// and its max |x| in one pass.
struct LeakyReluMax : torch::autograd::Function<LeakyReluMax> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, double slope,
                               float* max_abs) {
    torch::Tensor out = torch::empty_like(x, torch::MemoryFormat::Contiguous);
    // LibTorch applies the slope as a float32 scalar for float32 tensors.
    *max_abs = leaky_relu_max_abs_parallel(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), float(slope));
    ctx->save_for_backward({x});
    ctx->saved_data["slope"] = slope;
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    // What autograd runs for torch::leaky_relu (derivatives.yaml).
    return {torch::leaky_relu_backward(grad[0], x, ctx->saved_data["slope"].toDouble(), false), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor activate(const ActivationConfig& a, const torch::Tensor& x, const Tap& tap, const char* name) {
  if (tap.on() && a.kind == ActivationKind::kLeakyRelu && x.is_cpu() && x.scalar_type() == torch::kFloat32 &&
      x.is_contiguous()) {
    float max_abs = 0;
    torch::Tensor h = LeakyReluMax::apply(x, a.slope, &max_abs);
    tap(name, h, max_abs);
    return h;
  }
  torch::Tensor h = activate(a, x);
  tap(name, h);
  return h;
}

// ---- simple_cnn ----

SimpleCnn::SimpleCnn(ActivationConfig activation) : activation_(activation) {
  using torch::nn::Conv2dOptions;
  conv1_ = register_module("conv1", torch::nn::Conv2d(Conv2dOptions(1, 32, 3).padding(1)));
  conv2_ = register_module("conv2", torch::nn::Conv2d(Conv2dOptions(32, 64, 3).padding(1)));
  fc1_ = register_module("fc1", torch::nn::Linear(3136, 128));
  fc2_ = register_module("fc2", torch::nn::Linear(128, 10));
}

torch::Tensor SimpleCnn::forward(const torch::Tensor& x, const Tap& tap) {
  torch::Tensor h = activate(activation_, conv1_->forward(x), tap, "conv1_act");  // (B, 32, 28, 28)
  h = torch::max_pool2d(h, 2);
  h = activate(activation_, conv2_->forward(h), tap, "conv2_act");  // (B, 64, 14, 14)
  h = torch::max_pool2d(h, 2).flatten(1);                          // (B, 3136)
  h = activate(activation_, fc1_->forward(h), tap, "fc1_act");      // (B, 128)
  torch::Tensor logits = fc2_->forward(h);  // (B, 10)
  tap("fc2_logits", logits);
  return logits;
}

std::vector<std::string> SimpleCnn::tap_names() const {
  return {"conv1_act", "conv2_act", "fc1_act", "fc2_logits"};
}

// ---- mlp ----

Mlp::Mlp(ActivationConfig activation, int64_t depth, int64_t width) : activation_(activation) {
  int64_t in = 784;
  for (int64_t i = 1; i <= depth; ++i) {
    const std::string name = "fc" + std::to_string(i);
    hidden_.push_back(register_module(name, torch::nn::Linear(in, width)));
    tap_names_.push_back(name + "_act");
    in = width;
  }
  out_ = register_module("out", torch::nn::Linear(in, 10));
  tap_names_.push_back("out_logits");
}

torch::Tensor Mlp::forward(const torch::Tensor& x, const Tap& tap) {
  torch::Tensor h = x.flatten(1);
  for (size_t i = 0; i < hidden_.size(); ++i) {
    h = activate(activation_, hidden_[i]->forward(h), tap, tap_names_[i].c_str());
  }
  torch::Tensor logits = out_->forward(h);
  tap(tap_names_.back().c_str(), logits);
  return logits;
}

std::vector<std::string> Mlp::tap_names() const { return tap_names_; }

// ---- factory ----

std::shared_ptr<TappedModel> make_model(const TrainingConfig& config) {
  torch::manual_seed(config.seed);
  if (config.model.kind == "mlp") {
    return std::make_shared<Mlp>(config.activation, config.model.mlp_depth, config.model.mlp_width);
  }
  if (config.model.kind == "simple_cnn") return std::make_shared<SimpleCnn>(config.activation);
  throw InputError("config", "model.kind", config.model.kind, "is not a built-in model");
}

int64_t parameter_count(torch::nn::Module& model) {
  int64_t n = 0;
  for (const torch::Tensor& p : model.parameters()) n += p.numel();
  return n;
}

}  // namespace spikehunt
