#!/usr/bin/env python3
"""Scenarios of the frameworks' own code for the Python tests, registered by
spikehunt.lightning.scenario and spikehunt.hf.scenario from classes and functions
written as their users write them (none knows spikehunt):

  lit_blobs   a LightningModule (tests/python/tiny.py's MLP) and a LightningDataModule of
              seeded Gaussian blobs, 2 epochs, a StepLR per step; lr and width reach the
              module's hparams from the config
  hf_gpt2     a 2-layer GPT-2 configured locally (transformers.GPT2Config; nothing is
              downloaded) on Debian's fortunes as bytes, under the Trainer's own step
"""
import os

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
import transformers

import spikehunt
import spikehunt.hf
import spikehunt.lightning

FORTUNES = "/usr/share/games/fortunes/fortunes"


class LitBlobs(pl.LightningModule):
    def __init__(self, lr, width=16, momentum=0.9):
        super().__init__()
        self.save_hyperparameters()
        self.fc1 = torch.nn.Linear(8, width)
        self.act = torch.nn.LeakyReLU(0.01)
        self.fc2 = torch.nn.Linear(width, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)
        steps = self.trainer.estimated_stepping_batches
        return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(
            opt, step_size=max(steps // 2, 1), gamma=0.5), "interval": "step"}}


class BlobData(pl.LightningDataModule):
    def __init__(self, batch_size=32):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage):
        g = torch.Generator().manual_seed(1234)
        centers = torch.randn(4, 8, generator=g) * 3
        labels = torch.randint(0, 4, (512,), generator=g)
        self.train = torch.utils.data.TensorDataset(centers[labels[:384]] + torch.randn(384, 8, generator=g),
                                                    labels[:384])
        self.val = torch.utils.data.TensorDataset(centers[labels[384:]] + torch.randn(128, 8, generator=g),
                                                  labels[384:])

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return torch.utils.data.DataLoader(self.val, batch_size=64)


spikehunt.lightning.scenario("lit_blobs", LitBlobs, BlobData, trainer={"max_epochs": 2}, num_classes=4,
                             params=[spikehunt.integer("width", 16, 1, 1024, "hidden units")])


class Fortunes(torch.utils.data.Dataset):
    """Debian's fortunes as byte-level rows of 32 tokens."""

    def __init__(self, rows, offset=0):
        data = open(FORTUNES, "rb").read()[offset * 32:(offset + rows) * 32]
        self.rows = torch.tensor(list(data), dtype=torch.long).view(rows, 32)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


def gpt2(n_layer=2):
    config = transformers.GPT2Config(vocab_size=256, n_positions=32, n_embd=32, n_layer=n_layer, n_head=2,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


spikehunt.hf.scenario("hf_gpt2", gpt2, lambda: Fortunes(96), eval_dataset=lambda: Fortunes(32, offset=96),
                      args={"max_steps": 10, "lr_scheduler_type": "linear", "warmup_steps": 2},
                      params=[spikehunt.integer("n_layer", 2, 1, 12, "transformer blocks")])

if __name__ == "__main__":
    spikehunt.main()
