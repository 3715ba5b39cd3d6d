"""`spikehunt doctor -- COMMAND`: the doctor on a training script it does not control.

_attach.py's hooks watch the script as `run -- COMMAND` does; with the doctor's settings they also
hand this module what the doctor's probes need to train copies of the script's training:

  - the model as it was at its first training call (a deep copy, before any step);
  - the optimizer: its class and each parameter group's hyperparameters at the first step, its
    parameters as indices into the model's parameters();
  - the loss: the loss module (nn.CrossEntropyLoss, ...) or torch.nn.functional loss whose output
    backward() ran on, called on the model's own output and the targets;
  - the batches: the first `steps` steps' (inputs, targets), then held-out batches: the script's own
    evaluation (the model called in eval mode or without gradients, then a loss on its output), else
    later batches of its stream whose samples the first `steps` did not hold.

When all of that is plain (one model called on one tensor, one optimizer, one loss call on its
output, one backward a step), the process ends the script there and, at its exit, runs the doctor
in itself on the scenario "captured" built from it (its copies never touch the script's objects),
its report written to a file the launcher prints. When it is not, `reasons` says what the hooks
could not replay, and the doctor's probes do not run: they would judge another program.
"""
import copy
import json
import os
import sys

import torch


class _Loss:
    """One loss call: the callable (a copy of the module, or the functional) and its other arguments."""
    __slots__ = ("fn", "output", "prediction", "target", "kwargs")

    def __init__(self, fn, output, prediction, target, kwargs):
        self.fn, self.output, self.prediction, self.target, self.kwargs = fn, output, prediction, target, kwargs


