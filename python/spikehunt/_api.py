"""The package's API (spikehunt/__init__.py loads it on first use: `import spikehunt` alone
does not import torch, so the launcher of `spikehunt run -- COMMAND` starts at once)."""

import inspect
import os
import sys

import torch
import torch.nn.functional as F

from . import _core
from ._core import ParamSpec, kVersion as __version__

__all__ = ["Scenario", "Batch", "Config", "register", "main", "tap", "number", "integer", "boolean",
           "string", "values", "ContractError", "InputError", "run_config", "Watch", "NonFiniteError"]


class ContractError(TypeError):
    """A scenario class that does not follow the contract: names the file, the method and what was expected."""


class Config:
    """A training config (spikehunt's JSON) with attribute access: config.optimizer.lr,
    config.seed, config.batch_size, config.params["slope"] (or config.params.slope)."""

    def __init__(self, values):
        self._values = values

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            value = self._values[name]
        except KeyError:
            raise AttributeError(f"the config has no field {name!r} (it has {', '.join(self._values)})") from None
        return Config(value) if isinstance(value, dict) else value

    def __getitem__(self, name):
        value = self._values[name]
        return Config(value) if isinstance(value, dict) else value

    def __contains__(self, name):
        return name in self._values

    def get(self, name, default=None):
        return self[name] if name in self._values else default

    def to_dict(self):
        return self._values

    def __repr__(self):
        return f"Config({self._values!r})"


class Batch:
    """A training batch. next_batch() may return (inputs, targets) instead; a Batch also says
    where in the protocol it is: phase (an index into phase_names()), epoch and batch."""

    __slots__ = ("inputs", "targets", "phase", "epoch", "batch")

    def __init__(self, inputs, targets, phase=0, epoch=0, batch=0):
        self.inputs, self.targets, self.phase, self.epoch, self.batch = inputs, targets, phase, epoch, batch


class Scenario:
    """Your training under spikehunt. Override model(), optimizers(), next_batch() and
    planned_steps(); the rest have defaults.

    taps: names of submodules (model().named_modules()) whose outputs the monitor reads
    through forward hooks, or "leaves" for every module without children. Inside
    forward, spikehunt.tap(name, tensor) exposes any other value.
    """

    taps = ()

    def __init__(self, config):
        self.config = config

    def model(self):
        """The torch.nn.Module being trained (the same object every call)."""
        raise NotImplementedError

    def optimizers(self):
        """A torch.optim.Optimizer, or a dict {name: optimizer} for several."""
        raise NotImplementedError

    def forward(self, inputs):
        return self.model()(inputs)

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs, targets)

    def next_batch(self):
        """(inputs, targets) or a Batch; None when the protocol is done."""
        raise NotImplementedError

    def heldout(self, max_samples):
        """Held-out batches, up to max_samples samples in all: a list of (inputs, targets)."""
        return []

    def planned_steps(self):
        raise NotImplementedError

    def phase_names(self):
        return ["train"]

    def num_classes(self):
        return 10

    def optimizer_step(self):
        """Applies the gradients: steps every optimizer (override for an update of your own)."""
        for o in _optimizer_list(self.optimizers()):
            o.step()


def _optimizer_list(optimizers):
    if isinstance(optimizers, dict):
        return list(optimizers.values())
    if isinstance(optimizers, (list, tuple)):
        return list(optimizers)
    return [optimizers]


_tapping = False  # set by _core while a monitored forward runs
_watches = []     # the open Watches, whose loops tap() reports to


@torch.compiler.disable
def _monitor_tap(name, tensor):
    """Hands a tapped tensor to the monitor. Under torch.compile, Dynamo calls it as it is
    (a graph break) instead of trying to trace into the C++ extension."""
    _core.tap(name, tensor)


def tap(name, tensor):
    """Exposes a value inside forward() to the monitor under `name` (off outside a monitored step)."""
    if _tapping:
        _monitor_tap(name, tensor)
    for w in _watches:
        w._collect(name, tensor)
    return tensor


