#!/usr/bin/env python3
"""A tiny scenario for the Python tests: an MLP on seeded Gaussian blobs, a
few steps. params.bug plants a bug; the test names what it expects."""
import os
import random
import time

import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F

import spikehunt


class Blobs(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc1 = nn.Linear(8, width)
        self.act = nn.LeakyReLU(0.01)
        self.fc2 = nn.Linear(width, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def blobs(n, generator):
    centers = torch.randn(4, 8, generator=torch.Generator().manual_seed(1234)) * 3
    labels = torch.randint(0, 4, (n,), generator=generator)
    return centers[labels] + torch.randn(n, 8, generator=generator), labels


def hold():
    """TINY_HOLD=FILE:N lets the first N bursts of all processes train and holds the
    rest until killed, so a test can kill a sweep with exactly N runs committed."""
    path, allowed = os.environ["TINY_HOLD"].rsplit(":", 1)
    with open(path, "a") as f:
        f.write(".")
    if os.path.getsize(path) > int(allowed):
        time.sleep(600)


class Tiny(spikehunt.Scenario):
    taps = "leaves"

    def __init__(self, config):
        super().__init__(config)
        self.bug = config.params["bug"]
        self.net = Blobs(int(config.params["width"]))
        opt = config.optimizer
        if opt.kind == "adam":
            self.opt = torch.optim.Adam(self.net.parameters(), lr=opt.lr)
        else:
            self.opt = torch.optim.SGD(self.net.parameters(), lr=opt.lr, momentum=opt.momentum)
        self.steps = config.max_batches_per_epoch or 12
        self.generator = torch.Generator().manual_seed(config.seed)
        self.heldout_set = blobs(64, torch.Generator().manual_seed(99))
        # Python's random and NumPy's, seeded from the config by spikehunt: runs are bit-identical only if they are.
        self.jitter = random.random() + numpy.random.rand()
        self.done = 0
        if self.bug == "chdir":  # as a Hydra-style script does: the working directory is the run's own
            import tempfile
            os.chdir(tempfile.mkdtemp(prefix="tiny-chdir-"))

    def model(self):
        return self.net

    def optimizers(self):
        return [] if self.bug == "no_optimizers" else self.opt

    def forward(self, inputs):
        if self.bug == "os_exit" and self.done >= 3:
            os._exit(0)
        if self.bug == "forward_returns_list":
            return [self.net(inputs)]
        return self.net(inputs * (1 + 0.01 * self.jitter))

    def loss(self, outputs, targets):
        if self.bug == "raise_in_loss" and self.done >= 3:
            raise ValueError(f"no loss for step {self.done}")
        if self.bug == "loss_per_sample":  # reduction="none": one loss a sample, not one number
            return F.cross_entropy(outputs, targets, reduction="none")
        if self.bug == "broadcast_loss":  # warns every step ("Using a target size ..."); adds 0
            return F.cross_entropy(outputs, targets) + 0 * F.mse_loss(outputs[:, :1], targets.float())
        return F.cross_entropy(outputs, targets)

    def next_batch(self):
        if self.done == self.steps:
            return None
        if self.done == 0 and os.environ.get("TINY_HOLD"):
            hold()
        self.done += 1
        return blobs(self.config.batch_size, self.generator)

    def heldout(self, max_samples):
        x, y = self.heldout_set
        return [(x[:max_samples], y[:max_samples])]

    def planned_steps(self):
        return self.steps

    def num_classes(self):
        return 4


class NoData(spikehunt.Scenario):
    """Follows the contract but for next_batch(): a contract error when registered."""

    def model(self):
        return nn.Linear(2, 2)

    def optimizers(self):
        return torch.optim.SGD(self.model().parameters(), lr=0.1)

    def planned_steps(self):
        return 1


class NoConfig(Tiny):
    """Its __init__ takes no config: a contract error when registered."""

    def __init__(self):
        pass


class NewModelEachCall(Tiny):
    """model() builds a new module each call (a common slip): bad input when built."""

    def model(self):
        return Blobs(16)


class NumpyAndAttributes(Tiny):
    """planned_steps() a NumPy integer, num_classes an attribute: both accepted."""
    num_classes = 4

    def planned_steps(self):
        return numpy.int64(self.steps)


spikehunt.register("tiny", Tiny, params=[
    spikehunt.string("bug", "none", ["none", "raise_in_loss", "forward_returns_list", "broadcast_loss",
                                "loss_per_sample", "no_optimizers", "chdir", "os_exit"], "a planted bug"),
    spikehunt.integer("width", 16, 1, 1024, "hidden units"),
])
if os.environ.get("TINY_BROKEN"):
    spikehunt.register("nodata", NoData)
    spikehunt.register("noconfig", NoConfig)
    spikehunt.register("dict_params", Tiny, params={"bug": "none"})  # defaults as a dict, not declared params
spikehunt.register("new_model_each_call", NewModelEachCall, params=[
    spikehunt.string("bug", "none", ["none"], ""), spikehunt.integer("width", 16, 1, 1024, "")])
spikehunt.register("numpy_and_attributes", NumpyAndAttributes, params=[
    spikehunt.string("bug", "none", ["none"], ""), spikehunt.integer("width", 16, 1, 1024, "")])

if __name__ == "__main__":
    spikehunt.main()
