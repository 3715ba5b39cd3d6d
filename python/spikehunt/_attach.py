"""The monitor attached to a training script it does not control (`spikehunt run -- COMMAND`).

_site.py (put first on the command's PYTHONPATH as sitecustomize) calls attach() once the
script's process has imported torch. From then on torch's global hooks find what the script
trains, with no line of it changed:

  - module forward hooks: each call of a module outside any other (a root: the model) gives the
    step's inputs (its first tensor argument) and outputs; the leaf modules inside it give the
    taps; a loss module (nn.CrossEntropyLoss, ...) gives the targets (its second argument);
  - Tensor.backward: each call is a micro-batch's loss (several before a step: accumulation;
    a GradScaler's scaled loss is read unscaled);
  - optimizer step pre- and post-hooks: each optimizer's step is a step of its own Watch
    (spikehunt.Watch, the monitor of `run`), whose model is the root modules holding the
    optimizer's parameters. A GradScaler's skipped step is counted as skipped, not judged.

The burst ends after `steps` steps of the first optimizer that steps (SystemExit(0) from its
step: the script's `finally` blocks run), or at the first non-finite step, as a burst of `run`
does. At exit every Watch is closed (trace.jsonl, verdict.json, checkpoints) and this process
writes status-<pid>.json for the launcher (spikehunt/_command.py): whether torch was imported,
the steps, each Watch's folder and story, and the script's own traceback if it raised.
"""
import atexit
import json
import math
import os
import sys
import traceback
import weakref

_state = None


class _Call:
    """One call of a root module while training: its inputs, outputs and leaf taps."""
    __slots__ = ("module", "inputs", "outputs", "taps", "labels", "plain", "last_tap")

    def __init__(self, module, inputs, labels):
        self.module, self.inputs, self.outputs, self.taps, self.labels = module, inputs, None, [], labels
        self.plain = False  # called on one tensor, no keywords (what `doctor -- COMMAND`'s copies can replay)
        self.last_tap = None  # (a weak reference to the last tapped output, its version counter then)


