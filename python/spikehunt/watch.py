"""spikehunt.Watch: the monitor inside a training loop of your own.

    with spikehunt.Watch(model, optimizer, out="results/watch", taps="leaves") as w:
        for inputs, targets in loader:
            loss = F.cross_entropy(model(inputs), targets)
            w.step(loss, inputs, targets)      # instead of zero_grad(), loss.backward(), optimizer.step()

w.step() runs the step the way spikehunt's harness runs one (zero the gradients,
backward, clip, step every optimizer) under the same monitor as every verb: it
hashes the batch, reads the taps your hooks collected, the outputs, the loss, the
gradients, the parameters before and after, the optimizer's state; judges the
step finite, extreme or non-finite; and writes the same trace.jsonl, verdict.json
and checkpoints as `run` (under OUT/<YYYYMMDD-HHMMSS>-<hash>/, when the watch
closes). With fail_fast=True, the first non-finite tensor raises NonFiniteError
naming it and its stage.
"""
import json
import math

import torch

from . import _core


class NonFiniteError(ArithmeticError):
    """The step's first non-finite tensor, by name and stage: "fc1 (forward): 3 NaN of 8192"."""


class Watch:
    """Watches `model` (an nn.Module) and `optimizer` (a torch.optim optimizer, or a list or
    dict of them) while your loop runs. taps: submodule names whose outputs the monitor
    reads, or "leaves". rules: health rule overrides ({"loss_limit": 1e4}; the fields of
    a config's "health", docs/health.md). planned_steps: for the trace's planned length;
    num_classes: for the label histograms of the trace. process_group: under data-parallel
    training (torch.distributed initialized, DistributedDataParallel averaging the gradients),
    the ranks whose steps make one global step: "auto" (the default group when one is
    initialized with more than one rank), a group, or None (this process alone). Every rank
    then records the global step (one all_gather a step); rank 0 writes the folder."""

    def __init__(self, model, optimizer, out="results/watch", taps="leaves", fail_fast=False, rules=None,
                 checkpoints=True, planned_steps=0, num_classes=10, process_group="auto"):
        from . import _install_hooks
        if isinstance(optimizer, dict):
            optimizers = list(optimizer.values())
        elif isinstance(optimizer, (list, tuple)):
            optimizers = list(optimizer)
        else:
            optimizers = [optimizer]
        self.model = model
        self._optimizers = optimizers
        self.fail_fast = fail_fast
        self._taps = []
        self._outputs = None
        self._live = False  # a step begun: taps go to the monitor at once
        self._step = 0
        overrides = [f"health.{k}={json.dumps(v)}" for k, v in (rules or {}).items()]
        self._hooks = _install_hooks(model, taps, self._collect, f"Watch({type(model).__name__})")
        self._hooks.append(model.register_forward_hook(self._root))
        self.rank, self.world, gather = _ranks(process_group)
        self._core = _core.Watch(model, optimizers, str(out), overrides, fail_fast, checkpoints, int(planned_steps),
                                 int(num_classes), self.rank, self.world, gather)
        from . import _watches
        _watches.append(self)
        self.path = None
        self._closed = False
        self.ended = None  # the last step's record once the burst ended (non-finite, or fail-fast)

    def _collect(self, name, tensor):
        if not (self.model.training and torch.is_grad_enabled()):
            return
        if self._live:  # a callback's step under way: straight to the monitor
            self._ended_at(self._core.tap(name, tensor))
            return
        # The step begins after the forward (the loop hands the batch over then): a CPU tap's
        # max is taken now, while the tensor is still in cache, and handed over with it.
        peak = _core.max_abs(tensor) if tensor.is_cpu else None
        self._taps.append((name, tensor, peak))
        if self.fail_fast and self.world == 1 and not (math.isfinite(peak) if peak is not None else bool(torch.isfinite(tensor).all())):
            raise NonFiniteError(f"step {self._step}: {name} (forward): {int(torch.isnan(tensor).sum())} NaN, "
                                 f"{int(torch.isposinf(tensor).sum())} +Inf, {int(torch.isneginf(tensor).sum())} -Inf "
                                 f"of {tensor.numel()}")

    def _root(self, module, inputs, output):
        if self.model.training and torch.is_grad_enabled() and isinstance(output, torch.Tensor):
            self._outputs = output

    def step(self, loss, inputs, targets):
        """One optimizer step on `loss` (computed by your loop on `inputs` and `targets`):
        zero the gradients, backward, step every optimizer, all under the monitor, on this
        thread. Returns the step's record as a dict (step, health, loss, rules, and fault
        when non-finite)."""
        if not isinstance(loss, torch.Tensor):
            raise TypeError(f"Watch.step(loss, inputs, targets): loss is a {type(loss).__name__}, not a "
                            f"torch.Tensor: pass the loss tensor your loop computed, before .item()")
        outputs, taps = self.take_forward(loss.detach())
        record = self.replay([(inputs, targets, outputs, loss, taps)])
        del taps  # the activations go as backward frees them, as in a plain loop (not at the step's end)
        if record is None:
            self.model.zero_grad()
            loss.backward()
            record = self.after_backward()
        if record is None:
            for o in self._optimizers:
                o.step()
            record = self.finish()
        return record

    # The step's stages, for loops that run the step themselves, one hook at a time (the
    # framework callbacks: _callbacks.py; the command hooks: _attach.py). Each returns the
    # step's record when the step ended there (None while it goes on).
    @property
    def live(self):
        """A step is begun: taps go to the monitor as the forward makes them."""
        return self._live

    @property
    def closed(self):
        return self._closed

    def begin(self, batches):
        """Starts a step over its micro-batches [(inputs, targets)]; until it finishes, taps go
        to the monitor as they come."""
        if self.ended is not None:
            why = self.ended["health"] + (f": {self.ended['fault']}" if self.ended.get("fault") else
                                          f": {', '.join(self.ended['rules'])}" if self.ended.get("rules") else "")
            raise RuntimeError(f"the watch ended at step {self.ended['step']} ({why}), and takes no more steps; "
                               f"its results are in {self.close()}")
        self._live = True
        return self._ended_at(self._core.begin(list(batches)))

    def forward(self, outputs, loss):
        """A micro-batch's outputs and loss, after its taps."""
        return self._ended_at(self._core.forward(outputs, loss))

    def replay(self, micro):
        """A whole forward after the fact: [(inputs, targets, outputs, loss, taps)] a micro-batch."""
        record = self.begin([(m[0], m[1]) for m in micro])
        for _, _, outputs, loss, taps in micro:
            record = record or self._ended_at(self._core.taps(taps))
            record = record or self.forward(outputs, loss)
        return record

    def take_forward(self, default):
        """What the model's forward of a micro-batch left: its output (`default` when the root module
        gave no tensor) and the taps read outside a live step, taken (the next forward's replace them)."""
        outputs = self._outputs if self._outputs is not None else default
        taps, self._taps, self._outputs = self._taps, [], None
        return outputs, taps

    def abandon(self):
        """The begun step did not happen (the framework skipped its batch): no record, no step."""
        self._core.abandon()
        self._live = False
        self._taps, self._outputs = [], None

    def after_backward(self):
        """After the step's backward (every micro-batch's): the gradients."""
        return self._ended_at(self._core.after_backward())

    def finish(self):
        """After the optimizer's step: the step's record."""
        return self._ended_at(self._core.finish())

    def _ended_at(self, record):
        """The record of a step that ended (None while it goes on); raises under fail_fast."""
        if record is None:
            return None
        self._step = record["step"] + 1
        self._live = False
        if self._core.over:
            self.ended = record
            if self.fail_fast and record["health"] == "non_finite":
                self.close()
                raise NonFiniteError(f"step {record['step']}: {record.get('fault', 'non-finite')} "
                                     f"(results in {self.path})")
        return record

    def close(self):
        """Ends the burst and writes its folder; returns its path (None on ranks other than 0)."""
        if not self._closed:
            for h in self._hooks:
                h.remove()
            from . import _watches
            if self in _watches:
                _watches.remove(self)
            self.path = self._core.close() or None
            self._closed = True
        return self.path

    def text(self):
        """The burst's story as `run` prints it (the verdict, onset, data, hash chain)."""
        return self._core.text().strip()

    def verdict(self):
        """The verdict (a dict) once closed."""
        return json.loads(self._core.verdict())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _ranks(process_group):
    """(rank, world size, gather) of the data-parallel group the watch spans; (0, 1, None) alone."""
    if process_group is None or process_group is False:
        return 0, 1, None
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        if process_group == "auto":
            return 0, 1, None
        raise ValueError("Watch(process_group=...): torch.distributed is not initialized: call "
                         "torch.distributed.init_process_group first, or pass process_group=None")
    group = None if process_group == "auto" else process_group
    world = dist.get_world_size(group)
    if world == 1:
        return 0, 1, None
    # NCCL gathers device tensors; gloo (and the rest) host ones.
    device = (torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl"
              else torch.device("cpu"))

    def gather(mine):
        mine = mine.to(device)
        parts = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(parts, mine, group=group)
        return torch.cat(parts)

    return dist.get_rank(group), world, gather


