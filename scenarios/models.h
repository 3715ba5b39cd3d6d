// models.h — the built-in models, each exposing its activations through taps.
//   simple_cnn: conv 1→32 3×3 pad 1, act, max-pool 2; conv 32→64 3×3 pad 1,
//               act, max-pool 2; fc 3136→128, act; fc 128→10.
//               421,642 parameters. Taps conv1_act, conv2_act, fc1_act, fc2_logits.
//   mlp:        784 → width (× depth, each followed by the activation) → 10.
//               Taps fc1_act … fcD_act, out_logits.
//   gpt:        decoder-only transformer on byte tokens (GptConfig): token and
//               learned position embeddings; per block pre-LayerNorm causal
//               self-attention (own implementation, optional qk-LayerNorm per
//               head) and a pre-LayerNorm GELU MLP (4 × width); final
//               LayerNorm; a bias-free head (optionally tied). Weights N(0, 0.02),
//               biases 0. Taps per block i: block{i}_attn_logits (q·k/√d before
//               the softmax, future positions as 0), block{i}_mlp_act,
//               block{i}_resid (the residual stream after the block); then
//               out_logits, out_z (log-sum-exp per token) and out_z_mean.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "scenarios/config.h"
#include "scenarios/registry.h"
#include "scenarios/scenario.h"

namespace spikehunt {

torch::Tensor activate(const ActivationConfig& a, const torch::Tensor& x);
// activate(a, x), tapped as `name`. A leaky ReLU on a contiguous float32 CPU
// tensor is computed by one kernel that also takes the output's max |x| (bit
// for bit LibTorch's result and gradient), so the tap reads nothing again.
torch::Tensor activate(const ActivationConfig& a, const torch::Tensor& x, const Tap& tap, const char* name);

class TappedModel : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x, const Tap& tap) = 0;
  virtual std::vector<std::string> tap_names() const = 0;
};

class SimpleCnn : public TappedModel {
 public:
  explicit SimpleCnn(ActivationConfig activation);
  torch::Tensor forward(const torch::Tensor& x, const Tap& tap) override;
  std::vector<std::string> tap_names() const override;

 private:
  ActivationConfig activation_;
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

class Mlp : public TappedModel {
 public:
  Mlp(ActivationConfig activation, int64_t depth, int64_t width);
  torch::Tensor forward(const torch::Tensor& x, const Tap& tap) override;
  std::vector<std::string> tap_names() const override;

 private:
  ActivationConfig activation_;
  std::vector<torch::nn::Linear> hidden_;
  std::vector<std::string> tap_names_;
  torch::nn::Linear out_{nullptr};
};

class Gpt : public TappedModel {
 public:
  explicit Gpt(const GptConfig& config, int64_t vocab = kTextVocab);
  // tokens (B, T) int64 → logits (B, T, vocab).
  torch::Tensor forward(const torch::Tensor& tokens, const Tap& tap) override;
  std::vector<std::string> tap_names() const override;
  const GptConfig& config() const { return config_; }

 private:
  struct Block {
    torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr}, q_ln{nullptr}, k_ln{nullptr};
    torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
    std::string attn_name, mlp_name, resid_name;
  };
  GptConfig config_;
  int64_t vocab_;
  torch::nn::Embedding tokens_{nullptr}, positions_{nullptr};
  std::vector<Block> blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
  torch::nn::Linear head_{nullptr};  // null when tied
};

// The GPT's loss: mean cross-entropy over every token (in fp32) plus
// z_loss × mean(log² Z), Z the softmax's normalizer (Wortsman et al.'s z-loss).
torch::Tensor gpt_loss(const torch::Tensor& logits, const torch::Tensor& targets, double z_loss);

// Builds config.model with config.activation, initialized from
// torch::manual_seed(config.seed) on the CPU (so the init is the same on every device).
std::shared_ptr<TappedModel> make_model(const TrainingConfig& config);

int64_t parameter_count(torch::nn::Module& model);

}  // namespace spikehunt
