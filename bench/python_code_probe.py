#!/usr/bin/env python3
"""python_code_probe.py BUILD_DIR WORKDIR — 13 mistakes a PyTorch user's
training code can make (a KeyError in __init__, model() returning None, no
optimizers, sys.exit() in forward, integer outputs, infinite recursion, a
loss per sample, a float loss, a detached loss, batches that do not line up,
a string batch, params given as a dict), each run with `python3 bad_user.py
run`. Each must be a crash naming its stage and the user's line or cause
(exit 1) or bad input naming the file and the method (exit 2), as listed.
Prints how many were clear and each one that was not. About 1 minute on a
2-core VM."""
import os, subprocess, sys
BUILD = os.path.abspath(sys.argv[1]); W = os.path.abspath(sys.argv[2])
os.makedirs(W, exist_ok=True); os.chdir(W)
USER = r'''import os, sys, torch, torch.nn as nn, torch.nn.functional as F
import spikehunt

class Bad(spikehunt.Scenario):
    taps = "leaves"
    def __init__(self, config):
        super().__init__(config)
        self.bug = config.params["bug"]
        if self.bug == "keyerror_init":
            config.params["nope"]
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=config.optimizer.lr)
        self.g = torch.Generator().manual_seed(config.seed)
        self.done = 0
    def model(self):
        return None if self.bug == "model_none" else self.net
    def optimizers(self):
        return [] if self.bug == "no_optimizers" else self.opt
    def forward(self, x):
        if self.bug == "exit_in_forward": sys.exit(3)
        if self.bug == "int_output": return torch.zeros(x.shape[0], 4, dtype=torch.long)
        if self.bug == "recursion": return self.forward(x)
        return self.net(x)
    def loss(self, out, y):
        if self.bug == "vector_loss": return F.cross_entropy(out, y, reduction="none")
        if self.bug == "float_loss": return 1.5
        if self.bug == "no_grad_loss": return F.cross_entropy(out.detach(), y)
        return F.cross_entropy(out, y)
    def next_batch(self):
        self.done += 1
        if self.done > 6: return None
        if self.bug == "mismatched_batch":
            return torch.randn(16, 8, generator=self.g), torch.randint(0, 4, (8,), generator=self.g)
        if self.bug == "string_batch": return ("a", "b")
        return torch.randn(16, 8, generator=self.g), torch.randint(0, 4, (16,), generator=self.g)
    def planned_steps(self):
        return 6
    def heldout(self):
        return torch.randn(16, 8), torch.randint(0, 4, (16,))

if os.environ.get("BAD_DICT_PARAMS"):
    spikehunt.register("bad", Bad, params={"bug": "none"})  # defaults as a dict
else:
    spikehunt.register("bad", Bad, params=[spikehunt.string("bug", "none")])
if __name__ == "__main__":
    spikehunt.main()
'''
open("bad_user.py", "w").write(USER)
open("bad.json", "w").write('{"scenario": "bad", "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.0}, '
                            '"batch_size": 16, "max_batches_per_epoch": 6, "threads": 1}')
cases = [  # (params.bug, exit, what the output must hold)
    ("none", 0, "verdict: healthy"),
    ("keyerror_init", 1, "KeyError: 'nope' (bad_user.py:"),
    ("model_none", 2, "error: bad_user.py: Bad.model() returned None"),
    ("no_optimizers", 2, "error: bad_user.py: Bad.optimizers() returned an empty list"),
    ("exit_in_forward", 1, "SystemExit: 3 (bad_user.py:"),
    ("int_output", 1, "not implemented for 'Long' (bad_user.py:"),
    ("recursion", 1, "RecursionError: maximum recursion depth exceeded (bad_user.py:"),
    ("vector_loss", 1, "the loss is 16 numbers, not one"),
    ("float_loss", 2, "error: bad_user.py: Bad.loss() returned a float"),
    ("no_grad_loss", 1, "the loss depends on no trainable tensor"),
    ("mismatched_batch", 1, "the output has 16 rows but the batch has 8 labels"),
    ("string_batch", 2, "error: bad_user.py: Bad.next_batch() returned a str"),
    ("dict_params", 2, "params is a dict, not a list of declared params"),
]
env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
clear, unclear = 0, []
for bug, code, text in cases:
    args = [sys.executable, "bad_user.py", "run", "--config", "bad.json", "--out", "runs"]
    if bug != "dict_params":
        args += ["--set", f'params.bug="{bug}"']
    e = dict(env, BAD_DICT_PARAMS="1") if bug == "dict_params" else env
    r = subprocess.run(args, capture_output=True, text=True, env=e, timeout=300)
    out = r.stdout + r.stderr
    ok = r.returncode == code and text in out and "Traceback" not in out
    clear += ok
    if not ok:
        unclear.append((bug, r.returncode, out.strip()[-300:]))
print(f"{clear} of {len(cases)} clear")
for u in unclear:
    print("UNCLEAR:", u[0], "| exit", u[1], "|", u[2].replace("\n", " / "))