# Leaves whose output is, elementwise or over a pooling window, no larger in magnitude than their input and
# finite where it is: |f(x)| <= max|x|. Applied to the tensor the previous tap just read, unchanged since,
# such a leaf can neither be the first non-finite tensor nor raise the largest activation, so its tap would
# only repeat a bound the monitor already holds (and cost a pass over the tensor: docs/benchmarks.md).
_NON_EXPANSIVE = ("ReLU", "ReLU6", "Tanh", "GELU", "SiLU", "Mish", "Softsign", "Hardswish", "Hardshrink",
                  "Softshrink", "Tanhshrink", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d",
                  "AvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "AdaptiveAvgPool1d",
                  "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "Flatten", "Unflatten", "Identity")


def _repeats_last_tap(module, args, call):
    """True when `module` is a non-expansive leaf of torch.nn applied to the last tapped tensor, untouched."""
    if call.last_tap is None or not args or type(module).__module__.split(".")[:2] != ["torch", "nn"]:
        return False
    name = type(module).__name__
    if name == "LeakyReLU":
        if abs(module.negative_slope) > 1:
            return False
    elif name in ("ELU", "CELU"):
        if not 0 <= module.alpha <= 1:
            return False
    elif name not in _NON_EXPANSIVE:
        return False
    ref, version = call.last_tap
    return args[0] is ref() and args[0]._version == version


class _State:
    def __init__(self, settings):
        import torch
        from . import _core
        self.torch, self.core = torch, _core
        self.out = settings["out"]
        self.steps = int(settings.get("steps") or 0)
        self.rules = settings.get("rules") or {}
        self.status_dir = settings["status_dir"]
        self.depth = 0
        self.call = None            # the root call under way
        self.calls = []             # root calls since the last backward
        self.targets = None         # a loss module's targets since the last backward
        self.micro = []             # [(calls, loss, targets)] since the last optimizer step
        self.last_micro = []        # the micro-batches of the step before (optimizers stepped back to back)
        self.names = {}             # id(root) -> {id(module): name}
        self.roots = []             # every root module seen training, in order
        self.latest = {}            # id(root) -> its latest call
        self.watches = {}           # id(optimizer) -> spikehunt.Watch
        self.order = []             # optimizers in the order they first stepped
        self.primary = None
        self.done = 0               # steps of the primary optimizer
        self.skipped = []           # steps a GradScaler skipped: (optimizer index, step)
        self.stepping = 0           # optimizer pre-hooks fired (a GradScaler's step checks it)
        self.scaled = {}            # id(scaled loss) -> the unscaled loss
        self.error = None
        self.interrupted = False
        self.ended = None           # why the burst ended early
        self.closed = False
        self.exited = False
        self.monitor_error = None   # the monitor's own failure, which detached it
        self.alternate = bool(settings.get("alternate"))  # bench/python/command_bench.py: every other step
        self.paused = False         # ... unwatched, the hooks returning at once
        self.folders = []
        self.capture = None         # `doctor -- COMMAND`: what its probes need (_capture.py)
        if settings.get("doctor"):
            from ._capture import Capture
            self.capture = Capture(settings["doctor"])


def attach():
    """Installs the hooks (once), reading the launcher's settings from SPIKEHUNT_ATTACH."""
    global _state
    if _state is not None or "SPIKEHUNT_ATTACH" not in os.environ:
        return
    settings = json.loads(os.environ["SPIKEHUNT_ATTACH"])
    _state = _State(settings)
    torch = _state.torch
    if settings.get("threads"):  # the config's thread count: same config, same threads, same bits
        torch.set_num_threads(int(settings["threads"]))
    if settings.get("deterministic"):  # a sweep's burst: torch's deterministic kernels where it has them
        torch.use_deterministic_algorithms(True, warn_only=True)
    from torch.nn.modules import module as nn_module
    from torch.optim import optimizer as optim
    nn_module.register_module_forward_pre_hook(_before_forward)
    nn_module.register_module_forward_hook(_after_forward, with_kwargs=True, always_call=True)
    optim.register_optimizer_step_pre_hook(_before_step)
    optim.register_optimizer_step_post_hook(_after_step)
    backward = torch.Tensor.backward

    def monitored_backward(self, *args, **kwargs):
        _on_backward(self)
        return backward(self, *args, **kwargs)
    monitored_backward.__doc__ = backward.__doc__
    torch.Tensor.backward = monitored_backward
    _patch_grad_scaler(torch)
    _patch_functional_losses(torch)
    if _state.capture is not None:
        _patch_clipping(torch)
    hook = sys.excepthook

    def excepthook(kind, value, tb):
        _on_exception(kind, value, tb)
        hook(kind, value, tb)
    sys.excepthook = excepthook
    atexit.register(_at_exit)
    # os._exit() skips atexit: this process's own call closes the watches first (a forked child,
    # a DataLoader worker, exits as it asks).
    real_exit, pid = os._exit, os.getpid()

    def exit_now(code=0):
        if os.getpid() == pid:
            _at_exit()
        real_exit(code)
    os._exit = exit_now
    _write_status({"pid": pid, "argv": sys.argv, "torch": True, "steps": 0, "optimizers": 0, "abrupt": True})


def _guarded(hook):
    """A hook that never breaks the script it watches: an error of the monitor's own detaches it, says so
    once (and in the status file), and the script trains on unwatched. SystemExit (--steps) passes."""
    import functools

    @functools.wraps(hook)
    def guarded(*args, **kwargs):
        # Inside a torch.compile'd region Dynamo would trace the hook into the graph: there it does
        # nothing (the compiled module's own call, outside the region, is the model's root call).
        if _state.torch.compiler.is_compiling():
            return None
        if _state.closed or _state.paused and hook is not _after_step_hook:
            return None
        try:
            return hook(*args, **kwargs)
        except SystemExit:
            raise
        except Exception as e:  # noqa: BLE001  (the user's training must not die of the monitor)
            _state.monitor_error = f"{hook.__name__}: {type(e).__name__}: {e}"
            sys.stderr.write(f"spikehunt: the monitor stopped watching ({_state.monitor_error}); the script goes on\n")
            _close()
            return None
    return guarded


def _training(module):
    return module.training and _state.torch.is_grad_enabled()


def _first_tensor(args, kwargs):
    torch = _state.torch
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            return a
    return None


@_guarded
def _before_forward(module, args):
    s = _state
    s.depth += 1
    if s.depth != 1 or s.closed:
        return None
    from torch.nn.modules.loss import _Loss
    if isinstance(module, _Loss):
        if len(args) > 1 and isinstance(args[1], s.torch.Tensor) and s.targets is None and s.torch.is_grad_enabled():
            s.targets = args[1]
    elif _training(module):
        s.call = _Call(module, None, None)
        if s.capture is not None:
            s.capture.first_call(module)
        if id(module) not in s.names:
            s.names[id(module)] = {id(m): n for n, m in module.named_modules() if n}
            s.roots.append(module)
    return None


@_guarded
def _after_forward(module, args, kwargs, output):
    s = _state
    s.depth = max(s.depth - 1, 0)
    call = s.call
    if s.capture is not None and s.depth == 0 and module is not getattr(call, "module", None):
        from torch.nn.modules.loss import _Loss
        if isinstance(module, _Loss):
            s.capture.loss_call(module, args, kwargs, output)
        else:
            s.capture.eval_call(module, args, kwargs, _main_output(output))
    if call is None:
        return None
    if s.depth == 0 and module is call.module:
        labels = kwargs.get("labels")
        call.plain = len(args) == 1 and isinstance(args[0], s.torch.Tensor) and not kwargs
        call.inputs = _first_tensor(args, kwargs)
        call.labels = labels if isinstance(labels, s.torch.Tensor) else None
        call.outputs = _main_output(output)
        s.calls.append(call)
        s.latest[id(module)] = call
        s.call = None
        return None
    if next(module.children(), None) is None:  # a leaf inside the model: a tap
        name = s.names.get(id(call.module), {}).get(id(module))
        tensor = output[0] if isinstance(output, (tuple, list)) and output else output
        if name and isinstance(tensor, s.torch.Tensor) and tensor.is_floating_point():
            repeats = _repeats_last_tap(module, args, call)
            call.last_tap = (weakref.ref(tensor), tensor._version)  # untapped, the bound holds on down the chain
            if repeats:
                return None
            peak = s.core.max_abs(tensor) if tensor.is_cpu else None
            if peak is not None and math.isfinite(peak):
                # The monitor reads a CPU tap's max (taken now, in cache) and its size; the tensor itself only
                # to count non-finite values. A stand-in of its shape on one element's storage lets backward
                # free the activation as in a plain loop (held until the optimizer's pre-hook, it cost page
                # faults: bench/python/command_bench.py).
                tensor = s.torch.zeros((), dtype=tensor.dtype).expand(tensor.shape)
            call.taps.append((name, tensor, peak))
    return None


def _main_output(output):
    torch = _state.torch
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "keys"):  # a dict, or a Hugging Face ModelOutput
        for k in ("logits", "last_hidden_state"):
            if k in output and isinstance(output[k], torch.Tensor):
                return output[k]
    if isinstance(output, (tuple, list)):
        return next((o for o in output if isinstance(o, torch.Tensor)), None)
    return None