class Capture:
    def __init__(self, settings):
        self.steps = int(settings["steps"])              # training batches to capture
        self.heldout_samples = int(settings["heldout"])  # held-out samples to capture
        self.overfit_steps = int(settings["overfit_steps"])
        self.report = settings["report"]                 # where the report goes
        self.json = bool(settings.get("json"))
        self.snapshots = {}     # id(root) -> (root, its deep copy at its first training call)
        self.losses = []        # loss calls since the last backward
        self.pending = []       # [(loss call or None, the backward's loss)] since the last step
        self.train = []         # [(inputs, targets)]
        self.heldout = []       # [(inputs, targets)]
        self.seen = set()       # hashes of the training samples
        self.held = set()       # ... and of the held-out ones (an evaluation repeated each epoch counts once)
        self.eval_calls = []    # (module, inputs, outputs) of the script's evaluation calls
        self.model = None       # the primary optimizer's model at its first training call
        self.optimizer = None   # (class, [(hyperparameters, [parameter index])])
        self.loss = None        # the first step's loss call
        self.classes = 10
        self.lrs = None
        self.reasons = []       # what the hooks could not replay (empty: the doctor can run)
        self.notes = []         # what the copies do otherwise than the script
        self.stepped = 0        # the primary optimizer's steps seen
        self.root_name = None
        self.heldout_from = []  # where the held-out samples came from
        self.clip = None        # this step's clip_grad_norm_ (max_norm, norm_type), if the script clipped
        self.clips = []         # each captured training step's
        from ._hook_signs import HookReads
        self.reads = HookReads()  # what the signs of training the copies cannot replay read (_hook_signs.py)

    # ---- what the hooks hand it ----

    def first_call(self, module):
        """A root module's first training call: its state before any step (batch norm's statistics too)."""
        if id(module) in self.snapshots:
            return
        try:
            with torch.no_grad():
                copied = copy.deepcopy(module)
        except Exception as e:  # noqa: BLE001  (a module deepcopy cannot copy: said, not raised)
            copied = f"{type(e).__name__}: {e}"
        self.snapshots[id(module)] = (module, copied)
        self.reads.model(module)  # after the copy: its hooks stay on the script's parameters

    def eval_call(self, module, args, kwargs, output):
        """A root module called outside training (the script's evaluation): its inputs and outputs."""
        if id(module) in self.snapshots and len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor):
            self.eval_calls.append((module, args[0], output))
            del self.eval_calls[:-4]

    def loss_call(self, fn, args, kwargs, output):
        """A loss module's or functional's call: fn(prediction, target, **kwargs) gave `output`."""
        if len(args) < 2 and "target" not in kwargs or not isinstance(output, torch.Tensor):
            return
        prediction = args[0] if args else kwargs.get("input")
        target = args[1] if len(args) > 1 else kwargs.get("target")
        rest = {k: v for k, v in kwargs.items() if k not in ("input", "target")}
        if len(args) > 2:
            rest["_args"] = args[2:]
        call = _Loss(fn, output, prediction, target, rest)
        self.losses.append(call)
        for module, inputs, outputs in self.eval_calls:  # the script's evaluation: held-out data of its own
            if outputs is prediction:
                self._add_heldout(inputs, target, "the script's own evaluation")

    def clipped(self, max_norm, norm_type):
        self.clip = (max_norm, norm_type)

    def backward(self, loss):
        """backward() on `loss`: which loss call gave it (the same tensor, or its exact value: loss / 1)."""
        found = next((c for c in reversed(self.losses) if c.output is loss), None)
        if found is None and self.losses and self.losses[-1].output.numel() == 1:
            last = self.losses[-1]
            if torch.equal(last.output.detach().reshape(()), loss.detach().reshape(())):
                found = last
        self.pending.append((found, loss))
        self.losses = []

    def step(self, optimizer, roots, calls, others):
        """The primary optimizer's step: its batch (train, then held-out) and, at the first, the parts."""
        pending, self.pending = self.pending, []
        clip, self.clip = self.clip, None
        self.stepped += 1
        if self.reasons:
            return
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            self.reasons.append("the script trains data-parallel (torch.distributed is initialized): the copies "
                                "train in one process")
            return
        if others:
            self.reasons.append(f"{others + 1} optimizers step (a GAN, a teacher and a student, ...): the hooks "
                                "cannot tell how their losses and steps go together")
            return
        if len(pending) != 1:
            self.reasons.append(f"{len(pending)} backward() calls before step {len(self.train)} (gradient "
                                "accumulation, or none this process saw): the copies take one backward a step")
            return
        found, loss = pending[0]
        call = next((c for c in calls if c.module in roots), None)
        if len(roots) != 1 or call is None:
            self.reasons.append(f"the optimizer holds the parameters of {len(roots)} modules called on their own: "
                                "the copies train one model")
            return
        if not call.plain:
            self.reasons.append(f"the model ({type(call.module).__name__}) is called with more than one tensor, or "
                                "with keywords: the copies call it on the batch's inputs alone")
            return
        if found is None or found.prediction is not call.outputs or not isinstance(found.target, torch.Tensor):
            self.reasons.append("the loss that backward() ran on is not one loss function (an nn loss module or a "
                                "torch.nn.functional loss) called on the model's output and the targets: the code "
                                "between them cannot be replayed from the hooks")
            return
        if not self.train:
            self._parts(optimizer, call.module, found)
            if self.reasons:
                return
        lrs = [g["lr"] for g in optimizer.param_groups]
        if self.lrs is not None and lrs != self.lrs and not any("learning rate" in n for n in self.notes):
            self.notes.append(f"the script changes its learning rate from step to step (a schedule): the copies "
                              f"keep the first step's ({', '.join(f'{x:g}' for x in self.lrs)})")
        self.lrs = self.lrs or lrs
        inputs, targets = call.inputs.detach().clone(), found.target.detach().clone()
        if len(self.train) < self.steps:
            self.train.append((inputs, targets))
            self.clips.append(clip)
            self.seen.update(_sample_hashes(inputs, targets))
        else:
            self._add_heldout(inputs, targets, "later batches of the script's stream, their samples not in "
                                               "the first training batches")

    def complete(self):
        """Every batch captured; or, where the probes cannot run, `steps` steps watched as `run` watches them."""
        if self.reasons:
            return self.stepped >= self.steps
        return len(self.train) >= self.steps and self.heldout_count() >= self.heldout_samples

    def heldout_count(self):
        """The held-out samples captured so far."""
        return sum(int(x.shape[0]) for x, _ in self.heldout)

    # ---- the parts, at the first step ----

    def _parts(self, optimizer, root, loss):
        snapshot = self.snapshots.get(id(root), (None, None))[1]
        if not isinstance(snapshot, torch.nn.Module):
            self.reasons.append(f"the model ({type(root).__name__}) cannot be copied "
                                f"({snapshot or 'it was not seen at its first call'}): the probes train copies")
            return
        index = {id(p): i for i, p in enumerate(root.parameters())}
        groups = []
        for g in optimizer.param_groups:
            missing = [p for p in g["params"] if id(p) not in index]
            if missing:
                self.reasons.append(f"the optimizer holds {len(missing)} tensor(s) that are not parameters of the "
                                    f"model ({type(root).__name__}): the copies cannot map them")
                return
            groups.append(({k: v for k, v in g.items() if k != "params"}, [index[id(p)] for p in g["params"]]))
        try:
            fn = copy.deepcopy(loss.fn) if isinstance(loss.fn, torch.nn.Module) else loss.fn
            kwargs = copy.deepcopy(loss.kwargs)
        except Exception as e:  # noqa: BLE001
            self.reasons.append(f"the loss ({loss.fn!r}) cannot be copied: {type(e).__name__}: {e}")
            return
        self.model, self.optimizer, self.loss = snapshot, (type(optimizer), groups), (fn, kwargs)
        self.root_name = type(root).__name__
        out = loss.prediction
        ids = loss.target.dtype in (torch.int64, torch.int32) and out.dim() >= 2
        self.classes = int(out.shape[-1]) if ids else 10
        try:
            _Captured(None, self)  # the optimizer's class rebuilds from its groups, or it is said here
        except Exception as e:  # noqa: BLE001
            self.reasons.append(f"{type(optimizer).__name__} cannot be rebuilt from its parameter groups "
                                f"({type(e).__name__}: {e}): the probes need optimizers of their own")

    def _add_heldout(self, inputs, targets, source):
        have = self.heldout_count()
        if have >= self.heldout_samples:
            return
        inputs, targets = inputs.detach().clone(), targets.detach().clone()
        hashes = _sample_hashes(inputs, targets)
        keep = [i for i, h in enumerate(hashes) if h not in self.seen and h not in self.held]
        if not keep:
            return
        self.held.update(hashes[i] for i in keep)
        keep = torch.tensor(keep[:self.heldout_samples - have], device=inputs.device)
        self.heldout.append((inputs.index_select(0, keep), targets.index_select(0, keep)))
        if source not in self.heldout_from:
            self.heldout_from.append(source)

    # ---- the doctor, at the process's exit ----

    def run_doctor(self):
        """Runs the doctor on the scenario "captured" in this process, its report to self.report; the exit code."""
        if self.reasons:
            return None
        if not self.heldout:
            self.notes.append("no held-out samples: the script has no evaluation this process saw and its stream "
                              "held no sample outside the first training batches")
        from . import register
        global _active
        _active = self
        register("captured", _Captured)
        cls, groups = self.optimizer
        hyper = groups[0][0]
        clip = self.clips[0]
        if clip is not None and clip[1] != 2.0:
            self.notes.append(f"the script clips the gradients' {clip[1]:g}-norm at {clip[0]:g}: the copies clip "
                              f"their 2-norm at that value")
        if any(c != clip for c in self.clips):
            self.notes.append(f"the script clips the gradients at some steps and not at others, or at other values: "
                              f"the copies clip as at its first step ({'at %g' % clip[0] if clip else 'not at all'})")
        argv = ["spikehunt", "doctor", "--set", 'scenario="captured"', "--set",
                f"batch_size={int(self.train[0][0].shape[0])}", "--steps", str(len(self.train)),
                "--overfit-steps", str(self.overfit_steps)] + _optimizer_sets(cls, hyper) + (
                    ["--set", f"grad_clip={clip[0]!r}"] if clip else []) + (
                    ["--json"] if self.json else [])
        return cli_to_file(argv, self.report)

    def read_signs(self, watches):
        """Training the copies cannot replay: the signs the hooks read (_hook_signs.py), their report to
        self.report; the exit code."""
        from ._hook_signs import report
        signs = self.report + ".signs"
        cli_to_file(["spikehunt", "doctor", "--signs", "--json"], signs)
        with open(signs) as f:
            registry = json.load(f)
        return report(self.reads, watches, self.report, self.json, registry)


