#!/usr/bin/env python3
"""A small GPT in plain PyTorch on real English text (Debian's fortunes, bytes as
tokens), under spikehunt: configs/gpt.json's model (width 128, 2 layers, 4 heads,
context 64, pre-LayerNorm, GELU MLP) written the way a PyTorch user writes one,
AdamW, the config's warm-up and cosine schedule (spikehunt sets each group's lr).
The attention logits are tapped, so an exploding attention is named.

    .venv/bin/python examples/python/gpt.py run --config examples/python/gpt.json
    .venv/bin/python examples/python/gpt.py lr-sensitivity --config examples/python/gpt.json --lrs 1e-3,1e-2,1e-1
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import spikehunt

TEXT = "/usr/share/games/fortunes"
_text = {}


def text_bytes(path):
    """The bytes of a file, or of a folder's regular files (not symlinks, not *.dat) in name order."""
    if path not in _text:
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if not n.endswith(".dat")
                           and os.path.isfile(os.path.join(path, n)) and not os.path.islink(os.path.join(path, n)))
            data = b"".join(open(os.path.join(path, n), "rb").read() for n in names)
        else:
            data = open(path, "rb").read()
        _text[path] = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
    return _text[path]


class Block(nn.Module):
    def __init__(self, width, heads, qk_layernorm):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        d = width // heads
        self.q_ln = nn.LayerNorm(d) if qk_layernorm else nn.Identity()
        self.k_ln = nn.LayerNorm(d) if qk_layernorm else nn.Identity()

    def forward(self, x, future, name):
        b, t, c = x.shape
        d = c // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(c, -1)
        q, k, v = (z.view(b, t, self.heads, d).transpose(1, 2) for z in (q, k, v))
        logits = spikehunt.tap(name + "_attn_logits", (self.q_ln(q) @ self.k_ln(k).transpose(-2, -1)) * d ** -0.5)
        att = torch.softmax(logits.masked_fill(future, float("-inf")), -1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, width, layers, heads, context, qk_layernorm):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, qk_layernorm) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, x):
        t = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        for i, block in enumerate(self.blocks):
            h = block(h, future, f"block{i}")
        return self.head(self.ln_f(h))


class TextGpt(spikehunt.Scenario):
    taps = ["ln_f"]

    def __init__(self, config):
        super().__init__(config)
        self.context = config.model.gpt.context
        self.net = self.build_model(config)
        self.opt = self.build_optimizer(config)
        data = text_bytes(config.dataset.text_path)
        split = len(data) * 9 // 10
        self.train, self.test = data[:split], data[split:]
        windows = (len(self.train) - 1) // (self.context + 1)
        order = torch.randperm(windows, generator=torch.Generator().manual_seed(config.seed))
        batches = order.split(config.batch_size)
        limit = config.max_batches_per_epoch
        self.plan = list(batches[:limit] if limit else batches) * config.protocol.epochs_per_phase
        self.position = 0

    def build_model(self, config):
        g = config.model.gpt
        return Gpt(256, g.width, g.layers, g.heads, g.context, g.qk_layernorm)

    def build_optimizer(self, config):
        o = config.optimizer
        return torch.optim.AdamW(self.net.parameters(), lr=o.lr, betas=tuple(o.betas), eps=o.eps,
                                 weight_decay=o.weight_decay)

    def windows(self, data, starts):
        rows = torch.stack([data[s * (self.context + 1): (s + 1) * (self.context + 1)] for s in starts.tolist()])
        return rows[:, :-1], rows[:, 1:]

    def model(self):
        return self.net

    def optimizers(self):
        return self.opt

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))

    def next_batch(self):
        if self.position == len(self.plan):
            return None
        self.position += 1
        return self.windows(self.train, self.plan[self.position - 1])

    def skip_batches(self, n):
        skipped = min(n, len(self.plan) - self.position)
        self.position += skipped
        return skipped

    def heldout(self, max_samples):
        count = min(max_samples, (len(self.test) - 1) // (self.context + 1))
        return [self.windows(self.test, torch.arange(i, min(i + 64, count))) for i in range(0, count, 64)]

    def planned_steps(self):
        return len(self.plan)

    def phase_names(self):
        return ["text"]

    def num_classes(self):
        return 256


spikehunt.register("py_gpt", TextGpt)

if __name__ == "__main__":
    spikehunt.main()