@_guarded
def _on_backward(loss):
    s = _state
    if s.closed or not loss.requires_grad or loss.numel() != 1:
        return
    loss = s.scaled.pop(id(loss), loss)
    if s.capture is not None:
        s.capture.backward(loss)
    s.micro.append((s.calls, loss.detach(), s.targets))
    s.calls, s.targets, s.call, s.depth = [], None, None, 0


_LOSSES = ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "poisson_nll_loss", "gaussian_nll_loss",
           "multi_margin_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss", "soft_margin_loss")


def _patch_functional_losses(torch):
    """torch.nn.functional's losses give the step's targets (their second argument), as loss modules do."""
    import functools
    functional = torch.nn.functional
    for name in _LOSSES:
        loss = getattr(functional, name, None)
        if loss is None:
            continue

        @functools.wraps(loss)
        def monitored(*args, _loss=loss, **kwargs):
            target = args[1] if len(args) > 1 else kwargs.get("target")
            if (isinstance(target, torch.Tensor) and _state.targets is None and not _state.closed
                    and torch.is_grad_enabled()):  # an evaluation's loss (no_grad) gives no step its targets
                _state.targets = target
            output = _loss(*args, **kwargs)
            if _state.capture is not None and not _state.closed and _state.depth == 0:
                _state.capture.loss_call(_loss, args, kwargs, output)
            return output
        setattr(functional, name, monitored)


def _patch_clipping(torch):
    """`doctor -- COMMAND`: torch.nn.utils.clip_grad_norm_'s max_norm and norm type, which the copies apply."""
    import functools
    utils = torch.nn.utils
    clip = utils.clip_grad_norm_

    @functools.wraps(clip)
    def monitored(parameters, max_norm, norm_type=2.0, *args, **kwargs):
        if not _state.closed:
            _state.capture.clipped(float(max_norm), float(norm_type))
        return clip(parameters, max_norm, norm_type, *args, **kwargs)
    utils.clip_grad_norm_ = monitored