def _install_hooks(model, taps, sink, where):
    """Forward hooks on the submodules `taps` names ("leaves": every module without children)
    that call sink(name, output); returns their handles."""
    modules = dict(model.named_modules())
    if isinstance(taps, str):
        if taps != "leaves":
            raise ContractError(f"{where}: taps is {taps!r}: a list of submodule names, or \"leaves\" "
                                f"for every module without children")
        names = [n for n, m in modules.items() if n and not any(True for _ in m.children())]
    else:
        names = list(taps)
    handles = []
    for n in names:
        if n not in modules:
            close = [m for m in modules if m and (n in m or m in n)][:5]
            raise ContractError(f"{where}: taps names {n!r}, which is not a submodule of the model "
                                f"(it has {', '.join(close or [m for m in modules if m][:8])})")

        def hook(module, inputs, output, name=n):
            if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
                output = output[0]  # nn.LSTM, nn.MultiheadAttention: the output, not the states or weights
            if isinstance(output, torch.Tensor):
                sink(name, output)
        handles.append(modules[n].register_forward_hook(hook))
    return handles


def _core_tap(name, tensor):
    if _tapping:
        _monitor_tap(name, tensor)


def _install_taps(scenario, model, where):
    """The scenario's taps as hooks (called once per scenario, by _core)."""
    return _install_hooks(model, scenario.taps, _core_tap, f"{where}: {type(scenario).__name__}")


_REQUIRED = {
    "model": "returns the torch.nn.Module being trained",
    "optimizers": "returns a torch.optim.Optimizer or a dict {name: optimizer}",
    "next_batch": "returns (inputs, targets), a spikehunt.Batch, or None at the end",
    "planned_steps": "returns the number of optimizer steps the protocol takes",
}


def _source_file(obj):
    try:
        return os.path.relpath(inspect.getsourcefile(obj) or "?")
    except (TypeError, ValueError):
        return "?"


def _check_class(cls):
    """The contract's problems with a class: [] when it follows it."""
    where = _source_file(cls)
    if not (isinstance(cls, type) and issubclass(cls, Scenario)):
        return [f"{where}: {getattr(cls, '__name__', cls)!r} is not a subclass of spikehunt.Scenario"]
    problems = []
    for method, what in _REQUIRED.items():
        if getattr(cls, method) is getattr(Scenario, method):
            problems.append(f"{where}: {cls.__name__}.{method}() is missing: it {what}")
    try:
        inspect.signature(cls).bind(object())
    except TypeError:
        problems.append(f"{where}: {cls.__name__}.__init__{inspect.signature(cls.__init__)} does not take the "
                        f"config: it must be __init__(self, config) (and call super().__init__(config))")
    except ValueError:
        pass
    return problems


def number(name, default, min, max, doc=""):
    """A declared number param: config "params": {name: x} with min <= x <= max."""
    return ParamSpec.number(name, float(default), float(min), float(max), doc)


def integer(name, default, min, max, doc=""):
    return ParamSpec.integer(name, int(default), int(min), int(max), doc)


def boolean(name, default, doc=""):
    return ParamSpec.boolean(name, bool(default), doc)


def string(name, default, choices=(), doc=""):
    return ParamSpec.string(name, default, list(choices), doc)


def values(name, default, doc=""):
    """A declared list param (a list of numbers, booleans or strings)."""
    return ParamSpec.list(name, list(default), doc)


_problems = []


_registered = {}  # name -> the class register() gave it


def register(name, cls, params=()):
    """Registers a Scenario subclass under `name`: configs with "scenario": name train it.
    `params` declares its knobs (number(), integer(), boolean(), string(), values())."""
    problems = _check_class(cls) + _check_params(name, cls, params)
    held = _registered.get(name)
    if held is not None and held is not cls:
        problems.append(f"{_source_file(cls)}: register({name!r}, {cls.__name__}): {name!r} is already registered to "
                        f"{held.__qualname__} ({_source_file(held)}): a name holds one class (configs, repros and "
                        f"sweeps name the class by it), so give this one another name")
    if problems:
        _problems.extend(problems)
        return
    _registered[name] = cls
    _core.register_scenario(name, cls, _source_file(cls), list(params))


def _check_params(name, cls, params):
    """What is wrong with register()'s name and params, as error lines naming the file."""
    where = _source_file(cls)
    problems = []
    if not isinstance(name, str) or not name:
        problems.append(f"{where}: register({name!r}, ...): the name must be a non-empty string")
    example = 'e.g. params=[spikehunt.string("bug", "none"), spikehunt.number("width", 16, 1, 1024)]'
    if isinstance(params, (str, bytes, dict)) or not hasattr(params, "__iter__"):
        kind = "a dict" if isinstance(params, dict) else f"a {type(params).__name__}"
        return problems + [f"{where}: register({name!r}, ...): params is {kind}, not a list of declared params: "
                           f"declare each with spikehunt.number(), integer(), boolean(), string() or values(), "
                           f"{example}"]
    for p in params:
        if not isinstance(p, ParamSpec):
            problems.append(f"{where}: register({name!r}, ...): params holds {p!r} (a {type(p).__name__}), not a "
                            f"declared param: declare it with spikehunt.number(), integer(), boolean(), string() "
                            f"or values(), {example}")
    return problems


