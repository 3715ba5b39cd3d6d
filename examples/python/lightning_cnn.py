#!/usr/bin/env python3
"""The motivating case as a Lightning user writes it: a LightningModule of the
SimpleCNN (LeakyReLU, no normalization, SGD with momentum) and a DataModule of
Debian's Fashion-MNIST (/usr/share/datasets/fashion-mnist) whose training
classes change with the epoch: one domain (classes 0-4 or 5-9), the other,
then all (order "AB" or "BA"; train_dataloader() reads trainer.current_epoch,
reloaded every epoch). Neither class knows spikehunt.

Under every verb, through spikehunt.lightning.scenario (the config's
optimizer.lr, optimizer.momentum, batch_size, max_batches_per_epoch and
params.slope / params.order reach the constructors):

    .venv/bin/python examples/python/lightning_cnn.py run --config examples/python/lightning_cnn.json
    .venv/bin/python examples/python/lightning_cnn.py sweep --space examples/python/lightning_cnn_space.json
    .venv/bin/python examples/python/lightning_cnn.py doctor --config examples/python/lightning_cnn.json

or in a plain Lightning fit with the monitor as a callback:

    .venv/bin/python examples/python/lightning_cnn.py fit [--lr 0.05] [--batches 60] [--out results/watch]
"""
import argparse
import os
import sys

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from simple_cnn import fashion  # noqa: E402  (the idx reader of the plain-PyTorch example)

import spikehunt  # noqa: E402
import spikehunt.lightning  # noqa: E402


class LitSimpleCNN(L.LightningModule):
    def __init__(self, lr=0.05, momentum=0.9, slope=0.01):
        super().__init__()
        self.save_hyperparameters()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        slope = self.hparams.slope
        x = F.max_pool2d(F.leaky_relu(self.conv1(x), slope), 2)
        x = F.max_pool2d(F.leaky_relu(self.conv2(x), slope), 2)
        return self.fc2(F.leaky_relu(self.fc1(x.flatten(1)), slope))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)


class FashionDomains(L.LightningDataModule):
    """Epoch 0: the first domain's classes, epoch 1: the other's, then all ten."""

    def __init__(self, batch_size=64, order="AB", batches_per_epoch=0):
        super().__init__()
        self.batch_size, self.order, self.batches_per_epoch = batch_size, order, batches_per_epoch

    def setup(self, stage):
        self.images, self.labels = fashion("train")
        self.test = torch.utils.data.TensorDataset(*fashion("test"))

    def train_dataloader(self):
        domains = {"A": range(0, 5), "B": range(5, 10)}
        epoch = self.trainer.current_epoch
        classes = list(domains[self.order[epoch]]) if epoch < 2 else list(range(10))
        rows = torch.nonzero(torch.isin(self.labels, torch.tensor(classes))).flatten()
        if self.batches_per_epoch:
            rows = rows[torch.randperm(len(rows))[:self.batches_per_epoch * self.batch_size]]
        data = torch.utils.data.TensorDataset(self.images[rows], self.labels[rows])
        return torch.utils.data.DataLoader(data, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return torch.utils.data.DataLoader(self.test, batch_size=256)


# slope and order are declared params; spikehunt cuts each epoch at the config's max_batches_per_epoch.
spikehunt.lightning.scenario(
    "lit_simple_cnn", LitSimpleCNN, FashionDomains,
    trainer={"max_epochs": 3, "reload_dataloaders_every_n_epochs": 1},
    params=[spikehunt.number("slope", 0.01, 0, 1, "LeakyReLU slope"),
            spikehunt.string("order", "AB", ["AB", "BA"], "which domain trains first")])


def fit(argv):
    ap = argparse.ArgumentParser(prog="lightning_cnn.py fit")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batches", type=int, default=60, help="batches an epoch (0: all)")
    ap.add_argument("--order", default="AB", choices=["AB", "BA"])
    ap.add_argument("--out", default="results/watch")
    a = ap.parse_args(argv)
    L.seed_everything(0)
    monitor = spikehunt.lightning.Monitor(out=a.out, taps=["conv1", "conv2", "fc1", "fc2"])
    trainer = L.Trainer(max_epochs=3, reload_dataloaders_every_n_epochs=1, limit_train_batches=a.batches or 1.0,
                        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, num_sanity_val_steps=0, limit_val_batches=4, callbacks=[monitor])
    trainer.fit(LitSimpleCNN(lr=a.lr), FashionDomains(order=a.order))
    return 0 if monitor.watch.ended is None else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["fit"]:
        sys.exit(fit(sys.argv[2:]))
    spikehunt.main()
