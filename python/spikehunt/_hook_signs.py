"""`doctor -- COMMAND` on training the hooks cannot replay: the signs read through the hooks alone.

Where the copies of _capture.py cannot be built (a GAN's two optimizers, gradient accumulation, a
loss of the script's own code), the doctor's experiments and probes do not run: they would judge
another program. What the hooks can still read around each optimizer step of the script's own run,
without a copy and without a batch of the doctor's own, is read here; each is an invariant that
every correct training program satisfies (docs/commands.md, "The doctor on a command"):

  - frozen_parameters, init_symmetry: each model's parameters at its first training call;
  - input_scale, batch_repeats, label_balance: the inputs and class-id targets of the watched steps;
  - gradient_flow, optimizer_coverage: which parameters got a gradient, which changed, and which
    no optimizer holds, over the watched steps;
  - grad_accumulation, applied_update: the gradient an optimizer step applies against what the
    backward() calls gave each parameter since its gradient was last cleared (a hook on each
    parameter sees every backward's contribution and whether `.grad` was cleared before it); and the
    parameters between one step of their optimizer and the next (changed outside the step: a step
    undone, or the weights rewritten every step).

The report (text, or the doctor's JSON document) is written to the file the launcher prints, with the
names of the doctor's other signs, which need a `spikehunt.Scenario` and why.
"""
import functools
import json
import math

import torch


class _Slot:
    """One trainable parameter: its name, value at step 0, gradient contributions and values around steps."""
    __slots__ = ("name", "param", "start", "contrib", "cleared", "fresh", "before", "after", "had_grad",
                 "changed", "optimizer", "last_before", "got_grad")

    def __init__(self, name, param):
        self.name, self.param = name, param
        self.start = param.detach().clone()
        self.contrib = None    # the sum of backward's gradients since .grad was last cleared
        self.cleared = True    # .grad was cleared (None or zero) since its optimizer's last step
        self.fresh = False     # a backward gave it a gradient since its optimizer's last step
        self.before = self.after = None  # its value before and after its optimizer's last step
        self.had_grad = False  # a step of its optimizer found a nonzero gradient
        self.got_grad = False  # a backward gave it a nonzero gradient
        self.changed = False   # a step of its optimizer changed it
        self.optimizer = None  # the index of the optimizer holding it
        self.last_before = None  # its value before its optimizer's step before the last


