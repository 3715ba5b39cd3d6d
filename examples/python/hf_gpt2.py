#!/usr/bin/env python3
"""A Hugging Face user's training: a 2-layer GPT-2 configured locally
(transformers.GPT2Config: nothing is downloaded) learning Debian's fortunes
(package fortunes) as bytes, under transformers' Trainer with its own AdamW,
linear warm-up and decay, and gradient clipping. The model and dataset code
knows nothing of spikehunt.

Under every verb, through spikehunt.hf.scenario (the config's optimizer.lr,
batch_size, seed, grad_clip and params.n_layer / params.n_embd reach the
Trainer and the model):

    .venv/bin/python examples/python/hf_gpt2.py run --config examples/python/hf_gpt2.json
    .venv/bin/python examples/python/hf_gpt2.py sweep --space examples/python/hf_gpt2_space.json
    .venv/bin/python examples/python/hf_gpt2.py doctor --config examples/python/hf_gpt2.json

or in a plain trainer.train() with the monitor as a callback:

    .venv/bin/python examples/python/hf_gpt2.py train [--lr 1e-3] [--steps 60] [--out results/watch]
"""
import argparse
import sys

import torch
import transformers

import spikehunt
import spikehunt.hf

FORTUNES = "/usr/share/games/fortunes/fortunes"
CONTEXT = 64


class FortuneBytes(torch.utils.data.Dataset):
    """Debian's fortunes as rows of CONTEXT bytes; held out: the rows after the first `rows`."""

    def __init__(self, rows=2048, heldout=False):
        with open(FORTUNES, "rb") as f:
            data = torch.tensor(list(f.read()), dtype=torch.long)
        data = data[:len(data) // CONTEXT * CONTEXT].view(-1, CONTEXT)
        self.rows = data[rows:rows + 256] if heldout else data[:rows]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


def gpt2(n_layer=2, n_embd=64):
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=256, n_positions=CONTEXT, n_embd=n_embd, n_layer=n_layer, n_head=4,
        bos_token_id=10, eos_token_id=10))


ARGS = {"max_steps": 200, "warmup_steps": 20, "lr_scheduler_type": "linear", "max_grad_norm": 1.0}

spikehunt.hf.scenario("hf_gpt2_fortunes", gpt2, FortuneBytes, args=ARGS,
                      eval_dataset=lambda: FortuneBytes(heldout=True),
                      params=[spikehunt.integer("n_layer", 2, 1, 24, "transformer blocks"),
                              spikehunt.integer("n_embd", 64, 8, 4096, "width (a multiple of 4 heads)")])


def train(argv):
    ap = argparse.ArgumentParser(prog="hf_gpt2.py train")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--out", default="results/watch")
    a = ap.parse_args(argv)
    transformers.set_seed(0)
    monitor = spikehunt.hf.Monitor(out=a.out)
    args = transformers.TrainingArguments(output_dir="results/hf_gpt2", per_device_train_batch_size=16,
                                          learning_rate=a.lr, report_to=[], save_strategy="no", use_cpu=True,
                                          logging_steps=20, disable_tqdm=True, **{**ARGS, "max_steps": a.steps})
    transformers.Trainer(model=gpt2(), args=args, train_dataset=FortuneBytes(), callbacks=[monitor]).train()
    return 0 if monitor.watch.ended is None else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["train"]:
        sys.exit(train(sys.argv[2:]))
    spikehunt.main()
