#!/usr/bin/env python3
"""The motivating case in plain PyTorch: SimpleCNN (LeakyReLU 0.01, no
normalization), SGD lr 0.05 momentum 0.9, batch 64, trained on classes 0-4
then 5-9 (or the reverse) then all, on Debian's Fashion-MNIST
(/usr/share/datasets/fashion-mnist, package dataset-fashion-mnist).

Under spikehunt with the config's fields (optimizer.lr, optimizer.momentum,
activation.slope, protocol.task_order, batch_size, max_batches_per_epoch,
seed), so the same spaces sweep it:

    .venv/bin/python examples/python/simple_cnn.py run --config examples/python/simple_cnn.json
    .venv/bin/python examples/python/simple_cnn.py sweep --space examples/python/simple_cnn_space.json
    .venv/bin/python examples/python/simple_cnn.py doctor --config examples/python/simple_cnn.json
"""
import gzip
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import spikehunt

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An idx file (gzip or not) as a uint8 tensor of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


_cache = {}


def fashion(split):
    """(images as float (N, 1, 28, 28) in [0, 1], labels as int64), read once per process."""
    if split not in _cache:
        prefix = "train" if split == "train" else "t10k"
        images = read_idx(os.path.join(DATA, f"{prefix}-images-idx3-ubyte.gz"))
        labels = read_idx(os.path.join(DATA, f"{prefix}-labels-idx1-ubyte.gz"))
        _cache[split] = (images.float().div_(255).unsqueeze(1), labels.long())
    return _cache[split]


class SimpleCNN(nn.Module):
    def __init__(self, slope):
        super().__init__()
        self.slope = slope
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.leaky_relu(self.conv1(x), self.slope), 2)
        x = F.max_pool2d(spikehunt.tap("conv2_act", F.leaky_relu(self.conv2(x), self.slope)), 2)
        x = spikehunt.tap("fc1_act", F.leaky_relu(self.fc1(x.flatten(1)), self.slope))
        return self.fc2(x)


class MotivatingCase(spikehunt.Scenario):
    taps = ["conv1", "fc2"]  # read by forward hooks; conv2_act and fc1_act by spikehunt.tap

    def __init__(self, config):
        super().__init__(config)
        self.net = SimpleCNN(config.activation.slope)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=config.optimizer.lr,
                                   momentum=config.optimizer.momentum)
        images, labels = fashion("train")
        domains = config.protocol.domains
        order = config.protocol.task_order
        # Each domain's epochs, then epochs on all classes, each in a seeded order.
        phases = [(f"domain {'AB'[d] if d < 2 else d}", domains[d]) for d in order]
        phases += [("all", sorted(c for d in domains for c in d))]
        generator = torch.Generator().manual_seed(config.seed)
        limit = config.max_batches_per_epoch
        self.plan = []
        for p, (name, classes) in enumerate(phases):
            index = torch.nonzero(torch.isin(labels, torch.tensor(classes))).flatten()
            epochs = config.protocol.epochs_per_phase if p < len(order) else config.protocol.relaxation_epochs
            for e in range(epochs):
                shuffled = index[torch.randperm(len(index), generator=generator)]
                batches = shuffled.split(config.batch_size)
                for b, rows in enumerate(batches[:limit] if limit else batches):
                    self.plan.append((rows, p, e, b))
        self.phases = [name for name, _ in phases]
        self.images, self.labels = images, labels
        self.position = 0

    def model(self):
        return self.net

    def optimizers(self):
        return self.opt

    def next_batch(self):
        if self.position == len(self.plan):
            return None
        rows, phase, epoch, batch = self.plan[self.position]
        self.position += 1
        return spikehunt.Batch(self.images[rows], self.labels[rows], phase, epoch, batch)

    def skip_batches(self, n):
        skipped = min(n, len(self.plan) - self.position)
        self.position += skipped
        return skipped

    def heldout(self, max_samples):
        images, labels = fashion("test")
        return [(images[i:i + 256][:max_samples - i], labels[i:i + 256][:max_samples - i])
                for i in range(0, min(max_samples, len(labels)), 256)]

    def planned_steps(self):
        return len(self.plan)

    def phase_names(self):
        return self.phases


spikehunt.register("py_simple_cnn", MotivatingCase)

if __name__ == "__main__":
    spikehunt.main()
