"""spikehunt for PyTorch code: your nn.Module, torch.optim optimizers, data and
loss under spikehunt's monitor, sweeps, shrinking, replay, doctor and guard.

    import torch, spikehunt

    class Mine(spikehunt.Scenario):
        taps = ["fc1", "fc2"]                 # submodules whose outputs the monitor reads
        def __init__(self, config):
            super().__init__(config)
            self.net = Net(slope=config.params["slope"])
            self.opt = torch.optim.SGD(self.net.parameters(), lr=config.optimizer.lr, momentum=0.9)
            self.batches = iter(my_batches(seed=config.seed))
        def model(self): return self.net
        def optimizers(self): return self.opt
        def next_batch(self): return next(self.batches, None)   # (inputs, targets) or None at the end
        def planned_steps(self): return 100

    spikehunt.register("mine", Mine, params=[spikehunt.number("slope", 0.01, 0, 1, "LeakyReLU slope")])
    if __name__ == "__main__":
        spikehunt.main()                      # python3 train.py sweep --config mine.json ...

The contract is C++'s (scenarios/scenario.h; docs/python.md): the harness
zeroes the gradients, calls forward, loss and backward, clips, sets the
scheduled learning rates and calls optimizer_step. Your code must not call
zero_grad(), backward() or step() itself.
"""
# The API lives in _api.py and loads on first use (PEP 562): `python -m spikehunt run -- COMMAND`
# launches the command without importing torch and the extension itself (seconds), which only the
# command's own process needs. `spikehunt.Scenario`, `from spikehunt import Watch`, ... load it.

__all__ = ["Scenario", "Batch", "Config", "register", "main", "tap", "number", "integer", "boolean",
           "string", "values", "ContractError", "InputError", "run_config", "Watch", "NonFiniteError"]


import importlib as _importlib
import os as _os


def _check_torch():
    """The extension links the LibTorch of one torch release, whose C++ ABI the next one breaks (and a CPU
    build of the same release lacks its CUDA libraries): under another torch it would fail to load with an
    undefined symbol. Read without importing torch (its version.py), so the launcher stays fast."""
    try:
        from ._build import TORCH as built
    except ImportError:  # the source folder itself on the path, with no build
        return
    import importlib.util
    import re
    spec = importlib.util.find_spec("torch")
    if not built or spec is None or not spec.origin:
        return  # no torch at all: importing it later says so
    try:
        with open(_os.path.join(_os.path.dirname(spec.origin), "version.py")) as f:
            found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
    except OSError:
        return
    if found and found.group(1) != built:
        raise ImportError(
            f"spikehunt was built against torch {built} and this environment holds torch {found.group(1)} "
            f"({_os.path.dirname(spec.origin)}): its extension links that LibTorch, whose C++ ABI differs "
            f"between releases (and between a CPU and a CUDA build), so it cannot load here. Either install "
            f"the torch it was built for (pip install torch=={built.split('+')[0]}), or build spikehunt for "
            f"the torch at hand from its source: pip install --force-reinstall --no-deps /path/to/spikehunt "
            f"(docs/python.md)")


_check_torch()

# The package's own modules: `from . import _command` imports that module alone, never the API.
_MODULES = {f.split(".")[0] for f in _os.listdir(_os.path.dirname(_os.path.abspath(__file__)))}


def __getattr__(name):
    if name in _MODULES or name.startswith("__") and name != "__version__":
        raise AttributeError(f"module 'spikehunt' has no attribute {name!r}")
    _api = _importlib.import_module("spikehunt._api")
    try:
        value = getattr(_api, name)
    except AttributeError:
        raise AttributeError(f"module 'spikehunt' has no attribute {name!r}") from None
    if not name.startswith("_") or name == "__version__":
        globals()[name] = value  # a public name is bound once: later lookups skip this function
    return value


def __dir__():
    _api = _importlib.import_module("spikehunt._api")
    return sorted(set(globals()) | {n for n in dir(_api) if not n.startswith("__")})
