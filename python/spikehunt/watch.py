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

import torch

from . import _core


class NonFiniteError(ArithmeticError):
    """The step's first non-finite tensor, by name and stage: "fc1 (forward): 3 NaN of 8192"."""


class Watch:
    """Watches `model` (an nn.Module) and `optimizer` (a torch.optim optimizer, or a list or
    dict of them) while your loop runs. taps: submodule names whose outputs the monitor
    reads, or "leaves". rules: health rule overrides ({"loss_limit": 1e4}; the fields of
    a config's "health", docs/health.md). planned_steps: for the trace's planned length;
    num_classes: for the label histograms of the trace."""

    def __init__(self, model, optimizer, out="results/watch", taps="leaves", fail_fast=False, rules=None,
                 checkpoints=True, planned_steps=0, num_classes=10):
        from . import _install_hooks
        if isinstance(optimizer, dict):
            optimizers = list(optimizer.values())
        elif isinstance(optimizer, (list, tuple)):
            optimizers = list(optimizer)
        else:
            optimizers = [optimizer]
        self.model = model
        self.fail_fast = fail_fast
        self._taps = []
        self._outputs = None
        self._step = 0
        overrides = [f"health.{k}={json.dumps(v)}" for k, v in (rules or {}).items()]
        self._hooks = _install_hooks(model, taps, self._collect, f"Watch({type(model).__name__})")
        self._hooks.append(model.register_forward_hook(self._root))
        self._core = _core.Watch(model, optimizers, str(out), overrides, fail_fast, checkpoints, int(planned_steps),
                                 int(num_classes))
        from . import _watches
        _watches.append(self)
        self.path = None
        self.ended = None  # the last step's record once the burst ended (non-finite, or fail-fast)

    def _collect(self, name, tensor):
        if self.model.training and torch.is_grad_enabled():
            self._taps.append((name, tensor))
            if self.fail_fast and not bool(torch.isfinite(tensor).all()):
                raise NonFiniteError(f"step {self._step}: {name} (forward): {int(torch.isnan(tensor).sum())} NaN, "
                                     f"{int(torch.isposinf(tensor).sum())} +Inf, {int(torch.isneginf(tensor).sum())} -Inf "
                                     f"of {tensor.numel()}")

    def _root(self, module, inputs, output):
        if self.model.training and torch.is_grad_enabled() and isinstance(output, torch.Tensor):
            self._outputs = output

    def step(self, loss, inputs, targets):
        """One optimizer step on `loss` (computed by your loop on `inputs` and `targets`):
        backward, clip, step, all under the monitor. Returns the step's record as a dict
        (step, health, loss, rules, and fault when non-finite)."""
        if self.ended is not None:
            raise RuntimeError(f"the watch ended at step {self.ended['step']} ({self.ended['health']}); "
                               f"its results are in {self.close()}")
        outputs = self._outputs if self._outputs is not None else loss.detach()
        taps, self._taps, self._outputs = self._taps, [], None
        text = self._core.step(loss, inputs, targets, outputs, taps)
        if not text:
            raise RuntimeError(f"the watch's burst ended; its results are in {self.close()}")
        record = json.loads(text)
        self._step = record["step"] + 1
        if record["health"] == "non_finite":
            self.ended = record
            if self.fail_fast:
                self.close()
                raise NonFiniteError(f"step {record['step']}: {record.get('fault', 'non-finite')} "
                                     f"(results in {self.path})")
        return record

    def close(self):
        """Ends the burst and writes its folder; returns its path."""
        if self.path is None:
            for h in self._hooks:
                h.remove()
            from . import _watches
            if self in _watches:
                _watches.remove(self)
            self.path = self._core.close()
        return self.path

    def verdict(self):
        """The verdict (a dict) once closed."""
        return json.loads(self._core.verdict())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