def _patch_grad_scaler(torch):
    """A GradScaler's loss is read unscaled, and a step it skips (inf/NaN found) is counted as skipped."""
    scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    if scaler is None:
        return
    scale, step = scaler.scale, scaler.step

    def monitored_scale(self, outputs):
        scaled = scale(self, outputs)
        if isinstance(outputs, torch.Tensor) and isinstance(scaled, torch.Tensor):
            _state.scaled[id(scaled)] = outputs
            if _state.capture is not None:
                _state.capture.reads.scaler = True
        return scaled

    def monitored_step(self, optimizer, *args, **kwargs):
        before = _state.stepping
        result = step(self, optimizer, *args, **kwargs)
        if _state.stepping == before and not _state.closed:  # the scaler found inf/NaN and skipped it
            index = _optimizer_index(optimizer)
            _state.skipped.append((index, _state.done))
            _state.last_micro, _state.micro = _state.micro, []
        return result
    scaler.scale, scaler.step = monitored_scale, monitored_step


def _optimizer_index(optimizer):
    s = _state
    if id(optimizer) not in [id(o) for o in s.order]:
        return len(s.order)
    return [id(o) for o in s.order].index(id(optimizer))


def _model_of(optimizer):
    """The root modules holding the optimizer's parameters (one: itself; several: a ModuleDict of them)."""
    torch = _state.torch
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    roots = [m for m in _state.roots if any(id(p) in held for p in m.parameters())]
    if len(roots) == 1:
        return roots[0], roots
    if roots:
        return torch.nn.ModuleDict({f"model{i}": m for i, m in enumerate(roots)}), roots
    holder = torch.nn.Module()  # parameters outside any module that ran forward
    holder.params = torch.nn.ParameterList([p for g in optimizer.param_groups for p in g["params"]])
    return holder, roots


def _watch_of(optimizer, micro):
    s = _state
    w = s.watches.get(id(optimizer))
    if w is not None:
        return w
    from .watch import Watch
    model, roots = _model_of(optimizer)
    outputs = next((s.latest[id(m)].outputs for m in roots if s.latest[id(m)].outputs is not None), None)
    classes = int(outputs.shape[-1]) if outputs is not None and outputs.dim() >= 2 and outputs.is_floating_point() else 10
    index = len(s.order)
    out = s.out if index == 0 else os.path.join(s.out, f"optimizer{index}-{type(optimizer).__name__}")
    w = Watch(model, [optimizer], out=out, taps=[], rules=s.rules, planned_steps=s.steps, num_classes=classes)
    w._roots, w._pending = roots, None
    w._label = f"optimizer {index} ({type(optimizer).__name__} on {type(model).__name__})"
    s.watches[id(optimizer)] = w
    s.order.append(optimizer)
    if s.primary is None:
        s.primary = optimizer
    return w


@_guarded
def _before_step(optimizer, args, kwargs):
    s = _state
    s.stepping += 1
    if s.closed:
        return None
    micro = s.micro or s.last_micro
    s.last_micro, s.micro = micro, []
    w = _watch_of(optimizer, micro)
    if s.capture is not None:  # `doctor -- COMMAND`: each step read as its signs read it (_hook_signs.py)
        mine = next((c for calls, _, _ in micro[:1] for c in calls if c.module in w._roots), None)
        s.capture.reads.before_step(_optimizer_index(optimizer), optimizer, optimizer is s.primary,
                                    mine.inputs if mine else None, micro[0][2] if micro else None)
    if w.ended is not None:  # the doctor's capture goes on past the watch's end: it wants the data
        if s.capture is not None and optimizer is s.primary:
            s.capture.step(optimizer, w._roots, [c for calls, _, _ in micro for c in calls], len(s.order) - 1)
        return None
    torch = s.torch
    empty = torch.zeros(0, dtype=torch.long)
    batches = []
    for calls, loss, targets in micro:
        # The call of this optimizer's model in the micro-batch, else its latest (a GAN's generator ran
        # before the discriminator's step), else the first root call.
        mine = next((c for c in calls if c.module in w._roots), None)
        mine = mine or next((s.latest[id(m)] for m in w._roots), calls[0] if calls else None)
        inputs = mine.inputs if mine is not None and mine.inputs is not None else empty
        if targets is None:
            targets = mine.labels if mine is not None and mine.labels is not None else empty
        outputs = mine.outputs if mine is not None and mine.outputs is not None else loss
        batches.append((inputs.detach(), targets.detach(), outputs.detach(), loss, mine.taps if mine else []))
    if not batches:  # a step without a backward this process saw (gradients set by hand)
        batches = [(empty, empty, torch.zeros(()), torch.zeros(()), [])]
    w._pending = w.replay(batches) or w.after_backward()
    if s.capture is not None and optimizer is s.primary:
        s.capture.step(optimizer, w._roots, [c for calls, _, _ in micro for c in calls], len(s.order) - 1)
    return None