def cli_to_file(argv, path):
    """The spikehunt CLI run in this process with its standard output to `path`; its exit code."""
    from . import _core
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(path, "wb") as f:
            os.dup2(f.fileno(), 1)
            return _core.cli_main(argv, [sys.executable], [])
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _optimizer_sets(cls, hyper):
    """The config's optimizer as the captured one (the report's header reads it) when the config can say it."""
    kinds = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}
    kind, lr = kinds.get(cls), hyper.get("lr")
    if kind is None or not isinstance(lr, (int, float)) or not 0 < lr <= 10:
        return []
    sets = [f'optimizer.kind="{kind}"', f"optimizer.lr={lr!r}"]
    if kind == "sgd":
        sets += [f"optimizer.momentum={hyper.get('momentum', 0)!r}",
                 f"optimizer.nesterov={'true' if hyper.get('nesterov') else 'false'}"]
    else:
        b = hyper.get("betas", (0.9, 0.999))
        sets += [f"optimizer.betas=[{float(b[0])!r},{float(b[1])!r}]", f"optimizer.eps={hyper.get('eps', 1e-8)!r}"]
    decay = hyper.get("weight_decay", 0)
    if isinstance(decay, (int, float)) and 0 <= decay <= 1:
        sets.append(f"optimizer.weight_decay={decay!r}")
    return [w for s in sets for w in ("--set", s)]