_INPUT_KEYS = ("input_ids", "inputs", "x", "images", "pixel_values", "input")
_TARGET_KEYS = ("labels", "targets", "y", "target", "label")


def split_batch(batch, where="spikehunt"):
    """A framework's batch as (inputs, targets) for the monitor: a tuple or list's first
    two tensors (the second missing: no targets), or a dict's inputs and labels by their
    usual names. Anything else is a TypeError saying how to give them."""
    empty = torch.zeros(0, dtype=torch.long)
    if isinstance(batch, torch.Tensor):
        return batch, empty
    if isinstance(batch, (tuple, list)):
        tensors = [t for t in batch if isinstance(t, torch.Tensor)]
        if tensors:
            return tensors[0], tensors[1] if len(tensors) > 1 else empty
    if isinstance(batch, dict) or hasattr(batch, "keys"):
        inputs = next((batch[k] for k in _INPUT_KEYS if k in batch and isinstance(batch[k], torch.Tensor)), None)
        targets = next((batch[k] for k in _TARGET_KEYS if k in batch and isinstance(batch[k], torch.Tensor)), empty)
        if inputs is not None:
            return inputs, targets
    raise TypeError(f"{where}: cannot find the inputs and targets in a batch of type {type(batch).__name__}"
                    f"{' with keys ' + ', '.join(map(str, batch.keys())) if hasattr(batch, 'keys') else ''}: "
                    f"pass batch=lambda b: (inputs, targets)")
