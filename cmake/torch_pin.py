"""A scikit-build-core metadata provider (pyproject.toml): the wheel requires the torch release its
extension is built against, `torch==X.Y.Z`, the way torchvision pins its torch. LibTorch's C++ ABI
changes between releases, so a wheel built against one cannot promise any other (docs/python.md).

The torch is the one CMake builds against (CMakeLists.txt): the interpreter running pip's, read in
isolated mode (-I), which sees that environment's site-packages past pip's build isolation."""
import re
import subprocess
import sys


def dynamic_metadata(field, settings=None):
    if field != "dependencies":
        raise RuntimeError(f"cmake/torch_pin.py gives the dependencies, not {field!r}")
    for flags in ([], ["-I"]):
        p = subprocess.run([sys.executable, *flags, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True)
        if p.returncode == 0:
            break
    else:
        raise RuntimeError(f"spikehunt builds against the torch of the environment pip installs into, and "
                           f"{sys.executable} cannot import one:\n{p.stderr[-2000:]}\n"
                           f"hint: pip install torch first (requirements.txt pins the tested release)")
    release = re.match(r"\d+(\.\d+)*", p.stdout.strip()).group(0)  # 2.11.0+cu130 -> 2.11.0
    return [f"torch=={release}"]
