#!/usr/bin/env python3
"""Classic training bugs, planted in ordinary PyTorch code, for the doctor:
a small CNN-free classifier on seeded Gaussian blobs (fast enough for tests),
with params.bug choosing what is wrong. Each bug is written the way PyTorch
users write it; the doctor's top-ranked cause for each is pinned by
tests/python/test_python_doctor.py.

    python3 examples/python/planted_bugs.py doctor --set scenario='"planted_py"' --set params.bug='"double_softmax"'

  none               healthy (the control: no sign may fire, over several seeds)
  double_softmax     the model ends in nn.Softmax and the loss is nn.CrossEntropyLoss
  raw_inputs         inputs on a 0..255 scale (no normalization)
  partial_optimizer  the optimizer is built over the last layer only
  detached_hidden    .detach() in forward: no gradient reaches the first layer
  wrong_num_classes  the output layer has 3 units for 4 classes
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import spikehunt

BUGS = ["none", "double_softmax", "raw_inputs", "partial_optimizer", "detached_hidden", "wrong_num_classes"]


class Net(nn.Module):
    def __init__(self, bug):
        super().__init__()
        self.bug = bug
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 64)
        self.out = nn.Linear(64, 3 if bug == "wrong_num_classes" else 4)
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        if self.bug == "detached_hidden":
            h = h.detach()
        h = F.relu(self.fc2(h))
        y = self.out(h)
        return self.softmax(y) if self.bug == "double_softmax" else y


def blobs(n, generator, scale):
    centers = torch.randn(4, 16, generator=torch.Generator().manual_seed(7)) * 2
    labels = torch.randint(0, 4, (n,), generator=generator)
    x = centers[labels] + torch.randn(n, 16, generator=generator)
    return (x * 50 + 128 if scale else x), labels


class Planted(spikehunt.Scenario):
    taps = ["fc1", "fc2"]

    def __init__(self, config):
        super().__init__(config)
        self.bug = config.params["bug"]
        self.net = Net(self.bug)
        params = self.net.out.parameters() if self.bug == "partial_optimizer" else self.net.parameters()
        self.opt = torch.optim.SGD(params, lr=config.optimizer.lr, momentum=config.optimizer.momentum,
                                   weight_decay=config.optimizer.weight_decay)
        self.criterion = nn.CrossEntropyLoss()
        self.generator = torch.Generator().manual_seed(config.seed)
        self.steps = config.max_batches_per_epoch or 60
        self.done = 0
        self.test = blobs(256, torch.Generator().manual_seed(1000 + config.seed), self.bug == "raw_inputs")

    def model(self):
        return self.net

    def optimizers(self):
        return self.opt

    def loss(self, outputs, targets):
        return self.criterion(outputs, targets)

    def next_batch(self):
        if self.done == self.steps:
            return None
        self.done += 1
        return blobs(self.config.batch_size, self.generator, self.bug == "raw_inputs")

    def heldout(self, max_samples):
        x, y = self.test
        return [(x[:max_samples], y[:max_samples])]

    def planned_steps(self):
        return self.steps

    def num_classes(self):
        return 4


spikehunt.register("planted_py", Planted, params=[spikehunt.string("bug", "none", BUGS, "the planted bug")])

if __name__ == "__main__":
    spikehunt.main()