def _after_step_hook(optimizer, args, kwargs):
    s = _state
    if s.alternate and optimizer is s.primary or s.alternate and s.primary is None:
        s.paused = not s.paused
        if not s.paused:  # the step just ended was unwatched: what it left for the monitor is dropped
            s.calls, s.micro, s.targets, s.call, s.depth = [], [], None, None, 0
            return
    if s.closed:
        return
    if s.capture is not None:
        s.capture.reads.after_step(optimizer)
    w = s.watches.get(id(optimizer))
    capturing = s.capture is not None and optimizer is s.primary  # `doctor -- COMMAND`: until it has its batches
    if w is None or w.ended is not None and w._pending is None:
        if capturing and w is not None and s.capture.complete():
            _close()
            raise SystemExit(0)
        return
    record, w._pending = w._pending or w.finish(), None
    if optimizer is s.primary:
        s.done += 1
    if w.ended is not None:
        s.ended = f"{w._label} ended at step {record['step']}: {record['health']}" + (
            f" ({record['fault']})" if record.get("fault") else "")
        if not capturing or s.capture.complete():
            _close()
            raise SystemExit(0)
        return
    if capturing and s.capture.complete():
        s.ended = "the doctor's batches are captured" if not s.capture.reasons else "the doctor cannot replay it"
        _close()
        raise SystemExit(0)
    if s.steps and s.done >= s.steps and optimizer is s.primary:
        s.ended = f"--steps {s.steps}: the burst's steps are done"
        _close()
        raise SystemExit(0)


_after_step = _guarded(_after_step_hook)


def _on_exception(kind, value, tb):
    s = _state
    if issubclass(kind, KeyboardInterrupt):
        s.interrupted = True
        return
    frames = traceback.extract_tb(tb)
    last = frames[-1] if frames else None
    where = f" ({os.path.relpath(last.filename)}:{last.lineno} in {last.name})" if last else ""
    s.error = {"message": f"{kind.__name__}: {value}{where}",
               "traceback": "".join(traceback.format_exception(kind, value, tb))[-4000:]}
    for w in s.watches.values():
        w._core.crashed(s.error["message"], "")


def _close():
    s = _state
    if s.closed:
        return
    s.closed = True
    s.folders = []
    for optimizer in s.order:
        w = s.watches[id(optimizer)]
        path = w.close()
        s.folders.append({"optimizer": w._label, "path": path, "text": w.text(),
                          "verdict": w.verdict()})


def _at_exit():
    s = _state
    if s.exited:
        return
    s.exited = True
    _close()
    doctor = None
    if s.capture is not None:
        c = s.capture
        rc, error = None, None
        try:
            rc = c.run_doctor() if c.train and not c.reasons else c.read_signs(s.folders) if c.reasons else None
        except Exception as e:  # noqa: BLE001  (said by the launcher; the steps' status is still written)
            error = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-4000:]
        doctor = {"rc": rc, "error": error, "reasons": c.reasons, "notes": c.notes, "train": len(c.train),
                  "heldout": c.heldout_count(), "heldout_from": c.heldout_from,
                  "model": c.root_name, "read": bool(c.reasons)}
    _write_status({"doctor": doctor, "modules": _local_modules(), "pid": os.getpid(), "argv": sys.argv, "torch": True, "steps": s.done,
                   "optimizers": len(s.order), "skipped": s.skipped, "ended": s.ended, "error": s.error,
                   "interrupted": s.interrupted, "monitor_error": s.monitor_error, "watches": s.folders})


def _local_modules():
    """The script and the modules it imported from its own project (its folder and below, outside
    site-packages): the code a sweep over the command hashes into its build id."""
    # Its real path: a burst runs in a working folder of links (_command.working_folder), removed after it.
    script = os.path.realpath(sys.argv[0]) if sys.argv and os.path.isfile(sys.argv[0]) else None
    if script is None:
        return []
    from ._api import _project_modules
    return [script] + _project_modules(script)


def _write_status(status):
    """status-<pid>.json for the launcher: written when torch is imported (`abrupt`: the process has not
    ended through its exit handlers yet, which a kill or a crash leaves as it is), then at exit."""
    path = os.path.join(_state.status_dir, f"status-{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(status, f)
    os.replace(path + ".tmp", path)
