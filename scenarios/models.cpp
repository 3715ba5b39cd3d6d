#include "scenarios/models.h"

#include <cmath>
#include <limits>

#include "base/stats_kernels.h"

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

// ---- gpt ----

Gpt::Gpt(const GptConfig& config, int64_t vocab) : config_(config), vocab_(vocab) {
  const int64_t c = config.width;
  const int64_t d = c / config.heads;
  tokens_ = register_module("tok_emb", torch::nn::Embedding(vocab, c));
  positions_ = register_module("pos_emb", torch::nn::Embedding(config.context, c));
  for (int64_t i = 0; i < config.layers; ++i) {
    const std::string p = "block" + std::to_string(i);
    Block b;
    b.ln1 = register_module(p + "_ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})));
    b.qkv = register_module(p + "_qkv", torch::nn::Linear(c, 3 * c));
    if (config.qk_layernorm) {
      b.q_ln = register_module(p + "_q_ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
      b.k_ln = register_module(p + "_k_ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    }
    b.proj = register_module(p + "_proj", torch::nn::Linear(c, c));
    b.ln2 = register_module(p + "_ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})));
    b.fc = register_module(p + "_fc", torch::nn::Linear(c, 4 * c));
    b.out = register_module(p + "_out", torch::nn::Linear(4 * c, c));
    b.attn_name = p + "_attn_logits";
    b.mlp_name = p + "_mlp_act";
    b.resid_name = p + "_resid";
    blocks_.push_back(std::move(b));
  }
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})));
  if (!config.tied_embeddings) head_ = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(c, vocab).bias(false)));
  torch::NoGradGuard no_grad;
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    if (name.find("_ln") != std::string::npos || name.rfind("ln_f", 0) == 0) continue;  // LayerNorms keep (1, 0)
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) item.value().zero_();
    else item.value().normal_(0.0, 0.02);
  }
}

namespace {

// The attention scores as the model uses them: the future masked to 0. A sink
// that reads only the max gets it from the lower triangles in one pass, with
// no masked copy written; a non-finite max, or any other sink, gets the copy.
void tap_causal_scores(const Tap& tap, const char* name, const torch::Tensor& logits, const torch::Tensor& future) {
  if (tap.reads_max_only() && logits.is_cpu() && logits.scalar_type() == torch::kFloat32 && logits.is_contiguous() &&
      logits.dim() >= 2) {
    const int64_t rows = logits.size(-2), cols = logits.size(-1);
    const int64_t matrices = rows * cols == 0 ? 0 : logits.numel() / (rows * cols);
    const float max_abs = lower_triangle_max_abs_parallel(logits.data_ptr<float>(), matrices, rows, cols);
    if (std::isfinite(max_abs)) return tap(name, logits, max_abs);
  }
  tap(name, logits.masked_fill(future, 0.0));
}

}  // namespace

torch::Tensor Gpt::forward(const torch::Tensor& tokens, const Tap& tap) {
  const int64_t b = tokens.size(0), t = tokens.size(1), c = config_.width, h = config_.heads, d = c / h;
  const torch::Tensor pos = torch::arange(t, torch::TensorOptions().dtype(torch::kInt64).device(tokens.device()));
  torch::Tensor x = tokens_->forward(tokens) + positions_->forward(pos);  // (B, T, C)
  const torch::Tensor future =
      torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(tokens.device())).triu(1);
  const double scale = 1.0 / std::sqrt(double(d));
  for (Block& blk : blocks_) {
    const std::vector<torch::Tensor> qkv = blk.qkv->forward(blk.ln1->forward(x)).split(c, -1);
    torch::Tensor q = qkv[0].view({b, t, h, d}).transpose(1, 2);  // (B, H, T, D)
    torch::Tensor k = qkv[1].view({b, t, h, d}).transpose(1, 2);
    const torch::Tensor v = qkv[2].view({b, t, h, d}).transpose(1, 2);
    if (config_.qk_layernorm) {  // in fp32: CPU autocast leaves layer_norm alone, and its weights are fp32
      q = blk.q_ln->forward(q.to(torch::kFloat32));
      k = blk.k_ln->forward(k.to(torch::kFloat32));
    }
    const torch::Tensor logits = torch::matmul(q, k.transpose(-2, -1)) * scale;  // (B, H, T, T)
    if (tap.on()) tap_causal_scores(tap, blk.attn_name.c_str(), logits, future);
    const torch::Tensor att = torch::softmax(logits.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
    const torch::Tensor y = torch::matmul(att, v).transpose(1, 2).reshape({b, t, c});
    x = x + blk.proj->forward(y);
    torch::Tensor m = torch::gelu(blk.fc->forward(blk.ln2->forward(x)));
    tap(blk.mlp_name.c_str(), m);
    x = x + blk.out->forward(m);
    tap(blk.resid_name.c_str(), x);
  }
  x = ln_f_->forward(x);
  torch::Tensor logits = head_ ? head_->forward(x) : torch::matmul(x, tokens_->weight.t());  // (B, T, V)
  tap("out_logits", logits);
  if (tap.on()) {
    torch::NoGradGuard no_grad;
    const torch::Tensor z = torch::logsumexp(logits.detach().to(torch::kFloat32), -1);  // (B, T)
    tap("out_z", z);
    tap("out_z_mean", z.mean());
  }
  return logits;
}

std::vector<std::string> Gpt::tap_names() const {
  std::vector<std::string> names;
  for (const Block& b : blocks_) names.insert(names.end(), {b.attn_name, b.mlp_name, b.resid_name});
  names.insert(names.end(), {"out_logits", "out_z", "out_z_mean"});
  return names;
}

torch::Tensor gpt_loss(const torch::Tensor& logits, const torch::Tensor& targets, double z_loss) {
  const torch::Tensor flat = logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32);
  torch::Tensor loss = torch::nn::functional::cross_entropy(flat, targets.reshape({-1}));
  if (z_loss > 0) loss = loss + z_loss * torch::logsumexp(flat, -1).pow(2).mean();
  return loss;
}

// ---- factory ----

namespace {

using ModelMaker = std::shared_ptr<TappedModel> (*)(const TrainingConfig&);

// One maker a built-in model, in model_kinds()'s order (registry.h names them).
const ModelMaker kModelMakers[] = {
    [](const TrainingConfig& c) -> std::shared_ptr<TappedModel> { return std::make_shared<SimpleCnn>(c.activation); },
    [](const TrainingConfig& c) -> std::shared_ptr<TappedModel> {
      return std::make_shared<Mlp>(c.activation, c.model.mlp_depth, c.model.mlp_width);
    },
    [](const TrainingConfig& c) -> std::shared_ptr<TappedModel> { return std::make_shared<Gpt>(c.model.gpt); },
};

}  // namespace

std::shared_ptr<TappedModel> make_model(const TrainingConfig& config) {
  const std::vector<std::string>& kinds = model_kinds();
  if (kinds.size() != std::size(kModelMakers)) throw std::logic_error("model_kinds() and the model makers differ in number");
  torch::manual_seed(config.seed);
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] == config.model.kind) return kModelMakers[i](config);
  }
  throw InputError("config", "model.kind", config.model.kind, "is not a built-in model");
}

int64_t parameter_count(torch::nn::Module& model) {
  int64_t n = 0;
  for (const torch::Tensor& p : model.parameters()) n += p.numel();
  return n;
}

}  // namespace spikehunt
