"""A Lightning fit over several CPU processes (strategy "ddp", gloo) under
spikehunt.lightning.Monitor, for tests/python/test_python_ddp.py:

    python3 ddp_lightning.py DEVICES OUT [--nan-rank R --nan-step S]

Lightning starts the other ranks itself (it runs this script again), and
shards each epoch with a DistributedSampler (shuffled, seed 0); DEVICES 1 trains
the global batches two such ranks make, in one process. With
--nan-rank, rank R's training_step puts a NaN into its copy of the batch at
step S (after the monitor hashed the batch: the first non-finite tensor is the
first layer's output). Rank 0 prints the monitor's folder on its last line.
"""
import argparse
import os
import sys
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_lightning as pl  # noqa: E402

import spikehunt.lightning  # noqa: E402
from ddp_steps import GLOBAL_BATCH, Net, data  # noqa: E402


class Lit(pl.LightningModule):
    def __init__(self, nan_rank, nan_step):
        super().__init__()
        self.net = Net()
        self.nan_rank, self.nan_step = nan_rank, nan_step

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.global_rank == self.nan_rank and batch_idx == self.nan_step:
            x = x.clone()
            x[0, 0] = float("nan")
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("devices", type=int)
    p.add_argument("out")
    p.add_argument("--nan-rank", type=int, default=-1)
    p.add_argument("--nan-step", type=int, default=-1)
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    xs, ys = data(6)
    dataset = torch.utils.data.TensorDataset(xs.reshape(-1, 20), ys.reshape(-1))
    if a.devices > 1:  # Lightning puts in a DistributedSampler, shuffling with seed 0
        loader = torch.utils.data.DataLoader(dataset, batch_size=GLOBAL_BATCH // a.devices)
    else:  # one process, the global batches two ranks of that sampler make
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0)).tolist()
        shards, half = [order[0::2], order[1::2]], GLOBAL_BATCH // 2
        batches = [shards[0][k:k + half] + shards[1][k:k + half] for k in range(0, len(shards[0]), half)]
        loader = torch.utils.data.DataLoader(dataset, batch_sampler=batches)
    monitor = spikehunt.lightning.Monitor(out=a.out, num_classes=5)
    trainer = pl.Trainer(accelerator="cpu", devices=a.devices, strategy="ddp" if a.devices > 1 else "auto",
                         max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[monitor])
    trainer.fit(Lit(a.nan_rank, a.nan_step), loader)
    if trainer.global_rank == 0:
        print(monitor.path)


if __name__ == "__main__":
    main(sys.argv[1:])