class HookReads:
    def __init__(self):
        self.roots = []        # (root, prefix) in the order they first trained
        self.slots = {}        # id(parameter) -> _Slot
        self.primary_steps = 0
        self.inputs = []       # the first primary steps' float model inputs: (non-finite, rms)
        self.hashes = []       # each primary step's model input, hashed
        self.labels = []       # class-id targets of the primary steps
        self.scaler = False    # a GradScaler scaled a loss
        self.distributed = False  # torch.distributed is initialized (the gradients applied are the ranks' mean)
        self.steps = {}        # optimizer index -> steps read
        self.compared = 0      # steps whose applied gradient was compared with backward's
        self.equal = 0         # ... equal to it (within 1e-4)
        self.factors = []      # ... or one common factor of it: the factor
        self.other = 0         # ... or changed otherwise
        self.cleared_between = {}  # step -> parameters whose gradient was cleared between backward and step
        self.not_reset = {}        # step -> parameters whose gradient still held the previous step's
        self.stale = {}            # step -> parameters stepped with a gradient no backward gave since
        self.outside = 0           # steps whose parameters changed after the previous step of their optimizer
        self.rewritten = 0         # ... by half their size or more (the weights replaced)
        self.undone = 0            # ... back to their value before that step
        self.successive = 0        # steps that had a previous step of their optimizer

    # ---- what the hooks hand it ----

    def model(self, root):
        """A root module's first training call: its parameters at step 0, and a hook on each."""
        if any(r is root for r, _ in self.roots):
            return
        prefix = f"model{len(self.roots)}." if self.roots else ""
        self.roots.append((root, prefix))
        for name, p in root.named_parameters():
            if id(p) in self.slots or not p.requires_grad:
                continue
            slot = self.slots[id(p)] = _Slot(prefix + name, p)
            p.register_hook(functools.partial(_contribution, slot))

    def before_step(self, index, optimizer, primary, inputs, targets):
        self.steps[index] = self.steps.get(index, 0) + 1
        step = self.steps[index] - 1
        if primary:
            self._data(inputs, targets)
        self.distributed = self.distributed or (torch.distributed.is_available() and
                                                torch.distributed.is_initialized())
        gc = cc = gg = 0.0
        for p in _held(optimizer):
            slot = self.slots.get(id(p))
            if slot is None:
                continue
            slot.optimizer = index
            g = p.grad
            nonzero = g is not None and bool(g.any())
            slot.had_grad |= nonzero
            if slot.fresh and slot.contrib is not None:
                if not nonzero:
                    if bool(slot.contrib.any()):
                        self.cleared_between.setdefault((index, step), []).append(slot.name)
                elif not slot.cleared:
                    self.not_reset.setdefault((index, step), []).append(slot.name)
                else:
                    g64, c64 = g.detach().double(), slot.contrib.double()
                    gc += float((g64 * c64).sum())
                    cc += float((c64 * c64).sum())
                    gg += float((g64 * g64).sum())
            elif nonzero and not slot.fresh:
                self.stale.setdefault((index, step), []).append(slot.name)
            slot.before = p.detach().clone()
        if gg > 0 and cc > 0:
            self.compared += 1
            a = gc / cc
            residual = math.sqrt(max(gg - 2 * a * gc + a * a * cc, 0.0) / gg)
            if residual > 1e-3:
                self.other += 1
            elif abs(a - 1) <= 1e-4:
                self.equal += 1
            else:
                self.factors.append(a)

    def after_step(self, optimizer):
        moved = outside = rewritten = undone = 0.0
        previous = False
        for p in _held(optimizer):
            slot = self.slots.get(id(p))
            if slot is None or slot.before is None:
                continue
            now = p.detach()
            if slot.after is not None:  # what happened between its optimizer's last step and this one
                previous = True
                d = float((slot.before.double() - slot.after.double()).norm())
                if d > 0:
                    outside += 1
                    rewritten += d >= 0.5 * float(slot.after.double().norm())
                    undone += slot.last_before is not None and torch.equal(slot.before, slot.last_before)
            changed = not torch.equal(now, slot.before)
            slot.changed |= changed
            moved += changed
            slot.last_before = slot.before
            slot.after = now.clone()
            slot.fresh, slot.cleared, slot.contrib = False, False, None
        self.successive += previous
        self.outside += outside > 0
        self.rewritten += rewritten > 0
        self.undone += undone > 0 and undone >= outside / 2

    def _data(self, inputs, targets):
        self.primary_steps += 1
        if isinstance(inputs, torch.Tensor) and inputs.numel():
            x = inputs.detach()
            if x.is_floating_point() and len(self.inputs) < 4:
                finite = torch.isfinite(x)
                rms = float(x[finite].double().pow(2).mean().sqrt()) if bool(finite.any()) else math.nan
                self.inputs.append((int((~finite).sum()), rms))
            self.hashes.append(hash(x.cpu().contiguous().view(torch.uint8).numpy().tobytes()))
        if isinstance(targets, torch.Tensor) and targets.dim() == 1 and not targets.is_floating_point() \
                and targets.dtype != torch.bool and targets.numel():
            self.labels.append(targets.detach().cpu())

    # ---- the signs ----

    def signs(self, watches):
        """Each sign read, as the doctor's JSON writes a sign (name, passed, evidence, cause, hint, rank, ...)."""
        models = [(r, pre) for r, pre in self.roots if any(s.optimizer is not None for s in self._of(r, pre))]
        out = [self._frozen(models), self._symmetry(models), self._input_scale(), self._batch_repeats(),
               self._label_balance(), self._gradient_flow(models), self._coverage(models), self._accumulation(),
               self._update(), _monitor(watches)]
        return [s for s in out if s is not None]

    def _of(self, root, prefix):
        return [self.slots[id(p)] for p in root.parameters() if id(p) in self.slots and
                self.slots[id(p)].name.startswith(prefix)]

    def _frozen(self, models):
        frozen, weights, total, trained = [], 0, 0, 0
        for root, prefix in models:
            for name, p in root.named_parameters():
                total += p.numel()
                trained += p.numel() if p.requires_grad else 0
                if p.dim() >= 2:
                    weights += 1
                    if not p.requires_grad:
                        frozen.append(prefix + name)
        s = _sign("frozen_parameters", f"{trained:,} of {total:,} parameters require grad; "
                                       f"{weights - len(frozen)} of {weights} weights (tensors of 2 or more dimensions)")
        if weights and len(frozen) == weights:
            _fail(s, 12, f"every weight is frozen (requires_grad=False): {_list(frozen)}: no layer can change what "
                         "it computes", "unfreeze the layers meant to learn (at least the output layer when "
                                        "fine-tuning)", frozen)
        return s

    def _symmetry(self, models):
        identical, checked, example = [], 0, ""
        for root, prefix in models:
            weights = [s for s in self._of(root, prefix) if s.start.dim() >= 2 and s.start.shape[0] >= 2]
            for slot in weights[:-1]:  # the last weight (the output layer) may start equal
                checked += 1
                rows = slot.start.reshape(slot.start.shape[0], -1).double()
                size = float(rows[0].abs().max())
                if float((rows - rows[0]).abs().max()) == 0 and size > 0:
                    identical.append(slot.name)
                    example = example or f"{slot.name}: all {rows.shape[0]} rows equal, largest |w| {size:.4g}"
        s = _sign("init_symmetry", f"at its first training call, no hidden weight has identical units (rows), of "
                                   f"{checked}" if not identical else
                  f"at its first training call, {len(identical)} weight(s) have every unit identical: {example}")
        if identical:
            _fail(s, 8, f"the units of {_list(identical)} are identical at step 0 (symmetric initialization: "
                        f"{example}): units that start equal get equal gradients and can stay equal",
                  "initialize weights randomly (the layers' default init, or nn.init.kaiming_uniform_)", identical)
        return s

    def _input_scale(self):
        if not self.inputs:
            return _skipped("input_scale", "no float model inputs were watched")
        bad = sum(n for n, _ in self.inputs)
        rms = max((r for _, r in self.inputs if math.isfinite(r)), default=math.nan)
        s = _sign("input_scale", f"the first {len(self.inputs)} watched batches' inputs: rms up to {rms:.4g}"
                                 + (f", {bad:,} non-finite value(s)" if bad else ", all finite"))
        if bad:
            _fail(s, 2, f"the training inputs hold {bad:,} NaN/Inf value(s) in the first {len(self.inputs)} batches",
                  "find where the data gets them (a division by a zero std, a log of 0, a corrupt file)",
                  ["data"])
        elif rms > 10:
            _fail(s, 14, f"the training inputs' rms is {rms:.4g} (above 10): unscaled inputs (raw 0..255 pixels: "
                         "divide by 255)", "normalize the inputs (to mean 0, std 1, or 0..1)", ["data"])
        elif rms < 0.01:
            _fail(s, 14, f"the training inputs' rms is {rms:.4g} (below 0.01): scaled twice",
                  "scale the inputs once", ["data"])
        return s

    def _batch_repeats(self):
        n = len(self.hashes)
        if n < 8:
            return _skipped("batch_repeats", f"fewer than 8 watched batches ({n})")
        repeats = sum(h in self.hashes[max(0, i - 8):i] for i, h in enumerate(self.hashes))
        distinct = len(set(self.hashes))
        s = _sign("batch_repeats", f"{n} watched batches, {distinct} distinct (by the hash of their inputs); "
                                   f"{repeats} repeat one of the 8 batches before them")
        if distinct > 8 and repeats * 4 >= n:
            _fail(s, 7, f"{repeats} of {n} watched batches are identical to one of the 8 batches before them "
                        f"({distinct} distinct): the loader hands out the same batch several times before the rest",
                  "seed each DataLoader worker (worker_init_fn), or draw indices in the main process",
                  ["data loader"])
        return s

    def _label_balance(self):
        if not self.labels:
            return _skipped("label_balance", "no class-id targets reached a loss in the watched steps")
        y = torch.cat(self.labels)
        y = y[y >= 0]
        classes = torch.unique(y).tolist()
        s = _sign("label_balance", f"{y.numel():,} training labels of {len(self.labels)} steps, "
                                   f"{len(classes)} class(es)")
        if len(classes) == 1:
            _fail(s, 5, f"every training label is class {classes[0]} ({y.numel():,} labels)",
                  "check how the labels are read (a constant, a wrong column, a filter that keeps one class)",
                  ["labels"])
        return s

    def _gradient_flow(self, models):
        held = [s for r, pre in models for s in self._of(r, pre) if s.optimizer is not None]
        none = [s.name for s in held if not s.got_grad]
        s = _sign("gradient_flow", f"{len(held) - len(none)} of {len(held)} optimized parameters got a nonzero "
                                   f"gradient from a backward()")
        if none:
            _fail(s, 26, f"no backward gave {_list(none)} a gradient in the watched steps: the loss does not depend "
                         "on them (detached, computed under no_grad, or unused in forward())",
                  "find where the path from these layers to the loss is cut", none)
        return s

    def _coverage(self, models):
        slots = [s for r, pre in models for s in self._of(r, pre)]
        unheld = [s.name for s in slots if s.optimizer is None and torch.equal(s.param.detach(), s.start)]
        stuck = [s.name for s in slots if s.optimizer is not None and s.had_grad and not s.changed]
        s = _sign("optimizer_coverage", f"{sum(x.optimizer is not None for x in slots)} of {len(slots)} trainable "
                                        f"parameters held by an optimizer; {len(unheld)} unheld and unchanged, "
                                        f"{len(stuck)} held with a gradient and never changed")
        if unheld:
            _fail(s, 12, f"no optimizer updates {_list(unheld)}: they stay at their initial values",
                  "give the optimizer every parameter meant to train (model.parameters(), not a part of them)", unheld)
        elif stuck:
            _fail(s, 12, f"{_list(stuck)} had gradients and were never changed by their optimizer's steps",
                  "check the learning rate and that the optimizer's step runs", stuck)
        return s

    def _accumulation(self):
        steps = sum(self.steps.values())
        s = _sign("grad_accumulation", f"{len(self.not_reset)} of {steps} watched optimizer steps applied a "
                                       "gradient still holding the step before's")
        if self.not_reset and len(self.not_reset) * 2 >= max(steps - len(self.steps), 1):
            names = next(iter(self.not_reset.values()))
            _fail(s, 19, f"the gradient is never reset between optimizer steps: at {len(self.not_reset)} of {steps} "
                         f"steps backward added to a .grad that still held the previous step's ({_list(names)})",
                  "call optimizer.zero_grad() (or model.zero_grad()) once per step, before backward()", names)
        return s

    def _update(self):
        steps = sum(self.steps.values())
        parts = [f"{steps} optimizer steps read: the gradient applied equals backward's at {self.equal} of "
                 f"{self.compared} compared"]
        if self.cleared_between:
            parts.append(f"cleared between backward and step at {len(self.cleared_between)}")
        if self.factors:
            lo, hi = min(self.factors), max(self.factors)
            parts.append(f"one common factor of it at {len(self.factors)} ({lo:.4g}..{hi:.4g}: clipping"
                         + (", a GradScaler's unscaling" if self.scaler else "") + " or a rescaling)")
        if self.other:
            parts.append(f"changed otherwise at {self.other}" + (
                " (averaged across the data-parallel ranks)" if self.distributed else ""))
        if self.outside:
            parts.append(f"parameters changed outside their optimizer's step at {self.outside} of {self.successive}"
                         f" (rewritten by half their size or more at {self.rewritten}; back to before the step at "
                         f"{self.undone})")
        s = _sign("applied_update", "; ".join(parts))
        if self.cleared_between and len(self.cleared_between) * 2 >= steps:
            names = next(iter(self.cleared_between.values()))
            _fail(s, 11, f"the gradient is cleared between backward() and the optimizer's step at "
                         f"{len(self.cleared_between)} of {steps} steps ({_list(names)}): the steps apply nothing",
                  "call zero_grad() before backward() (or after step()), never between them", names)
        elif self.undone and self.undone * 4 >= self.successive:
            _fail(s, 8, f"the parameters return to their value before the step at {self.undone} of {self.successive}"
                        " steps: the optimizer's steps are undone (a state reloaded, or a copy written back, "
                        "between steps)", "find what writes the parameters between steps", ["step"])
        elif self.successive >= 2 and self.rewritten * 2 >= self.successive:
            _fail(s, 8, f"the parameters are rewritten between steps (by half their size or more at "
                        f"{self.rewritten} of {self.successive}): not what the last step left when the next "
                        "backward runs (an initialization inside forward(), or weights loaded every step)",
                  "initialize the weights once, in __init__, not in forward()", ["step"])
        elif self.stale and len(self.stale) * 2 >= steps:
            names = next(iter(self.stale.values()))
            _fail(s, 11, f"at {len(self.stale)} of {steps} steps the optimizer applied a gradient no backward() "
                         f"gave since its last step ({_list(names)}): the same gradient applied again",
                  "call backward() on this step's loss before each step, and zero_grad() after", names)
        elif self.factors and not self.scaler and sum(f >= 1.8 for f in self.factors) * 2 >= self.compared:
            _fail(s, 20, f"the gradient applied is {max(self.factors):.4g}x backward's at "
                         f"{sum(f >= 1.8 for f in self.factors)} of {self.compared} steps: something between "
                         "backward() and step() multiplies it", "find what scales .grad between them", ["step"])
        return s


