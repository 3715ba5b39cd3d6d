"""sitecustomize for `spikehunt run -- COMMAND` (copied as sitecustomize.py into a folder that the
launcher puts first on the command's PYTHONPATH). It imports nothing heavy: it waits for the
process to import torch, then attaches spikehunt's monitor (spikehunt/_attach.py). A process
that never imports torch (a shell's helper, torchrun's launcher before it does) is untouched.
Any sitecustomize this one shadows still runs."""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds torch as the rest of sys.meta_path would, and runs attach() once it is imported."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            try:
                from spikehunt import _attach
                _attach.attach()
            except Exception as e:  # the script runs on, unwatched, and the launcher says why
                sys.stderr.write(f"spikehunt: cannot attach the monitor in {sys.executable}: "
                                 f"{type(e).__name__}: {e}\n")
        spec.loader.exec_module = exec_module
        return spec


def _chain():
    """Runs the sitecustomize this file shadows, if there is one."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None and os.path.dirname(os.path.abspath(spec.origin or "")) != _HERE:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if "torch" in sys.modules:
    from spikehunt import _attach
    _attach.attach()
else:
    sys.meta_path.insert(0, _AfterTorch())
_chain()