class _os_exit_is_an_error:
    """While spikehunt runs: os._exit() called in this process (by training code) raises instead of
    ending the process with that code and no verdict (exit 0 read as "nothing found"); a forked child
    (a DataLoader worker, multiprocessing) still exits as it asks."""

    def __enter__(self):
        self._real, self._pid = os._exit, os.getpid()
        real, pid = self._real, self._pid

        def guarded_exit(code=0):
            if os.getpid() != pid:
                real(code)
            raise RuntimeError(f"the training code called os._exit({code}), which would end spikehunt's process "
                               f"with exit {code} and no verdict: return or raise instead")

        os._exit = guarded_exit
        return self

    def __exit__(self, *exc):
        os._exit = self._real
        return False


def _project_modules(script):
    """The files of the modules imported from the script's own project (its folder and below, outside
    site-packages): with the script and the extension, the code whose hash (the build id) a sweep
    records and checks in its workers and on resume."""
    root = os.path.dirname(script) + os.sep
    files = set()
    for module in list(sys.modules.values()):
        f = getattr(module, "__file__", None)
        if not isinstance(f, str):
            continue
        f = os.path.abspath(f)
        if (f != script and f.startswith(root) and f.endswith(".py") and os.path.isfile(f)
                and "site-packages" not in f and "dist-packages" not in f):
            files.add(f)
    return sorted(files)


def main(argv=None, exit=True, _command=None, _build_files=None):
    """The whole spikehunt command line on this program's scenarios (python3 train.py VERB ...).
    Sweeps start this script again for their workers. Exits with spikehunt's exit code
    (0 ok, 1 a finding, 2 bad input, 3 internal error) unless exit=False, then returns it."""
    if argv is None:
        argv = sys.argv
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if _problems:
        for p in _problems:
            print(f"error: {p}", file=sys.stderr)
        rc = 2
    else:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.reconfigure(line_buffering=True)
            except (AttributeError, ValueError):
                pass
        # The engine runs in C++ without the GIL, where Python's own handler would only set a
        # flag: Ctrl-C ends the program as it ends the spikehunt binary (sweeps resume).
        import signal
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        is_script = os.path.isfile(script)
        command = _command or ([sys.executable, script] if is_script else [sys.executable])
        build_files = [_core.__file__] + (_build_files if _build_files is not None else
                                          [script] + _project_modules(script) if is_script else [])
        # Printed commands name this interpreter (another python3 may come first on PATH).
        invoked = argv[0] if _command else f"{sys.executable} {sys.argv[0] if sys.argv else ''}"
        with _os_exit_is_an_error():
            rc = _core.cli_main([invoked] + list(argv[1:]), command, build_files)
    sys.stdout.flush()
    sys.stderr.flush()
    if exit:
        sys.exit(rc)
    return rc


InputError = _core.InputError  # bad input: a config, a flag, a return type (the CLI's exit 2)


def run_config(overrides=(), config=None, monitor=True, fail_fast=False):
    """Trains one burst in this process: the config file `config` (default: the built-in
    default config) with `overrides` ("optimizer.lr=0.3", "scenario=\\"mine\\"", ...).
    Returns the verdict as a dict (outcome, onset_step, failure_step, fault, ...) with
    "losses" (each step's loss, the last 1,024) and "input_hashes" (each step's).
    A bad config raises spikehunt.InputError."""
    import json
    return json.loads(_core.run_config(config or "", list(overrides), monitor, fail_fast))


from .watch import NonFiniteError, Watch  # noqa: E402  (the monitor inside a loop of your own)

# The public classes are spikehunt's (as they were when this module was the package itself): their
# reprs, error messages and pickles name spikehunt.Scenario, not spikehunt._api.Scenario.
for _cls in (ContractError, Config, Batch, Scenario):
    _cls.__module__ = "spikehunt"
del _cls
