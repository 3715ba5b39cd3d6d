#!/usr/bin/env python3
"""A LLaMA-style decoder in PyTorch 2.x on real English text (Debian's fortunes,
bytes as tokens), under spikehunt, written as such a model is written today:
nn.RMSNorm, rotary position embeddings, F.scaled_dot_product_attention
(causal, fused), a SwiGLU MLP, AdamW with its fused (or foreach) kernels, and
bf16 torch.autocast in its own forward. params.compile wraps the model in
torch.compile. The data, the batches and the held-out split are gpt.py's.

    .venv/bin/python examples/python/llama.py run --config examples/python/llama.json
    .venv/bin/python examples/python/llama.py sweep --space examples/python/llama_space.json
    .venv/bin/python examples/python/llama.py doctor --config examples/python/llama.json

What the monitor reads: every parameter, gradient and AdamW state tensor, the
loss, and the outputs of the submodules in `taps` (forward hooks). SDPA never
materializes the attention logits, so they cannot be tapped; each block taps
the largest |q|·|k| bound instead (block0_qk_bound), which is what an
attention-logit blow-up grows first.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import spikehunt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import TextGpt  # noqa: E402  (the fortunes data, batches and held-out split)


def rotary_tables(context, head_dim, base=10000.0):
    """cos and sin of the rotary angles, (T, head_dim / 2) each."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(context, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def rotate(x, cos, sin):
    """Rotary embedding of x (B, H, T, D): pairs (x[2i], x[2i+1]) turned by the position's angles."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, width, heads, name):
        super().__init__()
        self.heads, self.name = heads, name
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, -1))
        q, k = rotate(q, cos[:t], sin[:t]), rotate(k, cos[:t], sin[:t])
        # The bound max|q| * max|k| / sqrt(d) on every attention logit, since SDPA keeps the logits to itself.
        spikehunt.tap(self.name + "_qk_bound",
                      q.detach().abs().amax() * k.detach().abs().amax() * q.shape[-1] ** 0.5)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class SwiGLU(nn.Module):
    def __init__(self, width):
        super().__init__()
        hidden = 64 * ((8 * width // 3 + 63) // 64)
        self.gate, self.up = nn.Linear(width, hidden, bias=False), nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, width, heads, name):
        super().__init__()
        self.attn_norm, self.mlp_norm = nn.RMSNorm(width), nn.RMSNorm(width)
        self.attn, self.mlp = Attention(width, heads, name), SwiGLU(width)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, vocab, width, layers, heads, context, bf16):
        super().__init__()
        self.bf16 = bf16
        self.tok = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width, heads, f"block{i}") for i in range(layers))
        self.norm_f = nn.RMSNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        cos, sin = rotary_tables(context, width // heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens):
        with torch.autocast(device_type=tokens.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            h = self.tok(tokens)
            for block in self.blocks:
                h = block(h, self.cos, self.sin)
            logits = self.head(self.norm_f(h))
        return logits.float()  # the loss in fp32, as mixed-precision training does


class TextLlama(TextGpt):
    taps = ["blocks.0.mlp", "norm_f"]

    def build_model(self, config):
        g, p = config.model.gpt, config.params
        net = Llama(256, g.width, g.layers, g.heads, g.context, bf16=p["autocast_bf16"])
        self.compiled = torch.compile(net) if p["compile"] else net
        return net  # the module whose parameters and submodules are watched

    def build_optimizer(self, config):
        o = config.optimizer
        kernel = config.params["adamw_kernel"]  # "fused" or "foreach": AdamW's multi-tensor kernels
        return torch.optim.AdamW(self.net.parameters(), lr=o.lr, betas=tuple(o.betas), eps=o.eps,
                                 weight_decay=o.weight_decay, **{kernel: True})

    def forward(self, inputs):
        return self.compiled(inputs)


spikehunt.register("py_llama", TextLlama, params=[
    spikehunt.boolean("autocast_bf16", True, "forward under torch.autocast(bfloat16), the loss in fp32"),
    spikehunt.boolean("compile", False, "train the model through torch.compile"),
    spikehunt.string("adamw_kernel", "fused", ["fused", "foreach"], "AdamW's fused or foreach kernels"),
])

if __name__ == "__main__":
    spikehunt.main()
