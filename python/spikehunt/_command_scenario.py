"""The scenario "command": a training command of the user's as a config, so that sweeps,
shrinking, repros, replay and guard run it as they run any scenario (docs/commands.md).

A config {"scenario": "command", "params": {"command": ["python", "train.py", "--lr", "{lr}"],
"lr": 0.1, ...}} runs the command with each `{NAME}` replaced by the config's value of NAME (a
param, or a config field such as `seed` or `optimizer.lr`), the monitor attached to its Python
process (_attach.py); the burst is the folder that monitor wrote, which the harness reads back
(Scenario::run_elsewhere). params.burst_steps, when set, ends the command after that many
optimizer steps. `spikehunt sweep --space S -- COMMAND` builds such configs from a space whose
dimensions are the command's knobs.
"""
import atexit
import os
import re
import shutil
import tempfile

import torch

import spikehunt

KNOB = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")
RESERVED = ("command", "burst_steps", "env")
SEVERITY = {"healthy": 0, "extreme": 1, "timeout": 2, "non_finite": 3, "crashed": 4}  # params of the scenario itself, not knobs of the command
_scratch = []  # each burst's folder, removed at the next burst and at exit (the harness has read it by then)


def _clean():
    while _scratch:
        shutil.rmtree(_scratch.pop(), ignore_errors=True)


atexit.register(_clean)


def knob_values(config):
    """Every value a `{NAME}` may take: the params by name, and each config field by its path."""
    values = {}

    def walk(prefix, node):
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(path + ".", value)
            else:
                values[path] = value
    walk("", config.to_dict())
    for key, value in config.to_dict().get("params", {}).items():
        if key not in RESERVED:
            values[key] = value
    return values


def format_value(value):
    """As Python writes it (0.1, 1e-05, 3, True): what argparse, Hydra and int()/float() read back."""
    return repr(value) if isinstance(value, float) else str(value)


def substitute(template, values, where="params.command"):
    """The command with every {NAME} replaced; ValueError naming an unknown NAME."""
    def one(match):
        name = match.group(1)
        if name not in values:
            raise ValueError(f"{where}: {{{name}}} names no knob (the config has {', '.join(sorted(values)[:12])})")
        return format_value(values[name])
    return [KNOB.sub(one, part) for part in template]


class CommandScenario(spikehunt.Scenario):
    """The user's command, run in a process of its own under the monitor; the harness trains
    nothing here (model() and optimizers() are a placeholder the contract asks for)."""

    def __init__(self, config):
        super().__init__(config)
        template = config.params.get("command") if "params" in config else None
        if not (isinstance(template, list) and template and all(isinstance(p, str) for p in template)):
            raise spikehunt.ContractError(f"scenario \"command\": params.command is {template!r}: a list of the "
                                          f"command's words, e.g. [\"python\", \"train.py\", \"--lr\", \"{{lr}}\"]")
        values = knob_values(config)
        self.command = substitute(template, values)
        self.env = substitute(list(config.params.get("env") or []), values, "params.env")
        self.placeholder = torch.nn.Linear(1, 1)
        self.opt = torch.optim.SGD(self.placeholder.parameters(), lr=0.0)

    def model(self):
        return self.placeholder

    def optimizers(self):
        return self.opt

    def next_batch(self):
        return None

    def planned_steps(self):
        return int(self.config.params.get("burst_steps") or 0)

    def run_elsewhere(self):
        from . import _command
        _clean()
        work = tempfile.mkdtemp(prefix="spikehunt-command-")
        _scratch.append(work)
        health = self.config.to_dict().get("health", {})
        settings = {"out": os.path.join(work, "out"), "steps": self.planned_steps(), "rules": health,
                    "threads": self.config.threads, "env": self.env, "deterministic": True}
        if not any(w.startswith(("--master-port", "--master_port")) for w in self.command):
            settings["port"] = _command.free_port()
        code, tail, statuses = _command.execute(self.command, settings, work, echo=False,
                                                cwd=_command.working_folder(work))
        main = _command.watched(statuses)
        last = "\n".join(tail[-6:])
        shown = " ".join(self.command)
        if main is None:
            raise RuntimeError(f"the command {shown} (exit {code}): {_command.nothing_watched(statuses, code)}; its "
                               f"last lines:\n{last}")
        # Several optimizers (a GAN): the burst is the one that fared worst (the first of equals).
        worst = max(main["watches"], key=lambda w: SEVERITY.get(w["verdict"]["outcome"], 0))
        path = worst["path"]
        if main["error"] is None and code != 0 and worst["verdict"]["outcome"] == "healthy":
            raise RuntimeError(f"the command {shown} exited {code} after {main['steps']} step(s); its last lines:\n{last}")
        return path


spikehunt.register("command", CommandScenario)