def _sample_hashes(inputs, targets):
    """One hash a sample (its input row and its target), to tell held-out samples from trained ones."""
    x = inputs.detach().reshape(inputs.shape[0], -1).cpu()
    y = targets.detach().reshape(targets.shape[0], -1).cpu() if targets.dim() else targets.reshape(1, 1)
    return [hash((x[i].numpy().tobytes(), y[min(i, y.shape[0] - 1)].numpy().tobytes())) for i in range(x.shape[0])]


_active = None


from . import Scenario  # noqa: E402


class _Captured(Scenario):
    """The script's training as the hooks captured it: a fresh copy of the model and optimizer each
    time the doctor builds one, the captured batches in order, the same loss call."""

    taps = "leaves"  # every module without children: what dead_units and the unit probes read

    def __init__(self, config, capture=None):
        super().__init__(config)
        self.capture = capture or _active
        self.net = copy.deepcopy(self.capture.model)
        params = list(self.net.parameters())
        cls, groups = self.capture.optimizer
        self.opt = cls([dict(hyper, params=[params[i] for i in index]) for hyper, index in groups],
                       **({"lr": groups[0][0]["lr"]} if "lr" in groups[0][0] else {}))
        self.fn, self.kwargs = self.capture.loss
        self.done = 0

    def model(self):
        return self.net

    def optimizers(self):
        return self.opt

    def loss(self, outputs, targets):
        kwargs = dict(self.kwargs)
        args = kwargs.pop("_args", ())
        return self.fn(outputs, targets, *args, **kwargs)

    def next_batch(self):
        if self.done == len(self.capture.train):
            return None
        self.done += 1
        return self.capture.train[self.done - 1]

    def heldout(self, max_samples):
        out, have = [], 0
        for x, y in self.capture.heldout:
            if have >= max_samples:
                break
            out.append((x[:max_samples - have], y[:max_samples - have]))
            have += int(out[-1][0].shape[0])
        return out

    def planned_steps(self):
        return len(self.capture.train)

    def num_classes(self):
        return self.capture.classes
