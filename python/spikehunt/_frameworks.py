"""What the framework scenarios (spikehunt.lightning.scenario, spikehunt.hf.scenario) share:
building the user's objects with the config's values as their constructor's arguments, and
the bookkeeping of a scenario whose step is the framework's (forward and loss in one call)."""
import inspect

import torch

from . import Batch, ContractError, Scenario, _source_file, register
from .watch import split_batch

# Constructor arguments a config field fills when the config's "params" do not name them.
_FIELDS = {
    "lr": lambda c: c.optimizer.lr,
    "learning_rate": lambda c: c.optimizer.lr,
    "momentum": lambda c: c.optimizer.momentum,
    "weight_decay": lambda c: c.optimizer.weight_decay,
    "batch_size": lambda c: c.batch_size,
    "seed": lambda c: c.seed,
}


def from_config(factory, config, where):
    """factory(**arguments): each argument its __init__ (or function) names is taken from the
    config's params by that name, else from the config field of the same meaning (lr,
    learning_rate, momentum, weight_decay, batch_size, seed), else left to its default.
    A factory that is not callable is used as it is (an object built once)."""
    if not callable(factory):
        return factory
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return factory()
    arguments, missing = {}, []
    for name, p in signature.parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if name in config.params:
            arguments[name] = config.params[name]
        elif name in _FIELDS:
            arguments[name] = _FIELDS[name](config)
        elif p.default is p.empty:
            missing.append(name)
    if missing:
        raise ContractError(f"{where}: {getattr(factory, '__name__', factory)}() needs {', '.join(missing)}, "
                            f"which the config does not give: declare each as a param "
                            f"(register(..., params=[spikehunt.number({missing[0]!r}, ...)])) or give it a default")
    return factory(**arguments)


class FrameworkScenario(Scenario):
    """A scenario whose step is a framework's: step_loss(raw_batch, index) does forward and
    loss in one (Lightning's training_step, the Trainer's compute_loss). next_batch() keeps
    the raw batch by its inputs; forward() runs the step on it and returns the model's output
    (read by a hook on the root module; the loss when the root never returned a tensor);
    loss() returns the loss that step computed."""

    def __init__(self, config):
        super().__init__(config)
        self._raw = {}        # id(inputs) -> (raw batch, index), until its forward
        self._heldout = {}    # the same for held-out batches, kept
        self._root_output = None
        self._loss = None
        self._probe = None     # inputs forward() was given that no batch holds, until loss()
        self._template = None  # (raw, inputs, targets) of the last batch read: a probe's batch is built like it

    def _watch_root(self, module):
        def hook(_, inputs, output):
            if isinstance(output, torch.Tensor) and self._root_output is None:
                self._root_output = output
            elif hasattr(output, "get") and isinstance(output.get("logits"), torch.Tensor) \
                    and self._root_output is None:
                self._root_output = output.get("logits")
        module.register_forward_hook(hook)

    def _keep(self, raw, index, table):
        inputs, targets = self.split(raw)
        table[id(inputs)] = (raw, index, inputs)
        self._template = (raw, inputs, targets)
        return inputs, targets

    def forward(self, inputs):
        self._root_output = None
        kept = self._raw.pop(id(inputs), None) or self._heldout.get(id(inputs))
        if kept is None:  # inputs of spikehunt's own (the doctor's probes): the model alone, the loss later
            self._probe = inputs
            return _tensor_of(self.model()(inputs), self)
        self._probe = None
        self._loss = self._loss_of(self.step_loss(kept[0], kept[1]))
        output, self._root_output = self._root_output, None
        return output if output is not None else self._loss.detach()

    def loss(self, outputs, targets):
        if self._probe is None:
            return self._loss
        inputs, self._probe = self._probe, None
        if self._template is None:  # no batch read yet in this process: the training data's first, as a model
            with torch.random.fork_rng(devices=[]):
                raw = next(iter(self.train_loader()))
            self._template = (raw, *self.split(raw))
        raw = _substitute(self._template, inputs, targets)
        return self._loss_of(self.step_loss(raw, 0))

    def _loss_of(self, loss):
        if hasattr(loss, "get") and not isinstance(loss, torch.Tensor):
            loss = loss.get("loss")
        if not isinstance(loss, torch.Tensor):
            raise ContractError(f"{_source_file(type(self))}: the training step returned "
                                f"{'None' if loss is None else type(loss).__name__}: under spikehunt every "
                                f"batch trains, so it must return the loss (a tensor, or a dict with 'loss')")
        return loss

    def _heldout_of(self, loader, max_samples):
        """A held-out loader's batches as (inputs, targets), kept by their inputs, up to
        max_samples samples (at least one batch)."""
        out, samples = [], 0
        for index, raw in enumerate(loader):
            inputs, targets = self._keep(raw, index, self._heldout)
            if out and samples + len(inputs) > max_samples:
                break
            out.append((inputs, targets))
            samples += len(inputs)
            if samples >= max_samples:
                break
        return out

    def _batch_of(self, item):
        """A training batch from epochs_of()'s (epoch, index, raw), kept by its inputs."""
        epoch, index, raw = item
        inputs, targets = self._keep(raw, index, self._raw)
        return Batch(inputs, targets, 0, epoch, index)

    def optimizers(self):
        return self.opt

    def grad_clip(self):
        return self._clip

    def planned_steps(self):
        return self._planned

    def num_classes(self):
        return type(self).classes

    def step_loss(self, raw, index):
        raise NotImplementedError

    def train_loader(self):
        """A new training DataLoader."""
        raise NotImplementedError

    def split(self, raw):
        """A raw batch's (inputs, targets)."""
        raise NotImplementedError