def _contribution(slot, grad):
    """A backward's gradient for the slot's parameter, before it is added to .grad."""
    current = slot.param.grad
    g = grad.detach()
    if current is None or not bool(current.any()):
        slot.contrib, slot.cleared = g.clone(), True
    else:
        slot.contrib = g.clone() if slot.contrib is None else slot.contrib + g
    slot.fresh = True
    slot.got_grad = slot.got_grad or bool(g.any())


def _held(optimizer):
    return [p for g in optimizer.param_groups for p in g["params"] if isinstance(p, torch.Tensor)]


def _monitor(watches):
    parts = [f"{w['optimizer']}: {w['verdict']['outcome']} ({w['verdict'].get('steps_run', 0)} steps)"
             for w in watches]
    s = _sign("monitor_health", "the monitor's verdict of each optimizer's steps: " + "; ".join(parts))
    bad = [w for w in watches if w["verdict"]["outcome"] != "healthy"]
    if bad:
        v = bad[0]["verdict"]
        onset, failure = v.get("onset_step"), v.get("failure_step")
        when = ([f"extreme from step {onset}"] if onset is not None else []) + (
            [f"its first non-finite step {failure}"] if failure is not None else [])
        _fail(s, 29, f"{bad[0]['optimizer']}: {v['outcome']}" + (f" ({'; '.join(when)})" if when else ""),
              "sweep the knobs to find the stable region (`spikehunt sweep -- COMMAND`)", ["monitor"])
    return s