def _tensor_of(output, scenario):
    """A model's output as one tensor: itself, or a ModelOutput's logits."""
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "get") and isinstance(output.get("logits"), torch.Tensor):
        return output.get("logits")
    raise ContractError(f"{type(scenario).__name__}: the model returned a {type(output).__name__} for a batch's "
                        f"inputs: spikehunt needs a tensor (or a ModelOutput with logits)")


def _substitute(template, inputs, targets):
    """The raw batch `template` holds with its inputs and targets replaced: a tuple's, a
    list's or a dict's entries that are the template's inputs or targets."""
    raw, old_inputs, old_targets = template

    def swap(v):
        return inputs if v is old_inputs else targets if v is old_targets else v
    if isinstance(raw, (tuple, list)):
        return type(raw)(swap(v) for v in raw)
    if hasattr(raw, "keys"):
        return {k: swap(raw[k]) for k in raw.keys()}
    return inputs


def register_as(name, cls, factory, taps, num_classes, params):
    """Registers a framework scenario class under `name`, named after the user's factory
    (errors then name its file), with its taps and classes."""
    cls.taps, cls.classes = taps, num_classes
    cls.__name__ = cls.__qualname__ = f"{getattr(factory, '__name__', type(factory).__name__)}Scenario"
    cls.__module__ = getattr(factory, "__module__", cls.__module__)
    register(name, cls, params)
    return cls


def epochs_of(loader_factory, epochs, limit, max_steps, seed):
    """The training batches: `epochs` passes over a new iterator of loader_factory(epoch) each,
    each cut at `limit` batches (0: whole), all cut at `max_steps` (0: none). Yields (epoch,
    index, raw). Each epoch's iterator is made, and its first batch drawn, under torch's
    generator seeded from (seed, epoch) and then put back as it was: a DataLoader's shuffle
    is then the config's alone, and a replay from a checkpoint (which restores the
    generator mid-run) reads the batches the run read, epoch boundaries included."""
    done = 0
    for epoch in range(epochs):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed((int(seed) * 1_000_003 + epoch) % (1 << 63))
            iterator = iter(loader_factory(epoch))
            first = next(iterator, _END)
        index, raw = 0, first
        while raw is not _END:
            if (limit and index >= limit) or (max_steps and done >= max_steps):
                break
            yield epoch, index, raw
            done += 1
            index += 1
            raw = next(iterator, _END)
        if max_steps and done >= max_steps:
            return


_END = object()


def batches_per_epoch(loader, where, limit=0):
    """Batches an epoch trains: the loader's len(), cut at `limit` (0: none); `limit` alone
    for a loader without len() (an IterableDataset), which needs one."""
    try:
        n = len(loader)
    except TypeError:
        if limit:
            return limit
        raise ContractError(f"{where}: the training DataLoader has no len() (an IterableDataset): give "
                            f"max_batches_per_epoch in the config, or max_steps") from None
    return min(n, limit) if limit else n


__all__ = ["from_config", "FrameworkScenario", "register_as", "epochs_of", "batches_per_epoch", "split_batch"]