def _sign(name, evidence):
    return {"name": name, "passed": True, "skipped": False, "evidence": evidence, "hint": "", "named": [],
            "data": {}, "part": ""}


def _skipped(name, why):
    s = _sign(name, why)
    s["skipped"] = True
    return s


def _fail(s, rank, cause, hint, named):
    s.update(passed=False, rank=rank, cause=cause, hint=hint, named=list(named))


def _list(names, n=4):
    shown = ", ".join(names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


def report(reads, watches, path, as_json, registry):
    """Writes the signs read to `path` (the doctor's text from its "most likely cause" line on, or its JSON
    document with `needs_scenario`: the doctor's other signs); returns the exit code (0 every sign passed)."""
    parts = {r["name"]: r["part"] for r in registry}
    signs = reads.signs(watches)
    for s in signs:
        s["part"] = parts.get(s["name"], "")
    read = {s["name"] for s in signs}
    not_run = [r["name"] for r in registry if r["name"] not in read and r["name"] != "training_code_error"]
    failed = sorted((s for s in signs if not s["passed"]), key=lambda s: s["rank"])
    top = failed[0] if failed else None
    if as_json:
        cause = top and {"sign": top["name"], "cause": top["cause"], "hint": top["hint"], "part": top["part"]}
        text = json.dumps({"passed": not failed, "most_likely_cause": cause, "signs": signs,
                           "needs_scenario": not_run}, indent=2) + "\n"
    else:
        lines = [f"most likely cause: {top['cause']}  [{top['name']}]" if top else
                 "no vital sign read failed: nothing the hooks read points at a classic training bug"]
        for s in signs:
            lines.append(f"  {'skip' if s['skipped'] else 'pass' if s['passed'] else 'FAIL'}  {s['name']:<20} "
                         f"{s['evidence']}")
            if not s["passed"]:
                lines.append(f"        hint: {s['hint']}")
        skipped = sum(s["skipped"] for s in signs)
        lines.append(f"{len(signs)} vital signs read through the hooks: {len(signs) - len(failed) - skipped} passed, "
                     f"{len(failed)} failed, {skipped} skipped; not run, as they need a Scenario: {', '.join(not_run)}")
        text = "\n".join(lines) + "\n"
    with open(path, "w") as f:
        f.write(text)
    return 1 if failed else 0
